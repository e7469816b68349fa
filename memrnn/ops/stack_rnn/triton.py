"""A controller RNN (LSTM, gate blocks o, i, f, g, or Elman) driving a differentiable memory, as
two persistent Triton kernels: one launch for the forward pass of a whole sequence and one for the
backward (the tiling of :mod:`memrnn.ops.elman.triton`: one program per tile of ``BLOCK_B`` batch
rows, the state kept by the program for every step, phases ordered by a barrier).  The memories:
Joulin & Mikolov's (2015) superposition stack, Delétang et al.'s (2023) tape (and their Tape-RNN's
jump tape), and Grefenstette et al.'s (2015) stratification stack, neural queue and DeQue.  The CPU path of the same computation is
:class:`memrnn.ops.stack_rnn.cpu.StackRNNSequence`; the reference is
:class:`memrnn.layers.StackRNN`'s loop over ``step``.

Forward, per step ``t`` (time-major buffers):

1. the controller's gate pre-activations ``pre_t + z_{t−1} W_zᵀ`` with ``z = [h ; r]`` (the
   controller's output and the memory's reading) by ``tl.dot``, then the LSTM or Elman update;
   ``h_t`` goes to ``zs[t+1, :, :N]``;
2. the head ``h_t W_headᵀ + b_head``: the actions (``softmax`` over push, pop, no-op or stay,
   left, right; ``sigmoid`` push and pop strengths for the stratification memories) and the
   pushed or written vector ``v_t = act(·)``, into ``hd[t]``;
3. the memory, over its cells in chunks (each memory's ``_*_step`` below says how); its reading
   ``r_t`` goes to ``zs[t+1, :, N:]`` and what leaves its window to ``ovf[t]``.

Backward, per step, the same three phases reversed: the memory's state gradient, its action and
value gradients (each memory's ``_*_step_grad``) with the head's activation derivatives into ``ghd``;
``∂h_t += ghd W_head`` and the controller's gate gradients into ``ga``; then ``∂z_{t−1} = ga W_z``
by ``tl.dot``.  The weight gradients are single matrix products outside the kernels, and the
input projection's through autograd.  Float32 accumulation whatever the storage dtype (float32,
bfloat16, float16).  Where they fit :data:`PRELOAD_BYTES`, both kernels load the weight tiles once,
before their time loop, and Triton keeps them in shared memory for the whole sequence (on an H100
7-24% off a forward+backward step; ``benchmarks/results/stack-rnn-h100.md``).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor
from triton.runtime.errors import OutOfResources

from memrnn.ops.autograd import first_order
from memrnn.ops.buckets import final_by_length
from memrnn.ops.triton_common import BLOCK_B, CODES, _act, _act_grad, _sig, _tanh, unit_blocks

#: flattened stack cells per chunk of the stack phases
BLOCK_F = 128


def _stack_warps(lstm: bool, N: int, mem: int) -> int:
    """Warps per program of the two stack kernels: 4 for a controller of at most 64 units, but the
    tape with jumps, and the Elman-controlled plain tape; else 8.

    On an H200 (Triton 3.6, batch 64, width 8, T 256, forward+backward, best of 10;
    ``benchmarks/results/stack-rnn-h200.md``), 4 warps against 8 with the LSTM controller of 64
    units at depth 32 / depth T: superposition 13.1 -> 10.7 / 21.8 -> 21.1 ms, stratification
    12.9 -> 11.0 / 20.0 -> 18.2, queue 12.9 -> 10.7 / 20.2 -> 18.2, DeQue 16.3 -> 13.6 / 49.0 ->
    41.3, tape 15.5 -> 13.5 / 40.8 -> 40.2, but the tape with jumps 17.9 -> 16.6 / 58.3 -> 78.1;
    with 128 units within 5% either way; 16 warps no better than 8, 2 warps 1.5-7x slower.  With
    the Elman controller of 64 units, once the weights were preloaded (:data:`PRELOAD_BYTES`), on
    an H100 at depth 32 (``benchmarks/results/stack-rnn-h100.md``): superposition 5.0 -> 4.5 ms,
    stratification 5.0 -> 4.1, queue 5.0 -> 4.6, DeQue 8.3 -> 7.3, but tape 7.2 -> 7.3 and the
    tape with jumps 9.4 -> 10.2.  At 4 warps ptxas spills more (with the weights preloaded, sm_90:
    up to 372 bytes per thread under Triton 3.6, 448 under 3.9; sm_80: 564;
    ``benchmarks/results/kernels-compiled.md``), which the latency-bound steps hide on those two
    GPUs; an A100 has not timed them."""
    if N > 64 or mem == MEMORY_CODES["tape_jump"] or (not lstm and mem == MEMORY_CODES["tape"]):
        return 8
    return 4


#: the precision of the controller's products: plain IEEE float32 (FMA loops; the 16-wide blocks
#: of ``_k_blocks`` keep them from spilling).  On an H100 at state 64, T 256, depth 32, it ran
#: the LSTM-controlled forward+backward in 13.0 ms against 22.9 ms with the other kernels'
#: ``"tf32x3"`` (:data:`memrnn.ops.triton_common.DOT_PRECISION`), with the same error against
#: the reference loop (``benchmarks/results/stack-rnn-h100.md``)
STACK_DOT_PRECISION: tl.constexpr = tl.constexpr("ieee")
#: value activations of the pushed vector
VALUE_CODES = {"sigmoid": CODES["sigmoid"], "tanh": CODES["tanh"], "identity": CODES["identity"]}


@triton.jit
def _value_grad_from_output(v, VCODE: tl.constexpr):
    """``act'`` from the activation's output ``v``: sigmoid, tanh or identity."""
    if VCODE == 1:
        return v * (1.0 - v)
    elif VCODE == 0:
        return 1.0 - v * v
    else:
        return v * 0.0 + 1.0


@triton.jit
def _three(hrow, rmask):
    """Head columns 0, 1, 2 of each row of the tile (push, pop, no-op or stay, left, right),
    ``[BLOCK_B]`` float32 each, from ``hd[t]``."""
    a0 = tl.load(hrow, mask=rmask, other=0.0).to(tl.float32)
    a1 = tl.load(hrow + 1, mask=rmask, other=0.0).to(tl.float32)
    a2 = tl.load(hrow + 2, mask=rmask, other=0.0).to(tl.float32)
    return a0, a1, a2


# -- the memories' steps: ``t`` the step, ``rows``/``rmask`` the tile's batch rows -----------------
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


@triton.jit
def _softmax3_grads(grow, rmask, a0, a1, a2, g0, g1, g2):
    """The three actions' pre-activation gradients through their softmax into ``ghd[t]``."""
    dot = a0 * g0 + a1 * g1 + a2 * g2
    gty = grow.dtype.element_ty
    tl.store(grow, (a0 * (g0 - dot)).to(gty), mask=rmask)
    tl.store(grow + 1, (a1 * (g1 - dot)).to(gty), mask=rmask)
    tl.store(grow + 2, (a2 * (g2 - dot)).to(gty), mask=rmask)


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


@triton.jit
def _chunk(c, D, BLOCK_D: tl.constexpr, REV: tl.constexpr):
    """The first element of the ``c``-th chunk of ``D`` elements, last chunk first if ``REV``."""
    if REV:
        return (tl.cdiv(D, BLOCK_D) - 1 - c) * BLOCK_D
    else:
        return c * BLOCK_D


@triton.jit
def _scan(x, carry, REV: tl.constexpr):
    """One chunk ``x [BLOCK_B, BLOCK_D]`` of a running sum along the elements that continues
    ``carry [BLOCK_B]`` (the earlier chunks' total): ``(exclusive, carry + Σ_j x[:, j])``, the
    exclusive prefix sums (suffix sums if ``REV``) and the total to carry into the next chunk.

    A stack's covered sums are prefix sums over the elements (newest first) and their transpose
    suffix sums; a queue's the other way round.  Both directions are scans, never ``total −
    prefix``, so the last element's suffix sum is exactly 0 (a tie the subgradients see).  The
    total is one reduction with ``carry`` added into the chunk's first column, not ``carry +
    tl.sum(x, 1)``: Triton 3.6's ``TritonGPUOptimizeThreadLocality`` pass asserts
    (``loopResult.hasOneUse()``, the compile fails) on a loop-carried sum of a reduction whose
    result is unused after the loop, once the loads are specialised for 16-byte alignment (as
    every real launch is)."""
    exclusive = carry[:, None] + tl.cumsum(x, 1, reverse=REV) - x
    first = (tl.arange(0, x.shape[1]) == 0)[None, :]
    return exclusive, tl.sum(tl.where(first, x + carry[:, None], x), 1)


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


#: the memories the kernels run, by code
MEMORY_CODES = {"superposition": 0, "tape": 1, "stratification": 2, "queue": 3, "tape_jump": 4, "deque": 5}
#: the head's actions per memory code
N_ACTIONS = {0: 3, 1: 3, 2: 2, 3: 2, 4: 5, 5: 4}


@triton.jit
def _stack_fwd(
    pre_ptr, wz_ptr, wh_ptr, bh_ptr, zs_ptr, cs_ptr, gates_ptr, hd_ptr, s_ptr, p_ptr, ovf_ptr, jp_ptr, x_ptr,
    T, B, N, M, D, SW, KH,
    LSTM: tl.constexpr, CODE: tl.constexpr, VCODE: tl.constexpr, MEM: tl.constexpr,
    BLOCK_B: tl.constexpr, BLOCK_N: tl.constexpr, NUM_N: tl.constexpr,
    BLOCK_K: tl.constexpr, NUM_K: tl.constexpr, BLOCK_KH: tl.constexpr, BLOCK_F: tl.constexpr,
    BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr, PRELOAD: tl.constexpr,
):  # fmt: skip
    """``pre``/``gates`` ``[T, B, G]`` (``G = 4N`` LSTM, ``N`` Elman; ``gates`` holds the LSTM's
    activated gates or the Elman pre-activation), ``wz [G, N+M]``, ``wh [KH, N]``, ``bh [KH]``,
    ``zs [T+1, B, N+M]``, ``cs [T+1, B, N]``, ``hd [T, B, KH]`` (actions, then the pushed vector),
    ``s [T+1, B, SW]`` (the memory's cells, ``SW = D · M``, or the stratification strengths,
    ``SW = D``; the DeQue's, ``SW = 2D``), ``p [T+D, B, M]`` (the stratification values; the
    DeQue's two halves ``[2(T+D), B, M/2]``; unused otherwise), ``ovf [T, B]``, ``jp [B]`` (the
    jump tape's jumps in cells mod ``D``, int32; unused otherwise), ``x [B, 2D]`` (float32 scratch
    of the DeQue); index 0 of ``zs``, ``cs`` and ``s`` holds the initial state.  ``MEM``: 0
    superposition, 1 tape, 2 stratification, 3 queue, 4 the jump tape, 5 the DeQue (``M`` is
    the reading's width: ``2m`` for the DeQue).  ``PRELOAD``: the weight tiles are loaded once,
    before the time loop (:func:`_preload`)."""
    rows = tl.program_id(0) * BLOCK_B + tl.arange(0, BLOCK_B)
    rmask = rows < B
    cols = tl.arange(0, BLOCK_N)
    kcols = tl.arange(0, BLOCK_K)
    hcols = tl.arange(0, BLOCK_KH)
    NZ = N + M
    G = 4 * N if LSTM else N
    NQ: tl.constexpr = 4 if LSTM else 1
    # the weight tiles, once: W_z's by (jb, kb, gate), then W_head's by kb (see the loop below)
    wzs = ()
    whs = ()
    if PRELOAD:
        for jb in tl.static_range(NUM_N):
            pj = jb * BLOCK_N + cols
            for kb in tl.static_range(NUM_K):
                pk = kb * BLOCK_K + kcols
                pwm = (pk < NZ)[:, None] & (pj < N)[None, :]
                for q in tl.static_range(NQ):
                    pwt = wz_ptr + (q * N + pj[None, :]) * NZ + pk[:, None]
                    wzs = wzs + (tl.load(pwt, mask=pwm, other=0.0).to(tl.float32),)  # noqa: RUF005
        for kb in tl.static_range(NUM_N):
            pk = kb * BLOCK_N + cols
            pwm = (pk < N)[:, None] & (hcols < KH)[None, :]
            pwt = tl.load(wh_ptr + hcols[None, :] * N + pk[:, None], mask=pwm, other=0.0).to(tl.float32)
            whs = whs + (pwt,)  # noqa: RUF005 (Triton's tuples: no starred unpacking)
    for t in range(T):
        # 1. the controller
        z_prev = zs_ptr + t * B * NZ
        for jb in tl.static_range(NUM_N):
            j = jb * BLOCK_N + cols
            jmask = j < N
            m2 = rmask[:, None] & jmask[None, :]
            base = pre_ptr + t * B * G + rows[:, None] * G + j[None, :]
            a0 = tl.load(base, mask=m2, other=0.0).to(tl.float32)
            if LSTM:
                a1 = tl.load(base + N, mask=m2, other=0.0).to(tl.float32)
                a2 = tl.load(base + 2 * N, mask=m2, other=0.0).to(tl.float32)
                a3 = tl.load(base + 3 * N, mask=m2, other=0.0).to(tl.float32)
            for kb in tl.static_range(NUM_K):
                k = kb * BLOCK_K + kcols
                kmask = k < NZ
                z = tl.load(
                    z_prev + rows[:, None] * NZ + k[None, :], mask=rmask[:, None] & kmask[None, :], other=0.0
                ).to(tl.float32)
                wm = kmask[:, None] & jmask[None, :]
                wt = wz_ptr + j[None, :] * NZ + k[:, None]  # wt[k, j] = W_z[q·N + j, k]
                if PRELOAD:
                    w0 = wzs[(jb * NUM_K + kb) * NQ]  # this block's first tile
                else:
                    w0 = tl.load(wt, mask=wm, other=0.0).to(tl.float32)
                a0 += tl.dot(z, w0, input_precision=STACK_DOT_PRECISION)
                if LSTM:
                    if PRELOAD:
                        w1 = wzs[(jb * NUM_K + kb) * NQ + 1]
                        w2 = wzs[(jb * NUM_K + kb) * NQ + 2]
                        w3 = wzs[(jb * NUM_K + kb) * NQ + 3]
                    else:
                        w1 = tl.load(wt + N * NZ, mask=wm, other=0.0).to(tl.float32)
                        w2 = tl.load(wt + 2 * N * NZ, mask=wm, other=0.0).to(tl.float32)
                        w3 = tl.load(wt + 3 * N * NZ, mask=wm, other=0.0).to(tl.float32)
                    a1 += tl.dot(z, w1, input_precision=STACK_DOT_PRECISION)
                    a2 += tl.dot(z, w2, input_precision=STACK_DOT_PRECISION)
                    a3 += tl.dot(z, w3, input_precision=STACK_DOT_PRECISION)
            gb = gates_ptr + t * B * G + rows[:, None] * G + j[None, :]
            ty = gates_ptr.dtype.element_ty
            if LSTM:
                o, i, f, g = _sig(a0), _sig(a1), _sig(a2), _tanh(a3)
                off = rows[:, None] * N + j[None, :]
                c_prev = tl.load(cs_ptr + t * B * N + off, mask=m2, other=0.0).to(tl.float32)
                c = f * c_prev + i * g
                h = o * _tanh(c)
                tl.store(cs_ptr + (t + 1) * B * N + off, c.to(cs_ptr.dtype.element_ty), mask=m2)
                tl.store(gb, o.to(ty), mask=m2)
                tl.store(gb + N, i.to(ty), mask=m2)
                tl.store(gb + 2 * N, f.to(ty), mask=m2)
                tl.store(gb + 3 * N, g.to(ty), mask=m2)
            else:
                h = _act(a0, CODE)
                tl.store(gb, a0.to(ty), mask=m2)
            tl.store(
                zs_ptr + (t + 1) * B * NZ + rows[:, None] * NZ + j[None, :],
                h.to(zs_ptr.dtype.element_ty),
                mask=m2,
            )
        tl.debug_barrier()
        # 2. the head
        hmask = hcols < KH
        acc = (
            tl.zeros((BLOCK_B, BLOCK_KH), dtype=tl.float32)
            + tl.load(bh_ptr + hcols, mask=hmask, other=0.0).to(tl.float32)[None, :]
        )
        for kb in tl.static_range(NUM_N):
            k = kb * BLOCK_N + cols
            kmask = k < N
            h = tl.load(
                zs_ptr + (t + 1) * B * NZ + rows[:, None] * NZ + k[None, :],
                mask=rmask[:, None] & kmask[None, :],
                other=0.0,
            ).to(tl.float32)
            if PRELOAD:
                wt = whs[kb]
            else:
                wt = tl.load(  # wt[k, q] = W_head[q, k]
                    wh_ptr + hcols[None, :] * N + k[:, None], mask=kmask[:, None] & hmask[None, :], other=0.0
                ).to(tl.float32)
            # an explicit IEEE product: Triton 3.6 rewrote the sum of broadcast products that stood
            # here into a TF32 dot (inputs rounded to 10 significand bits: 2e-4 to 1e-3 of each
            # tensor's largest value on an H200, against 2e-7 for torch's float32;
            # ``python -m benchmarks.kernel_precision``)
            acc += tl.dot(h, wt, input_precision=STACK_DOT_PRECISION)
        if MEM < 2 or MEM == 4:  # softmax over the three (the jump tape: five) actions
            is_act = (hcols < (5 if MEM == 4 else 3))[None, :]
            logits = tl.where(is_act, acc, float("-inf"))
            e = tl.where(is_act, tl.exp(logits - tl.max(logits, 1)[:, None]), 0.0)
            heads = tl.where(is_act, e / tl.sum(e, 1)[:, None], _act(acc, VCODE))
        else:  # sigmoid push and pop strengths (the DeQue's: at both ends)
            heads = tl.where((hcols < (4 if MEM == 5 else 2))[None, :], _sig(acc), _act(acc, VCODE))
        tl.store(
            hd_ptr + t * B * KH + rows[:, None] * KH + hcols[None, :],
            heads.to(hd_ptr.dtype.element_ty),
            mask=rmask[:, None] & hmask[None, :],
        )
        tl.debug_barrier()
        # 3. the memory
        if MEM == 0:
            lost = _superposition_step(
                t, rows, rmask, hd_ptr, s_ptr, zs_ptr, B, N, M, SW, KH, NZ, BLOCK_B, BLOCK_F
            )
        elif MEM == 1:
            _tape_step(t, rows, rmask, hd_ptr, s_ptr, zs_ptr, jp_ptr, B, N, M, SW, KH, NZ, False, BLOCK_F)
            lost = tl.zeros((BLOCK_B,), dtype=tl.float32)
        elif MEM == 4:
            _tape_step(t, rows, rmask, hd_ptr, s_ptr, zs_ptr, jp_ptr, B, N, M, SW, KH, NZ, True, BLOCK_F)
            lost = tl.zeros((BLOCK_B,), dtype=tl.float32)
        elif MEM == 5:
            lost = _deque_step(
                t,
                T,
                rows,
                rmask,
                hd_ptr,
                s_ptr,
                p_ptr,
                x_ptr,
                zs_ptr,
                B,
                N,
                M,
                D,
                KH,
                NZ,
                BLOCK_B,
                BLOCK_D,
                BLOCK_M,
            )
        else:
            lost = _strat_step(
                t, T, rows, rmask, hd_ptr, s_ptr, p_ptr, zs_ptr, B, N, M, D, KH, NZ,
                MEM == 3, BLOCK_B, BLOCK_D, BLOCK_M,
            )  # fmt: skip
        tl.store(ovf_ptr + t * B + rows, lost.to(ovf_ptr.dtype.element_ty), mask=rmask)
        tl.debug_barrier()


@triton.jit
def _stack_bwd(
    gzx_ptr, gcx_ptr, gsx_ptr, wz_ptr, wh_ptr, zs_ptr, cs_ptr, gates_ptr, hd_ptr, s_ptr, p_ptr,
    ga_ptr, ghd_ptr, gz_ptr, gc_ptr, gs_ptr, gp_ptr, x_ptr, jp_ptr,
    T, B, N, M, D, SW, KH,
    LSTM: tl.constexpr, CODE: tl.constexpr, VCODE: tl.constexpr, MEM: tl.constexpr,
    HAS_GZ: tl.constexpr, HAS_GC: tl.constexpr, HAS_GS: tl.constexpr,
    BLOCK_B: tl.constexpr, BLOCK_N: tl.constexpr, NUM_N: tl.constexpr,
    BLOCK_K: tl.constexpr, NUM_K: tl.constexpr, BLOCK_KH: tl.constexpr, BLOCK_F: tl.constexpr,
    BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr, PRELOAD: tl.constexpr,
):  # fmt: skip
    """The gradients from outside: ``gzx [T+1, B, N+M]`` (of ``zs``), ``gcx [T+1, B, N]`` (of
    ``cs``), ``gsx [T+1, B, SW]`` (of ``s``), each used only when its ``HAS_*`` is set.  Out:
    ``ga [T, B, G]`` (gate pre-activations), ``ghd [T, B, KH]`` (head pre-activations).  Float32
    ping-pong scratch ``gz [2, B, N+M]``, ``gc [2, B, N]``, ``gs [2, B, SW]`` hold the gradients of
    step ``t``'s state in slot ``t % 2`` (slot ``T % 2`` filled by the caller); slot 0 ends with
    the initial state's (``gs`` without the initial reading's share, which ``gz`` holds).  The
    stratification memories also take ``gp [T+D, B, M]`` (float32, the values' gradient, filled
    with the outside gradient of ``p`` by the caller) and scratch ``x [2, B, D]``; the DeQue
    ``gp [2(T+D), B, M/2]`` and ``x [4, B, 2D]``.  ``PRELOAD``: the weight tiles are loaded once,
    before the time loop."""
    rows = tl.program_id(0) * BLOCK_B + tl.arange(0, BLOCK_B)
    rmask = rows < B
    cols = tl.arange(0, BLOCK_N)
    kcols = tl.arange(0, BLOCK_K)
    hcols = tl.arange(0, BLOCK_KH)
    hmask = hcols < KH
    NZ = N + M
    G = 4 * N if LSTM else N
    NQ: tl.constexpr = 4 if LSTM else 1
    # the weight tiles, once: W_head's by jb, then W_z's by (kb, jb, gate) (see the loop below)
    whs = ()
    wzs = ()
    if PRELOAD:
        for jb in tl.static_range(NUM_N):
            pj = jb * BLOCK_N + cols
            pwm = hmask[:, None] & (pj < N)[None, :]
            pwt = tl.load(wh_ptr + hcols[:, None] * N + pj[None, :], mask=pwm, other=0.0).to(tl.float32)
            whs = whs + (pwt,)  # noqa: RUF005 (Triton's tuples: no starred unpacking)
        for kb in tl.static_range(NUM_K):
            pk = kb * BLOCK_K + kcols
            for jb in tl.static_range(NUM_N):
                pj = jb * BLOCK_N + cols
                pwm = (pj < N)[:, None] & (pk < NZ)[None, :]
                for q in tl.static_range(NQ):
                    pwb = wz_ptr + (q * N + pj[:, None]) * NZ + pk[None, :]
                    wzs = wzs + (tl.load(pwb, mask=pwm, other=0.0).to(tl.float32),)  # noqa: RUF005
    for step in range(T):
        t = T - 1 - step
        cur, nxt = (t + 1) % 2, t % 2
        # A. the memory: its state gradient, the actions' and the pushed vector's gradients
        if MEM == 0:
            _superposition_step_grad(
                t, rows, rmask, hd_ptr, s_ptr, gs_ptr, gz_ptr, gsx_ptr, ghd_ptr, cur, nxt,
                B, N, M, SW, KH, NZ, VCODE, HAS_GS, BLOCK_B, BLOCK_F,
            )  # fmt: skip
        elif MEM == 1 or MEM == 4:
            _tape_step_grad(
                t, rows, rmask, hd_ptr, s_ptr, gs_ptr, gz_ptr, gsx_ptr, ghd_ptr, jp_ptr, cur, nxt,
                B, N, M, SW, KH, NZ, VCODE, HAS_GS, MEM == 4, BLOCK_B, BLOCK_F,
            )  # fmt: skip
        elif MEM == 5:
            _deque_step_grad(
                t, T, rows, rmask, hd_ptr, s_ptr, p_ptr, gs_ptr, gp_ptr, x_ptr, gz_ptr, gsx_ptr, ghd_ptr,
                cur, nxt, B, N, M, D, KH, NZ, VCODE, HAS_GS, BLOCK_B, BLOCK_D, BLOCK_M,
            )  # fmt: skip
        else:
            _strat_step_grad(
                t, T, rows, rmask, hd_ptr, s_ptr, p_ptr, gs_ptr, gp_ptr, x_ptr, gz_ptr, gsx_ptr, ghd_ptr,
                cur, nxt, B, N, M, D, KH, NZ, VCODE, MEM == 3, HAS_GS, BLOCK_B, BLOCK_D, BLOCK_M,
            )  # fmt: skip
        tl.debug_barrier()
        # B. ∂h_t (the head's share added) and the controller's gate gradients
        ghd = tl.load(
            ghd_ptr + t * B * KH + rows[:, None] * KH + hcols[None, :],
            mask=rmask[:, None] & hmask[None, :],
            other=0.0,
        ).to(tl.float32)
        for jb in tl.static_range(NUM_N):
            j = jb * BLOCK_N + cols
            jmask = j < N
            m2 = rmask[:, None] & jmask[None, :]
            if PRELOAD:
                w = whs[jb]
            else:
                w = tl.load(
                    wh_ptr + hcols[:, None] * N + j[None, :], mask=hmask[:, None] & jmask[None, :], other=0.0
                ).to(tl.float32)
            gh = tl.load(gz_ptr + cur * B * NZ + rows[:, None] * NZ + j[None, :], mask=m2, other=0.0)
            gh += tl.dot(ghd, w, input_precision=STACK_DOT_PRECISION)
            gb = gates_ptr + t * B * G + rows[:, None] * G + j[None, :]
            ob = ga_ptr + t * B * G + rows[:, None] * G + j[None, :]
            ty = ga_ptr.dtype.element_ty
            if LSTM:
                off = rows[:, None] * N + j[None, :]
                gc = tl.load(gc_ptr + cur * B * N + off, mask=m2, other=0.0)
                o = tl.load(gb, mask=m2, other=0.0).to(tl.float32)
                i = tl.load(gb + N, mask=m2, other=0.0).to(tl.float32)
                f = tl.load(gb + 2 * N, mask=m2, other=0.0).to(tl.float32)
                g = tl.load(gb + 3 * N, mask=m2, other=0.0).to(tl.float32)
                c = tl.load(cs_ptr + (t + 1) * B * N + off, mask=m2, other=0.0).to(tl.float32)
                c_prev = tl.load(cs_ptr + t * B * N + off, mask=m2, other=0.0).to(tl.float32)
                tc = _tanh(c)
                gc = gc + gh * o * (1.0 - tc * tc)
                tl.store(ob, (gh * tc * o * (1.0 - o)).to(ty), mask=m2)
                tl.store(ob + N, (gc * g * i * (1.0 - i)).to(ty), mask=m2)
                tl.store(ob + 2 * N, (gc * c_prev * f * (1.0 - f)).to(ty), mask=m2)
                tl.store(ob + 3 * N, (gc * i * (1.0 - g * g)).to(ty), mask=m2)
                gc_prev = gc * f
                if HAS_GC:
                    gc_prev += tl.load(gcx_ptr + t * B * N + off, mask=m2, other=0.0).to(tl.float32)
                tl.store(gc_ptr + nxt * B * N + off, gc_prev, mask=m2)
            else:
                a = tl.load(gb, mask=m2, other=0.0).to(tl.float32)
                tl.store(ob, (gh * _act_grad(a, CODE)).to(ty), mask=m2)
        tl.debug_barrier()
        # C. ∂z_t = ∂L/∂[h_t ; r_t] from outside plus ga_{t+1} W_z
        if PRELOAD:  # each gate's gradient loaded once, its product with every block of W_z after
            accs = ()
            for kb in tl.static_range(NUM_K):
                k = kb * BLOCK_K + kcols
                m2 = rmask[:, None] & (k < NZ)[None, :]
                if HAS_GZ:
                    acc = tl.load(gzx_ptr + t * B * NZ + rows[:, None] * NZ + k[None, :], mask=m2, other=0.0)
                    acc = acc.to(tl.float32)
                else:
                    acc = tl.zeros((BLOCK_B, BLOCK_K), dtype=tl.float32)
                accs = accs + (acc,)  # noqa: RUF005
            for jb in tl.static_range(NUM_N):
                j = jb * BLOCK_N + cols
                ab = ga_ptr + t * B * G + rows[:, None] * G + j[None, :]
                for q in tl.static_range(NQ):
                    ga = tl.load(ab + q * N, mask=rmask[:, None] & (j < N)[None, :], other=0.0).to(tl.float32)
                    summed = ()
                    for kb in tl.static_range(NUM_K):
                        w = wzs[(kb * NUM_N + jb) * NQ + q]
                        summed = summed + (accs[kb] + tl.dot(ga, w, input_precision=STACK_DOT_PRECISION),)  # noqa: RUF005
                    accs = summed
            for kb in tl.static_range(NUM_K):
                k = kb * BLOCK_K + kcols
                m2 = rmask[:, None] & (k < NZ)[None, :]
                tl.store(gz_ptr + nxt * B * NZ + rows[:, None] * NZ + k[None, :], accs[kb], mask=m2)
        else:
            for kb in tl.static_range(NUM_K):
                k = kb * BLOCK_K + kcols
                kmask = k < NZ
                m2 = rmask[:, None] & kmask[None, :]
                if HAS_GZ:
                    acc = tl.load(gzx_ptr + t * B * NZ + rows[:, None] * NZ + k[None, :], mask=m2, other=0.0)
                    acc = acc.to(tl.float32)
                else:
                    acc = tl.zeros((BLOCK_B, BLOCK_K), dtype=tl.float32)
                for jb in tl.static_range(NUM_N):
                    j = jb * BLOCK_N + cols
                    jmask = j < N
                    am = rmask[:, None] & jmask[None, :]
                    wm = jmask[:, None] & kmask[None, :]
                    ab = ga_ptr + t * B * G + rows[:, None] * G + j[None, :]
                    wb = wz_ptr + j[:, None] * NZ + k[None, :]  # W_z[q·N + j, k]
                    for q in tl.static_range(NQ):
                        ga = tl.load(ab + q * N, mask=am, other=0.0).to(tl.float32)
                        w = tl.load(wb + q * N * NZ, mask=wm, other=0.0).to(tl.float32)
                        acc += tl.dot(ga, w, input_precision=STACK_DOT_PRECISION)
                tl.store(gz_ptr + nxt * B * NZ + rows[:, None] * NZ + k[None, :], acc, mask=m2)
        tl.debug_barrier()


class StackRNNTriton(torch.autograd.Function):
    """``pre [T, B, G]`` (time-major ``x w_xᵀ + b``), ``w_z [G, N+M]`` (over ``[h ; r]``),
    ``w_head [KH, N]``, ``b_head [KH]`` (the actions in the layer's order, then the value),
    ``h0 [B, N]``, ``c0 [B, N]`` (ignored for Elman), ``s0 [B, SW]`` (the memory's initial cells or
    strengths), ``p0 [B, D, M]`` (the stratification memories' initial values, else None), ``r0
    [B, M]`` (the initial reading) -> ``zs [T+1, B, N+M]``, ``cs [T+1, B, N]`` (empty for Elman),
    ``s [T+1, B, SW]``, ``p [T+D, B, M]`` (empty but for the stratification memories; the window
    of step ``t`` is ``p[T−t : T−t+D]``), ``overflow [T, B]`` (not differentiable)."""

    @staticmethod
    def forward(ctx, pre, w_z, w_head, b_head, h0, c0, s0, p0, r0, jp, spec):  # type: ignore[override]
        lstm, code, vcode, mem = spec
        T, B, _ = pre.shape
        N, KH, SW = w_head.shape[1], w_head.shape[0], s0.shape[1]
        strat, deque = mem in (2, 3), mem == 5
        M = KH - N_ACTIONS[mem]  # the reading's width
        D = p0.shape[1] if strat else SW // 2 if deque else SW // M
        NZ = N + M
        pre, w_z, w_head, b_head = (t.contiguous() for t in (pre, w_z, w_head, b_head))
        zs = pre.new_empty(T + 1, B, NZ)
        zs[0, :, :N] = h0
        zs[0, :, N:] = r0
        cs = pre.new_empty(T + 1, B, N) if lstm else pre.new_empty(0)
        if lstm:
            cs[0] = c0
        gates = torch.empty_like(pre)
        hd = pre.new_empty(T, B, KH)
        s = pre.new_empty(T + 1, B, SW)
        s[0] = s0
        p = pre.new_empty(T + D, B, M) if strat else pre.new_empty(0)
        if strat:
            p[T:] = p0.transpose(0, 1)
        if deque:  # the bottom half's buffer, then the top half's
            p = pre.new_empty(2 * (T + D), B, M // 2)
            p[T : T + D] = p0[:, :D].transpose(0, 1)
            p[T + D : T + 2 * D] = p0[:, D:].transpose(0, 1)
        x = torch.empty(B, 2 * D, device=pre.device, dtype=torch.float32) if deque else s
        ovf = pre.new_zeros(T, B)
        if T > 0 and B > 0:
            _launch(_stack_fwd, triton.cdiv(B, BLOCK_B), (
                pre, w_z, w_head, b_head, zs, cs if lstm else zs, gates, hd, s, p if strat or deque else s, ovf,
                jp, x, T, B, N, M, D, SW, KH, lstm, code, vcode, mem,
                BLOCK_B, *unit_blocks(N), *_k_blocks(NZ), _head_block(KH), BLOCK_F, *_memory_blocks(mem, D, M),
            ), _preload(lstm, N, NZ, KH), _stack_warps(lstm, N, mem))  # fmt: skip
        ctx.spec, ctx.dims = spec, (M, D)
        ctx.set_materialize_grads(False)
        ctx.mark_non_differentiable(ovf)
        ctx.save_for_backward(w_z, w_head, zs, cs, gates, hd, s, p, jp)
        return zs, cs, s, p, ovf

    @staticmethod
    @first_order
    def backward(ctx, g_zs, g_cs, g_s, g_p, _g_ovf):  # type: ignore[override]
        w_z, w_head, zs, cs, gates, hd, s, p, jp = ctx.saved_tensors
        lstm, code, vcode, mem = ctx.spec
        M, D = ctx.dims
        strat, deque = mem in (2, 3), mem == 5
        T, B, G = gates.shape
        N, KH, SW = w_head.shape[1], w_head.shape[0], s.shape[2]
        NZ = N + M
        f32 = dict(device=zs.device, dtype=torch.float32)
        gz, gc, gs = torch.zeros(2, B, NZ, **f32), torch.zeros(2, B, N, **f32), torch.zeros(2, B, SW, **f32)
        if not lstm:
            g_cs = None
        for buf, g in ((gz, g_zs), (gc, g_cs), (gs, g_s)):
            if g is not None:
                buf[T % 2] = g[T]
        gp = torch.zeros(T + D, B, M, **f32) if strat else gs  # contiguous, whatever g_p's strides
        if deque:
            gp = torch.zeros(2 * (T + D), B, M // 2, **f32)
        if (strat or deque) and g_p is not None:
            gp.copy_(g_p)
        scratch = torch.empty(2, B, D, **f32) if strat else torch.empty(4, B, 2 * D, **f32) if deque else gs
        g_zs, g_cs, g_s = (None if g is None else g.contiguous() for g in (g_zs, g_cs, g_s))
        ga = torch.empty_like(gates)
        ghd = torch.empty_like(hd)
        if T > 0 and B > 0:
            _launch(_stack_bwd, triton.cdiv(B, BLOCK_B), (
                zs if g_zs is None else g_zs, zs if g_cs is None else g_cs, zs if g_s is None else g_s,
                w_z, w_head, zs, cs if lstm else zs, gates, hd, s, p if strat or deque else s,
                ga, ghd, gz, gc, gs, gp, scratch, jp, T, B, N, M, D, SW, KH,
                lstm, code, vcode, mem, g_zs is not None, g_cs is not None, g_s is not None,
                BLOCK_B, *unit_blocks(N), *_k_blocks(NZ), _head_block(KH), BLOCK_F, *_memory_blocks(mem, D, M),
            ), _preload(lstm, N, NZ, KH), _stack_warps(lstm, N, mem))  # fmt: skip
        dt = zs.dtype
        g_s0 = gs[0].clone()
        g_r0 = g_p0 = None
        if strat or deque:  # the reading is a state field of its own
            g_r0 = gz[0, :, N:].to(dt)
        else:  # the reading is the top (head) cell
            g_s0[:, :M] += gz[0, :, N:]
        if strat:
            g_p0 = gp[T:].transpose(0, 1).to(dt)
        if deque:
            g_p0 = gp[T : T + 2 * D].transpose(0, 1).to(dt)
        g_w_z = g_w_head = g_b_head = None
        if ctx.needs_input_grad[1]:
            g_w_z = (ga.reshape(T * B, G).t().float() @ zs[:T].reshape(T * B, NZ).float()).to(w_z.dtype)
        if ctx.needs_input_grad[2]:
            g_w_head = (ghd.reshape(T * B, KH).t().float() @ zs[1:, :, :N].reshape(T * B, N).float()).to(dt)
        if ctx.needs_input_grad[3]:
            g_b_head = ghd.float().sum((0, 1)).to(dt)
        g_c0 = gc[0].to(dt) if lstm else None
        return ga, g_w_z, g_w_head, g_b_head, gz[0, :, :N].to(dt), g_c0, g_s0.to(dt), g_p0, g_r0, None, None


#: the most bytes of float32 weight tiles (W_z's and W_head's, padded to their blocks) that the
#: stack kernels load once, before their time loop, rather than load from global memory and stage
#: through shared memory again at every step
PRELOAD_BYTES = 96 * 1024


def _preload(lstm: bool, N: int, NZ: int, KH: int) -> bool:
    """Whether the weight tiles fit :data:`PRELOAD_BYTES` (64 LSTM units at width 8: 84 KiB; 128 Elman units: 88 KiB)."""
    block_n, num_n = unit_blocks(N)
    block_k, num_k = _k_blocks(NZ)
    tiles = (4 if lstm else 1) * block_n * num_n * block_k * num_k + block_n * num_n * _head_block(KH)
    return 4 * tiles <= PRELOAD_BYTES


def _launch(kernel: triton.JITFunction, programs: int, args: tuple, preload: bool, warps: int) -> None:
    """``kernel`` on ``programs`` programs with its arguments ``args`` and ``PRELOAD = preload``
    last; a GPU whose shared memory cannot hold the preloaded weights beside the kernel's own
    stagings (Triton's ``OutOfResources`` at launch, before anything runs: 88 KiB in all at 64 LSTM units,
    more than a T4's 64 KB) runs it without."""
    if preload:
        try:
            kernel[(programs,)](*args, True, num_warps=warps)
            return
        except OutOfResources:
            pass
    kernel[(programs,)](*args, False, num_warps=warps)


def _head_block(KH: int) -> int:
    """Columns of the head's tile: a power of 2, at least 16 (``tl.dot``)."""
    return max(16, triton.next_power_of_2(KH))


def _memory_blocks(mem: int, D: int, M: int) -> tuple[int, int]:
    """``(BLOCK_D, BLOCK_M)`` of memory ``mem`` (:func:`_depth_blocks`; the DeQue's ``2D``
    strengths and values of ``M / 2`` units)."""
    return _depth_blocks(2 * D, M // 2) if mem == 5 else _depth_blocks(D, M)


def _depth_blocks(D: int, M: int) -> tuple[int, int]:
    """``(BLOCK_D, BLOCK_M)`` of the stratification memories: elements per chunk and the width's
    tile, so that a chunk of values (``BLOCK_B × BLOCK_D × BLOCK_M``) holds at most 4096."""
    block_m = triton.next_power_of_2(max(M, 1))
    return max(1, min(triton.next_power_of_2(max(D, 1)), 4096 // (BLOCK_B * block_m))), block_m


def stack_rnn_triton(
    x: Tensor,
    w_in: Tensor,
    b: Tensor,
    w_rec: Tensor,
    w_head: Tensor,
    b_head: Tensor,
    h0: Tensor,
    c0: Tensor | None,
    memory0: tuple[Tensor, ...],
    *,
    controller: str,
    activation: str,
    memory: str,
    value_activation: str,
    lengths: Tensor | None = None,
) -> tuple[Tensor, ...]:
    """:func:`memrnn.ops.stack_rnn.stack_rnn_sequence` on the two kernels above: ``x [B, T, n]``,
    ``memory0`` the memory's state fields (``stack [B, D, M]``, ``tape [B, D, M]``, ``jump [B]``
    and ``tape``, or ``values [B, D, M]``, ``strengths [B, D]``, ``reading [B, M]``) -> ``h [B, T, N]``, ``r [B, T, M]``,
    final ``h``, ``c`` (None for Elman), the memory's fields at each row's length, ``overflow
    [B, T]``."""
    B, T, nx = x.shape
    N = w_rec.shape[1]
    lstm = controller == "lstm"
    code = 0 if lstm else CODES[activation]
    if value_activation not in VALUE_CODES:
        raise ValueError(f"the stack kernel has no value activation {value_activation!r}")
    if memory not in MEMORY_CODES:
        raise ValueError(f"the stack kernels have no memory {memory!r}; they have {sorted(MEMORY_CODES)}")
    mem = MEMORY_CODES[memory]
    pre = torch.nn.functional.linear(x, w_in[:, :nx], b).transpose(0, 1)
    w_z = torch.cat([w_rec, w_in[:, nx:]], 1)
    jump = None
    if mem in (2, 3, 5):
        values0, strengths0, reading0 = memory0
        D, M = values0.shape[1] // (2 if mem == 5 else 1), values0.shape[2]
        s0, p0, r0 = strengths0, values0, reading0
    else:
        if mem == 4:
            jump, cells0 = memory0
        else:
            (cells0,) = memory0
        _, D, M = cells0.shape
        s0, p0, r0 = cells0.reshape(B, D * M), None, cells0[:, 0]
    # the jump tape's jumps in cells, reduced mod D (int32); a placeholder for the other memories
    jp = (
        (torch.round(jump.detach()).to(torch.int64) % D).to(torch.int32).contiguous()
        if jump is not None
        else torch.zeros(1, dtype=torch.int32, device=x.device)
    )
    zs, cs, s, p, ovf = StackRNNTriton.apply(
        pre, w_z, w_head, b_head, h0, c0, s0, p0, r0, jp, (lstm, code, VALUE_CODES[value_activation], mem)
    )
    zs_b = zs.transpose(0, 1)  # [B, T+1, N+M]
    h_fin = final_by_length(zs_b[:, :, :N], lengths)
    c_fin = final_by_length(cs.transpose(0, 1), lengths) if lstm else None
    s_fin = final_by_length(s.transpose(0, 1), lengths)
    if mem in (2, 3, 5):
        ends = torch.full((B,), T, device=x.device) if lengths is None else lengths.to(x.device)
        idx = (T - ends)[:, None] + torch.arange(D, device=x.device)  # [B, D]: the final window
        values = p[: T + D].transpose(0, 1).gather(1, idx[..., None].expand(-1, -1, M))
        if mem == 5:  # the top half slides the other way: Pt[L : L + D]
            top = (T + D + ends)[:, None] + torch.arange(D, device=x.device)
            values = torch.cat([values, p.transpose(0, 1).gather(1, top[..., None].expand(-1, -1, M))], 1)
        finals = (values, s_fin, final_by_length(zs_b[:, :, N:], lengths))
    else:
        finals = (s_fin.reshape(B, D, M),) if jump is None else (jump, s_fin.reshape(B, D, M))
    return zs_b[:, 1:, :N], zs_b[:, 1:, N:], h_fin, c_fin, *finals, ovf.t()


def _k_blocks(K: int) -> tuple[int, int]:
    """``(BLOCK_K, NUM_K)`` over the controller's recurrent input ``[h ; r]`` (``N + M`` wide):
    blocks of 16 up to 128 (at N 64, M 8, blocks of 64 spilled 728 bytes per thread in the LSTM
    forward, of 16: 56; ``python -m benchmarks.kernel_compile``), of 32 beyond."""
    block = 16 if K <= 128 else 32
    return block, triton.cdiv(K, block)
