"""The ReLU-counter recurrence of :func:`memrnn.ops.counter.counter_sequence` (Weiss, Goldberg &
Yahav 2018, section 4: a controller RNN and counters of two ReLU units each) as two persistent
Triton kernels, one launch per sequence for the forward and one for the backward (the tiling of
:mod:`memrnn.ops.elman.triton`).

Per step: ``a = pre_t + r_{t−1} W_recᵀ`` over ``G = H + 2k`` outputs by ``tl.dot`` (blocks of the
state ``r = [h; e]``), ``h_t = σ(a[:H])`` and the moves ``relu(a[H:])`` to memory, then (after a
barrier) ``e_t = e_{t−1} + inc − dec`` from the stored moves.  Backward: ``∂a`` elementwise from
``∂r_t`` and ``∂moves``, then ``∂r_{t−1} = ∂rs_{t−1} + ∂a W_rec`` (plus ``∂e_t``, which passes
through) by ``tl.dot``; the weight gradients are matrix products outside.  Float32 accumulation.
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
    _rec_matvec,
    _rec_matvec_t,
    _seed_slot,
    unit_blocks,
    weight_grad,
)


@triton.jit
def _counter_fwd(
    pre_ptr, w_ptr, rs_ptr, a_ptr, mv_ptr, T, B, H, K,
    CODE: tl.constexpr, BLOCK_B: tl.constexpr, BLOCK: tl.constexpr, NUM_G: tl.constexpr, NUM_N: tl.constexpr,
):  # fmt: skip
    """``pre``/``a`` ``[T, B, G]``, ``rs`` ``[T+1, B, N]`` (``rs[0] = r0``), ``mv`` ``[T, B, 2k]``,
    ``w`` ``W_rec [G, N]`` with ``N = H + k``, ``G = H + 2k``; one program per tile of rows (grid
    axis 0) and member (axis 1: every buffer with the member first; one model is ``M = 1``)."""
    rows = tl.program_id(0) * BLOCK_B + tl.arange(0, BLOCK_B)
    rmask = rows < B
    cols = tl.arange(0, BLOCK)
    N = H + K
    G = H + 2 * K
    m = tl.program_id(1).to(tl.int64)  # the member: its weights, inputs, states and outputs
    pre_ptr += m * T * B * G
    a_ptr += m * T * B * G
    rs_ptr += m * (T + 1) * B * N
    mv_ptr += m * T * B * 2 * K
    w_ptr += m * G * N
    for t in range(T):
        r_prev = rs_ptr + t * B * N
        for jb in tl.static_range(NUM_G):
            j = jb * BLOCK + cols
            jmask = j < G
            m2 = rmask[:, None] & jmask[None, :]
            acc = tl.load(pre_ptr + t * B * G + rows[:, None] * G + j[None, :], mask=m2, other=0.0).to(
                tl.float32
            )
            acc = _rec_matvec(
                (acc,), r_prev, N, rows, rmask, w_ptr, N, 1, 0, j, jmask, N, BLOCK, NUM_N, DOT_PRECISION
            )[0]
            tl.store(
                a_ptr + t * B * G + rows[:, None] * G + j[None, :], acc.to(a_ptr.dtype.element_ty), mask=m2
            )
            is_h = j[None, :] < H
            h = _act(acc, CODE)
            tl.store(
                rs_ptr + (t + 1) * B * N + rows[:, None] * N + j[None, :],
                h.to(rs_ptr.dtype.element_ty),
                mask=m2 & is_h,
            )
            mv = tl.maximum(acc, 0.0)
            tl.store(
                mv_ptr + t * B * 2 * K + rows[:, None] * 2 * K + (j[None, :] - H),
                mv.to(mv_ptr.dtype.element_ty),
                mask=m2 & ~is_h,
            )
        tl.debug_barrier()
        for cb in tl.static_range(NUM_N):
            c = cb * BLOCK + cols
            cm = rmask[:, None] & (c < K)[None, :]
            e = tl.load(r_prev + rows[:, None] * N + H + c[None, :], mask=cm, other=0.0).to(tl.float32)
            mvb = mv_ptr + t * B * 2 * K + rows[:, None] * 2 * K + c[None, :]
            e += tl.load(mvb, mask=cm, other=0.0).to(tl.float32) - tl.load(mvb + K, mask=cm, other=0.0).to(
                tl.float32
            )
            tl.store(
                rs_ptr + (t + 1) * B * N + rows[:, None] * N + H + c[None, :],
                e.to(rs_ptr.dtype.element_ty),
                mask=cm,
            )
        tl.debug_barrier()


@triton.jit
def _counter_bwd(
    grs_ptr, gmv_ptr, w_ptr, a_ptr, ga_ptr, g_ptr, T, B, H, K,
    CODE: tl.constexpr, BLOCK_B: tl.constexpr, BLOCK: tl.constexpr, NUM_G: tl.constexpr, NUM_N: tl.constexpr,
):  # fmt: skip
    """``grs`` ``[T+1, B, N]``, ``gmv`` ``[T, B, 2k]``, ``ga`` ``[T, B, G]`` out, ``g`` ``[2, B, N]``
    float32 scratch (``∂L/∂r_t`` in slot ``t % 2``; slot 0 ends with ``∂L/∂r_0``).  Members as
    :func:`_counter_fwd`."""
    rows = tl.program_id(0) * BLOCK_B + tl.arange(0, BLOCK_B)
    rmask = rows < B
    cols = tl.arange(0, BLOCK)
    N = H + K
    G = H + 2 * K
    m = tl.program_id(1).to(tl.int64)
    grs_ptr += m * (T + 1) * B * N
    gmv_ptr += m * T * B * 2 * K
    a_ptr += m * T * B * G
    ga_ptr += m * T * B * G
    g_ptr += m * 2 * B * N
    w_ptr += m * G * N
    _seed_slot(g_ptr, grs_ptr, T, B, N, rows, rmask, cols, BLOCK, NUM_N)
    tl.debug_barrier()
    for step in range(T):
        t = T - 1 - step
        cur = g_ptr + ((t + 1) % 2) * B * N
        nxt = g_ptr + (t % 2) * B * N
        for jb in tl.static_range(NUM_G):
            j = jb * BLOCK + cols
            jmask = j < G
            m2 = rmask[:, None] & jmask[None, :]
            a = tl.load(a_ptr + t * B * G + rows[:, None] * G + j[None, :], mask=m2, other=0.0).to(tl.float32)
            is_h = j[None, :] < H
            is_inc = (j[None, :] >= H) & (j[None, :] < H + K)
            # the state unit each output feeds: h_j, or the counter e_c (inc: +, dec: −)
            unit = tl.where(is_h, j[None, :], tl.where(is_inc, j[None, :], j[None, :] - K))
            gr = tl.load(cur + rows[:, None] * N + unit, mask=m2, other=0.0)
            gm = tl.load(
                gmv_ptr + t * B * 2 * K + rows[:, None] * 2 * K + (j[None, :] - H), mask=m2 & ~is_h, other=0.0
            )
            ga_h = gr * _act_grad(a, CODE)
            sign = tl.where(is_inc, 1.0, -1.0)
            ga_m = (sign * gr + gm.to(tl.float32)) * tl.where(a > 0, 1.0, 0.0)
            ga = tl.where(is_h, ga_h, ga_m)
            tl.store(
                ga_ptr + t * B * G + rows[:, None] * G + j[None, :], ga.to(ga_ptr.dtype.element_ty), mask=m2
            )
        tl.debug_barrier()
        for kb in tl.static_range(NUM_N):
            k = kb * BLOCK + cols
            kmask = k < N
            m2 = rmask[:, None] & kmask[None, :]
            acc = tl.load(grs_ptr + t * B * N + rows[:, None] * N + k[None, :], mask=m2, other=0.0).to(
                tl.float32
            )
            # e_t = e_{t−1} + …: ∂L/∂e_t passes to e_{t−1}
            acc += tl.load(cur + rows[:, None] * N + k[None, :], mask=m2 & (k[None, :] >= H), other=0.0)
            acc = _rec_matvec_t(
                acc, ga_ptr + t * B * G, G, rows, rmask, w_ptr, N, 1, 0, k, kmask, G, BLOCK, NUM_G, 1,
                DOT_PRECISION,
            )  # fmt: skip
            tl.store(nxt + rows[:, None] * N + k[None, :], acc, mask=m2)
        tl.debug_barrier()


class CounterTriton(torch.autograd.Function):
    """``pre [T, B, G]`` (time-major ``x w_inᵀ + b``), ``w_rec [G, N]``, ``r0 [B, N]``, the hidden
    size and the controller's activation code -> ``rs [T+1, B, N]``, moves ``[T, B, 2k]``.
    Members: every argument and result with the member dimension first (``pre [M, T, B, G]``,
    ``w_rec [M, G, N]``, …), one launch per direction for all of them (a grid of row tiles ×
    members) and one weight-gradient product per member."""

    @staticmethod
    def forward(ctx, pre, w_rec, r0, hidden, code):  # type: ignore[override]
        T, B, G = pre.shape[-3:]
        lead = pre.shape[:-3]  # (M,) with members
        M, N = (lead[0] if lead else 1), w_rec.shape[-1]
        H, K = hidden, N - hidden
        pre, w_rec = pre.contiguous(), w_rec.contiguous()
        rs = pre.new_empty(*lead, T + 1, B, N)
        rs[..., 0, :, :] = r0
        a = pre.new_empty(*lead, T, B, G)
        moves = pre.new_empty(*lead, T, B, 2 * K)
        block, num_g = unit_blocks(G)
        num_n = triton.cdiv(N, block)
        if T > 0 and B > 0 and M > 0:
            _counter_fwd[(triton.cdiv(B, BLOCK_B), M)](
                pre, w_rec, rs, a, moves, T, B, H, K, code, BLOCK_B, block, num_g, num_n, num_warps=DOT_WARPS
            )
        ctx.hidden, ctx.code = H, code
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(w_rec, a, rs)
        return rs, moves

    @staticmethod
    @first_order
    def backward(ctx, grad_rs, grad_moves):  # type: ignore[override]
        w_rec, a, rs = ctx.saved_tensors
        T, B, G = a.shape[-3:]
        lead = a.shape[:-3]
        M, N = (lead[0] if lead else 1), w_rec.shape[-1]
        H, K = ctx.hidden, N - ctx.hidden
        if grad_rs is None and grad_moves is None:
            return None, None, None, None, None
        grad_rs = torch.zeros_like(rs) if grad_rs is None else grad_rs.contiguous()
        grad_moves = a.new_zeros(*lead, T, B, 2 * K) if grad_moves is None else grad_moves.contiguous()
        ga = torch.empty_like(a)
        g = torch.zeros(*lead, 2, B, N, device=a.device, dtype=torch.float32)
        block, num_g = unit_blocks(G)
        num_n = triton.cdiv(N, block)
        if T > 0 and B > 0 and M > 0:
            _counter_bwd[(triton.cdiv(B, BLOCK_B), M)](
                grad_rs, grad_moves, w_rec, a, ga, g, T, B, H, K, ctx.code, BLOCK_B, block, num_g,
                num_n, num_warps=DOT_WARPS,
            )  # fmt: skip
            g_r0 = g[..., 0, :, :].to(rs.dtype)
        else:
            g_r0 = grad_rs[..., 0, :, :]
        grad_w = None
        if ctx.needs_input_grad[1]:
            grad_w = weight_grad(ga, rs[..., :-1, :, :]).to(w_rec.dtype)
        return ga, grad_w, g_r0, None, None


def counter_triton(
    pre: Tensor, w_rec: Tensor, r0: Tensor, hidden: int, activation: str
) -> tuple[Tensor, Tensor]:
    """:class:`CounterTriton` batch first: ``pre [B, T, G]`` -> ``rs [B, T+1, N]``, moves ``[B, T,
    2k]``; members ``pre [M, B, T, G]`` -> ``[M, B, T+1, N]``, ``[M, B, T, 2k]``, one launch each way."""
    rs, moves = CounterTriton.apply(pre.transpose(-3, -2).contiguous(), w_rec, r0, hidden, CODES[activation])
    return rs.transpose(-3, -2), moves.transpose(-3, -2)
