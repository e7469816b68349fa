"""Delétang et al.'s (2023) tape and their Tape-RNN's jump tape (``JUMP``): the step and its gradient
for the stack RNN's persistent Triton kernels (:mod:`memrnn.ops.stack_rnn.triton`, which dispatch on
the memory's code): ``t`` the step, ``rows``/``rmask`` the tile's batch rows."""

from __future__ import annotations

import triton
import triton.language as tl

from memrnn.ops.triton_common import _softmax3_grads, _three, _value_grad_from_output


@triton.jit
def _softmax5_grads(grow, rmask, a0, a1, a2, a3, a4, g0, g1, g2, g3, g4):
    """The jump tape's five action pre-activation gradients through their softmax into ``ghd[t]``."""
    dot = a0 * g0 + a1 * g1 + a2 * g2 + a3 * g3 + a4 * g4
    gty = grow.dtype.element_ty
    tl.store(grow, (a0 * (g0 - dot)).to(gty), mask=rmask)
    tl.store(grow + 1, (a1 * (g1 - dot)).to(gty), mask=rmask)
    tl.store(grow + 2, (a2 * (g2 - dot)).to(gty), mask=rmask)
    tl.store(grow + 3, (a3 * (g3 - dot)).to(gty), mask=rmask)
    tl.store(grow + 4, (a4 * (g4 - dot)).to(gty), mask=rmask)


@triton.jit
def _written(s_row, v_row, q, mask, M):
    """The tape after the write, at flat cells ``q``: the written vector in the head's cell
    (``q < M``), the old tape elsewhere."""
    head = q < M
    v = tl.load(v_row + q, mask=mask & head, other=0.0).to(tl.float32)
    s = tl.load(s_row + q, mask=mask & ~head, other=0.0).to(tl.float32)
    return tl.where(head, v, s)


@triton.jit
def _tape_step(
    t, rows, rmask, hd_ptr, s_ptr, zs_ptr, jp_ptr, B, N, M, DM, KH, NZ, JUMP: tl.constexpr, BLOCK_F: tl.constexpr
):  # fmt: skip
    """Delétang et al.'s (2023) tape, ``s [T+1, B, DM]`` (the head's cell first, circular): write
    ``v_t`` into the head's cell, then ``S_t[i] = stay · W[i] + left · W[i+1] + right · W[i−1]``;
    with ``JUMP`` (their Tape-RNN) also ``+ jump_left · W[i+L] + jump_right · W[i−L]``, ``L`` the
    row's jump in cells (``jp [B]``, already reduced mod ``D``)."""
    NA: tl.constexpr = 5 if JUMP else 3
    stay1, left1, right1 = _three(hd_ptr + t * B * KH + rows * KH, rmask)
    stay, left, right = stay1[:, None], left1[:, None], right1[:, None]
    if JUMP:
        jl = tl.load(hd_ptr + t * B * KH + rows * KH + 3, mask=rmask, other=0.0).to(tl.float32)[:, None]
        jr = tl.load(hd_ptr + t * B * KH + rows * KH + 4, mask=rmask, other=0.0).to(tl.float32)[:, None]
        LM = (tl.load(jp_ptr + rows, mask=rmask, other=0) * M)[:, None]
    old_row = s_ptr + t * B * DM + rows[:, None] * DM
    v_row = hd_ptr + t * B * KH + rows[:, None] * KH + NA
    new_row = s_ptr + (t + 1) * B * DM + rows[:, None] * DM
    for f0 in range(0, DM, BLOCK_F):
        fi = f0 + tl.arange(0, BLOCK_F)
        mf = rmask[:, None] & (fi < DM)[None, :]
        q = fi[None, :]
        new = (
            stay * _written(old_row, v_row, q, mf, M)
            + left * _written(old_row, v_row, (q + M) % DM, mf, M)
            + right * _written(old_row, v_row, (q + DM - M) % DM, mf, M)
        )
        if JUMP:
            new += jl * _written(old_row, v_row, (q + LM) % DM, mf, M)
            new += jr * _written(old_row, v_row, (q + DM - LM) % DM, mf, M)
        tl.store(new_row + q, new.to(s_ptr.dtype.element_ty), mask=mf)
        tl.store(
            zs_ptr + (t + 1) * B * NZ + rows[:, None] * NZ + N + q,
            new.to(zs_ptr.dtype.element_ty),
            mask=mf & (q < M),
        )


@triton.jit
def _tape_grad_at(g_row, r_row, q, mask, M):
    """``∂L/∂S_{t+1}`` at flat cells ``q``: the carried gradient plus the reading's (head cell)."""
    return tl.load(g_row + q, mask=mask, other=0.0) + tl.load(r_row + q, mask=mask & (q < M), other=0.0)


@triton.jit
def _tape_step_grad(
    t, rows, rmask, hd_ptr, s_ptr, gs_ptr, gz_ptr, gsx_ptr, ghd_ptr, jp_ptr, cur, nxt,
    B, N, M, DM, KH, NZ, VCODE: tl.constexpr, HAS_GS: tl.constexpr, JUMP: tl.constexpr,
    BLOCK_B: tl.constexpr, BLOCK_F: tl.constexpr,
):  # fmt: skip
    """``∂S_t`` into ``gs[nxt]``: ``∂W[j] = stay · g[j] + left · g[j−1] + right · g[j+1]`` (with
    ``JUMP``, ``+ jump_left · g[j−L] + jump_right · g[j+L]``), the head's cell to the written vector
    and the rest to the old tape; the moves' gradients through their softmax into ``ghd[t]``."""
    NA: tl.constexpr = 5 if JUMP else 3
    stay1, left1, right1 = _three(hd_ptr + t * B * KH + rows * KH, rmask)
    stay, left, right = stay1[:, None], left1[:, None], right1[:, None]
    jl1 = tl.zeros((BLOCK_B,), dtype=tl.float32)
    jr1 = tl.zeros((BLOCK_B,), dtype=tl.float32)
    LM = tl.zeros((BLOCK_B, 1), dtype=tl.int32)
    if JUMP:
        jl1 = tl.load(hd_ptr + t * B * KH + rows * KH + 3, mask=rmask, other=0.0).to(tl.float32)
        jr1 = tl.load(hd_ptr + t * B * KH + rows * KH + 4, mask=rmask, other=0.0).to(tl.float32)
        LM = (tl.load(jp_ptr + rows, mask=rmask, other=0) * M)[:, None]
    jl, jr = jl1[:, None], jr1[:, None]
    g_jl = tl.zeros((BLOCK_B,), dtype=tl.float32)
    g_jr = tl.zeros((BLOCK_B,), dtype=tl.float32)
    old_row = s_ptr + t * B * DM + rows[:, None] * DM
    v_row = hd_ptr + t * B * KH + rows[:, None] * KH + NA
    g_row = gs_ptr + cur * B * DM + rows[:, None] * DM
    r_row = gz_ptr + cur * B * NZ + rows[:, None] * NZ + N
    out_row = gs_ptr + nxt * B * DM + rows[:, None] * DM
    g_stay = tl.zeros((BLOCK_B,), dtype=tl.float32)
    g_left = tl.zeros((BLOCK_B,), dtype=tl.float32)
    g_right = tl.zeros((BLOCK_B,), dtype=tl.float32)
    for f0 in range(0, DM, BLOCK_F):
        fi = f0 + tl.arange(0, BLOCK_F)
        mf = rmask[:, None] & (fi < DM)[None, :]
        q = fi[None, :]
        ql, qr = (q + M) % DM, (q + DM - M) % DM  # one cell to the right / to the left, circular
        g0 = _tape_grad_at(g_row, r_row, q, mf, M)
        g_stay += tl.sum(g0 * _written(old_row, v_row, q, mf, M), 1)
        g_left += tl.sum(g0 * _written(old_row, v_row, ql, mf, M), 1)
        g_right += tl.sum(g0 * _written(old_row, v_row, qr, mf, M), 1)
        gw = (
            stay * g0
            + left * _tape_grad_at(g_row, r_row, qr, mf, M)
            + right * _tape_grad_at(g_row, r_row, ql, mf, M)
        )
        if JUMP:
            qjl, qjr = (q + LM) % DM, (q + DM - LM) % DM  # L cells to the right / to the left
            g_jl += tl.sum(g0 * _written(old_row, v_row, qjl, mf, M), 1)
            g_jr += tl.sum(g0 * _written(old_row, v_row, qjr, mf, M), 1)
            gw += jl * _tape_grad_at(g_row, r_row, qjr, mf, M) + jr * _tape_grad_at(g_row, r_row, qjl, mf, M)
        head = q < M
        g_old = tl.where(head, 0.0, gw)
        if HAS_GS:
            g_old += tl.load(gsx_ptr + t * B * DM + rows[:, None] * DM + q, mask=mf, other=0.0).to(tl.float32)
        tl.store(out_row + q, g_old, mask=mf)
        v = tl.load(v_row + q, mask=mf & head, other=0.0).to(tl.float32)
        tl.store(
            ghd_ptr + t * B * KH + rows[:, None] * KH + NA + q,
            (gw * _value_grad_from_output(v, VCODE)).to(ghd_ptr.dtype.element_ty),
            mask=mf & head,
        )
    if JUMP:
        _softmax5_grads(
            ghd_ptr + t * B * KH + rows * KH, rmask,
            stay1, left1, right1, jl1, jr1, g_stay, g_left, g_right, g_jl, g_jr,
        )  # fmt: skip
    else:
        _softmax3_grads(
            ghd_ptr + t * B * KH + rows * KH, rmask, stay1, left1, right1, g_stay, g_left, g_right
        )
