"""The generator (language model) LightningModule: :class:`SequenceModule` with the
next-token objective only."""

from __future__ import annotations

from collections.abc import Callable

from memrnn.core.layer import MemoryLayer
from memrnn.lit.sequence import SequenceModule


class GeneratorModule(SequenceModule):
    """Next-token language model over a formal language (Hewitt et al. 2020, Definitions 2–3):
    ``logits_t = V · layer(E · w_<t) + b``, trained with masked cross-entropy.

    The same as ``SequenceModule(objectives={"generator": 1.0})``; see it for the arguments.
    Validation and test log ``ce``, ``ce_exact``, ``ce_gap`` (nats per token; see
    ``CrossEntropyGap``), ``acc``, ``ppl`` and, for bracket languages, Hewitt's ``closing``.
    """

    def __init__(
        self,
        layer: Callable[[int], MemoryLayer],
        vocab_size: int,
        num_symbols: int,
        embedding_dim: int | None = None,
        lr: float = 1e-2,
        weight_decay: float = 0.0,
        lr_decay: float | None = None,
        lr_patience: int = 0,
        optimizer: str = "adam",
        bracket_types: int | None = None,
        embedding: str = "learned",
    ) -> None:
        super().__init__(
            layer,
            vocab_size,
            num_symbols,
            embedding_dim=embedding_dim,
            objectives={"generator": 1.0},
            lr=lr,
            weight_decay=weight_decay,
            lr_decay=lr_decay,
            lr_patience=lr_patience,
            optimizer=optimizer,
            bracket_types=bracket_types,
            embedding=embedding,
        )
