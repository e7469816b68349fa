"""The ReLU-counter recurrence (:class:`memrnn.layers.ReLUCounter`): the reference loop, the CPU
fast path (:class:`memrnn.ops.counter.cpu.CounterRNNSequence`) and the GPU kernels behind one entry
point, :func:`counter_sequence`."""

from __future__ import annotations

from collections.abc import Callable

import torch.nn.functional as F
from torch import Tensor

from memrnn.ops.counter.cpu import CounterRNNSequence
from memrnn.ops.counter.reference import counter_reference
from memrnn.ops.dispatch import choose

TRITON_ACTIVATIONS = ("tanh", "sigmoid", "relu", "heaviside", "saturated_linear")


def counter_sequence(
    x: Tensor,
    w_in: Tensor,
    b: Tensor,
    w_rec: Tensor,
    r0: Tensor,
    hidden: int,
    activation: str,
    fn: Callable[[Tensor], Tensor],
    *,
    impl: str | None = None,
) -> tuple[Tensor, Tensor]:
    """``x [B, T, n]`` -> ``rs [B, T+1, H + k]`` and moves ``[B, T, 2k]``
    (:mod:`memrnn.ops.counter.reference`); ``activation`` names the controller's ``fn``.  ``impl``
    as :func:`memrnn.ops.elman.elman_sequence`."""
    impl = choose(x, impl, triton_ok=activation in TRITON_ACTIVATIONS)
    if impl == "reference":
        return counter_reference(x, w_in, b, w_rec, r0, hidden, fn)
    if impl == "cpu":
        return CounterRNNSequence.apply(x, w_in, b, w_rec, r0, hidden, fn)
    from memrnn.ops.counter.triton import counter_triton

    return counter_triton(F.linear(x, w_in, b), w_rec, r0, hidden, activation)


__all__ = ["counter_reference", "counter_sequence"]
