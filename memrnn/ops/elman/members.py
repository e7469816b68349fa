"""The Elman recurrence of :mod:`memrnn.ops.elman` with a member dimension: M independent Elman
RNNs (M runs trained as one model, ``docs/design.md``, "Members"), each with its own recurrent
weights, on pre-activations ``[M, B, T, H]``.  :class:`ElmanMemberSequence` is
:class:`memrnn.ops.elman.cpu.ElmanSequence` with the matrix products batched over the members
(``baddbmm``), one set of kernels per step whatever M is; :func:`elman_member_reference` is the
loop over members of the plain reference."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from memrnn.core.activations import identity
from memrnn.ops.autograd import first_order
from memrnn.ops.bptt import blocks, derivative, from_output
from memrnn.ops.elman.reference import elman_reference


def elman_member_reference(
    pre: Tensor, weight_hh: Tensor, h0: Tensor, activation: Callable[[Tensor], Tensor], leak: float = 1.0
) -> Tensor:
    """Member ``m`` is :func:`memrnn.ops.elman.reference.elman_reference` on ``pre[m]``,
    ``weight_hh[m]``, ``h0[m]``: ``pre [M, B, T, H]``, ``weight_hh [M, H, H]``, ``h0 [M, B, H]``
    -> ``hs [M, B, T+1, H]``."""
    return torch.stack(
        [elman_reference(pre[m], weight_hh[m], h0[m], activation, leak) for m in range(pre.shape[0])]
    )


class ElmanMemberSequence(torch.autograd.Function):
    """``pre [T, M, B, H]`` (time-major), ``weight_hh [M, H, H]``, ``h0 [M, B, H]``, the
    activation and the leak ``α`` -> ``hs [T+1, M, B, H]``; per step one ``baddbmm`` over the
    members and the activation, backward by hand (:class:`~memrnn.ops.elman.cpu.ElmanSequence`'s
    method)."""

    @staticmethod
    def forward(ctx, pre, weight_hh, h0, activation, leak):  # type: ignore[override]
        T, M, B, H = pre.shape
        ctx.set_materialize_grads(False)
        zs = pre.clone()
        hs = pre.new_empty(T + 1, M, B, H)
        hs[0] = h0
        w_t = weight_hh.transpose(1, 2)
        z_, h_ = zs.unbind(0), hs.unbind(0)
        for s in range(T):
            z_[s].baddbmm_(h_[s], w_t)
            if leak == 1.0:
                h_[s + 1].copy_(activation(z_[s]))
            else:
                torch.add(h_[s] * (1 - leak), activation(z_[s]), alpha=leak, out=h_[s + 1])
        linear = activation is identity
        derivative_of_output = from_output(activation) if leak == 1.0 or linear else None
        ctx.activation, ctx.leak, ctx.from_output = activation, leak, derivative_of_output
        keep_hs = hs if ctx.needs_input_grad[1] or not linear else None
        ctx.save_for_backward(weight_hh, keep_hs, None if derivative_of_output else zs)
        return hs

    @staticmethod
    @first_order
    def backward(ctx, grad_hs):  # type: ignore[override]
        weight_hh, hs, zs = ctx.saved_tensors
        leak = ctx.leak
        if grad_hs is None:
            return None, None, None, None, None
        T1, M, B, H = grad_hs.shape
        T = T1 - 1
        g_h = grad_hs[T].clone()
        gz = grad_hs.new_empty(T, M, B, H)
        gz_ = gz.unbind(0)
        for lo, hi in blocks(T):
            if hs is None:  # identity without ∂U
                d = grad_hs.new_ones(hi - lo, M, B, H)
            elif ctx.from_output:
                d = ctx.from_output(hs[lo + 1 : hi + 1])
            else:
                d = derivative(ctx.activation, zs[lo:hi])
            d_ = d.mul_(leak).unbind(0)
            for s in range(hi - 1, lo - 1, -1):
                torch.mul(g_h, d_[s - lo], out=gz_[s])
                if leak == 1.0:
                    g_h = torch.baddbmm(grad_hs[s], gz_[s], weight_hh)
                else:
                    g_h = torch.baddbmm(grad_hs[s], gz_[s], weight_hh).add_(g_h, alpha=1 - leak)
        grad_w = None
        if ctx.needs_input_grad[1]:
            # ∂U of member m: Σ_t gz_tᵀ h_{t−1}, one product per member over every step and row
            grad_w = torch.bmm(
                gz.permute(1, 3, 0, 2).reshape(M, H, T * B), hs[:-1].permute(1, 0, 2, 3).reshape(M, T * B, H)
            )
        return gz, grad_w, g_h, None, None


def elman_member_cpu(
    pre: Tensor, weight_hh: Tensor, h0: Tensor, activation: Callable[[Tensor], Tensor], leak: float = 1.0
) -> Tensor:
    """:class:`ElmanMemberSequence` members and batch first: ``pre [M, B, T, H]`` -> ``hs [M, B, T+1, H]``."""
    pre_t = pre.permute(2, 0, 1, 3).contiguous()
    return ElmanMemberSequence.apply(pre_t, weight_hh, h0, activation, leak).permute(1, 2, 0, 3)
