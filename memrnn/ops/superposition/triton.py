"""Joulin & Mikolov's (2015) superposition stack's step and its gradient for the stack RNN's persistent
Triton kernels (:mod:`memrnn.ops.stack_rnn.triton`, which dispatch on the memory's code): ``t`` the
step, ``rows``/``rmask`` the tile's batch rows."""

from __future__ import annotations

import triton
import triton.language as tl

from memrnn.ops.triton_common import _softmax3_grads, _three, _value_grad_from_output


@triton.jit
def _superposition_step(t, rows, rmask, hd_ptr, s_ptr, zs_ptr, B, N, M, DM, KH, NZ, BLOCK_B, BLOCK_F):
    """Joulin & Mikolov's (2015) equations 5–6 over the flattened ``[depth · width]`` cells
    ``s [T+1, B, DM]``: ``S_t[i] = push · S_{t−1}[i−1] + pop · S_{t−1}[i+1] + noop · S_{t−1}[i]``
    with ``S_{t−1}[−1] = v_t`` and an empty cell below the window; returns ``push · max|S_{t−1}[D−1]|``,
    the mass a push moves out of the window."""
    push1, pop1, noop1 = _three(hd_ptr + t * B * KH + rows * KH, rmask)
    push, pop, noop = push1[:, None], pop1[:, None], noop1[:, None]
    old_row = s_ptr + t * B * DM + rows[:, None] * DM
    new_row = s_ptr + (t + 1) * B * DM + rows[:, None] * DM
    lost = tl.zeros((BLOCK_B,), dtype=tl.float32)
    for f0 in range(0, DM, BLOCK_F):
        fi = f0 + tl.arange(0, BLOCK_F)
        mf = rmask[:, None] & (fi < DM)[None, :]
        topf = (fi < M)[None, :]
        old = tl.load(old_row + fi[None, :], mask=mf, other=0.0).to(tl.float32)
        up = tl.load(old_row + fi[None, :] + M, mask=mf & (fi + M < DM)[None, :], other=0.0).to(tl.float32)
        below = tl.load(old_row + fi[None, :] - M, mask=mf & ~topf, other=0.0).to(tl.float32)
        v = tl.load(hd_ptr + t * B * KH + rows[:, None] * KH + 3 + fi[None, :], mask=mf & topf, other=0.0).to(
            tl.float32
        )
        new = push * tl.where(topf, v, below) + pop * up + noop * old
        tl.store(new_row + fi[None, :], new.to(s_ptr.dtype.element_ty), mask=mf)
        tl.store(
            zs_ptr + (t + 1) * B * NZ + rows[:, None] * NZ + N + fi[None, :],
            new.to(zs_ptr.dtype.element_ty),
            mask=mf & topf,
        )
        last = mf & (fi >= DM - M)[None, :]
        lost = tl.maximum(lost, tl.max(tl.where(last, tl.abs(old), 0.0), 1))
    return push1 * lost


@triton.jit
def _superposition_step_grad(
    t, rows, rmask, hd_ptr, s_ptr, gs_ptr, gz_ptr, gsx_ptr, ghd_ptr, cur, nxt,
    B, N, M, DM, KH, NZ, VCODE: tl.constexpr, HAS_GS: tl.constexpr, BLOCK_B: tl.constexpr, BLOCK_F: tl.constexpr,
):  # fmt: skip
    """``∂S_t`` into ``gs[nxt]`` from ``∂S_{t+1}`` (``gs[cur]`` plus the reading's share, ``gz[cur]``);
    the three action gradients through the softmax and the pushed vector's into ``ghd[t]``."""
    push1, pop1, noop1 = _three(hd_ptr + t * B * KH + rows * KH, rmask)
    push, pop, noop = push1[:, None], pop1[:, None], noop1[:, None]
    old_row = s_ptr + t * B * DM + rows[:, None] * DM
    g_row = gs_ptr + cur * B * DM + rows[:, None] * DM  # ∂L/∂S_{t+1} (without the reading's share)
    r_row = gz_ptr + cur * B * NZ + rows[:, None] * NZ + N  # ∂L/∂r_{t+1}
    out_row = gs_ptr + nxt * B * DM + rows[:, None] * DM
    g_push = tl.zeros((BLOCK_B,), dtype=tl.float32)
    g_pop = tl.zeros((BLOCK_B,), dtype=tl.float32)
    g_noop = tl.zeros((BLOCK_B,), dtype=tl.float32)
    for f0 in range(0, DM, BLOCK_F):
        fi = f0 + tl.arange(0, BLOCK_F)
        mf = rmask[:, None] & (fi < DM)[None, :]
        topf = (fi < M)[None, :]
        has_up = mf & (fi + M < DM)[None, :]
        has_below = mf & ~topf
        # ∂L/∂S_{t+1} at fi, fi + M (one cell lower) and fi − M (one cell higher): the reading's
        # share is on the top cell, fi < M
        g0 = tl.load(g_row + fi[None, :], mask=mf, other=0.0) + tl.load(
            r_row + fi[None, :], mask=mf & topf, other=0.0
        )
        g_dn = tl.load(g_row + fi[None, :] + M, mask=has_up, other=0.0)
        g_hi = tl.load(g_row + fi[None, :] - M, mask=has_below, other=0.0) + tl.load(
            r_row + fi[None, :] - M, mask=has_below & (fi < 2 * M)[None, :], other=0.0
        )
        old = tl.load(old_row + fi[None, :], mask=mf, other=0.0).to(tl.float32)
        up = tl.load(old_row + fi[None, :] + M, mask=has_up, other=0.0).to(tl.float32)
        below = tl.load(old_row + fi[None, :] - M, mask=has_below, other=0.0).to(tl.float32)
        v = tl.load(hd_ptr + t * B * KH + rows[:, None] * KH + 3 + fi[None, :], mask=mf & topf, other=0.0).to(
            tl.float32
        )
        g_push += tl.sum(g0 * tl.where(topf, v, below), 1)
        g_pop += tl.sum(g0 * up, 1)
        g_noop += tl.sum(g0 * old, 1)
        g_old = noop * g0 + push * g_dn + pop * g_hi
        if HAS_GS:
            g_old += tl.load(gsx_ptr + t * B * DM + rows[:, None] * DM + fi[None, :], mask=mf, other=0.0).to(
                tl.float32
            )
        tl.store(out_row + fi[None, :], g_old, mask=mf)
        gv = push * g0 * _value_grad_from_output(v, VCODE)
        tl.store(
            ghd_ptr + t * B * KH + rows[:, None] * KH + 3 + fi[None, :],
            gv.to(ghd_ptr.dtype.element_ty),
            mask=mf & topf,
        )
    _softmax3_grads(ghd_ptr + t * B * KH + rows * KH, rmask, push1, pop1, noop1, g_push, g_pop, g_noop)
