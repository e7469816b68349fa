"""The second-order recurrence over one-hot inputs as one autograd Function with hand-written
backpropagation through time, on token buckets (:mod:`memrnn.ops.buckets`): the CPU fast path of
:func:`memrnn.ops.second_order_rnn.second_order_sequence`."""

from __future__ import annotations

import torch

from memrnn.ops.autograd import first_order
from memrnn.ops.buckets import TokenBuckets


class SecondOrderSequence(torch.autograd.Function):
    """Equation 3 over a whole one-hot sequence with hand-written backpropagation through time.

    Forward: ``S [B, T+1, n]`` (``S[:, 0] = s^0``), ``S[:, t+1] = h_H(S[:, t] W[·,·,k_t] + b)``, each
    step one bucketed ``bmm`` (:class:`memrnn.ops.buckets.TokenBuckets`) and no autograd graph.
    Backward: one bucketed ``bmm`` per step for ``∂/∂s^t``; ``∂W``, ``∂b`` and ``∂H`` once per
    sequence.  Equal to the reference loop (``tests/ops/test_second_order_rnn.py``)."""

    @staticmethod
    def forward(ctx, weight, bias, sensitivity, s0, buckets):  # type: ignore[override]
        B, n = s0.shape
        T = buckets.slots.shape[0]
        wk = weight.permute(2, 1, 0).contiguous()  # [m, n (j), n (i)]: z_b = s_b @ wk[k_b]
        states = s0.new_empty(B, T + 1, n)
        states[:, 0] = s0
        keep_u = sensitivity.requires_grad
        pre = s0.new_empty(B, T, n) if keep_u else None
        s = s0
        for t in range(T):
            u = buckets.contract(t, s, wk)
            if bias is not None:
                u += bias
            if pre is not None:
                pre[:, t] = u
            s = torch.sigmoid(u * sensitivity)
            states[:, t + 1] = s
        ctx.buckets, ctx.has_bias = buckets, bias is not None
        ctx.save_for_backward(weight, sensitivity, states, pre)
        return states

    @staticmethod
    @first_order
    def backward(ctx, grad_states):  # type: ignore[override]
        weight, sensitivity, states, pre = ctx.saved_tensors
        buckets: TokenBuckets = ctx.buckets
        T = states.shape[1] - 1
        wkt = weight.permute(2, 0, 1).contiguous()  # [m, n (i), n (j)]: ∂s_j = Σ_i ∂u_i W_ijk
        grad_u = torch.empty_like(states[:, 1:])
        grad_h = sensitivity.new_zeros(()) if pre is not None else None
        g = grad_states[:, T]
        for t in range(T, 0, -1):
            s = states[:, t]
            ds = g * s * (1 - s)  # ∂L/∂(H u)
            if grad_h is not None:
                grad_h += (ds * pre[:, t - 1]).sum()
            gu = ds * sensitivity
            grad_u[:, t - 1] = gu
            g = grad_states[:, t - 1] + buckets.contract(t - 1, gu, wkt)
        grad_w = buckets.weight_grad(states[:, :-1], grad_u).permute(2, 1, 0)
        grad_b = grad_u.sum((0, 1)) if ctx.has_bias else None
        return grad_w, grad_b, grad_h, g, None
