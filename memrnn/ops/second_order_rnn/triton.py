"""The second-order recurrence over one-hot inputs (Giles et al. 1990; Stogin, Mali & Giles 2020,
appendix A, equation 3: ``s_{t+1} = h_H(W[·,·,k_t] s_t + b)``) as two persistent Triton kernels,
one launch per sequence for the forward and one for the backward.

Each row reads its own weight slice ``W[·,·,k_b]``: per step the kernel multiplies the tile's
states by every symbol's slice (``m`` ``tl.dot`` s per block of units) and keeps, per row, the
product of its symbol, so it is meant for the small vocabularies of formal languages
(:data:`MAX_SYMBOLS`).  ``H`` is read from memory (no host sync); ``∂W``, ``∂b`` and ``∂H`` are
matrix products outside the kernels from the saved ``∂u`` and ``u``.  Float32 accumulation.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

from memrnn.ops.autograd import first_order
from memrnn.ops.buckets import grouped_weight_grad
from memrnn.ops.triton_common import (
    BLOCK_B,
    DOT_PRECISION,
    DOT_WARPS,
    _rec_matvec,
    _rec_matvec_t,
    _seed_slot,
    unit_blocks,
)

#: the largest vocabulary the kernels handle (one ``tl.dot`` per symbol and step)
MAX_SYMBOLS = 32


@triton.jit
def _so_fwd(
    ids_ptr, w_ptr, b_ptr, h_ptr, s_ptr, u_ptr, T, B, N, M,
    HAS_BIAS: tl.constexpr, BLOCK_B: tl.constexpr, BLOCK_N: tl.constexpr, NUM_N: tl.constexpr,
):  # fmt: skip
    """``ids`` ``[T, B]``, ``w`` ``W [N(i), N(j), M]``, ``s`` ``[T+1, B, N]`` (``s[0] = s0``), ``u``
    ``[T, B, N]`` (``W s + b``); one program per tile of rows (grid axis 0) and member (axis 1:
    every buffer with the member first, ``h`` one sensitivity per member; one model is one member)."""
    mb = tl.program_id(1).to(tl.int64)  # the member: its weights, symbols, states and outputs
    ids_ptr += mb * T * B
    w_ptr += mb * N * N * M
    b_ptr += mb * N
    h_ptr += mb
    s_ptr += mb * (T + 1) * B * N
    u_ptr += mb * T * B * N
    rows = tl.program_id(0) * BLOCK_B + tl.arange(0, BLOCK_B)
    rmask = rows < B
    cols = tl.arange(0, BLOCK_N)
    sens = tl.load(h_ptr).to(tl.float32)
    for t in range(T):
        ids = tl.load(ids_ptr + t * B + rows, mask=rmask, other=-1)
        s_prev = s_ptr + t * B * N
        for ib in tl.static_range(NUM_N):
            i = ib * BLOCK_N + cols
            imask = i < N
            m2 = rmask[:, None] & imask[None, :]
            acc = tl.zeros((BLOCK_B, BLOCK_N), dtype=tl.float32)
            for sym in range(M):
                # the symbol's slice W[i, j, sym]: W_sym[i, j] at (i·N + j)·M + sym
                part = _rec_matvec(
                    (tl.zeros((BLOCK_B, BLOCK_N), dtype=tl.float32),), s_prev, N, rows, rmask, w_ptr + sym,
                    N * M, M, 0, i, imask, N, BLOCK_N, NUM_N, DOT_PRECISION,
                )[0]  # fmt: skip
                acc += tl.where((ids == sym)[:, None], part, 0.0)
            if HAS_BIAS:
                acc += tl.load(b_ptr + i, mask=imask, other=0.0).to(tl.float32)[None, :]
            out = 1.0 / (1.0 + tl.exp(-sens * acc))
            off = rows[:, None] * N + i[None, :]
            tl.store(u_ptr + t * B * N + off, acc.to(u_ptr.dtype.element_ty), mask=m2)
            tl.store(s_ptr + (t + 1) * B * N + off, out.to(s_ptr.dtype.element_ty), mask=m2)
        tl.debug_barrier()


@triton.jit
def _so_bwd(
    ids_ptr, w_ptr, h_ptr, s_ptr, gs_ptr, gu_ptr, g_ptr, T, B, N, M,
    BLOCK_B: tl.constexpr, BLOCK_N: tl.constexpr, NUM_N: tl.constexpr,
):  # fmt: skip
    """``gs`` ``[T+1, B, N]`` (``∂L/∂s``) in; ``gu`` ``[T, B, N]`` out (``∂L/∂(H u)``); ``g``
    ``[2, B, N]`` float32 scratch with ``∂L/∂s_t`` in slot ``t % 2`` (slot 0 ends with ``∂L/∂s_0``).
    Members as :func:`_so_fwd`."""
    mb = tl.program_id(1).to(tl.int64)
    ids_ptr += mb * T * B
    w_ptr += mb * N * N * M
    h_ptr += mb
    s_ptr += mb * (T + 1) * B * N
    gs_ptr += mb * (T + 1) * B * N
    gu_ptr += mb * T * B * N
    g_ptr += mb * 2 * B * N
    rows = tl.program_id(0) * BLOCK_B + tl.arange(0, BLOCK_B)
    rmask = rows < B
    cols = tl.arange(0, BLOCK_N)
    sens = tl.load(h_ptr).to(tl.float32)
    _seed_slot(g_ptr, gs_ptr, T, B, N, rows, rmask, cols, BLOCK_N, NUM_N)
    tl.debug_barrier()
    for step in range(T):
        t = T - 1 - step
        cur = g_ptr + ((t + 1) % 2) * B * N
        nxt = g_ptr + (t % 2) * B * N
        ids = tl.load(ids_ptr + t * B + rows, mask=rmask, other=-1)
        for ib in tl.static_range(NUM_N):
            i = ib * BLOCK_N + cols
            m2 = rmask[:, None] & (i < N)[None, :]
            off = rows[:, None] * N + i[None, :]
            s = tl.load(s_ptr + (t + 1) * B * N + off, mask=m2, other=0.0).to(tl.float32)
            g = tl.load(cur + off, mask=m2, other=0.0)
            tl.store(gu_ptr + t * B * N + off, (g * s * (1.0 - s)).to(gu_ptr.dtype.element_ty), mask=m2)
        tl.debug_barrier()
        for jb in tl.static_range(NUM_N):
            j = jb * BLOCK_N + cols
            jmask = j < N
            m2 = rmask[:, None] & jmask[None, :]
            acc = tl.load(gs_ptr + t * B * N + rows[:, None] * N + j[None, :], mask=m2, other=0.0).to(
                tl.float32
            )
            for sym in range(M):
                part = _rec_matvec_t(
                    tl.zeros((BLOCK_B, BLOCK_N), dtype=tl.float32), gu_ptr + t * B * N, N, rows, rmask,
                    w_ptr + sym, N * M, M, 0, j, jmask, N, BLOCK_N, NUM_N, 1, DOT_PRECISION,
                )  # fmt: skip
                acc += tl.where((ids == sym)[:, None], part * sens, 0.0)
            tl.store(nxt + rows[:, None] * N + j[None, :], acc, mask=m2)
        tl.debug_barrier()


class SecondOrderTriton(torch.autograd.Function):
    """``weight [N, N, M]``, ``bias [N]`` or None, ``sensitivity`` (0-d), ``s0 [B, N]``, ``ids
    [T, B]`` -> states ``[T+1, B, N]``.  Members: every argument and result with the member
    dimension first (``weight [MB, N, N, M]``, ``sensitivity [MB]``, ``ids [MB, T, B]`` -> ``[MB,
    T+1, B, N]``), one launch per direction for all of them (a grid of row tiles × members)."""

    @staticmethod
    def forward(ctx, weight, bias, sensitivity, s0, ids):  # type: ignore[override]
        T, B = ids.shape[-2:]
        lead = ids.shape[:-2]  # (MB,) with members
        members = lead[0] if lead else 1
        N, _, M = weight.shape[-3:]
        weight = weight.contiguous()
        ids = ids.contiguous()
        states = s0.new_empty(*lead, T + 1, B, N)
        states[..., 0, :, :] = s0
        u = s0.new_empty(*lead, T, B, N)
        block, num = unit_blocks(N)
        sens = sensitivity.detach().reshape(*lead, 1).to(s0.dtype).contiguous()
        b = bias.contiguous() if bias is not None else weight.new_zeros(1)
        if T > 0 and B > 0 and members > 0:
            _so_fwd[(triton.cdiv(B, BLOCK_B), members)](
                ids, weight, b, sens, states, u, T, B, N, M, bias is not None, BLOCK_B, block, num,
                num_warps=DOT_WARPS,
            )  # fmt: skip
        ctx.has_bias = bias is not None
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(weight, sens, states, u, ids)
        return states

    @staticmethod
    @first_order
    def backward(ctx, grad_states):  # type: ignore[override]
        if grad_states is None:
            return None, None, None, None, None
        weight, sens, states, u, ids = ctx.saved_tensors
        T1, B, N = states.shape[-3:]
        lead = states.shape[:-3]
        members = lead[0] if lead else 1
        T, M = T1 - 1, weight.shape[-1]
        grad_states = grad_states.contiguous()
        gu = torch.empty_like(u)  # ∂L/∂(H u)
        g = torch.zeros(*lead, 2, B, N, device=states.device, dtype=torch.float32)
        block, num = unit_blocks(N)
        if T > 0 and B > 0 and members > 0:
            _so_bwd[(triton.cdiv(B, BLOCK_B), members)](
                ids, weight, sens, states, grad_states, gu, g, T, B, N, M, BLOCK_B, block, num,
                num_warps=DOT_WARPS,
            )  # fmt: skip
            g_s0 = g[..., 0, :, :].to(states.dtype)
        else:
            g_s0 = grad_states[..., 0, :, :]
        per = (-1, 1, 1, 1) if lead else ()
        grad_u = gu * sens.reshape(per)  # ∂L/∂u
        grad_h = None
        if ctx.needs_input_grad[2]:
            grad_h = (gu * u).sum((-3, -2, -1)).reshape(lead)
        grad_b = grad_u.sum((-3, -2)) if ctx.has_bias and ctx.needs_input_grad[1] else None
        grad_w = None
        if ctx.needs_input_grad[0]:
            # ∂W[i, j, k] = Σ_{(t,b): k_tb = k} ∂u[t, b, i] s[t, b, j]: one product per symbol (with
            # members per member and symbol: member μ's symbol k is μ·M + k, each in its own order)
            syms = ids if not lead else ids + (torch.arange(members, device=ids.device) * M).view(-1, 1, 1)
            dwk = grouped_weight_grad(
                syms, states[..., :-1, :, :], grad_u, members * M
            )  # [MB·M, N (j), N (i)]
            grad_w = dwk.reshape(*lead, M, N, N).transpose(-3, -1)
        return grad_w, grad_b, grad_h, g_s0, None


def second_order_triton(
    weight: Tensor, bias: Tensor | None, sensitivity: Tensor, s0: Tensor, ids: Tensor
) -> Tensor:
    """:class:`SecondOrderTriton` batch first: ``ids [B, T]`` -> states ``[B, T+1, N]``; members
    ``ids [MB, B, T]`` -> ``[MB, B, T+1, N]``, one launch each way."""
    states = SecondOrderTriton.apply(weight, bias, sensitivity, s0, ids.transpose(-2, -1).contiguous())
    return states.transpose(-3, -2)
