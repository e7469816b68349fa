""":class:`~memrnn.ops.stack_rnn.cpu.StackRNNSequence` as one opaque call under ``torch.compile``,
in a module of its own: ``torch.compiler.disable`` imports ``torch._dynamo`` (about half of
``import memrnn``'s time when it was applied at import: 4.2 s against 2.2 s on this project's
CPU), so :func:`memrnn.ops.stack_rnn.stack_rnn_sequence` imports this module when it first runs."""

from __future__ import annotations

import torch
from torch import Tensor

from memrnn.ops.stack_rnn.cpu import NoHistory, StackRNNSequence


@torch.compiler.disable
def hand_written(*args: object) -> tuple[Tensor, ...]:
    """``StackRNNSequence.apply(*args)``, run eagerly by compiled models: its loops write into
    views of its own buffers, which Dynamo cannot trace (the stratification memories' failed with
    "non-differentiable view input mutations").

    When no gradient can be asked for (grad mode off, as under ``torch.no_grad`` and
    ``torch.inference_mode``, or no tensor argument requiring one), the forward runs without
    autograd's ``Function`` and keeps no history (:class:`memrnn.ops.stack_rnn.cpu.NoHistory`):
    memory O(batch × state) instead of O(T × batch × state), the same results bit for bit."""
    if not torch.is_grad_enabled() or not any(isinstance(a, Tensor) and a.requires_grad for a in args):
        with torch.no_grad():
            return StackRNNSequence.forward(NoHistory(), *args)
    return StackRNNSequence.apply(*args)
