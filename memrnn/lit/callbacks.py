"""Callbacks shared by the configs."""

from __future__ import annotations

import lightning as L
from lightning.pytorch.utilities import rank_zero_info


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
