"""The generator (language model) LightningModule: embedding -> any MemoryLayer -> readout."""

from __future__ import annotations

from collections.abc import Callable

import lightning as L
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torchmetrics import MetricCollection
from torchmetrics.classification import MulticlassAccuracy
from torchmetrics.text import Perplexity

from memrnn.core.layer import MemoryLayer
from memrnn.data.datamodule import IGNORE_INDEX
from memrnn.lit.metrics import CrossEntropyGap


class GeneratorModule(L.LightningModule):
    """Next-token language model over a formal language (seed 000, Definitions 2–3).

    ``logits_t = V · layer(E · w_<t) + b``, trained with masked cross-entropy.

    Args:
        layer: a callable of the embedding size returning a ``MemoryLayer``; in YAML a
            ``class_path`` with ``init_args`` that omit ``input_size``.
        vocab_size: input ids (linked from the data module: symbols + ``BOS``).
        num_symbols: output classes (linked from the data module: symbols, ``END`` included).
        embedding_dim: size of the token embedding ``E``.
        lr: Adam learning rate.
        weight_decay: Adam weight decay.
        lr_decay: if set, multiply the learning rate by this factor whenever ``val/ce`` fails
            to improve (``ReduceLROnPlateau`` with patience 0, as in seed 000 H.3).

    Validation and test log ``ce``, ``ce_exact``, ``ce_gap`` (nats per token; see
    ``CrossEntropyGap``), ``acc`` (per-token argmax accuracy) and ``ppl`` under ``val/``, ``test/``.
    """

    def __init__(
        self,
        layer: Callable[[int], MemoryLayer],
        vocab_size: int,
        num_symbols: int,
        embedding_dim: int = 16,
        lr: float = 1e-2,
        weight_decay: float = 0.0,
        lr_decay: float | None = None,
    ) -> None:
        super().__init__()
        if num_symbols < 1 or vocab_size < num_symbols:
            raise ValueError(f"need 1 <= num_symbols <= vocab_size, got {num_symbols=} {vocab_size=}")
        if embedding_dim < 1:
            raise ValueError(f"embedding_dim must be positive, got {embedding_dim}")
        if lr_decay is not None and not 0 < lr_decay < 1:
            raise ValueError(f"lr_decay must lie in (0, 1), got {lr_decay}")
        self.save_hyperparameters()
        self.embedding = nn.Embedding(vocab_size, embedding_dim)
        self.layer = layer(embedding_dim)
        if not isinstance(self.layer, MemoryLayer):
            raise ValueError(f"layer must build a memrnn MemoryLayer, got {type(self.layer).__name__}")
        self.readout = nn.Linear(self.layer.output_size, num_symbols)
        self.vocab_size, self.num_symbols = vocab_size, num_symbols
        for split in ("val", "test"):
            metrics = MetricCollection(
                {
                    "acc": MulticlassAccuracy(num_symbols, average="micro", ignore_index=IGNORE_INDEX),
                    "ppl": Perplexity(ignore_index=IGNORE_INDEX),
                },
                prefix=f"{split}/",
            )
            setattr(self, f"{split}_metrics", metrics)
            setattr(self, f"{split}_gap", CrossEntropyGap())

    def forward(self, input_ids: Tensor, mask: Tensor | None = None) -> Tensor:
        """``input_ids [B, T]`` (``BOS`` first) -> next-token logits ``[B, T, num_symbols]``."""
        bad = (input_ids < 0) | (input_ids >= self.vocab_size)
        if bool(bad.any()):  # one host sync per batch
            raise ValueError(
                f"unknown token id {int(input_ids[bad][0])}; the model has ids 0..{self.vocab_size - 1}"
            )
        hidden, _ = self.layer(self.embedding(input_ids), mask=mask)
        return self.readout(hidden)

    def _loss(self, logits: Tensor, target: Tensor) -> Tensor:
        return F.cross_entropy(logits.flatten(0, 1), target.flatten(), ignore_index=IGNORE_INDEX)

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        logits = self(batch["input"], batch["mask"])
        loss = self._loss(logits, batch["target"])
        self.log("train/loss", loss, prog_bar=True, batch_size=int(batch["mask"].sum()))
        return loss

    def _eval_step(self, batch: dict[str, Tensor], split: str) -> None:
        logits = self(batch["input"], batch["mask"])
        n_tokens = int(batch["mask"].sum())
        self.log(f"{split}/loss", self._loss(logits, batch["target"]), batch_size=n_tokens, sync_dist=True)
        metrics = getattr(self, f"{split}_metrics")
        metrics["acc"].update(logits.flatten(0, 1), batch["target"].flatten())
        metrics["ppl"].update(logits.float(), batch["target"])
        getattr(self, f"{split}_gap").update(logits, batch["target"], batch["ref_logprob"])

    def _eval_epoch_end(self, split: str) -> None:
        metrics = getattr(self, f"{split}_metrics")
        self.log_dict(metrics.compute())
        metrics.reset()
        gap = getattr(self, f"{split}_gap")
        self.log_dict({f"{split}/{k}": v.float() for k, v in gap.compute().items()}, prog_bar=split == "val")
        gap.reset()

    def _eval_epoch_start(self, split: str) -> None:
        # A previous trainer.validate() ran under inference_mode and may have left inference
        # tensors in the metric states; fit's validation runs under no_grad and could not update
        # them in place.  Resetting here re-creates ordinary tensors.
        getattr(self, f"{split}_metrics").reset()
        getattr(self, f"{split}_gap").reset()

    def on_validation_epoch_start(self) -> None:
        self._eval_epoch_start("val")

    def on_test_epoch_start(self) -> None:
        self._eval_epoch_start("test")

    def validation_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        self._eval_step(batch, "val")

    def on_validation_epoch_end(self) -> None:
        self._eval_epoch_end("val")

    def test_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        self._eval_step(batch, "test")

    def on_test_epoch_end(self) -> None:
        self._eval_epoch_end("test")

    def configure_optimizers(self):
        opt = torch.optim.Adam(self.parameters(), lr=self.hparams.lr, weight_decay=self.hparams.weight_decay)
        if self.hparams.lr_decay is None:
            return opt
        sched = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, factor=self.hparams.lr_decay, patience=0)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "monitor": "val/ce"}}
