"""The Elman recurrence as one autograd Function with hand-written backpropagation through time
(the fast path on CPU, and on GPUs where the Triton kernel does not apply).

Forward: per step one ``addmm`` and one activation kernel, no autograd graph; the
pre-activations ``z_t`` are kept for the backward, except where the derivative is a function of
the output, as autograd computes it (:func:`memrnn.ops.bptt.from_output`: ``tanh``, ``sigmoid``
and ``relu`` without a leak, ``identity``), which halves what a sequence keeps for the backward.
Backward: per step one ``addmm`` and one or two elementwise kernels, the activation derivatives computed for :data:`memrnn.ops.bptt.BLOCK` steps
at once (autograd's own subgradient conventions, so the numbers equal the reference loop's);
``∂U`` is one matrix product.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from memrnn.core.activations import identity
from memrnn.ops.autograd import first_order
from memrnn.ops.bptt import blocks, derivative, from_output


class ElmanSequence(torch.autograd.Function):
    """``pre [T, B, H]`` (time-major), ``weight_hh [H, H]``, ``h0 [B, H]``, the activation and the
    leak ``α`` -> ``hs [T+1, B, H]`` (see :func:`memrnn.ops.elman.reference.elman_reference`).

    Members (M runs as one model): ``pre [T, M, B, H]``, ``weight_hh [M, H, H]``, ``h0 [M, B, H]``
    -> ``hs [T+1, M, B, H]``, every product batched over the members (``baddbmm`` for ``addmm``)."""

    @staticmethod
    def forward(ctx, pre, weight_hh, h0, activation, leak):  # type: ignore[override]
        T = pre.shape[0]
        ctx.set_materialize_grads(False)
        zs = pre.clone()
        hs = pre.new_empty(T + 1, *pre.shape[1:])
        hs[0] = h0
        w_t = weight_hh.transpose(-2, -1)
        addmm_ = torch.Tensor.baddbmm_ if weight_hh.dim() == 3 else torch.Tensor.addmm_
        z_, h_ = zs.unbind(0), hs.unbind(0)
        for s in range(T):
            addmm_(z_[s], h_[s], w_t)
            if leak == 1.0:
                h_[s + 1].copy_(activation(z_[s]))
            else:
                torch.add(h_[s] * (1 - leak), activation(z_[s]), alpha=leak, out=h_[s + 1])
        linear = activation is identity
        # with a leak h_t is not σ(z_t): its derivative is read from the outputs only without one
        derivative_of_output = from_output(activation) if leak == 1.0 or linear else None
        ctx.activation, ctx.leak, ctx.from_output = activation, leak, derivative_of_output
        # hs: for ∂U and the derivatives read from the outputs (a frozen linear reservoir needs neither)
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
        T, rows = grad_hs.shape[0] - 1, grad_hs.shape[1:]  # rows: ([M,] B, H)
        addmm = torch.baddbmm if weight_hh.dim() == 3 else torch.addmm
        g_h = grad_hs[T].clone()
        gz = grad_hs.new_empty(T, *rows)  # time-major whatever grad_hs's strides
        gz_ = gz.unbind(0)
        for lo, hi in blocks(T):
            if hs is None:  # identity without ∂U
                d = grad_hs.new_ones(hi - lo, *rows)
            elif ctx.from_output:
                d = ctx.from_output(hs[lo + 1 : hi + 1])
            else:
                d = derivative(ctx.activation, zs[lo:hi])
            d_ = d.mul_(leak).unbind(0)
            for s in range(hi - 1, lo - 1, -1):
                torch.mul(g_h, d_[s - lo], out=gz_[s])
                if leak == 1.0:
                    g_h = addmm(grad_hs[s], gz_[s], weight_hh)
                else:
                    g_h = addmm(grad_hs[s], gz_[s], weight_hh).add_(g_h, alpha=1 - leak)
        grad_w = None
        if ctx.needs_input_grad[1]:
            H = rows[-1]
            if weight_hh.dim() == 2:
                grad_w = gz.reshape(-1, H).t() @ hs[:-1].reshape(-1, H)
            else:  # one product per member over every step and row
                M = rows[0]
                grad_w = torch.bmm(
                    gz.transpose(0, 1).reshape(M, -1, H).transpose(1, 2),
                    hs[:-1].transpose(0, 1).reshape(M, -1, H),
                )
        return gz, grad_w, g_h, None, None


def elman_cpu(
    pre: Tensor, weight_hh: Tensor, h0: Tensor, activation: Callable[[Tensor], Tensor], leak: float = 1.0
) -> Tensor:
    """:class:`ElmanSequence` batch first: ``pre [B, T, H]`` -> ``hs [B, T+1, H]``."""
    pre_t = pre.transpose(0, 1).contiguous()
    return ElmanSequence.apply(pre_t, weight_hh, h0, activation, leak).transpose(0, 1)


def elman_member_cpu(
    pre: Tensor, weight_hh: Tensor, h0: Tensor, activation: Callable[[Tensor], Tensor], leak: float = 1.0
) -> Tensor:
    """:class:`ElmanSequence` with members, members and batch first: ``pre [M, B, T, H]``,
    ``weight_hh [M, H, H]``, ``h0 [M, B, H]`` -> ``hs [M, B, T+1, H]``."""
    pre_t = pre.permute(2, 0, 1, 3).contiguous()
    return ElmanSequence.apply(pre_t, weight_hh, h0, activation, leak).permute(1, 2, 0, 3)
