"""What a suite cell records of its validation: the validation metrics of the checkpoint it tests,
which ``collect``'s selection on validation reads (DuSell & Chiang's ``print_best.py`` picks the
run with the best validation score and tests it).

Imported where a cell runs (it needs Lightning), not by ``python -m memrnn.suite --help``.
"""

from __future__ import annotations

import math
import time
from typing import Any

import lightning as L
import torch


def _float(v: Any) -> float | None:
    if isinstance(v, torch.Tensor) and v.numel() == 1:
        v = v.item()
    if isinstance(v, int | float) and not isinstance(v, bool):
        return float(v)
    return None


class ValidationRecord(L.Callback):
    """Keeps, after every validation epoch of a fit (not the sanity check), the scalar
    validation metrics Lightning holds then (``trainer.callback_metrics``: the ``val/…`` ones and
    the first checkpoint callback's monitored value), with the epoch, the step and the wall clock
    (``time``: Unix seconds); of a members run also ``members`` (the members the process trains,
    frozen ones included: what an epoch's cost follows) and ``stopped`` (how many of them are
    stopped after this validation, so frozen in the next epoch).  The record is
    saved in every checkpoint and restored with it, so a run continued after an interruption
    still knows its earlier epochs.  :meth:`tested` gives those of the checkpoint a test reads."""

    def __init__(self) -> None:
        self.epochs: list[dict[str, Any]] = []

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        ckpt = trainer.checkpoint_callback
        monitor = getattr(ckpt, "monitor", None)
        metrics = {}
        for k, v in trainer.callback_metrics.items():
            if k.startswith("val/") or k == monitor:
                value = _float(v)
                if value is not None:
                    metrics[k] = value
        entry = {"epoch": trainer.current_epoch, "step": trainer.global_step, "time": round(time.time(), 1)}
        members, stopped = getattr(pl_module, "members", None), getattr(pl_module, "stopped", None)
        if isinstance(members, int) and isinstance(stopped, torch.Tensor):
            entry |= {"members": members, "stopped": int(stopped.sum())}
        self.epochs.append({**entry, "metrics": metrics})

    def state_dict(self) -> dict[str, Any]:
        return {"epochs": list(self.epochs)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.epochs = list(state_dict.get("epochs", []))

    def tested(self, ckpt: Any, best_path: str) -> dict[str, Any] | None:
        """The record of the validation whose weights a test of ``best_path`` reads: with a
        checkpoint path, the first validation whose monitored value is the checkpoint callback's
        ``best_model_score`` (the callback keeps the first of equal values); without one (the
        test reads the last weights), the last validation.  None when no recorded validation
        matches (a run continued from a checkpoint written before memrnn kept this record)."""
        if not self.epochs:
            return None
        if not best_path:
            return self.epochs[-1]
        score = _float(getattr(ckpt, "best_model_score", None))
        monitor = getattr(ckpt, "monitor", None)
        if score is None or monitor is None or math.isnan(score):
            return None
        return next((e for e in self.epochs if e["metrics"].get(monitor) == score), None)
