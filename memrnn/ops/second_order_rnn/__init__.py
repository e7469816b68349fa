"""The second-order recurrence over one-hot inputs (:class:`memrnn.layers.SecondOrderRNN`): the
reference loop, the CPU fast path on token buckets and the GPU kernels behind one entry point,
:func:`second_order_sequence`.

Members (M runs as one model, ``docs/design.md``): every argument with a leading member dimension
(``weight [M, n, n, m]``, ``bias [M, n]``, ``sensitivity [M]``, ``s0 [M, B, n]``, ``ids [M, B,
T]``); ``"reference"`` loops over the members (:func:`second_order_member_reference`), ``"cpu"``
runs :class:`~memrnn.ops.second_order_rnn.cpu.SecondOrderSequence` with members (every member's
rows and weight slices in one bucketed product per step) where buckets pay, else the member
reference; the Triton kernels launch once per direction for all members (a grid of row tiles ×
members)."""

from __future__ import annotations

import torch
from torch import Tensor

from memrnn.ops.buckets import TokenBuckets, check_ids, member_buckets
from memrnn.ops.dispatch import choose, use_buckets
from memrnn.ops.members import per_member
from memrnn.ops.second_order_rnn.cpu import SecondOrderSequence
from memrnn.ops.tensor import second_order


def second_order_reference(
    weight: Tensor, bias: Tensor | None, sensitivity: Tensor, s0: Tensor, ids: Tensor
) -> Tensor:
    """``s_{t+1} = h_H(W[·,·,k_t] s_t + b)`` step by step under autograd (the indexed contraction
    of :func:`memrnn.ops.tensor.second_order`): ``ids [B, T]`` -> states ``[B, T+1, N]``."""
    s, states = s0, [s0]
    for ids_t in ids.unbind(1):
        z = second_order(weight, s, tokens=ids_t)
        if bias is not None:
            z = z + bias
        s = torch.sigmoid(sensitivity * z)
        states.append(s)
    return torch.stack(states, 1)


def second_order_member_reference(
    weight: Tensor, bias: Tensor | None, sensitivity: Tensor, s0: Tensor, ids: Tensor
) -> Tensor:
    """Members: member ``μ`` is :func:`second_order_reference` on ``weight[μ]``, ``bias[μ]``,
    ``sensitivity[μ]``, ``s0[μ]``, ``ids[μ]``: ``weight [M, n, n, m]``, ``bias [M, n]`` or None,
    ``sensitivity [M]``, ``s0 [M, B, n]``, ``ids [M, B, T]`` -> states ``[M, B, T+1, n]``."""
    return per_member(second_order_reference, weight.shape[0], weight, bias, sensitivity, s0, ids)


def second_order_sequence(
    weight: Tensor,
    bias: Tensor | None,
    sensitivity: Tensor,
    s0: Tensor,
    ids: Tensor,
    *,
    impl: str | None = None,
) -> Tensor:
    """``weight W [N, N, M]`` (next unit, current unit, symbol), ``bias [N]`` or None, the
    sensitivity ``H`` (a 0-d tensor, learned or not), ``s0 [B, N]``, ``ids [B, T]`` (checked by the
    caller) -> states ``[B, T+1, N]``.  ``impl`` as :func:`memrnn.ops.elman.elman_sequence`; on CPU
    the bucketed Function where buckets pay (:func:`memrnn.ops.dispatch.use_buckets`), else the
    indexed loop; the kernels take vocabularies up to 32 symbols.

    Members: ``weight [M, n, n, m]``, ``bias [M, n]`` or None, ``sensitivity [M]``, ``s0 [M, B,
    n]``, ``ids [M, B, T]`` -> states ``[M, B, T+1, n]``, member ``μ`` exactly the call on its
    ``[μ]`` slices (module docstring)."""
    if weight.dim() == 4:
        return _members(weight, bias, sensitivity, s0, ids, impl)
    impl = choose(s0, impl, triton_ok=weight.shape[2] <= 32)
    if impl == "triton":
        from memrnn.ops.second_order_rnn.triton import second_order_triton

        return second_order_triton(weight, bias, sensitivity, s0, ids)
    if impl == "cpu" and ids.shape[1] > 0:
        buckets = TokenBuckets(ids, weight.shape[2])
        if use_buckets(buckets, ids.shape[0]):
            return SecondOrderSequence.apply(weight, bias, sensitivity, s0, buckets)
    return second_order_reference(weight, bias, sensitivity, s0, ids)


def _members(weight, bias, sensitivity, s0, ids, impl):
    M = weight.shape[0]
    for name, t, dims in (("bias", bias, 2), ("sensitivity", sensitivity, 1), ("s0", s0, 3), ("ids", ids, 3)):
        if t is not None and (t.dim() != dims or t.shape[0] != M):
            raise ValueError(
                f"with members every argument has the member dimension first: weight is "
                f"{tuple(weight.shape)} (M = {M}), so {name} must be {dims}-D with {M} first, got {tuple(t.shape)}"
            )
    impl = choose(s0, impl, triton_ok=weight.shape[3] <= 32)
    if impl == "triton":
        from memrnn.ops.second_order_rnn.triton import second_order_triton

        check_ids(ids, weight.shape[3])  # an id past the vocabulary would reach the next member's ∂W
        return second_order_triton(weight, bias, sensitivity, s0, ids)
    if impl == "cpu" and ids.shape[2] > 0:
        buckets = member_buckets(ids, weight.shape[3])
        if use_buckets(buckets, ids.shape[0] * ids.shape[1]):
            return SecondOrderSequence.apply(weight, bias, sensitivity, s0, buckets)
    return second_order_member_reference(weight, bias, sensitivity, s0, ids)


__all__ = ["second_order_member_reference", "second_order_reference", "second_order_sequence"]
