""":class:`~memrnn.ops.stack_rnn.cpu.StackRNNSequence` as one opaque call under ``torch.compile``,
in a module of its own: ``torch.compiler.disable`` imports ``torch._dynamo`` (about half of
``import memrnn``'s time when it was applied at import: 4.2 s against 2.2 s on this project's
CPU), so :func:`memrnn.ops.stack_rnn.stack_rnn_sequence` imports this module when it first runs."""

from __future__ import annotations

import torch
from torch import Tensor

from memrnn.ops.stack_rnn.cpu import StackRNNSequence


@torch.compiler.disable
def hand_written(*args: object) -> tuple[Tensor, ...]:
    """``StackRNNSequence.apply(*args)``, run eagerly by compiled models: its loops write into
    views of its own buffers, which Dynamo cannot trace (the stratification memories' failed with
    "non-differentiable view input mutations")."""
    return StackRNNSequence.apply(*args)
