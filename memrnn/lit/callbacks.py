"""Callbacks shared by the configs."""

from __future__ import annotations

import csv
import itertools
import sys
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import torch
from lightning.pytorch.callbacks import TQDMProgressBar
from lightning.pytorch.utilities import rank_zero_info
from matplotlib.figure import Figure

from memrnn.data.datamodule import bos_inputs
from memrnn.lit.loggers import WandbLogger
from memrnn.lit.runs import run_dir
from memrnn.ops.stack import action_codes


class CrossEntropyReport(L.Callback):
    """At the end of ``fit`` (and ``test``), print the model's cross-entropy per token, the exact
    cross-entropy of the generating distribution on the same tokens, and their difference, in
    nats, from the last validation (test) epoch.  The numbers are also kept in ``self.report``.
    """

    def __init__(self) -> None:
        self.report: dict[str, dict[str, float]] = {}

    def _print(self, trainer: L.Trainer, split: str) -> None:
        m = trainer.callback_metrics
        keys = ("ce", "ce_exact", "ce_gap")
        if not all(f"{split}/{k}" in m for k in keys):
            return
        vals = {k: float(m[f"{split}/{k}"]) for k in keys}
        self.report[split] = vals
        rank_zero_info(
            f"\n[{split}] cross-entropy per token (nats): model {vals['ce']:.4f} | "
            f"exact generating distribution {vals['ce_exact']:.4f} | difference {vals['ce_gap']:.4f}"
        )

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._print(trainer, "val")

    def on_test_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._print(trainer, "test")


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
        if every_n_epochs < 1:
            raise ValueError(f"every_n_epochs must be >= 1, got {every_n_epochs}")
        self.splits, self.every_n_epochs, self.figures = tuple(splits), every_n_epochs, figures
        self.results: dict[str, Comparison] = {}

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
        was_training = pl_module.training
        pl_module.eval()
        try:
            with torch.no_grad():
                result = self.compare(trainer, pl_module, split)
        finally:
            pl_module.train(was_training)
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


class LengthCurves(ModelComparison):
    """Length generalization from one evaluation run: after each validation and test epoch,
    take the module's per-length curves (``SequenceModule.length_curves``) and

    * write ``<log dir>/length_curves_<split>.csv`` (one row per string length) and a plot of
      ``metric`` against the length, ``<log dir>/figures/<split>_length_plot_step*.png``;
    * log them to W&B as a table ``<split>/length_curves``, that figure, and an interactive line
      plot ``<split>/length_line``, when a :class:`~memrnn.lit.WandbLogger` is attached;
    * keep them in ``self.curves[split]``.

    Args:
        splits: which evaluations to report (``"val"``, ``"test"``).
        metric: the curve plotted (default: ``ce_gap`` for generators, ``accept_end`` for
            acceptors, ``next_set_sequence`` for next-set models, whichever exists first).
        every_n_epochs, figures: as :class:`ModelComparison`.
    """

    key = "length"

    def __init__(
        self,
        splits: Sequence[str] = ("val", "test"),
        metric: str | None = None,
        every_n_epochs: int = 1,
        figures: bool = True,
    ) -> None:
        super().__init__(splits, every_n_epochs, figures)
        self.metric = metric
        self.curves: dict[str, dict[str, list[float]]] = {}

    def _metric(self, curves: dict[str, list[float]]) -> str:
        metric = self.metric or next(
            (m for m in ("ce_gap", "accept_end", "next_set_sequence") if m in curves), list(curves)[-1]
        )
        if metric not in curves:
            raise ValueError(f"no per-length curve {metric!r}; available: {list(curves)[2:]}")
        return metric

    def compare(self, trainer: L.Trainer, pl_module: L.LightningModule, split: str) -> Comparison | None:
        if not hasattr(pl_module, "length_curves"):
            return None
        curves = pl_module.length_curves(split)
        if not curves:
            return None
        self.curves[split] = curves
        metric = self._metric(curves)
        figures = {}
        if self.figures:
            from memrnn.analysis.plots import length_plot

            figures["length_plot"] = length_plot(curves, metric, title=f"{split}: {metric} by length")
        return Comparison(figures=figures, tables={"length_curves": curves})

    def wandb_extras(self, comparison: Comparison, split: str) -> dict[str, Any]:
        import wandb

        curves = comparison.tables["length_curves"]
        metric = self._metric(curves)
        table = wandb.Table(columns=list(curves), data=[list(r) for r in zip(*curves.values(), strict=True)])
        return {f"{split}/length_line": wandb.plot.line(table, "length", metric, title=f"{split}: {metric}")}


class CountingReport(L.Callback):
    """After ``fit`` (and ``test``), sweep ``n = min_n..n_max`` with
    :func:`memrnn.analysis.counting_sweep` on the data module's counting language: print and log
    ``counting/first_failure`` (the first ``n`` where ``x^n`` is rejected or a ±1 neighbour
    accepted; ``n_max + 1`` if none) and ``counting/positives_ok``, the share of ``x^n`` accepted."""

    def __init__(self, n_max: int = 1000) -> None:
        if n_max < 1:
            raise ValueError(f"n_max must be >= 1, got {n_max}")
        self.n_max = n_max
        self.result = None

    def _run(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        from memrnn.analysis.counting import counting_sweep
        from memrnn.languages.counting import CountingLanguage

        language = getattr(trainer.datamodule, "language", None)
        if not isinstance(language, CountingLanguage) or "acceptor" not in getattr(pl_module, "heads", {}):
            return
        self.result = sweep = counting_sweep(pl_module, language, self.n_max)
        first = sweep.first_failure if sweep.first_failure is not None else self.n_max + 1
        share = sum(sweep.positive_ok) / len(sweep.positive_ok)
        rank_zero_info(
            f"\n[counting] {language}: x^n accepted and every ±1 neighbour rejected for n < {first} "
            f"(swept to {self.n_max}); x^n accepted for {share:.1%} of n"
        )
        for logger in trainer.loggers:
            logger.log_metrics(
                {"counting/first_failure": first, "counting/positives_ok": share}, trainer.global_step
            )

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._run(trainer, pl_module)


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
        """``(trace, mask)``: the layer's ``trace`` on ``BOS w_1 .. w_n`` for each string
        (``[B, T, ...]`` per key, ``T`` = the longest string's length) and the ``[B, T]`` mask."""
        device = next(pl_module.parameters()).device
        inp, mask, _ = bos_inputs([s[:-1] for s in strings], language.bos_id)
        inp, mask = inp.to(device), mask.to(device)
        trace = pl_module.layer.trace(pl_module.embedding(inp), mask=mask)
        return {k: v.detach().cpu() for k, v in trace.items()}, mask.cpu()

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
        from memrnn.analysis.plots import trace_heatmaps
        from memrnn.analysis.reference import available_features, reference_features

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


class LinearProbe(TraceComparison):
    """Decode the reference automaton's configuration from the layer's state with linear maps
    (:func:`memrnn.analysis.probe.fit_linear_probe`): after every validation, fit one probe per
    feature (``stack_top``, ``depth``, ``state`` for a PDA language; ``counter``, ``state`` for a
    counter language; ``state`` for a DFA) on the first half of the probe strings, score it on
    the other half, and log ``<split>/probe/<feature>_acc`` (held-out accuracy),
    ``<feature>_train_acc`` and, for counts, ``<feature>_r2``.

    Args:
        representation: the trace keys whose per-step values, flattened and concatenated, are
            the probe's input; ``"state"`` (default) takes every ``state.*`` field (an LSTM's
            ``h`` and ``c``).
        features: which reference features (default: every one the language has).
        train_fraction: share of the probe strings used to fit.
        Others: as :class:`TraceComparison`.
    """

    key = "probe"

    def __init__(
        self,
        representation: str | Sequence[str] = "state",
        features: Sequence[str] | None = None,
        train_fraction: float = 0.5,
        num_strings: int = 64,
        lengths: tuple[int, int] | None = None,
        seed: int = 0,
        heatmap_keys: Sequence[str] | None = None,
        splits: Sequence[str] = ("val",),
        every_n_epochs: int = 1,
        figures: bool = True,
    ) -> None:
        super().__init__(num_strings, lengths, seed, heatmap_keys, splits, every_n_epochs, figures)
        if not 0 < train_fraction < 1:
            raise ValueError(f"train_fraction must lie in (0, 1), got {train_fraction}")
        self.representation = (representation,) if isinstance(representation, str) else tuple(representation)
        self.features = tuple(features) if features is not None else None
        self.train_fraction = train_fraction
        self.probes: dict[str, Any] = {}

    def _inputs(self, trace: dict[str, torch.Tensor]) -> torch.Tensor:
        keys = []
        for r in self.representation:
            if r == "state":
                keys += [k for k in trace if k.startswith("state.")]
            elif r in trace:
                keys.append(r)
            else:
                raise ValueError(f"representation {r!r} is not in the layer's trace; it has {sorted(trace)}")
        b, t = next(iter(trace.values())).shape[:2]
        return torch.cat([trace[k].reshape(b, t, -1).double() for k in keys], -1)

    def compare_trace(self, language, strings, trace, mask):
        from memrnn.analysis.probe import probe_features
        from memrnn.analysis.reference import available_features, reference_features

        have = available_features(language)
        wanted = self.features or have
        unknown = [f for f in wanted if f not in have]
        if unknown:
            raise ValueError(f"{language} has no reference features {unknown}; it has {list(have)}")
        if not wanted:
            raise ValueError(f"{language} has no reference automaton to probe for")
        refs = [{k: v for k, v in reference_features(language, s).items() if k in wanted} for s in strings]
        n_train = min(max(1, round(len(strings) * self.train_fraction)), len(strings) - 1)
        self.figure_string, self.reference_keys = n_train, tuple(wanted)
        self.probes = probe_features(self._inputs(trace), mask, refs, n_train)
        metrics: dict[str, float] = {}
        for name, res in self.probes.items():
            metrics[f"{name}_acc"] = res.accuracy
            metrics[f"{name}_train_acc"] = res.train_accuracy
            if res.kind == "value":
                metrics[f"{name}_r2"] = res.r2
        # the first held-out string's decoded values, for the figure
        n = len(strings[n_train])
        decoded = {k: np.asarray(r.prediction)[:n] for k, r in self.probes.items()}
        return metrics, decoded


class StackActions(TraceComparison):
    """Compare an nnPDA's learned stack actions with the language's PDA on probe strings
    (Stogin et al. 2020), and extract the PDA the network implements.

    After every ``every_n_epochs``-th validation: the layer's ``trace`` gives ``push`` (``p+``),
    ``pop`` (``p−``) and ``push_vector`` (``C``) at every step of ``BOS w_1 .. w_n``; they are
    quantized at 1/2 and compared with the PDA's operation at the same step (``BOS``: no-op).
    Logged as ``<split>/stack/``: ``action_acc`` (all steps), ``push_acc``, ``pop_acc``,
    ``noop_acc`` (per PDA action), ``symbol_acc`` (pushed symbol, argmax ``C``, under the best
    matching of the layer's stack symbols to the PDA's) and ``extracted_states``: the size of the
    PDA read back from the weights (:func:`~memrnn.constructions.extract_pda`, reachable
    states).  The extracted rules are the table ``extracted_pda`` (CSV and W&B) and stay in
    ``self.extracted``; the heatmap draws the PDA's and the layer's action codes (+1 push,
    −1 pop, 0 no-op) above ``push``, ``pop`` and ``push_vector``.

    Needs a layer whose ``trace`` reports ``push``/``pop``/``push_vector`` (``NNPDA``) and a
    language with a ``pda()``.  Arguments as :class:`TraceComparison`.
    """

    key = "stack"
    #: the PDA read back from the weights at the last comparison
    extracted: Any = None

    def heatmap(self, language, strings, trace, decoded) -> Figure:
        """The PDA's action codes (steps) and the layer's (crosses) above the layer's
        ``push``, ``pop`` and ``push_vector`` for one probe string."""
        from memrnn.analysis.plots import trace_heatmaps
        from memrnn.analysis.reference import Feature

        b, s = self.figure_string, strings[self.figure_string]
        keys = self.heatmap_keys or ("push", "pop", "push_vector")
        return trace_heatmaps(
            {k: trace[k][b, : len(s)].numpy() for k in keys},
            ["BOS", *(language.symbols[t] for t in s[:-1])],
            reference={"action": Feature("class", decoded["pda_action"])},
            decoded={"action": decoded["layer_action"]},
            title=f"StackActions: probe string {b} (+1 push, -1 pop, 0 no-op; x: the layer)",
        )

    def compare_trace(self, language, strings, trace, mask):
        if not hasattr(language, "pda"):
            raise ValueError(f"StackActions needs a language with a PDA; {language} has none")
        missing = [k for k in ("push", "pop", "push_vector") if k not in trace]
        if missing:
            raise ValueError(
                f"StackActions needs a layer that traces {missing} (an NNPDA); it has {sorted(trace)}"
            )
        pda = language.pda()
        got = action_codes(trace["push"], trace["pop"])
        sym = trace["push_vector"].argmax(-1)
        ref_ops, ref_syms = torch.zeros_like(got), torch.full_like(got, -1)
        for b, s in enumerate(strings):
            for t, step in enumerate(pda.run([language.symbols[i] for i in s[:-1]]), start=1):
                kind = step.op[0]
                ref_ops[b, t] = 1 if kind == "push" else -1 if kind == "pop" else 0
                if kind == "push":
                    ref_syms[b, t] = pda.g_index[step.op[1]]
        real = mask.bool()
        metrics = {"action_acc": float((got == ref_ops)[real].float().mean())}
        for name, code in (("push", 1), ("pop", -1), ("noop", 0)):
            sel = real & (ref_ops == code)
            if bool(sel.any()):
                metrics[f"{name}_acc"] = float((got == ref_ops)[sel].float().mean())
        both = real & (ref_ops == 1) & (got == 1)
        m2 = trace["push_vector"].shape[-1]
        if bool(both.any()) and m2 == len(pda.stack_alphabet):
            best = max(
                float((torch.tensor(perm)[sym[both]] == ref_syms[both]).float().mean())
                for perm in itertools.permutations(range(m2))
            )
            metrics["symbol_acc"] = best
        n = len(strings[self.figure_string])
        decoded = {
            "pda_action": ref_ops[self.figure_string, :n].numpy().astype(float),
            "layer_action": got[self.figure_string, :n].numpy().astype(float),
        }
        return metrics, decoded

    def compare(self, trainer: L.Trainer, pl_module: L.LightningModule, split: str) -> Comparison | None:
        result = super().compare(trainer, pl_module, split)
        if result is None:
            return None
        from memrnn.constructions import extract_pda

        layer, language = pl_module.layer, trainer.datamodule.language
        vocab = [*language.symbols, "BOS"]
        if layer.input_size == len(vocab) and hasattr(layer, "stack_symbols"):
            pda = extract_pda(
                layer,
                alphabet=vocab,
                stack_alphabet=[f"k{i}" for i in range(layer.stack_symbols)],
                ignore=["BOS"],
                method="reachable",
            )
            self.extracted = pda
            result.metrics["extracted_states"] = float(len(pda.states))
            rows = sorted(pda.delta.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2] or ""))
            result.tables["extracted_pda"] = {
                "state": [k[0] for k, _ in rows],
                "symbol": [k[1] for k, _ in rows],
                "top": [k[2] or "EMPTY" for k, _ in rows],
                "next": [v[0] for _, v in rows],
                "op": [v[1][0] + (f"({v[1][1]})" if v[1][1] else "") for _, v in rows],
            }
        return result


def _dyck_slots(language: Any, strings: Sequence[Sequence[int]], steps: int) -> torch.Tensor:
    """``[B, steps, m]`` long: the bracket in each stack slot (bottom first, the LSTM
    construction's layout; 0 = empty, ``i + 1`` = bracket ``i``) after ``BOS w_1 .. w_t``."""
    k, m = language.k, language.m
    out = torch.zeros(len(strings), steps, m, dtype=torch.long)
    for b, s in enumerate(strings):
        stack: list[int] = []
        for t, tok in enumerate(s[: steps - 1], start=1):
            if tok < k:
                stack.append(tok)
            elif tok < 2 * k and stack:
                stack.pop()
            for j, sym in enumerate(stack[:m]):
                out[b, t, j] = sym + 1
    return out


class HewittComparison(TraceComparison):
    """Compare an LSTM trained on Dyck-(k,m) with Hewitt's LSTM construction (Hewitt et al. 2020, E.6, G.2)
    on probe strings.

    After every ``every_n_epochs``-th validation, logged as ``<split>/hewitt/``:

    * ``slot{j}_h_acc``, ``slot{j}_c_acc`` and their means ``slot_h_acc``, ``slot_c_acc``: held-out
      accuracy of a linear probe decoding stack slot ``j`` (bottom first: empty or which
      bracket) from ``h_t`` and from ``c_t`` (fit on the first half of the probe strings).  The
      construction stores every slot in ``c`` and only the top in ``h``.
    * ``saturation_i``, ``_f``, ``_o``: the fraction of gate values within ``0.05`` of 0 or 1
      (the construction: 1.0).
    * ``match_i``, ``match_f``, ``match_o``, ``match_c``: mean absolute correlation of the
      learned units with the construction's (``3m⌈log2 k⌉ − m`` units, the same probe strings),
      paired one to one by an optimal assignment (:func:`~memrnn.analysis.matching.match_units`).

    Figures: the default trace heatmap and ``gate_correlation`` (``|corr|`` of learned units,
    ordered by their match, against the construction's, per gate).  Needs an LSTM layer
    (``trace`` with ``i``, ``f``, ``o``, ``c``, ``h``) and a Dyck-(k,m) language.
    """

    key = "hewitt"

    def _construction_trace(self, language: Any, strings: list[list[int]]) -> dict[str, torch.Tensor]:
        from memrnn.constructions.hewitt import HewittGenerator, HewittLSTM

        enc = "log" if language.k >= 2 else "one_hot"
        g = HewittGenerator(HewittLSTM(k=language.k, m=language.m, encoding=enc, dtype=torch.float64))
        inp, mask, _ = bos_inputs([s[:-1] for s in strings], language.bos_id)
        return {k: v.detach() for k, v in g.layer.trace(g.embedding(inp), mask=mask).items()}

    def compare_trace(self, language, strings, trace, mask):
        from memrnn.analysis.matching import correlation, match_units
        from memrnn.analysis.probe import fit_linear_probe

        if not (hasattr(language, "k") and hasattr(language, "m") and language.bracket_bound == language.m):
            raise ValueError(f"HewittComparison needs a Dyck-(k,m) language, got {language}")
        missing = [k for k in ("i", "f", "o", "c", "h") if k not in trace]
        if missing:
            raise ValueError(
                f"HewittComparison needs an LSTM layer (trace keys {missing} missing; it has {sorted(trace)})"
            )
        real = mask.bool()
        top = {
            k: trace[k][..., -1, :] if trace[k].dim() == 4 else trace[k] for k in ("i", "f", "o", "c", "h")
        }
        slots = _dyck_slots(language, strings, real.shape[1])
        half = len(strings) // 2
        tr, te = real.clone(), real.clone()
        tr[half:], te[:half] = False, False
        metrics: dict[str, float] = {}
        for feat in ("h", "c"):
            accs = []
            for j in range(language.m):
                y = slots[..., j]
                res = fit_linear_probe(top[feat][tr], y[tr], top[feat][te], y[te], "class")
                metrics[f"slot{j + 1}_{feat}_acc"] = res.accuracy
                accs.append(res.accuracy)
            metrics[f"slot_{feat}_acc"] = float(np.mean(accs))
        for g in ("i", "f", "o"):
            v = top[g][real]
            metrics[f"saturation_{g}"] = float(((v < 0.05) | (v > 0.95)).double().mean())
        ref = self._construction_trace(language, strings)
        self._corr = {}
        for g in ("i", "f", "o", "c"):
            a = top[g][real].double().numpy()
            b = ref[g][..., -1, :][real].numpy()
            rows, cols, r = match_units(a, b)
            metrics[f"match_{g}"] = float(r.mean())
            self._corr[g] = (
                np.abs(correlation(a, b))[rows][:, np.argsort(cols)] if len(rows) else np.zeros((0, 0))
            )
        return metrics, {}

    def compare(self, trainer: L.Trainer, pl_module: L.LightningModule, split: str) -> Comparison | None:
        result = super().compare(trainer, pl_module, split)
        if result is not None and self.figures and getattr(self, "_corr", None):
            import matplotlib.pyplot as plt

            fig, axes = plt.subplots(1, 4, figsize=(16, 4), squeeze=False)
            for ax, (g, c) in zip(axes[0], self._corr.items(), strict=True):
                im = ax.imshow(c, vmin=0, vmax=1, aspect="auto", cmap="viridis")
                ax.set_title(f"{g}: |corr| learned (rows, matched) vs construction")
                ax.set_xlabel("construction unit")
            axes[0, 0].set_ylabel("learned unit")
            fig.colorbar(im, ax=axes[0, -1])
            fig.tight_layout()
            result.figures["gate_correlation"] = fig
        return result


class CounterProbe(ModelComparison):
    """Find counting dimensions in a trained layer (Weiss et al. 2018 Figure 1): feed one long probe string
    (``a^1000 b^1000``, ``a^100 b^100 c^100``, or a sampled string of a PDA language), correlate
    every unit of the layer's state (``state.*`` of its ``trace``: an LSTM's ``h`` and ``c``, a
    GRU's ``h``) with the reference counters (``a-b``, ``b-c`` count differences; ``depth``), and
    compare with the compiled counter machine's counting units (:mod:`memrnn.constructions.counters`,
    LSTM, on the same string).

    Logged as ``<split>/counters/``: ``best_abs_r_<ref>`` (the largest ``|r|`` over all units),
    ``units_<ref>`` (how many units reach ``threshold``) and ``construction_abs_r_<ref>``.  Table
    ``counter_correlations`` (one row per unit); figure ``activations``: the state over the probe
    string with the counting units drawn bold, beside the construction's counters.

    Args:
        n: the probe's block length (default 1000 for two blocks, 100 for three).
        threshold: ``|r|`` at which a unit counts as a counter.
        keys: trace keys to scan (default every ``state.*``).
        splits, every_n_epochs, figures: as :class:`ModelComparison` (default: validation, test).
    """

    key = "counters"

    def __init__(
        self,
        n: int | None = None,
        threshold: float = 0.99,
        keys: Sequence[str] | None = None,
        splits: Sequence[str] = ("val", "test"),
        every_n_epochs: int = 1,
        figures: bool = True,
    ) -> None:
        super().__init__(splits, every_n_epochs, figures)
        if n is not None and n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        if not 0 < threshold <= 1:
            raise ValueError(f"threshold must lie in (0, 1], got {threshold}")
        self.n, self.threshold = n, threshold
        self.keys = tuple(keys) if keys is not None else None
        self.correlations: dict[str, np.ndarray] = {}

    def analyse(self, pl_module: L.LightningModule, language: Any) -> tuple[Comparison, dict[str, Any]]:
        """The comparison for ``pl_module`` (an embedding and a layer) on ``language``, and the raw
        material of the figure (``string``, ``trace``, ``refs``, ``construction``)."""
        from memrnn.analysis.counting import probe_string, reference_counters, unit_correlations
        from memrnn.languages.counting import CountingLanguage

        string = probe_string(language, self.n)
        refs = reference_counters(language, string)
        trace, _ = TraceComparison.run_trace(pl_module, language, [string])
        keys = self.keys or tuple(k for k in trace if k.startswith("state."))
        missing = [k for k in keys if k not in trace]
        if missing or not keys:
            raise ValueError(
                f"CounterProbe keys {missing or keys} not in the layer's trace; it has {sorted(trace)}"
            )
        units = {k: trace[k][0].reshape(len(string), -1).double().numpy() for k in keys}
        self.correlations = {k: unit_correlations(u, refs) for k, u in units.items()}
        metrics: dict[str, float] = {}
        table: dict[str, list] = {"key": [], "unit": [], **{f"r_{r}": [] for r in refs}}
        for k, r in self.correlations.items():
            for u in range(r.shape[0]):
                table["key"].append(k)
                table["unit"].append(u)
                for j, name in enumerate(refs):
                    table[f"r_{name}"].append(float(r[u, j]))
        every = np.concatenate(list(self.correlations.values()), 0)
        for j, name in enumerate(refs):
            metrics[f"best_abs_r_{name}"] = float(np.abs(every[:, j]).max())
            metrics[f"units_{name}"] = float((np.abs(every[:, j]) >= self.threshold).sum())
        construction = None
        if isinstance(language, CountingLanguage):
            from memrnn.constructions.counters import compile_counter_machine

            cc = compile_counter_machine(language.machine, "lstm", dtype=torch.float64)
            ids, _ = cc.ids([[language.symbols[t] for t in string[:-1]]])
            construction = cc.magnitudes(ids)[0].double().numpy()
            rc = unit_correlations(construction, refs)
            for j, name in enumerate(refs):
                metrics[f"construction_abs_r_{name}"] = float(np.abs(rc[:, j]).max())
        raw = {"string": string, "units": units, "refs": refs, "construction": construction}
        return Comparison(metrics=metrics, tables={"counter_correlations": table}), raw

    def compare(self, trainer: L.Trainer, pl_module: L.LightningModule, split: str) -> Comparison | None:
        language = getattr(trainer.datamodule, "language", None)
        if language is None or not hasattr(pl_module, "layer") or not hasattr(pl_module, "embedding"):
            return None
        result, raw = self.analyse(pl_module, language)
        if self.figures:
            result.figures["activations"] = self.figure(language, raw)
        return result

    def figure(self, language: Any, raw: dict[str, Any]) -> Figure:
        """Weiss et al. 2018 Figure 1: the state over the probe string, counters bold; the construction's."""
        import matplotlib.pyplot as plt

        key = "state.c" if "state.c" in raw["units"] else next(iter(raw["units"]))
        units, r = raw["units"][key], np.abs(self.correlations[key]).max(1)
        panels = 2 if raw["construction"] is not None else 1
        fig, axes = plt.subplots(1, panels, figsize=(7 * panels, 3.5), squeeze=False)
        ax = axes[0, 0]
        for u in range(units.shape[1]):
            bold = r[u] >= self.threshold
            ax.plot(units[:, u], lw=2.0 if bold else 0.7, label=f"unit {u} |r|={r[u]:.3f}" if bold else None)
        ax.set_title(f"learned {key} on the probe ({len(raw['string']) - 1} symbols)")
        ax.set_xlabel("position")
        if (r >= self.threshold).any():
            ax.legend(fontsize=7)
        if raw["construction"] is not None:
            ax = axes[0, 1]
            for j in range(raw["construction"].shape[1]):
                ax.plot(raw["construction"][:, j], lw=2.0, label=f"counter {j}")
            for name, v in raw["refs"].items():
                ax.plot(v, ls=":", color="k", lw=1.0, label=f"#{name}")
            ax.set_title("compiled LSTM counters (|c|, one step behind) and references")
            ax.set_xlabel("position")
            ax.legend(fontsize=7)
        fig.tight_layout()
        return fig


class HewittInit(L.Callback):
    """Start from Hewitt's construction: at the first ``setup`` (fit, validate or test; before a
    checkpoint is restored, so resuming keeps the trained weights; never again, so a
    ``trainer.test()`` after ``fit`` sees the trained model),
    :func:`~memrnn.constructions.hewitt_init_` sets the module's LSTM (``layer``),
    ``embedding`` and generator head.

    Args:
        scale: multiplies the constructed weights (``hewitt_init_``; 1 = exact, saturated).
        encoding: ``"log"`` (``3m⌈log2 k⌉ − m`` units) or ``"one_hot"`` (``mk``).
        k, m: default: the data module's language's.
        freeze_embedding: keep the token features fixed (default).  The construction's input
            weights are ``≈ λ = 52``, so the embedding's gradient is amplified ``~λ²`` times and
            any optimizer step on it (SGD 0.5 or Adam 0.01, measured) wrecks the stack within
            a few steps.
    """

    def __init__(
        self,
        scale: float = 1.0,
        encoding: str = "log",
        k: int | None = None,
        m: int | None = None,
        freeze_embedding: bool = True,
    ) -> None:
        self.scale, self.encoding, self.k, self.m = scale, encoding, k, m
        self.freeze_embedding = freeze_embedding
        self.spec = None

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if self.spec is not None:  # once: a later trainer.test() must not reset the trained weights
            return
        from memrnn.constructions.hewitt import hewitt_init_

        language = getattr(trainer.datamodule, "language", None)
        k = self.k if self.k is not None else getattr(language, "k", None)
        m = self.m if self.m is not None else getattr(language, "m", None)
        if k is None or m is None:
            raise ValueError("HewittInit needs k and m, or a Dyck-(k,m) data module")
        head = pl_module.heads["generator"] if "generator" in pl_module.heads else None  # noqa: SIM401 (ModuleDict)
        self.spec = hewitt_init_(
            pl_module.layer,
            k,
            m,
            encoding=self.encoding,
            scale=self.scale,
            embedding=pl_module.embedding,
            readout=head,
        )
        if self.freeze_embedding:
            pl_module.embedding.weight.requires_grad_(False)
        rank_zero_info(
            f"HewittInit: Dyck-({k},{m}) {self.encoding} construction ({self.spec.hidden_size} units) x{self.scale}"
            + (", token features frozen" if self.freeze_embedding else "")
        )


class ProgressBar(TQDMProgressBar):
    """Lightning's TQDM bar with the live metrics (``train/loss``, the validation metrics marked
    ``prog_bar``) on a terminal; where output is not a terminal (SLURM logs, CI, pipes) the bars
    are replaced by one line per epoch with the same metrics, so log files stay readable.

    Args:
        refresh_rate: batches between bar updates (terminal only).
        lines: ``True`` forces one line per epoch, ``False`` forces bars; ``None`` chooses by
            whether standard output is a terminal.
    """

    def __init__(self, refresh_rate: int = 1, lines: bool | None = None) -> None:
        super().__init__(refresh_rate=refresh_rate)
        self.lines = (not sys.stdout.isatty()) if lines is None else lines
        if self.lines:
            self.disable()

    def epoch_line(self, trainer: L.Trainer, pl_module: L.LightningModule) -> str:
        """``epoch e/E: name value, ...`` from the progress-bar metrics."""
        metrics = {k: v for k, v in self.get_metrics(trainer, pl_module).items() if k != "v_num"}
        total = trainer.max_epochs if trainer.max_epochs is not None and trainer.max_epochs >= 0 else "?"
        cells = [f"{k} {v:.4g}" if isinstance(v, int | float) else f"{k} {v}" for k, v in metrics.items()]
        return f"epoch {trainer.current_epoch + 1}/{total}: " + ", ".join(cells)

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.lines:
            if trainer.is_global_zero:
                print(self.epoch_line(trainer, pl_module), flush=True)
            return
        super().on_train_epoch_end(trainer, pl_module)
