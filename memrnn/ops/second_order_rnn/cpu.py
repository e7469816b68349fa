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
    sequence.  Equal to the reference loop (``tests/ops/test_second_order_rnn.py``).

    Members (M runs as one model): ``weight [M, n, n, m]``, ``bias [M, n]`` or None,
    ``sensitivity [M]``, ``s0 [M, B, n]`` and buckets over the ``M·B`` rows of every member with
    member ``μ``'s symbol ``k`` as symbol ``μ·m + k`` (:func:`memrnn.ops.buckets.member_buckets`) -> ``states [M, B,
    T+1, n]``: the members' rows are one batch and their weight slices one bucketed ``bmm`` per
    step (``M·m`` slices), the bias and ``H`` per row, ``∂W`` per member and symbol as
    :meth:`~memrnn.ops.buckets.TokenBuckets.weight_grad`'s ``M·m`` products, ``∂b`` and ``∂H`` per
    member; a step launches the kernels of one run whatever M is."""

    @staticmethod
    def forward(ctx, weight, bias, sensitivity, s0, buckets):  # type: ignore[override]
        members = weight.dim() == 4  # [M, n, n, m]: the rows of every member as one batch
        lead = s0.shape[:-1]  # ([M,] B)
        n = s0.shape[-1]
        T = buckets.slots.shape[0]
        keep_u = sensitivity.requires_grad
        if members:
            M, B = lead
            wk = weight.permute(0, 3, 2, 1).reshape(-1, n, n)  # [M·m, n (j), n (i)]
            s0 = s0.reshape(M * B, n)
            if bias is not None:  # each row's member's bias and H
                bias = bias[:, None].expand(M, B, n).reshape(M * B, n)
            sensitivity = sensitivity[:, None, None].expand(M, B, 1).reshape(M * B, 1)
        else:
            wk = weight.permute(2, 1, 0).contiguous()  # [m, n (j), n (i)]: z_b = s_b @ wk[k_b]
        states = s0.new_empty(s0.shape[0], T + 1, n)
        states[:, 0] = s0
        pre = s0.new_empty(s0.shape[0], T, n) if keep_u else None
        s = s0
        for t in range(T):
            u = buckets.contract(t, s, wk)
            if bias is not None:
                u += bias
            if pre is not None:
                pre[:, t] = u
            s = torch.sigmoid(u * sensitivity)
            states[:, t + 1] = s
        ctx.buckets, ctx.has_bias, ctx.lead = buckets, bias is not None, lead
        ctx.save_for_backward(weight, sensitivity, states, pre)
        return states.view(*lead, T + 1, n)

    @staticmethod
    @first_order
    def backward(ctx, grad_states):  # type: ignore[override]
        weight, sensitivity, states, pre = ctx.saved_tensors
        buckets: TokenBuckets = ctx.buckets
        lead = ctx.lead
        members = len(lead) == 2
        rows, T1, n = states.shape
        T = T1 - 1
        if members:  # [M·m, n (i), n (j)] and the rows of every member as one batch
            wkt = weight.permute(0, 3, 1, 2).reshape(-1, n, n)
            grad_states = grad_states.reshape(rows, T1, n)
        else:
            wkt = weight.permute(2, 0, 1).contiguous()  # [m, n (i), n (j)]: ∂s_j = Σ_i ∂u_i W_ijk
        grad_u = torch.empty_like(states[:, 1:])
        grad_h = sensitivity.new_zeros(lead[:-1]) if pre is not None else None  # [M] with members
        g = grad_states[:, T]
        for t in range(T, 0, -1):
            s = states[:, t]
            ds = g * s * (1 - s)  # ∂L/∂(H u)
            if grad_h is not None:
                if members:
                    grad_h += (ds * pre[:, t - 1]).view(lead[0], -1).sum(1)
                else:
                    grad_h += (ds * pre[:, t - 1]).sum()
            gu = ds * sensitivity
            grad_u[:, t - 1] = gu
            g = grad_states[:, t - 1] + buckets.contract(t - 1, gu, wkt)
        grad_w = buckets.weight_grad(states[:, :-1], grad_u)  # [(M·)m, n (j), n (i)]
        if members:
            M = lead[0]
            grad_w = grad_w.view(M, -1, n, n).permute(0, 3, 2, 1)
            grad_b = grad_u.view(M, -1, n).sum(1) if ctx.has_bias else None
            return grad_w, grad_b, grad_h, g.view(*lead, n), None
        grad_b = grad_u.sum((0, 1)) if ctx.has_bias else None
        return grad_w.permute(2, 1, 0), grad_b, grad_h, g, None
