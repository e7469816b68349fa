"""The LSTM recurrence of :func:`memrnn.ops.lstm.lstm_sequence` (gate order ``o, i, f, g``; the
first ``tanh_units`` units expose ``tanh(c)``, the rest ``c`` itself: Weiss et al.'s counter cells)
as two persistent Triton kernels, one launch per sequence for the forward and one for the backward
(the tiling of :mod:`memrnn.ops.elman.triton`).

Forward, per step and block of units: the four gate pre-activations ``pre_t + h_{t−1} W_recᵀ`` by
``tl.dot`` over blocks of the previous state, then ``c_t = f c_{t−1} + i g``, ``h_t = o X(c_t)``;
``hs``, ``cs`` and the activated gates go to memory for the backward.  Backward, per step:
``∂c_t`` and the four gate gradients elementwise into ``ga``, then ``∂h_{t−1} = ∂hs_{t−1} + ga_t
W_rec`` by ``tl.dot``; ``∂W_rec = Σ_t ga_tᵀ h_{t−1}`` and the input projection's gradients are
matrix products outside.  Float32 accumulation.  Members (M runs as one model) are the grid's
second axis, as in :mod:`memrnn.ops.elman.triton`.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

from memrnn.ops.autograd import first_order
from memrnn.ops.triton_common import (
    BLOCK_B,
    DOT_PRECISION,
    DOT_WARPS,
    _rec_matvec,
    _rec_matvec_t,
    _seed_slot,
    _sig,
    _tanh,
    unit_blocks,
    weight_grad,
)


@triton.jit
def _lstm_fwd(
    pre_ptr, w_ptr, hs_ptr, cs_ptr, gates_ptr, T, B, N, U,
    BLOCK_B: tl.constexpr, BLOCK_N: tl.constexpr, NUM_N: tl.constexpr,
):  # fmt: skip
    """``pre``/``gates`` ``[T, B, 4N]``, ``hs``/``cs`` ``[T+1, B, N]`` (index 0: the initial
    state), ``w`` ``W_rec [4N, N]``; one program per tile of rows (grid axis 0) and member (axis
    1: every buffer with the member first, ``[M, T, B, 4N]``, ``W_rec [M, 4N, N]``, …; one model is
    ``M = 1``)."""
    rows = tl.program_id(0) * BLOCK_B + tl.arange(0, BLOCK_B)
    rmask = rows < B
    cols = tl.arange(0, BLOCK_N)
    G = 4 * N
    m = tl.program_id(1).to(tl.int64)  # the member: its weights, inputs, states and outputs
    pre_ptr += m * T * B * G
    gates_ptr += m * T * B * G
    hs_ptr += m * (T + 1) * B * N
    cs_ptr += m * (T + 1) * B * N
    w_ptr += m * G * N
    for t in range(T):
        h_prev = hs_ptr + t * B * N
        for jb in tl.static_range(NUM_N):
            j = jb * BLOCK_N + cols
            jmask = j < N
            m2 = rmask[:, None] & jmask[None, :]
            base = pre_ptr + t * B * G + rows[:, None] * G + j[None, :]
            a_o = tl.load(base, mask=m2, other=0.0).to(tl.float32)
            a_i = tl.load(base + N, mask=m2, other=0.0).to(tl.float32)
            a_f = tl.load(base + 2 * N, mask=m2, other=0.0).to(tl.float32)
            a_g = tl.load(base + 3 * N, mask=m2, other=0.0).to(tl.float32)
            # gate q's rows of W_rec: q·N + j
            a_o, a_i, a_f, a_g = _rec_matvec(
                (a_o, a_i, a_f, a_g), h_prev, N, rows, rmask, w_ptr, N, 1, N, j, jmask, N, BLOCK_N, NUM_N,
                DOT_PRECISION,
            )  # fmt: skip
            o, i, f, g = _sig(a_o), _sig(a_i), _sig(a_f), _tanh(a_g)
            c_prev = tl.load(cs_ptr + t * B * N + rows[:, None] * N + j[None, :], mask=m2, other=0.0).to(
                tl.float32
            )
            c = f * c_prev + i * g
            x = tl.where(j[None, :] < U, _tanh(c), c)
            h_new = o * x
            out = rows[:, None] * N + j[None, :]
            tl.store(cs_ptr + (t + 1) * B * N + out, c.to(cs_ptr.dtype.element_ty), mask=m2)
            tl.store(hs_ptr + (t + 1) * B * N + out, h_new.to(hs_ptr.dtype.element_ty), mask=m2)
            gb = gates_ptr + t * B * G + rows[:, None] * G + j[None, :]
            ty = gates_ptr.dtype.element_ty
            tl.store(gb, o.to(ty), mask=m2)
            tl.store(gb + N, i.to(ty), mask=m2)
            tl.store(gb + 2 * N, f.to(ty), mask=m2)
            tl.store(gb + 3 * N, g.to(ty), mask=m2)
        tl.debug_barrier()


@triton.jit
def _lstm_bwd(
    ghs_ptr, gcs_ptr, w_ptr, cs_ptr, gates_ptr, ga_ptr, gh_ptr, gc_ptr, T, B, N, U,
    BLOCK_B: tl.constexpr, BLOCK_N: tl.constexpr, NUM_N: tl.constexpr,
):  # fmt: skip
    """``ghs``/``gcs`` ``[T+1, B, N]`` (``∂L/∂hs``, ``∂L/∂cs``), ``ga`` ``[T, B, 4N]`` out (the gate
    pre-activations' gradients); ``gh``/``gc`` ``[2, B, N]`` float32 scratch with ``∂L/∂h_t``,
    ``∂L/∂c_t`` in slot ``t % 2``; slot 0 ends with the initial state's gradients.  Members as
    :func:`_lstm_fwd` (grid axis 1; ``gh``/``gc`` ``[M, 2, B, N]``)."""
    rows = tl.program_id(0) * BLOCK_B + tl.arange(0, BLOCK_B)
    rmask = rows < B
    cols = tl.arange(0, BLOCK_N)
    G = 4 * N
    m = tl.program_id(1).to(tl.int64)
    ghs_ptr += m * (T + 1) * B * N
    gcs_ptr += m * (T + 1) * B * N
    cs_ptr += m * (T + 1) * B * N
    gates_ptr += m * T * B * G
    ga_ptr += m * T * B * G
    gh_ptr += m * 2 * B * N
    gc_ptr += m * 2 * B * N
    w_ptr += m * G * N
    _seed_slot(gh_ptr, ghs_ptr, T, B, N, rows, rmask, cols, BLOCK_N, NUM_N)
    _seed_slot(gc_ptr, gcs_ptr, T, B, N, rows, rmask, cols, BLOCK_N, NUM_N)
    tl.debug_barrier()
    for step in range(T):
        t = T - 1 - step
        cur, nxt = (t + 1) % 2, t % 2
        for jb in tl.static_range(NUM_N):
            j = jb * BLOCK_N + cols
            m2 = rmask[:, None] & (j < N)[None, :]
            off = rows[:, None] * N + j[None, :]
            gh = tl.load(gh_ptr + cur * B * N + off, mask=m2, other=0.0)
            gc = tl.load(gc_ptr + cur * B * N + off, mask=m2, other=0.0)
            gb = gates_ptr + t * B * G + rows[:, None] * G + j[None, :]
            o = tl.load(gb, mask=m2, other=0.0).to(tl.float32)
            i = tl.load(gb + N, mask=m2, other=0.0).to(tl.float32)
            f = tl.load(gb + 2 * N, mask=m2, other=0.0).to(tl.float32)
            g = tl.load(gb + 3 * N, mask=m2, other=0.0).to(tl.float32)
            c = tl.load(cs_ptr + (t + 1) * B * N + off, mask=m2, other=0.0).to(tl.float32)
            c_prev = tl.load(cs_ptr + t * B * N + off, mask=m2, other=0.0).to(tl.float32)
            tc = _tanh(c)
            is_tanh = j[None, :] < U
            x = tl.where(is_tanh, tc, c)
            gc = gc + gh * o * tl.where(is_tanh, 1.0 - tc * tc, 1.0)
            ob = ga_ptr + t * B * G + rows[:, None] * G + j[None, :]
            ty = ga_ptr.dtype.element_ty
            tl.store(ob, (gh * x * o * (1.0 - o)).to(ty), mask=m2)
            tl.store(ob + N, (gc * g * i * (1.0 - i)).to(ty), mask=m2)
            tl.store(ob + 2 * N, (gc * c_prev * f * (1.0 - f)).to(ty), mask=m2)
            tl.store(ob + 3 * N, (gc * i * (1.0 - g * g)).to(ty), mask=m2)
            gc_prev = gc * f + tl.load(gcs_ptr + t * B * N + off, mask=m2, other=0.0).to(tl.float32)
            tl.store(gc_ptr + nxt * B * N + off, gc_prev, mask=m2)
        tl.debug_barrier()
        for kb in tl.static_range(NUM_N):
            k = kb * BLOCK_N + cols
            kmask = k < N
            m2 = rmask[:, None] & kmask[None, :]
            acc = tl.load(ghs_ptr + t * B * N + rows[:, None] * N + k[None, :], mask=m2, other=0.0).to(
                tl.float32
            )
            # ga's columns and W_rec's rows of gate q: q·N + j
            acc = _rec_matvec_t(
                acc, ga_ptr + t * B * G, G, rows, rmask, w_ptr, N, 1, N, k, kmask, N, BLOCK_N, NUM_N, 4,
                DOT_PRECISION,
            )  # fmt: skip
            tl.store(gh_ptr + nxt * B * N + rows[:, None] * N + k[None, :], acc, mask=m2)
        tl.debug_barrier()


class LSTMTriton(torch.autograd.Function):
    """``pre [T, B, 4N]`` (time-major ``x w_inᵀ + b``), ``w_rec [4N, N]``, ``h0``, ``c0`` ``[B, N]``,
    ``tanh_units`` -> ``hs``, ``cs`` ``[T+1, B, N]``.  Members: every argument with the member
    first (``pre [M, T, B, 4N]``, ``w_rec [M, 4N, N]``, ``h0``, ``c0`` ``[M, B, N]`` -> ``[M, T+1, B,
    N]``), one launch per direction for all of them (a grid of row tiles × members) and one
    weight-gradient product per member."""

    @staticmethod
    def forward(ctx, pre, w_rec, h0, c0, tanh_units):  # type: ignore[override]
        T, B, G = pre.shape[-3:]
        lead = pre.shape[:-3]  # (M,) with members
        M, N = (lead[0] if lead else 1), G // 4
        pre, w_rec = pre.contiguous(), w_rec.contiguous()
        hs, cs = pre.new_empty(*lead, T + 1, B, N), pre.new_empty(*lead, T + 1, B, N)
        hs[..., 0, :, :], cs[..., 0, :, :] = h0, c0
        gates = pre.new_empty(*lead, T, B, G)
        block, num = unit_blocks(N)
        if T > 0 and B > 0 and M > 0:
            _lstm_fwd[(triton.cdiv(B, BLOCK_B), M)](
                pre, w_rec, hs, cs, gates, T, B, N, tanh_units, BLOCK_B, block, num, num_warps=DOT_WARPS
            )
        ctx.tanh_units = tanh_units
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(w_rec, hs, cs, gates)
        return hs, cs

    @staticmethod
    @first_order
    def backward(ctx, grad_hs, grad_cs):  # type: ignore[override]
        w_rec, hs, cs, gates = ctx.saved_tensors
        T, B, G = gates.shape[-3:]
        lead = gates.shape[:-3]
        M, N = (lead[0] if lead else 1), G // 4
        if grad_hs is None and grad_cs is None:
            return None, None, None, None, None
        grad_hs = torch.zeros_like(hs) if grad_hs is None else grad_hs.contiguous()
        grad_cs = torch.zeros_like(cs) if grad_cs is None else grad_cs.contiguous()
        ga = torch.empty_like(gates)
        gh = torch.zeros(*lead, 2, B, N, device=hs.device, dtype=torch.float32)
        gc = torch.zeros(*lead, 2, B, N, device=hs.device, dtype=torch.float32)
        block, num = unit_blocks(N)
        if T > 0 and B > 0 and M > 0:
            _lstm_bwd[(triton.cdiv(B, BLOCK_B), M)](
                grad_hs, grad_cs, w_rec, cs, gates, ga, gh, gc, T, B, N, ctx.tanh_units, BLOCK_B, block,
                num, num_warps=DOT_WARPS,
            )  # fmt: skip
            g_h0, g_c0 = gh[..., 0, :, :].to(hs.dtype), gc[..., 0, :, :].to(hs.dtype)
        else:
            g_h0, g_c0 = grad_hs[..., 0, :, :], grad_cs[..., 0, :, :]
        grad_w = weight_grad(ga, hs[..., :-1, :, :]).to(w_rec.dtype) if ctx.needs_input_grad[1] else None
        return ga, grad_w, g_h0, g_c0, None


def lstm_triton(pre: Tensor, w_rec: Tensor, h0: Tensor, c0: Tensor, tanh_units: int) -> tuple[Tensor, Tensor]:
    """:class:`LSTMTriton` batch first: ``pre [B, T, 4N]`` -> ``hs``, ``cs`` ``[B, T+1, N]``; members
    ``pre [M, B, T, 4N]``, ``w_rec [M, 4N, N]``, ``h0``, ``c0`` ``[M, B, N]`` -> ``[M, B, T+1, N]``."""
    hs, cs = LSTMTriton.apply(pre.transpose(-3, -2).contiguous(), w_rec, h0, c0, tanh_units)
    return hs.transpose(-3, -2), cs.transpose(-3, -2)
