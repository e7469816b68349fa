"""Callbacks shared by the configs."""

from __future__ import annotations

import csv
from pathlib import Path

import lightning as L
from lightning.pytorch.utilities import rank_zero_info

from memrnn.lit.loggers import WandbLogger


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


class LengthCurves(L.Callback):
    """Length generalization from one evaluation run: after each validation and test epoch,
    take the module's per-length curves (``SequenceModule.length_curves``) and

    * write ``<log dir>/length_curves_<split>.csv`` (one row per string length),
    * log them to W&B as a table ``<split>/length_curve`` and a line plot of ``metric`` against
      the length (``<split>/length_plot``), when a :class:`~memrnn.lit.WandbLogger` is attached,
    * keep them in ``self.curves[split]``.

    Args:
        splits: which evaluations to report (``"val"``, ``"test"``).
        metric: the curve plotted (default: ``ce_gap`` for generators, ``accept_end`` for
            acceptors, ``next_set_sequence`` for next-set models, whichever exists first).
    """

    def __init__(self, splits: tuple[str, ...] = ("val", "test"), metric: str | None = None) -> None:
        for s in splits:
            if s not in ("val", "test"):
                raise ValueError(f"splits must be 'val' and/or 'test', got {s!r}")
        self.splits, self.metric = tuple(splits), metric
        self.curves: dict[str, dict[str, list[float]]] = {}

    def _report(self, trainer: L.Trainer, pl_module: L.LightningModule, split: str) -> None:
        if split not in self.splits or trainer.sanity_checking or not hasattr(pl_module, "length_curves"):
            return
        curves = pl_module.length_curves(split)
        if not curves:
            return
        self.curves[split] = curves
        # trainer.log_dir broadcasts from rank 0: every rank must ask, or rank 0 waits forever
        out_dir = Path(trainer.log_dir or trainer.default_root_dir)
        if not trainer.is_global_zero:
            return
        columns = list(curves)
        rows = list(zip(*(curves[c] for c in columns), strict=True))
        out_dir.mkdir(parents=True, exist_ok=True)
        with open(out_dir / f"length_curves_{split}.csv", "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(columns)
            writer.writerows(rows)
        metric = self.metric or next(
            (m for m in ("ce_gap", "accept_end", "next_set_sequence") if m in curves), columns[-1]
        )
        if metric not in curves:
            raise ValueError(f"no per-length curve {metric!r}; available: {columns[2:]}")
        for logger in trainer.loggers:
            if isinstance(logger, WandbLogger):
                import wandb

                table = wandb.Table(columns=columns, data=[list(r) for r in rows])
                plot = wandb.plot.line(table, "length", metric, title=f"{split}: {metric} by length")
                logger.experiment.log(
                    {
                        f"{split}/length_curve": table,
                        f"{split}/length_plot": plot,
                        "trainer/global_step": trainer.global_step,
                    }
                )

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._report(trainer, pl_module, "val")

    def on_test_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._report(trainer, pl_module, "test")


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
