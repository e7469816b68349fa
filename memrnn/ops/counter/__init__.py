"""The ReLU-counter recurrence (:class:`memrnn.layers.ReLUCounter`): the reference loop, the CPU
fast path (:class:`memrnn.ops.counter.cpu.CounterRNNSequence`) and the GPU kernels behind one entry
point, :func:`counter_sequence`."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from memrnn.ops.counter.cpu import CounterRNNSequence
from memrnn.ops.counter.reference import counter_member_reference, counter_reference
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
    as :func:`memrnn.ops.elman.elman_sequence`.

    Members (M runs as one model, ``docs/design.md``): every argument with a leading member
    dimension, ``x [M, B, T, n]``, ``w_in [M, H + 2k, n]``, ``b [M, H + 2k]``, ``w_rec [M, H + 2k, H +
    k]``, ``r0 [M, B, H + k]`` -> ``rs [M, B, T+1, H + k]``, moves ``[M, B, T, 2k]``, member ``m``
    exactly the call on its ``[m]`` slices: the reference loops over the members, the CPU path
    batches its products over them (:class:`memrnn.ops.counter.cpu.CounterRNNSequence` with
    members), the GPU kernels launch once per direction for all members (a grid of row tiles ×
    members)."""
    if w_rec.dim() == 3:
        return _members(x, w_in, b, w_rec, r0, hidden, activation, fn, impl)
    impl = choose(x, impl, triton_ok=activation in TRITON_ACTIVATIONS)
    if impl == "reference":
        return counter_reference(x, w_in, b, w_rec, r0, hidden, fn)
    if impl == "cpu":
        return CounterRNNSequence.apply(x, w_in, b, w_rec, r0, hidden, fn)
    from memrnn.ops.counter.triton import counter_triton

    return counter_triton(F.linear(x, w_in, b), w_rec, r0, hidden, activation)


def _members(x, w_in, b, w_rec, r0, hidden, activation, fn, impl):
    M = w_rec.shape[0]
    for name, t, dims in (("x", x, 4), ("w_in", w_in, 3), ("b", b, 2), ("r0", r0, 3)):
        if t.dim() != dims or t.shape[0] != M:
            raise ValueError(
                f"with members every argument has the member dimension first: w_rec is {tuple(w_rec.shape)} "
                f"(M = {M}), so {name} must be {dims}-D with {M} first, got {tuple(t.shape)}"
            )
    impl = choose(x, impl, triton_ok=activation in TRITON_ACTIVATIONS)
    if impl == "reference":
        return counter_member_reference(x, w_in, b, w_rec, r0, hidden, fn)
    if impl == "cpu":
        return CounterRNNSequence.apply(x, w_in, b, w_rec, r0, hidden, fn)
    from memrnn.ops.counter.triton import counter_triton

    B, T, n = x.shape[1:]
    pre = torch.baddbmm(b[:, None], x.reshape(M, B * T, n), w_in.transpose(1, 2)).reshape(M, B, T, -1)
    return counter_triton(pre, w_rec, r0, hidden, activation)


__all__ = ["counter_member_reference", "counter_reference", "counter_sequence"]
