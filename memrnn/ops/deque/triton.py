"""Grefenstette et al.'s (2015) neural DeQue: the step and its gradient for the stack RNN's persistent
Triton kernels (:mod:`memrnn.ops.stack_rnn.triton`, which dispatch on the memory's code): ``t`` the
step, ``rows``/``rmask`` the tile's batch rows."""

from __future__ import annotations

import triton
import triton.language as tl

from memrnn.ops.triton_common import _chunk, _scan, _three, _value_grad_from_output


@triton.jit
def _four(hrow, rmask):
    """The DeQue's head columns 0–3 of each row of the tile (push and pop at the top, push and
    pop at the bottom), ``[BLOCK_B]`` float32 each, from ``hd[t]``."""
    a0, a1, a2 = _three(hrow, rmask)
    return a0, a1, a2, tl.load(hrow + 3, mask=rmask, other=0.0).to(tl.float32)


@triton.jit
def _deque_step(
    t, T, rows, rmask, hd_ptr, s_ptr, p_ptr, x_ptr, zs_ptr, B, N, M, D, KH, NZ,
    BLOCK_B: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr,
):  # fmt: skip
    """Grefenstette et al.'s (2015) DeQue (section 3.3, :mod:`memrnn.ops.deque`): strengths
    ``s [T+1, B, 2D]`` bottom first (the bottom half newest first, the top half oldest first);
    each half's values slide in ``p [2(T+D), B, m]`` (``m = M / 2``): the bottom half's ``Pb =
    p[:T+D]`` (``v_bot`` of step ``t`` at ``Pb[T−1−t]``; slot ``i < D`` after step ``t`` at
    ``Pb[T−1−t+i]``), the top half's ``Pt = p[T+D:]`` (``v_top`` at ``Pt[D+t]``; slot ``D+j`` at
    ``Pt[t+1+j]``).  The top pop (covered from above: suffix sums), then the bottom pop (prefix
    sums), each half shifted outward, both pushes, both readings ``[r_top ; r_bot]``; ``x [B, 2D]``
    (float32) holds the strengths between the pops.  Returns the strength that leaves the window."""
    m = M // 2
    W = 2 * D
    push_top, pop_top, push_bot, pop_bot = _four(hd_ptr + t * B * KH + rows * KH, rmask)
    old_row = s_ptr + t * B * W + rows[:, None] * W
    new_row = s_ptr + (t + 1) * B * W + rows[:, None] * W
    x_row = x_ptr + rows[:, None] * W
    # 1. the top pop: from the top down (suffix sums)
    carry = tl.zeros((BLOCK_B,), dtype=tl.float32)
    for c in range(tl.cdiv(W, BLOCK_D)):
        di = _chunk(c, W, BLOCK_D, True) + tl.arange(0, BLOCK_D)
        md = rmask[:, None] & (di < W)[None, :]
        old = tl.load(old_row + di[None, :], mask=md, other=0.0).to(tl.float32)
        cov, carry = _scan(old, carry, True)
        tl.store(x_row + di[None, :], tl.maximum(old - tl.maximum(pop_top[:, None] - cov, 0.0), 0.0), mask=md)
    tl.debug_barrier()
    # 2. the bottom pop (prefix sums); slot i of the bottom half moves to i + 1, of the top half
    # to i − 1: slots D − 1 and D leave the window
    carry = tl.zeros((BLOCK_B,), dtype=tl.float32)
    lost = tl.zeros((BLOCK_B,), dtype=tl.float32)
    for c in range(tl.cdiv(W, BLOCK_D)):
        di = _chunk(c, W, BLOCK_D, False) + tl.arange(0, BLOCK_D)
        md = rmask[:, None] & (di < W)[None, :]
        p1 = tl.load(x_row + di[None, :], mask=md, other=0.0)
        cov, carry = _scan(p1, carry, False)
        p2 = tl.maximum(p1 - tl.maximum(pop_bot[:, None] - cov, 0.0), 0.0)
        leaves = ((di == D - 1) | (di == D))[None, :]
        dst = tl.where(di < D, di + 1, di - 1)
        tl.store(new_row + dst[None, :], p2.to(s_ptr.dtype.element_ty), mask=md & ~leaves)
        lost += tl.sum(tl.where(md & leaves, p2, 0.0), 1)
    tl.store(new_row, push_bot[:, None].to(s_ptr.dtype.element_ty), mask=rmask[:, None])
    tl.store(new_row + W - 1, push_top[:, None].to(s_ptr.dtype.element_ty), mask=rmask[:, None])
    mcols = tl.arange(0, BLOCK_M)
    mm = rmask[:, None] & (mcols < m)[None, :]
    v_top = tl.load(hd_ptr + t * B * KH + rows[:, None] * KH + 4 + mcols[None, :], mask=mm, other=0.0)
    v_bot = tl.load(hd_ptr + t * B * KH + rows[:, None] * KH + 4 + m + mcols[None, :], mask=mm, other=0.0)
    pty = p_ptr.dtype.element_ty
    tl.store(p_ptr + (T + 2 * D + t) * B * m + rows[:, None] * m + mcols[None, :], v_top.to(pty), mask=mm)
    tl.store(p_ptr + (T - 1 - t) * B * m + rows[:, None] * m + mcols[None, :], v_bot.to(pty), mask=mm)
    tl.debug_barrier()
    # 3. the readings of the new DeQue: the top's (suffix sums), then the bottom's (prefix sums)
    for end in tl.static_range(2):
        carry = tl.zeros((BLOCK_B,), dtype=tl.float32)
        r = tl.zeros((BLOCK_B, BLOCK_M), dtype=tl.float32)
        for c in range(tl.cdiv(W, BLOCK_D)):
            di = _chunk(c, W, BLOCK_D, end == 0) + tl.arange(0, BLOCK_D)
            md = rmask[:, None] & (di < W)[None, :]
            new = tl.load(new_row + di[None, :], mask=md, other=0.0).to(tl.float32)
            cov, carry = _scan(new, carry, end == 0)
            w = tl.minimum(new, tl.maximum(1.0 - cov, 0.0))
            slot = tl.where(di < D, T - 1 - t + di, T + D + t + 1 + di - D)  # the row of p
            V = tl.load(
                p_ptr + slot[None, :, None] * B * m + rows[:, None, None] * m + mcols[None, None, :],
                mask=md[:, :, None] & (mcols < m)[None, None, :],
                other=0.0,
            ).to(tl.float32)
            r += tl.sum(w[:, :, None] * V, 1)
        tl.store(
            zs_ptr + (t + 1) * B * NZ + rows[:, None] * NZ + N + end * m + mcols[None, :],
            r.to(zs_ptr.dtype.element_ty),
            mask=mm,
        )
    return lost


@triton.jit
def _deque_step_grad(
    t, T, rows, rmask, hd_ptr, s_ptr, p_ptr, gs_ptr, gp_ptr, x_ptr, gz_ptr, gsx_ptr, ghd_ptr, cur, nxt,
    B, N, M, D, KH, NZ, VCODE: tl.constexpr, HAS_GS: tl.constexpr,
    BLOCK_B: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr,
):  # fmt: skip
    """The backward of :func:`_deque_step` with autograd's subgradients (``max(·, 0)`` passes at
    0, ``minimum`` splits a tie in halves), the passes of the CPU kernel
    (``memrnn.ops.stack_rnn.cpu._Deque.backward``) over chunks: the strengths' gradient
    ``gs[cur] -> gs[nxt]``, the values' accumulated in ``gp [2(T+D), B, m]`` (float32), the four
    strengths' through their sigmoid and the pushed vectors' into ``ghd[t]``.  ``x [4, B, 2D]``
    (float32) is scratch: the new strengths' gradient, two rows of running-sum operands, the
    strengths between the pops."""
    m = M // 2
    W = 2 * D
    push_top, pop_top, push_bot, pop_bot = _four(hd_ptr + t * B * KH + rows * KH, rmask)
    old_row = s_ptr + t * B * W + rows[:, None] * W
    new_row = s_ptr + (t + 1) * B * W + rows[:, None] * W
    g_row = gs_ptr + cur * B * W + rows[:, None] * W  # ∂L/∂s_{t+1}
    out_row = gs_ptr + nxt * B * W + rows[:, None] * W
    y_row = x_ptr + rows[:, None] * W  # ∂L/∂s_{t+1} with the readings' shares
    a_row = x_ptr + B * W + rows[:, None] * W
    b_row = x_ptr + 2 * B * W + rows[:, None] * W
    p1_row = x_ptr + 3 * B * W + rows[:, None] * W
    mcols = tl.arange(0, BLOCK_M)
    mm = rmask[:, None] & (mcols < m)[None, :]
    zrow = gz_ptr + cur * B * NZ + rows[:, None] * NZ + N + mcols[None, :]
    # 1. the readings (the top's with suffix sums into a_row, the bottom's with prefix sums into
    # b_row): the values' gradient, and the strengths' through w = min(s, max(0, 1 − covered(s)))
    for end in tl.static_range(2):
        g_r = tl.load(zrow + end * m, mask=mm, other=0.0)
        x_row = a_row if end == 0 else b_row
        carry = tl.zeros((BLOCK_B,), dtype=tl.float32)
        for c in range(tl.cdiv(W, BLOCK_D)):
            di = _chunk(c, W, BLOCK_D, end == 0) + tl.arange(0, BLOCK_D)
            md = rmask[:, None] & (di < W)[None, :]
            new = tl.load(new_row + di[None, :], mask=md, other=0.0).to(tl.float32)
            ex, carry = _scan(new, carry, end == 0)
            a = 1.0 - ex
            r = tl.maximum(a, 0.0)
            w = tl.minimum(new, r)
            da = tl.where(new < r, 1.0, tl.where(new == r, 0.5, 0.0))
            db = tl.where(a >= 0, 1.0 - da, 0.0)
            slot = tl.where(di < D, T - 1 - t + di, T + D + t + 1 + di - D)
            m3 = md[:, :, None] & (mcols < m)[None, None, :]
            off = slot[None, :, None] * B * m + rows[:, None, None] * m + mcols[None, None, :]
            V = tl.load(p_ptr + off, mask=m3, other=0.0).to(tl.float32)
            g_w = tl.sum(V * g_r[:, None, :], 2)
            tl.store(
                gp_ptr + off,
                tl.load(gp_ptr + off, mask=m3, other=0.0) + w[:, :, None] * g_r[:, None, :],
                mask=m3,
            )
            tl.store(x_row + di[None, :], g_w * db, mask=md)  # −∂L/∂covered
            if end == 0:
                y = tl.load(g_row + di[None, :], mask=md, other=0.0)
            else:
                y = tl.load(y_row + di[None, :], mask=md, other=0.0)
            tl.store(y_row + di[None, :], y + g_w * da, mask=md)
        tl.debug_barrier()
    # the covered sums' transposes: the top's (a queue's) prefix sums, the bottom's suffix sums
    for end in tl.static_range(2):
        x_row = a_row if end == 0 else b_row
        carry = tl.zeros((BLOCK_B,), dtype=tl.float32)
        for c in range(tl.cdiv(W, BLOCK_D)):
            di = _chunk(c, W, BLOCK_D, end == 1) + tl.arange(0, BLOCK_D)
            md = rmask[:, None] & (di < W)[None, :]
            x = tl.load(x_row + di[None, :], mask=md, other=0.0)
            ex, carry = _scan(x, carry, end == 1)
            y = tl.load(y_row + di[None, :], mask=md, other=0.0) - ex
            tl.store(y_row + di[None, :], y, mask=md)
        tl.debug_barrier()
    # 2. the pushes (new slots 0 and 2D − 1), the top pop's result again (suffix sums)
    g_push_bot = tl.load(x_ptr + rows * W, mask=rmask, other=0.0)
    g_push_top = tl.load(x_ptr + rows * W + W - 1, mask=rmask, other=0.0)
    carry = tl.zeros((BLOCK_B,), dtype=tl.float32)
    for c in range(tl.cdiv(W, BLOCK_D)):
        di = _chunk(c, W, BLOCK_D, True) + tl.arange(0, BLOCK_D)
        md = rmask[:, None] & (di < W)[None, :]
        old = tl.load(old_row + di[None, :], mask=md, other=0.0).to(tl.float32)
        ex, carry = _scan(old, carry, True)
        c1 = pop_top[:, None] - ex
        tl.store(p1_row + di[None, :], tl.maximum(old - tl.maximum(c1, 0.0), 0.0), mask=md)
    tl.debug_barrier()
    # 3. the bottom pop (prefix sums): the shift's gradient (slot i of the result came from i + 1
    # or i − 1 of the new DeQue), then b2 = p1 − max(b1, 0), b1 = pop_bot − covered(p1)
    carry = tl.zeros((BLOCK_B,), dtype=tl.float32)
    g_pop_bot = tl.zeros((BLOCK_B,), dtype=tl.float32)
    for c in range(tl.cdiv(W, BLOCK_D)):
        di = _chunk(c, W, BLOCK_D, False) + tl.arange(0, BLOCK_D)
        md = rmask[:, None] & (di < W)[None, :]
        p1 = tl.load(p1_row + di[None, :], mask=md, other=0.0)
        ex, carry = _scan(p1, carry, False)
        b1 = pop_bot[:, None] - ex
        b2 = p1 - tl.maximum(b1, 0.0)
        kept = md & ((di != D - 1) & (di != D))[None, :]
        src = tl.where(di < D, di + 1, di - 1)
        g_b2 = tl.where(b2 >= 0, tl.load(y_row + src[None, :], mask=kept, other=0.0), 0.0)
        g_b1 = tl.where(b1 >= 0, -g_b2, 0.0)
        g_pop_bot += tl.sum(tl.where(md, g_b1, 0.0), 1)
        tl.store(a_row + di[None, :], g_b2, mask=md)
        tl.store(b_row + di[None, :], g_b1, mask=md)
    tl.debug_barrier()
    # 4. the top pop (suffix sums): g_p1 = g_b2 − suffix(g_b1), then c2 = old − max(c1, 0)
    carry_g = tl.zeros((BLOCK_B,), dtype=tl.float32)
    carry = tl.zeros((BLOCK_B,), dtype=tl.float32)
    g_pop_top = tl.zeros((BLOCK_B,), dtype=tl.float32)
    for c in range(tl.cdiv(W, BLOCK_D)):
        di = _chunk(c, W, BLOCK_D, True) + tl.arange(0, BLOCK_D)
        md = rmask[:, None] & (di < W)[None, :]
        g_b1 = tl.load(b_row + di[None, :], mask=md, other=0.0)
        ex, carry_g = _scan(g_b1, carry_g, True)
        g_p1 = tl.load(a_row + di[None, :], mask=md, other=0.0) - ex
        old = tl.load(old_row + di[None, :], mask=md, other=0.0).to(tl.float32)
        ex, carry = _scan(old, carry, True)
        c1 = pop_top[:, None] - ex
        c2 = old - tl.maximum(c1, 0.0)
        g_c2 = tl.where(c2 >= 0, g_p1, 0.0)
        g_c1 = tl.where(c1 >= 0, -g_c2, 0.0)
        g_pop_top += tl.sum(tl.where(md, g_c1, 0.0), 1)
        tl.store(a_row + di[None, :], g_c2, mask=md)
        tl.store(b_row + di[None, :], g_c1, mask=md)
    tl.debug_barrier()
    # 5. the old strengths: g_c2 − prefix(g_c1), and the outside gradient of s_t
    carry = tl.zeros((BLOCK_B,), dtype=tl.float32)
    for c in range(tl.cdiv(W, BLOCK_D)):
        di = _chunk(c, W, BLOCK_D, False) + tl.arange(0, BLOCK_D)
        md = rmask[:, None] & (di < W)[None, :]
        g_c1 = tl.load(b_row + di[None, :], mask=md, other=0.0)
        ex, carry = _scan(g_c1, carry, False)
        g_old = tl.load(a_row + di[None, :], mask=md, other=0.0) - ex
        if HAS_GS:
            g_old += tl.load(gsx_ptr + t * B * W + rows[:, None] * W + di[None, :], mask=md, other=0.0).to(
                tl.float32
            )
        tl.store(out_row + di[None, :], g_old, mask=md)
    # 6. the pushed vectors (complete: the windows after step t are done) and the heads
    gty = ghd_ptr.dtype.element_ty
    for end in tl.static_range(2):
        v = tl.load(
            hd_ptr + t * B * KH + rows[:, None] * KH + 4 + end * m + mcols[None, :], mask=mm, other=0.0
        )
        at = (T + 2 * D + t) if end == 0 else (T - 1 - t)  # Pt[D + t], Pb[T − 1 − t]
        gv = tl.load(gp_ptr + at * B * m + rows[:, None] * m + mcols[None, :], mask=mm, other=0.0)
        gv = gv * _value_grad_from_output(v.to(tl.float32), VCODE)
        tl.store(
            ghd_ptr + t * B * KH + rows[:, None] * KH + 4 + end * m + mcols[None, :], gv.to(gty), mask=mm
        )
    grow = ghd_ptr + t * B * KH + rows * KH
    tl.store(grow, (g_push_top * push_top * (1.0 - push_top)).to(gty), mask=rmask)
    tl.store(grow + 1, (g_pop_top * pop_top * (1.0 - pop_top)).to(gty), mask=rmask)
    tl.store(grow + 2, (g_push_bot * push_bot * (1.0 - push_bot)).to(gty), mask=rmask)
    tl.store(grow + 3, (g_pop_bot * pop_bot * (1.0 - pop_bot)).to(gty), mask=rmask)
