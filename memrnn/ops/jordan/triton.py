"""The Jordan recurrence of :func:`memrnn.ops.jordan.jordan_sequence` (the lecture notes' "Elman and
Jordan Networks": ``h_t = σ(pre_t + r_{t−1} Uᵀ)``, ``r_t = σ_o(h_t Eᵀ)``) as two persistent Triton
kernels, one launch per sequence for the forward and one for the backward.

The fed-back ``r`` (``F`` units: for a language model the vocabulary) stays in registers for the
whole sequence; the hidden state goes through blocks of units, each block's ``h`` contributing to
the next ``r`` by ``tl.dot`` as soon as it is computed, so a step needs no barrier.  ``σ_o`` is
elementwise, the identity or a softmax over ``F``.  Backward: ``∂(h Eᵀ)`` from ``∂r`` (the softmax's
Jacobian-vector product), then per block ``∂h = ∂hs + ∂(h Eᵀ) E``, ``∂a = ∂h σ'(a)``, and
``∂r_{t−1} = ∂rs_{t−1} + Σ ∂a U`` accumulated in registers; the weight gradients are matrix
products outside.  Float32 accumulation; ``F`` up to :data:`MAX_FEEDBACK`.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

from memrnn.ops.autograd import first_order
from memrnn.ops.triton_common import (
    BLOCK_B,
    CODES,
    DOT_PRECISION,
    DOT_WARPS,
    _act,
    _act_grad,
    _load_tile,
    unit_blocks,
    weight_grad,
)

#: the largest feedback size the kernels keep in registers (larger ones take the CPU path)
MAX_FEEDBACK = 128
SOFTMAX = 6


@triton.jit
def _out_act(o, fmask, CODE: tl.constexpr):
    if CODE == 6:
        z = tl.where(fmask, o, float("-inf"))
        z = z - tl.max(z, axis=1)[:, None]
        e = tl.where(fmask, tl.exp(z), 0.0)
        return e / tl.sum(e, axis=1)[:, None]
    else:
        return _act(o, CODE)


@triton.jit
def _jordan_fwd(
    pre_ptr, u_ptr, e_ptr, hs_ptr, acts_ptr, rs_ptr, outs_ptr, T, B, H, F,
    CODE: tl.constexpr, OUT: tl.constexpr, BLOCK_B: tl.constexpr, BLOCK_H: tl.constexpr, NUM_H: tl.constexpr,
    BLOCK_F: tl.constexpr,
):  # fmt: skip
    """``pre``/``acts``/``hs`` ``[T, B, H]``, ``rs`` ``[T+1, B, F]`` (``rs[0] = r0``), ``outs``
    ``[T, B, F]`` (``h Eᵀ``), ``u`` ``U [H, F]``, ``e`` ``E [F, H]``; one program per tile of rows
    (grid axis 0) and member (axis 1: every buffer with the member first; one model is ``M = 1``)."""
    m = tl.program_id(1).to(tl.int64)  # the member: its weights, inputs, states and outputs
    pre_ptr += m * T * B * H
    acts_ptr += m * T * B * H
    hs_ptr += m * T * B * H
    rs_ptr += m * (T + 1) * B * F
    outs_ptr += m * T * B * F
    u_ptr += m * H * F
    e_ptr += m * F * H
    rows = tl.program_id(0) * BLOCK_B + tl.arange(0, BLOCK_B)
    rmask = rows < B
    cols = tl.arange(0, BLOCK_H)
    f = tl.arange(0, BLOCK_F)
    fmask = f < F
    rf = rmask[:, None] & fmask[None, :]
    r = tl.load(rs_ptr + rows[:, None] * F + f[None, :], mask=rf, other=0.0).to(tl.float32)
    for t in range(T):
        o = tl.zeros((BLOCK_B, BLOCK_F), dtype=tl.float32)
        for jb in tl.static_range(NUM_H):
            j = jb * BLOCK_H + cols
            jmask = j < H
            m2 = rmask[:, None] & jmask[None, :]
            off = t * B * H + rows[:, None] * H + j[None, :]
            a = tl.load(pre_ptr + off, mask=m2, other=0.0).to(tl.float32)
            ut = _load_tile(u_ptr, f, fmask, j, jmask, 1, F)  # ut[f, j] = U[j, f]
            a += tl.dot(r, ut, input_precision=DOT_PRECISION)
            h = tl.where(m2, _act(a, CODE), 0.0)
            tl.store(acts_ptr + off, a.to(acts_ptr.dtype.element_ty), mask=m2)
            tl.store(hs_ptr + off, h.to(hs_ptr.dtype.element_ty), mask=m2)
            et = _load_tile(e_ptr, j, jmask, f, fmask, 1, H)  # et[j, f] = E[f, j]
            o += tl.dot(h, et, input_precision=DOT_PRECISION)
        r = tl.where(rf, _out_act(o, fmask[None, :], OUT), 0.0)
        tl.store(
            outs_ptr + t * B * F + rows[:, None] * F + f[None, :], o.to(outs_ptr.dtype.element_ty), mask=rf
        )
        tl.store(
            rs_ptr + (t + 1) * B * F + rows[:, None] * F + f[None, :], r.to(rs_ptr.dtype.element_ty), mask=rf
        )


@triton.jit
def _jordan_bwd(
    ghs_ptr, grs_ptr, u_ptr, e_ptr, acts_ptr, rs_ptr, outs_ptr, ga_ptr, go_ptr, gr0_ptr, T, B, H, F,
    CODE: tl.constexpr, OUT: tl.constexpr, BLOCK_B: tl.constexpr, BLOCK_H: tl.constexpr, NUM_H: tl.constexpr,
    BLOCK_F: tl.constexpr,
):  # fmt: skip
    """``ghs`` ``[T, B, H]``, ``grs`` ``[T+1, B, F]`` in; ``ga`` ``[T, B, H]`` (``∂a``), ``go``
    ``[T, B, F]`` (``∂(h Eᵀ)``) and ``gr0`` ``[B, F]`` out.  Members as :func:`_jordan_fwd`."""
    m = tl.program_id(1).to(tl.int64)
    ghs_ptr += m * T * B * H
    acts_ptr += m * T * B * H
    ga_ptr += m * T * B * H
    grs_ptr += m * (T + 1) * B * F
    rs_ptr += m * (T + 1) * B * F
    outs_ptr += m * T * B * F
    go_ptr += m * T * B * F
    gr0_ptr += m * B * F
    u_ptr += m * H * F
    e_ptr += m * F * H
    rows = tl.program_id(0) * BLOCK_B + tl.arange(0, BLOCK_B)
    rmask = rows < B
    cols = tl.arange(0, BLOCK_H)
    f = tl.arange(0, BLOCK_F)
    fmask = f < F
    rf = rmask[:, None] & fmask[None, :]
    g_r = tl.load(grs_ptr + T * B * F + rows[:, None] * F + f[None, :], mask=rf, other=0.0).to(tl.float32)
    for step in range(T):
        t = T - 1 - step
        foff = t * B * F + rows[:, None] * F + f[None, :]
        if OUT == 6:
            r = tl.load(rs_ptr + (t + 1) * B * F + rows[:, None] * F + f[None, :], mask=rf, other=0.0).to(
                tl.float32
            )
            go = r * (g_r - tl.sum(g_r * r, axis=1)[:, None])
        else:
            o = tl.load(outs_ptr + foff, mask=rf, other=0.0).to(tl.float32)
            go = g_r * _act_grad(o, OUT)
        go = tl.where(rf, go, 0.0)
        tl.store(go_ptr + foff, go.to(go_ptr.dtype.element_ty), mask=rf)
        g_next = tl.load(grs_ptr + foff, mask=rf, other=0.0).to(tl.float32)
        for jb in tl.static_range(NUM_H):
            j = jb * BLOCK_H + cols
            jmask = j < H
            m2 = rmask[:, None] & jmask[None, :]
            off = t * B * H + rows[:, None] * H + j[None, :]
            e = _load_tile(e_ptr, f, fmask, j, jmask, H, 1)
            g_h = tl.load(ghs_ptr + off, mask=m2, other=0.0).to(tl.float32)
            g_h += tl.dot(go, e, input_precision=DOT_PRECISION)
            a = tl.load(acts_ptr + off, mask=m2, other=0.0).to(tl.float32)
            ga = tl.where(m2, g_h * _act_grad(a, CODE), 0.0)
            tl.store(ga_ptr + off, ga.to(ga_ptr.dtype.element_ty), mask=m2)
            u = _load_tile(u_ptr, j, jmask, f, fmask, F, 1)
            g_next += tl.dot(ga, u, input_precision=DOT_PRECISION)
        g_r = g_next
    tl.store(gr0_ptr + rows[:, None] * F + f[None, :], g_r.to(gr0_ptr.dtype.element_ty), mask=rf)


class JordanTriton(torch.autograd.Function):
    """As :class:`memrnn.ops.jordan.cpu.JordanSequence`: ``pre [T, B, H]``, ``U [H, F]``, ``E [F, H]``,
    ``r0 [B, F]`` -> ``hs [T, B, H]``, ``rs [T+1, B, F]``; activations by code.  Members: every
    argument and result with the member dimension first (``pre [M, T, B, H]``, ``U [M, H, F]``,
    …), one launch per direction for all of them (a grid of row tiles × members) and one
    weight-gradient product per member."""

    @staticmethod
    def forward(ctx, pre, weight_fb, weight_out, r0, code, out_code):  # type: ignore[override]
        T, B, H = pre.shape[-3:]
        lead = pre.shape[:-3]  # (M,) with members
        M, F = (lead[0] if lead else 1), weight_fb.shape[-1]
        pre, weight_fb, weight_out = pre.contiguous(), weight_fb.contiguous(), weight_out.contiguous()
        hs, acts = pre.new_empty(*lead, T, B, H), pre.new_empty(*lead, T, B, H)
        rs, outs = pre.new_empty(*lead, T + 1, B, F), pre.new_empty(*lead, T, B, F)
        rs[..., 0, :, :] = r0
        block_h, num_h = unit_blocks(H)
        block_f = max(16, triton.next_power_of_2(F))
        if T > 0 and B > 0 and M > 0:
            _jordan_fwd[(triton.cdiv(B, BLOCK_B), M)](
                pre, weight_fb, weight_out, hs, acts, rs, outs, T, B, H, F, code, out_code, BLOCK_B,
                block_h, num_h, block_f, num_warps=DOT_WARPS,
            )  # fmt: skip
        ctx.code, ctx.out_code = code, out_code
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(weight_fb, weight_out, acts, hs, rs, outs)
        return hs, rs

    @staticmethod
    @first_order
    def backward(ctx, grad_hs, grad_rs):  # type: ignore[override]
        weight_fb, weight_out, acts, hs, rs, outs = ctx.saved_tensors
        T, B, H = acts.shape[-3:]
        lead = acts.shape[:-3]
        M, F = (lead[0] if lead else 1), rs.shape[-1]
        if grad_hs is None and grad_rs is None:
            return None, None, None, None, None, None
        grad_hs = torch.zeros_like(hs) if grad_hs is None else grad_hs.contiguous()
        grad_rs = torch.zeros_like(rs) if grad_rs is None else grad_rs.contiguous()
        ga, go = torch.empty_like(acts), torch.empty_like(outs)
        g_r0 = torch.empty_like(rs[..., 0, :, :])
        block_h, num_h = unit_blocks(H)
        block_f = max(16, triton.next_power_of_2(F))
        if T > 0 and B > 0 and M > 0:
            _jordan_bwd[(triton.cdiv(B, BLOCK_B), M)](
                grad_hs, grad_rs, weight_fb, weight_out, acts, rs, outs, ga, go, g_r0, T, B, H, F,
                ctx.code, ctx.out_code, BLOCK_B, block_h, num_h, block_f, num_warps=DOT_WARPS
            )  # fmt: skip
        else:
            g_r0 = grad_rs[..., 0, :, :]
        grad_fb = weight_grad(ga, rs[..., :-1, :, :]).to(weight_fb.dtype)
        grad_out = weight_grad(go, hs).to(weight_out.dtype)
        return ga, grad_fb, grad_out, g_r0, None, None


def jordan_triton(
    pre: Tensor, weight_fb: Tensor, weight_out: Tensor, r0: Tensor, activation: str, output_activation: str
):
    """:class:`JordanTriton` time-major: ``pre [T, B, H]`` -> ``hs [T, B, H]``, ``rs [T+1, B, F]``;
    members ``pre [M, T, B, H]`` -> ``[M, T, B, H]``, ``[M, T+1, B, F]``, one launch each way."""
    out_code = SOFTMAX if output_activation == "softmax" else CODES[output_activation]
    return JordanTriton.apply(pre, weight_fb, weight_out, r0, CODES[activation], out_code)
