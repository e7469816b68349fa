"""Callbacks that report numbers the module already computes: the cross-entropy against the exact
distribution, per-length curves, how far an acceptor counts, and a progress bar."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import TQDMProgressBar
from lightning.pytorch.utilities import rank_zero_info

from memrnn.analysis.counting import counting_sweep, strings_acceptor
from memrnn.analysis.plots import length_plot
from memrnn.core.checks import positive_int
from memrnn.languages.counting import CountingLanguage
from memrnn.lit.callbacks.base import Comparison, ModelComparison, model_to_compare


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


class LengthCurves(ModelComparison):
    """Length generalization from one evaluation run: after each validation and test epoch,
    take the module's per-length curves (``SequenceModule.length_curves``) and

    * write ``<log dir>/length_curves_<split>.csv`` (one row per string length) and a plot of
      ``metric`` against the length, ``<log dir>/figures/<split>_length_plot_step*.png``;
    * log them to W&B as a table ``<split>/length_curves``, that figure, and an interactive line
      plot ``<split>/length_line``, when a :class:`~memrnn.lit.WandbLogger` is attached;
    * keep them in ``self.curves[split]``.

    With members (:class:`memrnn.lit.MemberSequenceModule`) the curves are the members' mean
    (each member's: ``pl_module.member_curves``).

    Args:
        splits: which evaluations to report (``"val"``, ``"test"``).
        metric: the curve plotted (default: ``ce_gap`` for generators, ``accept_end`` for
            acceptors, ``next_set_sequence`` for next-set models, whichever exists first).
        every_n_epochs, figures: as :class:`ModelComparison`.
    """

    key = "length"

    reads_model = False  # the module's curves (with members: their mean), not the model

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
        positive_int("n_max", n_max)
        self.n_max = n_max
        self.result = None

    def _run(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:

        language = getattr(trainer.datamodule, "language", None)
        if not isinstance(language, CountingLanguage) or "acceptor" not in getattr(pl_module, "heads", {}):
            return
        model = model_to_compare(pl_module)  # with members: member 0's
        accepts = strings_acceptor(lambda w: model.accepts(w, language.bos_id), language)
        self.result = sweep = counting_sweep(accepts, language, self.n_max)
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
