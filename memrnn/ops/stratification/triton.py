"""Grefenstette et al.'s (2015) stratification stack and neural queue (``QUEUE``; the queue's spec is
:mod:`memrnn.ops.queue`): the step and its gradient for the stack RNN's persistent Triton kernels
(:mod:`memrnn.ops.stack_rnn.triton`, which dispatch on the memory's code): ``t`` the step,
``rows``/``rmask`` the tile's batch rows."""

from __future__ import annotations

import triton
import triton.language as tl

from memrnn.ops.triton_common import _chunk, _scan, _value_grad_from_output


@triton.jit
def _strat_step(
    t, T, rows, rmask, hd_ptr, s_ptr, p_ptr, zs_ptr, B, N, M, D, KH, NZ,
    QUEUE: tl.constexpr, BLOCK_B: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr,
):  # fmt: skip
    """Grefenstette et al.'s (2015) equations 1–3 (stack) or their queue: strengths ``s [T+1, B, D]``
    newest first; the values slide in ``p [T+D, B, M]`` (``p[T−1−t] = v_t``, the window of step
    ``t`` is ``p[T−t : T−t+D]``).  Pop ``s' = max(0, s − max(0, pop − covered(s)))``, push ``v_t``
    with strength ``push``, read ``Σ_i min(s_i, max(0, 1 − covered(s)_i)) · V_i``; returns the
    strength that leaves the window."""
    push = tl.load(hd_ptr + t * B * KH + rows * KH, mask=rmask, other=0.0).to(tl.float32)
    pop = tl.load(hd_ptr + t * B * KH + rows * KH + 1, mask=rmask, other=0.0).to(tl.float32)
    old_row = s_ptr + t * B * D + rows[:, None] * D
    new_row = s_ptr + (t + 1) * B * D + rows[:, None] * D
    carry = tl.zeros((BLOCK_B,), dtype=tl.float32)
    lost = tl.zeros((BLOCK_B,), dtype=tl.float32)
    for c in range(tl.cdiv(D, BLOCK_D)):
        di = _chunk(c, D, BLOCK_D, QUEUE) + tl.arange(0, BLOCK_D)
        md = rmask[:, None] & (di < D)[None, :]
        old = tl.load(old_row + di[None, :], mask=md, other=0.0).to(tl.float32)
        cov, carry = _scan(old, carry, QUEUE)
        popped = tl.maximum(old - tl.maximum(pop[:, None] - cov, 0.0), 0.0)
        tl.store(
            new_row + di[None, :] + 1, popped.to(s_ptr.dtype.element_ty), mask=md & (di + 1 < D)[None, :]
        )
        lost += tl.sum(tl.where(md & (di == D - 1)[None, :], popped, 0.0), 1)
    tl.store(new_row, push[:, None].to(s_ptr.dtype.element_ty), mask=rmask[:, None])
    mcols = tl.arange(0, BLOCK_M)
    mm = rmask[:, None] & (mcols < M)[None, :]
    v = tl.load(hd_ptr + t * B * KH + rows[:, None] * KH + 2 + mcols[None, :], mask=mm, other=0.0)
    tl.store(
        p_ptr + (T - 1 - t) * B * M + rows[:, None] * M + mcols[None, :],
        v.to(p_ptr.dtype.element_ty),
        mask=mm,
    )
    tl.debug_barrier()
    # the reading of the new structure
    carry = tl.zeros((BLOCK_B,), dtype=tl.float32)
    r = tl.zeros((BLOCK_B, BLOCK_M), dtype=tl.float32)
    for c in range(tl.cdiv(D, BLOCK_D)):
        di = _chunk(c, D, BLOCK_D, QUEUE) + tl.arange(0, BLOCK_D)
        md = rmask[:, None] & (di < D)[None, :]
        new = tl.load(new_row + di[None, :], mask=md, other=0.0).to(tl.float32)
        cov, carry = _scan(new, carry, QUEUE)
        w = tl.minimum(new, tl.maximum(1.0 - cov, 0.0))
        V = tl.load(
            p_ptr + (T - 1 - t + di)[None, :, None] * B * M + rows[:, None, None] * M + mcols[None, None, :],
            mask=md[:, :, None] & (mcols < M)[None, None, :],
            other=0.0,
        ).to(tl.float32)
        r += tl.sum(w[:, :, None] * V, 1)
    tl.store(
        zs_ptr + (t + 1) * B * NZ + rows[:, None] * NZ + N + mcols[None, :],
        r.to(zs_ptr.dtype.element_ty),
        mask=mm,
    )
    return lost


@triton.jit
def _strat_step_grad(
    t, T, rows, rmask, hd_ptr, s_ptr, p_ptr, gs_ptr, gp_ptr, x_ptr, gz_ptr, gsx_ptr, ghd_ptr, cur, nxt,
    B, N, M, D, KH, NZ, VCODE: tl.constexpr, QUEUE: tl.constexpr, HAS_GS: tl.constexpr,
    BLOCK_B: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr,
):  # fmt: skip
    """The backward of :func:`_strat_step` with autograd's subgradients (``max(·, 0)`` passes at 0,
    ``minimum`` splits a tie in halves): the strengths' gradient ``gs[cur] -> gs[nxt]``, the
    values' accumulated in ``gp [T+D, B, M]`` (float32), the push and pop strengths' through their
    sigmoid and the pushed vector's into ``ghd[t]``.  ``x [2, B, D]`` is float32 scratch."""
    push = tl.load(hd_ptr + t * B * KH + rows * KH, mask=rmask, other=0.0).to(tl.float32)
    pop = tl.load(hd_ptr + t * B * KH + rows * KH + 1, mask=rmask, other=0.0).to(tl.float32)
    old_row = s_ptr + t * B * D + rows[:, None] * D
    new_row = s_ptr + (t + 1) * B * D + rows[:, None] * D
    g_row = gs_ptr + cur * B * D + rows[:, None] * D  # ∂L/∂s_{t+1}, then with the reading's share
    out_row = gs_ptr + nxt * B * D + rows[:, None] * D
    x_row = x_ptr + rows[:, None] * D
    y_row = x_ptr + B * D + rows[:, None] * D
    mcols = tl.arange(0, BLOCK_M)
    mm = rmask[:, None] & (mcols < M)[None, :]
    g_r = tl.load(gz_ptr + cur * B * NZ + rows[:, None] * NZ + N + mcols[None, :], mask=mm, other=0.0)
    # 1. the reading: ∂w, the values' share, and the strengths' through w = min(s, max(0, 1 − cov(s)))
    carry = tl.zeros((BLOCK_B,), dtype=tl.float32)
    for c in range(tl.cdiv(D, BLOCK_D)):
        di = _chunk(c, D, BLOCK_D, QUEUE) + tl.arange(0, BLOCK_D)
        md = rmask[:, None] & (di < D)[None, :]
        new = tl.load(new_row + di[None, :], mask=md, other=0.0).to(tl.float32)
        ex, carry = _scan(new, carry, QUEUE)
        a3 = 1.0 - ex
        r3 = tl.maximum(a3, 0.0)
        w = tl.minimum(new, r3)
        da = tl.where(new < r3, 1.0, tl.where(new == r3, 0.5, 0.0))
        db3 = tl.where(a3 >= 0, 1.0 - da, 0.0)
        m3 = md[:, :, None] & (mcols < M)[None, None, :]
        off = (T - 1 - t + di)[None, :, None] * B * M + rows[:, None, None] * M + mcols[None, None, :]
        V = tl.load(p_ptr + off, mask=m3, other=0.0).to(tl.float32)
        g_w = tl.sum(V * g_r[:, None, :], 2)
        gp = tl.load(gp_ptr + off, mask=m3, other=0.0)
        tl.store(gp_ptr + off, gp + w[:, :, None] * g_r[:, None, :], mask=m3)
        tl.store(x_row + di[None, :], g_w * db3, mask=md)  # −∂L/∂cov
        tl.store(y_row + di[None, :], g_w * da, mask=md)
    tl.debug_barrier()
    carry = tl.zeros((BLOCK_B,), dtype=tl.float32)
    g_push = tl.zeros((BLOCK_B,), dtype=tl.float32)
    for c in range(tl.cdiv(D, BLOCK_D)):
        di = _chunk(c, D, BLOCK_D, not QUEUE) + tl.arange(0, BLOCK_D)
        md = rmask[:, None] & (di < D)[None, :]
        x = tl.load(x_row + di[None, :], mask=md, other=0.0)
        gn = tl.load(g_row + di[None, :], mask=md, other=0.0) + tl.load(
            y_row + di[None, :], mask=md, other=0.0
        )
        ex, carry = _scan(x, carry, not QUEUE)
        gn -= ex
        tl.store(g_row + di[None, :], gn, mask=md)
        g_push += tl.sum(tl.where(md & (di == 0)[None, :], gn, 0.0), 1)
    tl.debug_barrier()
    # 2. the pop (new strength 0 is the push, new i+1 is popped i)
    carry = tl.zeros((BLOCK_B,), dtype=tl.float32)
    g_pop = tl.zeros((BLOCK_B,), dtype=tl.float32)
    for c in range(tl.cdiv(D, BLOCK_D)):
        di = _chunk(c, D, BLOCK_D, QUEUE) + tl.arange(0, BLOCK_D)
        md = rmask[:, None] & (di < D)[None, :]
        old = tl.load(old_row + di[None, :], mask=md, other=0.0).to(tl.float32)
        ex, carry = _scan(old, carry, QUEUE)
        a1 = pop[:, None] - ex
        a2 = old - tl.maximum(a1, 0.0)
        g_a2 = tl.load(g_row + di[None, :] + 1, mask=md & (di + 1 < D)[None, :], other=0.0)
        g_a2 = tl.where(a2 >= 0, g_a2, 0.0)
        g_a1 = tl.where(a1 >= 0, g_a2, 0.0)  # −∂L/∂a1
        g_pop -= tl.sum(g_a1, 1)
        tl.store(x_row + di[None, :], g_a1, mask=md)
        tl.store(y_row + di[None, :], g_a2, mask=md)
    tl.debug_barrier()
    carry = tl.zeros((BLOCK_B,), dtype=tl.float32)
    for c in range(tl.cdiv(D, BLOCK_D)):
        di = _chunk(c, D, BLOCK_D, not QUEUE) + tl.arange(0, BLOCK_D)
        md = rmask[:, None] & (di < D)[None, :]
        x = tl.load(x_row + di[None, :], mask=md, other=0.0)
        ex, carry = _scan(x, carry, not QUEUE)
        g_old = tl.load(y_row + di[None, :], mask=md, other=0.0) + ex
        if HAS_GS:
            g_old += tl.load(gsx_ptr + t * B * D + rows[:, None] * D + di[None, :], mask=md, other=0.0).to(
                tl.float32
            )
        tl.store(out_row + di[None, :], g_old, mask=md)
    # 3. the pushed vector (its gradient is complete: the windows after step t are done) and the heads
    v = tl.load(hd_ptr + t * B * KH + rows[:, None] * KH + 2 + mcols[None, :], mask=mm, other=0.0).to(
        tl.float32
    )
    gv = tl.load(gp_ptr + (T - 1 - t) * B * M + rows[:, None] * M + mcols[None, :], mask=mm, other=0.0)
    gty = ghd_ptr.dtype.element_ty
    grow = ghd_ptr + t * B * KH + rows * KH
    tl.store(grow[:, None] + 2 + mcols[None, :], (gv * _value_grad_from_output(v, VCODE)).to(gty), mask=mm)
    tl.store(grow, (g_push * push * (1.0 - push)).to(gty), mask=rmask)
    tl.store(grow + 1, (g_pop * pop * (1.0 - pop)).to(gty), mask=rmask)
