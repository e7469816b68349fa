"""The second-order recurrence over one-hot inputs (:class:`memrnn.layers.SecondOrderRNN`): the
reference loop, the CPU fast path on token buckets and the GPU kernels behind one entry point,
:func:`second_order_sequence`."""

from __future__ import annotations

import torch
from torch import Tensor

from memrnn.ops.buckets import TokenBuckets
from memrnn.ops.dispatch import choose, use_buckets
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
    indexed loop; the kernels take vocabularies up to 32 symbols."""
    impl = choose(s0, impl, triton_ok=weight.shape[2] <= 32)
    if impl == "triton":
        from memrnn.ops.second_order_rnn.triton import second_order_triton

        return second_order_triton(weight, bias, sensitivity, s0, ids)
    if impl == "cpu" and ids.shape[1] > 0:
        buckets = TokenBuckets(ids, weight.shape[2])
        if use_buckets(buckets, ids.shape[0]):
            return SecondOrderSequence.apply(weight, bias, sensitivity, s0, buckets)
    return second_order_reference(weight, bias, sensitivity, s0, ids)


__all__ = ["second_order_reference", "second_order_sequence"]
