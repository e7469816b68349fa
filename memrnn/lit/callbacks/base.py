"""The comparison callbacks' base: a :class:`Comparison` (metrics, figures, tables), the callback
that computes one after evaluations and publishes it (loggers, CSV/PNG under the run directory,
W&B tables and images), and the base of comparisons made on a layer's per-step internals."""

from __future__ import annotations

import csv
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import torch
from lightning.pytorch.utilities import rank_zero_info
from matplotlib.figure import Figure

from memrnn.analysis.plots import trace_heatmaps
from memrnn.analysis.reference import available_features, reference_features
from memrnn.analysis.trace import layer_trace
from memrnn.core.checks import positive_int
from memrnn.lit.loggers import WandbLogger
from memrnn.lit.runs import run_dir


def model_to_compare(pl_module: L.LightningModule) -> L.LightningModule:
    """The model a comparison or probe reads: ``pl_module``, or with members
    (:class:`memrnn.lit.MemberSequenceModule`) member 0's, as an ordinary
    :class:`~memrnn.lit.SequenceModule` (:meth:`~memrnn.lit.MemberSequenceModule.member_module`)."""
    member_module = getattr(pl_module, "member_module", None)
    return member_module(0) if callable(member_module) else pl_module


@dataclass
class Comparison:
    """What a :class:`ModelComparison` found: ``metrics`` (logged as ``<split>/<key>/<name>``),
    ``figures`` (saved as PNG under ``<log dir>/figures/`` and logged to W&B as images) and
    ``tables`` (``{name: {column: values}}``, saved as ``<log dir>/<name>_<split>.csv`` and
    logged to W&B as tables ``<split>/<name>``)."""

    metrics: dict[str, float] = field(default_factory=dict)
    figures: dict[str, Figure] = field(default_factory=dict)
    tables: dict[str, dict[str, list]] = field(default_factory=dict)


class ModelComparison(L.Callback, ABC):
    """Base of the callbacks that compare a trained model with a reference (the exact
    distribution, the language's automaton, a construction's weights).

    After every ``every_n_epochs``-th validation epoch (never during the sanity check) and after
    each test epoch in ``splits``, :meth:`compare` computes a :class:`Comparison` on rank 0; the
    base logs its numbers to every logger, writes figures and tables under the log directory and,
    with a :class:`~memrnn.lit.WandbLogger`, logs them as ``wandb.Image`` and ``wandb.Table``.
    The last result per split stays in ``self.results``.

    Subclasses implement :meth:`compare`; :meth:`wandb_extras` may add W&B-only objects.
    """

    #: prefix of the logged metric names: ``<split>/<key>/<name>``
    key: str = "compare"

    def __init__(
        self, splits: Sequence[str] = ("val", "test"), every_n_epochs: int = 1, figures: bool = True
    ) -> None:
        for s in splits:
            if s not in ("val", "test"):
                raise ValueError(f"splits must be 'val' and/or 'test', got {s!r}")
        positive_int("every_n_epochs", every_n_epochs)
        self.splits, self.every_n_epochs, self.figures = tuple(splits), every_n_epochs, figures
        self.results: dict[str, Comparison] = {}

    #: whether :meth:`compare` reads the model itself (its layer, embedding, heads): with members
    #: (:class:`memrnn.lit.MemberSequenceModule`) it then reads member 0's model
    reads_model: bool = True

    @abstractmethod
    def compare(self, trainer: L.Trainer, pl_module: L.LightningModule, split: str) -> Comparison | None:
        """The comparison after an evaluation of ``split`` (None: nothing to report).  Runs on
        rank 0 only, so it must not call collectives."""

    def wandb_extras(self, comparison: Comparison, split: str) -> dict[str, Any]:
        """Extra objects to log to W&B with the comparison (default: none)."""
        return {}

    def _due(self, trainer: L.Trainer, split: str) -> bool:
        if split not in self.splits or trainer.sanity_checking:
            return False
        return split == "test" or (trainer.current_epoch + 1) % self.every_n_epochs == 0

    def _run(self, trainer: L.Trainer, pl_module: L.LightningModule, split: str) -> None:
        if not self._due(trainer, split):
            return
        # trainer.log_dir broadcasts from rank 0: every rank must ask, or rank 0 waits forever
        _ = trainer.log_dir
        if not trainer.is_global_zero:
            return
        out_dir = run_dir(trainer)
        module = model_to_compare(pl_module) if self.reads_model else pl_module
        was_training = module.training
        module.eval()
        try:
            with torch.no_grad():
                result = self.compare(trainer, module, split)
        finally:
            module.train(was_training)
        if result is None:
            return
        self.results[split] = result
        self._publish(trainer, result, split, out_dir)

    def _publish(self, trainer: L.Trainer, result: Comparison, split: str, out_dir: Path) -> None:
        step = trainer.global_step
        if result.metrics:
            named = {f"{split}/{self.key}/{k}": float(v) for k, v in result.metrics.items()}
            for logger in trainer.loggers:
                logger.log_metrics(named, step)
            rank_zero_info(f"[{split}] " + ", ".join(f"{k} {v:.4g}" for k, v in named.items()))
        out_dir.mkdir(parents=True, exist_ok=True)
        for name, columns in result.tables.items():
            with open(out_dir / f"{name}_{split}.csv", "w", newline="") as f:
                writer = csv.writer(f)
                writer.writerow(list(columns))
                writer.writerows(zip(*columns.values(), strict=True))
        paths = {}
        if self.figures and result.figures:
            (out_dir / "figures").mkdir(exist_ok=True)
            for name, fig in result.figures.items():
                paths[name] = out_dir / "figures" / f"{split}_{name}_step{step:06d}.png"
                fig.savefig(paths[name], dpi=100)
        wandb_loggers = [lg for lg in trainer.loggers if isinstance(lg, WandbLogger)]
        if not wandb_loggers:
            return
        import wandb

        payload: dict[str, Any] = {}
        for name, columns in result.tables.items():
            rows = [list(r) for r in zip(*columns.values(), strict=True)]
            payload[f"{split}/{name}"] = wandb.Table(columns=list(columns), data=rows)
        for name, path in paths.items():
            payload[f"{split}/{name}"] = wandb.Image(str(path))
        payload.update(self.wandb_extras(result, split))
        if payload:
            payload["trainer/global_step"] = step
            for logger in wandb_loggers:
                logger.experiment.log(payload)

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._run(trainer, pl_module, "val")

    def on_test_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._run(trainer, pl_module, "test")


class TraceComparison(ModelComparison):
    """Base of comparisons made on the layer's internals.  Draws ``num_strings`` strings of the
    data module's language once (seeded; lengths uniform over ``lengths``, default the
    validation window, where the language can sample given a length),
    feeds each as ``BOS w_1 .. w_n`` through the module's embedding and ``layer.trace``, and
    passes the per-step internals (``[B, T, ...]``, padded positions masked) to
    :meth:`compare_trace`.  With ``figures``, adds ``trace_heatmap``: the ``heatmap_keys`` of the
    trace (default: every gate/diagnostic the layer reports, else its state) over time for one
    probe string, below the reference automaton's features for it.

    Args:
        num_strings: probe strings (more than 1).
        lengths: ``(min, max)`` string lengths, ``END`` counted.
        seed: the probe strings' seed (the same strings every epoch).
        heatmap_keys: trace keys drawn in the heatmap figure.
        splits, every_n_epochs, figures: as :class:`ModelComparison` (default: validation only).
    """

    def __init__(
        self,
        num_strings: int = 64,
        lengths: tuple[int, int] | None = None,
        seed: int = 0,
        heatmap_keys: Sequence[str] | None = None,
        splits: Sequence[str] = ("val",),
        every_n_epochs: int = 1,
        figures: bool = True,
    ) -> None:
        super().__init__(splits, every_n_epochs, figures)
        if num_strings < 2:
            raise ValueError(f"num_strings must be >= 2, got {num_strings}")
        self.num_strings, self.lengths, self.seed = num_strings, lengths, seed
        self.heatmap_keys = tuple(heatmap_keys) if heatmap_keys is not None else None
        self._strings: list[list[int]] | None = None

    def probe_strings(self, trainer: L.Trainer) -> list[list[int]] | None:
        """The probe strings (complete, ending with ``END``), drawn on first use."""
        if self._strings is None:
            dm = trainer.datamodule
            language = getattr(dm, "language", None)
            if language is None:
                return None
            lengths = self.lengths or getattr(dm, "windows", {}).get("val")
            rng = np.random.default_rng(self.seed)
            try:  # lengths uniform over the window, so long strings are probed too
                self._strings = language.sample_many(self.num_strings, rng, lengths, "uniform")
            except (NotImplementedError, ValueError):
                rng = np.random.default_rng(self.seed)
                self._strings = language.sample_many(self.num_strings, rng, lengths)
        return self._strings

    @staticmethod
    def run_trace(pl_module: L.LightningModule, language: Any, strings: Sequence[Sequence[int]]):
        """``(trace, mask)`` of the module's layer on the strings
        (:func:`memrnn.analysis.trace.layer_trace` with the module's embedding).  A module whose
        layer reads the strings without ``BOS`` (``initial_output=True``) is refused: its traces
        would be one step off the references these comparisons draw beside them."""
        if getattr(pl_module, "initial_output", False):
            raise ValueError(
                f"{type(pl_module).__name__}(initial_output=True) runs its layer on w without BOS, while the "
                "trace comparisons and probes read the layer on BOS w, position by position: train "
                "with initial_output=False to compare the internals"
            )
        return layer_trace(pl_module.embedding, pl_module.layer, strings, language.bos_id)

    @abstractmethod
    def compare_trace(
        self, language: Any, strings: list[list[int]], trace: dict[str, torch.Tensor], mask: torch.Tensor
    ) -> tuple[dict[str, float], dict[str, np.ndarray]]:
        """Numbers from the internals, and per-position values to draw over the heatmap of the
        figure's string (``{name: [T]}``, may be empty)."""

    #: which probe string the heatmap shows
    figure_string: int = 0
    #: which reference features the heatmap draws (None: all)
    reference_keys: tuple[str, ...] | None = None

    def compare(self, trainer: L.Trainer, pl_module: L.LightningModule, split: str) -> Comparison | None:
        if not hasattr(pl_module, "layer") or not hasattr(pl_module, "embedding"):
            return None
        strings = self.probe_strings(trainer)
        if not strings:
            return None
        language = trainer.datamodule.language
        trace, mask = self.run_trace(pl_module, language, strings)
        metrics, decoded = self.compare_trace(language, strings, trace, mask)
        figures = {}
        if self.figures:
            figures["trace_heatmap"] = self.heatmap(language, strings, trace, decoded)
        return Comparison(metrics=metrics, figures=figures)

    def heatmap(
        self, language: Any, strings: list[list[int]], trace: dict[str, torch.Tensor], decoded
    ) -> Figure:

        b = self.figure_string
        s = strings[b]
        keys = self.heatmap_keys
        if keys is None:
            extra = [k for k in trace if k != "output" and not k.startswith("state.")]
            keys = extra or [k for k in trace if k.startswith("state.")]
        missing = [k for k in keys if k not in trace]
        if missing:
            raise ValueError(f"heatmap_keys {missing} not in the layer's trace; it has {sorted(trace)}")
        ref = reference_features(language, s) if available_features(language) else None
        if ref is not None and self.reference_keys is not None:
            ref = {k: v for k, v in ref.items() if k in self.reference_keys}
        tokens = ["BOS", *(language.symbols[t] for t in s[:-1])]
        return trace_heatmaps(
            {k: trace[k][b, : len(s)].numpy() for k in keys},
            tokens,
            reference=ref,
            decoded=decoded,
            title=f"{type(self).__name__}: probe string {b}",
        )
