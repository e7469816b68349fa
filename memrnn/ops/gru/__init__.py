"""The GRU's CPU fast path, :class:`memrnn.ops.gru.cpu.GRUSequence` (opt-in through
``GRULayer(bptt=True)``); on CUDA ``GRULayer`` runs cuDNN, so there is no GPU kernel here."""

from memrnn.ops.gru.cpu import GRUSequence

__all__ = ["GRUSequence"]
