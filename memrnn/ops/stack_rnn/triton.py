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
3. the memory, over its cells in chunks (each memory's ``_*_step``, in
   ``memrnn/ops/<memory>/triton.py``, says how); its reading ``r_t`` goes to ``zs[t+1, :, N:]`` and what leaves its window to ``ovf[t]``.

Backward, per step, the same three phases reversed: the memory's state gradient, its action and
value gradients (each memory's ``_*_step_grad``) with the head's activation derivatives into ``ghd``;
``∂h_t += ghd W_head`` and the controller's gate gradients into ``ga``; then ``∂z_{t−1} = ga W_z``
by ``tl.dot``.  The weight gradients are single matrix products outside the kernels, and the
input projection's through autograd.  Float32 accumulation whatever the storage dtype (float32,
bfloat16, float16).  Where they fit :data:`PRELOAD_BYTES`, both kernels load the weight tiles once,
before their time loop, and Triton keeps them in shared memory for the whole sequence (on an H100
7-24% off a forward+backward step; ``benchmarks/results/stack-rnn-h100.md``).

Members (M runs as one model, ``docs/guide/members.md``) are the grid's second axis: every buffer
holds the members one after the other, and each program first moves its pointers to its
member's weights, rows and scratch; one launch per direction runs them all (one model: ``M = 1``).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor
from triton.runtime.errors import OutOfResources

from memrnn.ops.autograd import first_order
from memrnn.ops.buckets import final_by_length
from memrnn.ops.deque.triton import _deque_step, _deque_step_grad
from memrnn.ops.stack_rnn.specs import SPECS
from memrnn.ops.stratification.triton import _strat_step, _strat_step_grad
from memrnn.ops.superposition.triton import _superposition_step, _superposition_step_grad
from memrnn.ops.tape.triton import _tape_step, _tape_step_grad
from memrnn.ops.triton_common import (
    BLOCK_B,
    CODES,
    _act,
    _act_grad,
    _load_tile,
    _rec_matvec,
    _rec_matvec_t,
    _sig,
    _tanh,
    unit_blocks,
    weight_grad,
)

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


#: the memories the kernels run, by code (their specs', :mod:`memrnn.ops.stack_rnn.specs`)
MEMORY_CODES = {name: s.code for name, s in SPECS.items() if s.triton}
#: the head's actions per memory code
N_ACTIONS = {s.code: s.n_actions for s in SPECS.values() if s.triton}
# the codes as the kernels' constexprs, which select each memory's step (``MEM``)
SUPERPOSITION: tl.constexpr = tl.constexpr(MEMORY_CODES["superposition"])
STRATIFICATION: tl.constexpr = tl.constexpr(MEMORY_CODES["stratification"])
QUEUE: tl.constexpr = tl.constexpr(MEMORY_CODES["queue"])
TAPE: tl.constexpr = tl.constexpr(MEMORY_CODES["tape"])
TAPE_JUMP: tl.constexpr = tl.constexpr(MEMORY_CODES["tape_jump"])
DEQUE: tl.constexpr = tl.constexpr(MEMORY_CODES["deque"])
_STRAT = (MEMORY_CODES["stratification"], MEMORY_CODES["queue"])  # host-side: the sliding-buffer memories
_DEQUE, _TAPE_JUMP = MEMORY_CODES["deque"], MEMORY_CODES["tape_jump"]


@triton.jit
def _keep(
    t, u, R, rows, rmask, zs_ptr, cs_ptr, s_ptr, p_ptr, out_ptr, zf_ptr, cf_ptr, sf_ptr, pf_ptr, len_ptr,
    B, N, M, D, SW, LSTM: tl.constexpr, MEM: tl.constexpr, BLOCK_B: tl.constexpr,
    BLOCK_N: tl.constexpr, NUM_N: tl.constexpr, BLOCK_K: tl.constexpr, NUM_K: tl.constexpr,
    BLOCK_F: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr,
):  # fmt: skip
    """After step ``t`` of a launch without history (its state in slot ``u + 1``): ``[h ; r]``
    into ``out[t]``, and the state of the tile's rows whose length is ``t + 1`` into the finals
    (:func:`_stack_fwd`'s ``NO_HISTORY``); copies in the storage dtype."""
    NZ = N + M
    ends = rmask & (tl.load(len_ptr + rows, mask=rmask, other=-1) == t + 1)
    kcols = tl.arange(0, BLOCK_K)
    for kb in tl.static_range(NUM_K):
        k = kb * BLOCK_K + kcols
        m2 = rmask[:, None] & (k < NZ)[None, :]
        z = tl.load(zs_ptr + (u + 1) * B * NZ + rows[:, None] * NZ + k[None, :], mask=m2, other=0.0)
        tl.store(out_ptr + t * B * NZ + rows[:, None] * NZ + k[None, :], z, mask=m2)
        tl.store(zf_ptr + rows[:, None] * NZ + k[None, :], z, mask=m2 & ends[:, None])
    if LSTM:
        cols = tl.arange(0, BLOCK_N)
        for jb in tl.static_range(NUM_N):
            j = jb * BLOCK_N + cols
            mc = ends[:, None] & (j < N)[None, :]
            cell = tl.load(cs_ptr + (u + 1) * B * N + rows[:, None] * N + j[None, :], mask=mc, other=0.0)
            tl.store(cf_ptr + rows[:, None] * N + j[None, :], cell, mask=mc)
    for f0 in range(0, SW, BLOCK_F):
        fi = f0 + tl.arange(0, BLOCK_F)
        mf = ends[:, None] & (fi < SW)[None, :]
        cells = tl.load(s_ptr + (u + 1) * B * SW + rows[:, None] * SW + fi[None, :], mask=mf, other=0.0)
        tl.store(sf_ptr + rows[:, None] * SW + fi[None, :], cells, mask=mf)
    if MEM == STRATIFICATION or MEM == QUEUE or MEM == DEQUE:  # noqa: SIM109 (constexpr selects)
        # the values' window: P[R−1−u+i] (newest first); the DeQue's top half Pt[u+1+i−D], i ≥ D
        W = 2 * D if MEM == DEQUE else D
        m = M // 2 if MEM == DEQUE else M
        mcols = tl.arange(0, BLOCK_M)
        for ch in range(tl.cdiv(W, BLOCK_D)):
            di = ch * BLOCK_D + tl.arange(0, BLOCK_D)
            m3 = (ends[:, None] & (di < W)[None, :])[:, :, None] & (mcols < m)[None, None, :]
            slot = tl.where(di < D, R - 1 - u + di, R + D + u + 1 + di - D)
            v = tl.load(
                p_ptr + slot[None, :, None] * B * m + rows[:, None, None] * m + mcols[None, None, :],
                mask=m3,
                other=0.0,
            )
            tl.store(
                pf_ptr + rows[:, None, None] * (W * m) + di[None, :, None] * m + mcols[None, None, :],
                v,
                mask=m3,
            )


@triton.jit
def _rewind(
    R, rows, rmask, zs_ptr, cs_ptr, s_ptr, p_ptr, B, N, M, D, SW, LSTM: tl.constexpr, MEM: tl.constexpr,
    BLOCK_N: tl.constexpr, NUM_N: tl.constexpr, BLOCK_K: tl.constexpr, NUM_K: tl.constexpr,
    BLOCK_F: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr,
):  # fmt: skip
    """The ring of a launch without history back to its first slot: the state of slot ``R`` into
    slot 0 (``zs``, ``cs``, ``s``), and the sliding values' window of step ``R − 1`` to where step 0
    reads it: ``P[0 : D] -> P[R : R+D]`` (newest first), the DeQue's top half ``Pt[R : R+D] ->
    Pt[0 : D]`` (oldest first).  The two ranges of a window overlap when ``R < D``: each chunk is
    loaded whole before it is stored, the chunks in the order that reads every row before it is
    overwritten."""
    NZ = N + M
    kcols = tl.arange(0, BLOCK_K)
    for kb in tl.static_range(NUM_K):
        k = kb * BLOCK_K + kcols
        mz = rmask[:, None] & (k < NZ)[None, :]
        zoff = rows[:, None] * NZ + k[None, :]
        tl.store(zs_ptr + zoff, tl.load(zs_ptr + R * B * NZ + zoff, mask=mz, other=0.0), mask=mz)
    if LSTM:
        cols = tl.arange(0, BLOCK_N)
        for jb in tl.static_range(NUM_N):
            j = jb * BLOCK_N + cols
            mc = rmask[:, None] & (j < N)[None, :]
            coff = rows[:, None] * N + j[None, :]
            tl.store(cs_ptr + coff, tl.load(cs_ptr + R * B * N + coff, mask=mc, other=0.0), mask=mc)
    for f0 in range(0, SW, BLOCK_F):
        fi = f0 + tl.arange(0, BLOCK_F)
        mf = rmask[:, None] & (fi < SW)[None, :]
        soff = rows[:, None] * SW + fi[None, :]
        tl.store(s_ptr + soff, tl.load(s_ptr + R * B * SW + soff, mask=mf, other=0.0), mask=mf)
    if MEM == STRATIFICATION or MEM == QUEUE or MEM == DEQUE:  # noqa: SIM109 (constexpr selects)
        m = M // 2 if MEM == DEQUE else M
        mcols = tl.arange(0, BLOCK_M)
        poff = rows[:, None, None] * m + mcols[None, None, :]
        chunks = tl.cdiv(D, BLOCK_D)
        for ch in range(chunks):  # P[0 : D] -> P[R : R+D], from the far end
            di = (chunks - 1 - ch) * BLOCK_D + tl.arange(0, BLOCK_D)
            m3 = (rmask[:, None] & (di < D)[None, :])[:, :, None] & (mcols < m)[None, None, :]
            v = tl.load(p_ptr + di[None, :, None] * B * m + poff, mask=m3, other=0.0)
            tl.debug_barrier()
            tl.store(p_ptr + (R + di)[None, :, None] * B * m + poff, v, mask=m3)
            tl.debug_barrier()
        if MEM == DEQUE:  # Pt = P[R+D :]: Pt[R : R+D] -> Pt[0 : D], from the near end
            top = p_ptr + (R + D) * B * m
            for ch2 in range(chunks):
                dj = ch2 * BLOCK_D + tl.arange(0, BLOCK_D)
                mt = (rmask[:, None] & (dj < D)[None, :])[:, :, None] & (mcols < m)[None, None, :]
                vt = tl.load(top + (R + dj)[None, :, None] * B * m + poff, mask=mt, other=0.0)
                tl.debug_barrier()
                tl.store(top + dj[None, :, None] * B * m + poff, vt, mask=mt)
                tl.debug_barrier()


@triton.jit
def _stack_fwd(
    pre_ptr, wz_ptr, wh_ptr, bh_ptr, zs_ptr, cs_ptr, gates_ptr, hd_ptr, s_ptr, p_ptr, ovf_ptr, jp_ptr, x_ptr,
    out_ptr, zf_ptr, cf_ptr, sf_ptr, pf_ptr, len_ptr,
    T, B, N, M, D, SW, KH, R,
    LSTM: tl.constexpr, CODE: tl.constexpr, VCODE: tl.constexpr, MEM: tl.constexpr,
    BLOCK_B: tl.constexpr, BLOCK_N: tl.constexpr, NUM_N: tl.constexpr,
    BLOCK_K: tl.constexpr, NUM_K: tl.constexpr, BLOCK_KH: tl.constexpr, BLOCK_F: tl.constexpr,
    BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr, NO_HISTORY: tl.constexpr, PRELOAD: tl.constexpr,
):  # fmt: skip
    """``pre``/``gates`` ``[T, B, G]`` (``G = 4N`` LSTM, ``N`` Elman; ``gates`` holds the LSTM's
    activated gates or the Elman pre-activation), ``wz [G, N+M]``, ``wh [KH, N]``, ``bh [KH]``,
    ``zs [T+1, B, N+M]``, ``cs [T+1, B, N]``, ``hd [T, B, KH]`` (actions, then the pushed vector),
    ``s [T+1, B, SW]`` (the memory's cells, ``SW = D · M``, or the stratification strengths,
    ``SW = D``; the DeQue's, ``SW = 2D``), ``p [T+D, B, M]`` (the stratification values; the
    DeQue's two halves ``[2(T+D), B, M/2]``; unused otherwise), ``ovf [T, B]``, ``jp [B]`` (the
    jump tape's jumps in cells mod ``D``, int32; unused otherwise), ``x [B, 2D]`` (float32 scratch
    of the DeQue); index 0 of ``zs``, ``cs`` and ``s`` holds the initial state.  ``MEM``: the
    memory's code (:data:`MEMORY_CODES`, from its spec) (``M`` is
    the reading's width: ``2m`` for the DeQue).  ``PRELOAD``: the weight tiles are loaded once,
    before the time loop (:func:`_preload`).

    ``NO_HISTORY`` (a forward nothing will differentiate, :func:`_forward_no_history`): ``zs``,
    ``cs`` and ``s`` hold ``R + 1`` steps, ``hd`` ``R``, the sliding values ``p [R+D, B, M]``
    (the DeQue's ``[2(R+D), B, M/2]``), ``gates`` is not written: step ``t`` runs as the buffers'
    step ``u = t mod R`` (the memories' steps as they are, with ``R`` for ``T``), after which
    ``[h ; r]`` goes to ``out [T, B, N+M]`` and the rows whose length (``len [B]``, int64) is
    ``t + 1`` store their state: ``[h ; r]`` in ``zf [B, N+M]``, ``c`` in ``cf [B, N]``, the
    cells or strengths in ``sf [B, SW]``, the values' window in ``pf [B, D, M]`` (the DeQue's
    ``[B, 2D, M/2]``); after ``u = R − 1`` the last slot moves to the first (:func:`_rewind`).
    The arithmetic is the history launch's, op for op."""
    rows = tl.program_id(0) * BLOCK_B + tl.arange(0, BLOCK_B)
    rmask = rows < B
    cols = tl.arange(0, BLOCK_N)
    kcols = tl.arange(0, BLOCK_K)
    hcols = tl.arange(0, BLOCK_KH)
    NZ = N + M
    G = 4 * N if LSTM else N
    NQ: tl.constexpr = 4 if LSTM else 1
    # the member (grid axis 1; one model: 0): every buffer holds the members one after the other,
    # each its own weights, inputs, state, outputs and scratch (the sizes above, ``R`` for ``T``
    # where a buffer holds the ring)
    mb = tl.program_id(1).to(tl.int64)
    pre_ptr += mb * T * B * G
    gates_ptr += mb * T * B * G
    wz_ptr += mb * G * NZ
    wh_ptr += mb * KH * N
    bh_ptr += mb * KH
    zs_ptr += mb * (R + 1) * B * NZ
    cs_ptr += mb * (R + 1) * B * N
    hd_ptr += mb * R * B * KH
    s_ptr += mb * (R + 1) * B * SW
    p_ptr += mb * (R + D) * B * M
    ovf_ptr += mb * T * B
    jp_ptr += mb * B
    x_ptr += mb * B * 2 * D
    out_ptr += mb * T * B * NZ
    zf_ptr += mb * B * NZ
    cf_ptr += mb * B * N
    sf_ptr += mb * B * SW
    pf_ptr += mb * B * D * M
    len_ptr += mb * B
    # the weight tiles, once: W_z's by (jb, kb, gate), then W_head's by kb (see the loop below)
    wzs = ()
    whs = ()
    if PRELOAD:
        for jb in tl.static_range(NUM_N):
            pj = jb * BLOCK_N + cols
            for kb in tl.static_range(NUM_K):
                pk = kb * BLOCK_K + kcols
                for q in tl.static_range(NQ):  # W_z[q·N + j, k]ᵀ
                    pwt = _load_tile(wz_ptr + q * N * NZ, pk, pk < NZ, pj, pj < N, 1, NZ)
                    wzs = wzs + (pwt,)  # noqa: RUF005 (Triton's tuples: no starred unpacking)
        for kb in tl.static_range(NUM_N):
            pk = kb * BLOCK_N + cols
            whs = whs + (_load_tile(wh_ptr, pk, pk < N, hcols, hcols < KH, 1, N),)  # noqa: RUF005
    for t in range(T):
        if NO_HISTORY:  # the ring's slot, and the steps the sliding values' buffer is laid out for
            u = t % R
            TB = R
        else:
            u = t
            TB = T
        # 1. the controller
        z_prev = zs_ptr + u * B * NZ
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
            # gate q's rows of W_z: q·N + j; this block's preloaded tiles from (jb · NUM_K) · NQ
            if LSTM:
                a0, a1, a2, a3 = _rec_matvec(
                    (a0, a1, a2, a3), z_prev, NZ, rows, rmask, wz_ptr, NZ, 1, N, j, jmask, NZ, BLOCK_K, NUM_K,
                    STACK_DOT_PRECISION, wzs, jb * NUM_K * NQ, PRELOAD,
                )  # fmt: skip
            else:
                a0 = _rec_matvec(
                    (a0,), z_prev, NZ, rows, rmask, wz_ptr, NZ, 1, N, j, jmask, NZ, BLOCK_K, NUM_K,
                    STACK_DOT_PRECISION, wzs, jb * NUM_K * NQ, PRELOAD,
                )[0]  # fmt: skip
            gb = gates_ptr + t * B * G + rows[:, None] * G + j[None, :]
            ty = gates_ptr.dtype.element_ty
            if LSTM:
                o, i, f, g = _sig(a0), _sig(a1), _sig(a2), _tanh(a3)
                off = rows[:, None] * N + j[None, :]
                c_prev = tl.load(cs_ptr + u * B * N + off, mask=m2, other=0.0).to(tl.float32)
                c = f * c_prev + i * g
                h = o * _tanh(c)
                tl.store(cs_ptr + (u + 1) * B * N + off, c.to(cs_ptr.dtype.element_ty), mask=m2)
                if not NO_HISTORY:
                    tl.store(gb, o.to(ty), mask=m2)
                    tl.store(gb + N, i.to(ty), mask=m2)
                    tl.store(gb + 2 * N, f.to(ty), mask=m2)
                    tl.store(gb + 3 * N, g.to(ty), mask=m2)
            else:
                h = _act(a0, CODE)
                if not NO_HISTORY:
                    tl.store(gb, a0.to(ty), mask=m2)
            tl.store(
                zs_ptr + (u + 1) * B * NZ + rows[:, None] * NZ + j[None, :],
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
        # h_t W_headᵀ as explicit IEEE products: Triton 3.6 rewrote the sum of broadcast products
        # that stood here into a TF32 dot (inputs rounded to 10 significand bits: 2e-4 to 1e-3 of
        # each tensor's largest value on an H200, against 2e-7 for torch's float32;
        # ``python -m benchmarks.kernel_precision``)
        acc = _rec_matvec(
            (acc,), zs_ptr + (u + 1) * B * NZ, NZ, rows, rmask, wh_ptr, N, 1, 0, hcols, hmask, N,
            BLOCK_N, NUM_N, STACK_DOT_PRECISION, whs, 0, PRELOAD,
        )[0]  # fmt: skip
        # softmax over the three (the jump tape: five) actions (``==`` chains: Triton's constexpr selects)
        if MEM == SUPERPOSITION or MEM == TAPE or MEM == TAPE_JUMP:  # noqa: SIM109
            is_act = (hcols < (5 if MEM == TAPE_JUMP else 3))[None, :]
            logits = tl.where(is_act, acc, float("-inf"))
            e = tl.where(is_act, tl.exp(logits - tl.max(logits, 1)[:, None]), 0.0)
            heads = tl.where(is_act, e / tl.sum(e, 1)[:, None], _act(acc, VCODE))
        else:  # sigmoid push and pop strengths (the DeQue's: at both ends)
            heads = tl.where((hcols < (4 if MEM == DEQUE else 2))[None, :], _sig(acc), _act(acc, VCODE))
        tl.store(
            hd_ptr + u * B * KH + rows[:, None] * KH + hcols[None, :],
            heads.to(hd_ptr.dtype.element_ty),
            mask=rmask[:, None] & hmask[None, :],
        )
        tl.debug_barrier()
        # 3. the memory
        if MEM == SUPERPOSITION:
            lost = _superposition_step(
                u, rows, rmask, hd_ptr, s_ptr, zs_ptr, B, N, M, SW, KH, NZ, BLOCK_B, BLOCK_F
            )
        elif MEM == TAPE:
            _tape_step(u, rows, rmask, hd_ptr, s_ptr, zs_ptr, jp_ptr, B, N, M, SW, KH, NZ, False, BLOCK_F)
            lost = tl.zeros((BLOCK_B,), dtype=tl.float32)
        elif MEM == TAPE_JUMP:
            _tape_step(u, rows, rmask, hd_ptr, s_ptr, zs_ptr, jp_ptr, B, N, M, SW, KH, NZ, True, BLOCK_F)
            lost = tl.zeros((BLOCK_B,), dtype=tl.float32)
        elif MEM == DEQUE:
            lost = _deque_step(
                u,
                TB,
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
                u, TB, rows, rmask, hd_ptr, s_ptr, p_ptr, zs_ptr, B, N, M, D, KH, NZ,
                MEM == QUEUE, BLOCK_B, BLOCK_D, BLOCK_M,
            )  # fmt: skip
        tl.store(ovf_ptr + t * B + rows, lost.to(ovf_ptr.dtype.element_ty), mask=rmask)
        tl.debug_barrier()
        if NO_HISTORY:
            _keep(
                t, u, R, rows, rmask, zs_ptr, cs_ptr, s_ptr, p_ptr, out_ptr, zf_ptr, cf_ptr, sf_ptr, pf_ptr,
                len_ptr, B, N, M, D, SW, LSTM, MEM, BLOCK_B, BLOCK_N, NUM_N, BLOCK_K, NUM_K, BLOCK_F, BLOCK_D,
                BLOCK_M,
            )  # fmt: skip
            tl.debug_barrier()  # the window just kept may overlap where the rewind moves it
            if u == R - 1:
                _rewind(
                    R, rows, rmask, zs_ptr, cs_ptr, s_ptr, p_ptr, B, N, M, D, SW, LSTM, MEM, BLOCK_N, NUM_N,
                    BLOCK_K, NUM_K, BLOCK_F, BLOCK_D, BLOCK_M,
                )  # fmt: skip
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
    # the member (grid axis 1), as in :func:`_stack_fwd`
    mb = tl.program_id(1).to(tl.int64)
    gzx_ptr += mb * (T + 1) * B * NZ
    gcx_ptr += mb * (T + 1) * B * N
    gsx_ptr += mb * (T + 1) * B * SW
    wz_ptr += mb * G * NZ
    wh_ptr += mb * KH * N
    zs_ptr += mb * (T + 1) * B * NZ
    cs_ptr += mb * (T + 1) * B * N
    gates_ptr += mb * T * B * G
    hd_ptr += mb * T * B * KH
    s_ptr += mb * (T + 1) * B * SW
    p_ptr += mb * (T + D) * B * M
    ga_ptr += mb * T * B * G
    ghd_ptr += mb * T * B * KH
    gz_ptr += mb * 2 * B * NZ
    gc_ptr += mb * 2 * B * N
    gs_ptr += mb * 2 * B * SW
    gp_ptr += mb * (T + D) * B * M
    jp_ptr += mb * B
    if MEM == DEQUE:  # scratch [4, B, 2D]; the stratification memories' [2, B, D]
        x_ptr += mb * 8 * B * D
    else:
        x_ptr += mb * 2 * B * D
    # the weight tiles, once: W_head's by jb, then W_z's by (kb, jb, gate) (see the loop below)
    whs = ()
    wzs = ()
    if PRELOAD:
        for jb in tl.static_range(NUM_N):
            pj = jb * BLOCK_N + cols
            whs = whs + (_load_tile(wh_ptr, hcols, hmask, pj, pj < N, N, 1),)  # noqa: RUF005
        for kb in tl.static_range(NUM_K):
            pk = kb * BLOCK_K + kcols
            for jb in tl.static_range(NUM_N):
                pj = jb * BLOCK_N + cols
                for q in tl.static_range(NQ):  # W_z[q·N + j, k]
                    pwb = _load_tile(wz_ptr + q * N * NZ, pj, pj < N, pk, pk < NZ, NZ, 1)
                    wzs = wzs + (pwb,)  # noqa: RUF005 (Triton's tuples: no starred unpacking)
    for step in range(T):
        t = T - 1 - step
        cur, nxt = (t + 1) % 2, t % 2
        # A. the memory: its state gradient, the actions' and the pushed vector's gradients
        if MEM == SUPERPOSITION:
            _superposition_step_grad(
                t, rows, rmask, hd_ptr, s_ptr, gs_ptr, gz_ptr, gsx_ptr, ghd_ptr, cur, nxt,
                B, N, M, SW, KH, NZ, VCODE, HAS_GS, BLOCK_B, BLOCK_F,
            )  # fmt: skip
        elif MEM == TAPE or MEM == TAPE_JUMP:  # noqa: SIM109
            _tape_step_grad(
                t, rows, rmask, hd_ptr, s_ptr, gs_ptr, gz_ptr, gsx_ptr, ghd_ptr, jp_ptr, cur, nxt,
                B, N, M, SW, KH, NZ, VCODE, HAS_GS, MEM == TAPE_JUMP, BLOCK_B, BLOCK_F,
            )  # fmt: skip
        elif MEM == DEQUE:
            _deque_step_grad(
                t, T, rows, rmask, hd_ptr, s_ptr, p_ptr, gs_ptr, gp_ptr, x_ptr, gz_ptr, gsx_ptr, ghd_ptr,
                cur, nxt, B, N, M, D, KH, NZ, VCODE, HAS_GS, BLOCK_B, BLOCK_D, BLOCK_M,
            )  # fmt: skip
        else:
            _strat_step_grad(
                t, T, rows, rmask, hd_ptr, s_ptr, p_ptr, gs_ptr, gp_ptr, x_ptr, gz_ptr, gsx_ptr, ghd_ptr,
                cur, nxt, B, N, M, D, KH, NZ, VCODE, MEM == QUEUE, HAS_GS, BLOCK_B, BLOCK_D, BLOCK_M,
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
            if PRELOAD:  # noqa: SIM108 (a constexpr branch: whs is empty without PRELOAD)
                w = whs[jb]
            else:
                w = _load_tile(wh_ptr, hcols, hmask, j, jmask, N, 1)
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
        # C. ∂z_t = ∂L/∂[h_t ; r_t] from outside plus ga_{t+1} W_z (ga's columns and W_z's rows of
        # gate q: q·N + j)
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
                acc = _rec_matvec_t(
                    acc, ga_ptr + t * B * G, G, rows, rmask, wz_ptr, NZ, 1, N, k, kmask, N, BLOCK_N, NUM_N, NQ,
                    STACK_DOT_PRECISION,
                )  # fmt: skip
                tl.store(gz_ptr + nxt * B * NZ + rows[:, None] * NZ + k[None, :], acc, mask=m2)
        tl.debug_barrier()


class StackRNNTriton(torch.autograd.Function):
    """``pre [T, B, G]`` (time-major ``x w_xᵀ + b``), ``w_z [G, N+M]`` (over ``[h ; r]``),
    ``w_head [KH, N]``, ``b_head [KH]`` (the actions in the layer's order, then the value),
    ``h0 [B, N]``, ``c0 [B, N]`` (ignored for Elman), ``s0 [B, SW]`` (the memory's initial cells or
    strengths), ``p0 [B, D, M]`` (the stratification memories' initial values, else None), ``r0
    [B, M]`` (the initial reading) -> ``zs [T+1, B, N+M]``, ``cs [T+1, B, N]`` (empty for Elman),
    ``s [T+1, B, SW]``, ``p [T+D, B, M]`` (empty but for the stratification memories; the window
    of step ``t`` is ``p[T−t : T−t+D]``), ``overflow [T, B]`` (not differentiable).

    Members (M runs as one model): every argument and result with the member dimension first
    (``pre [M, T, B, G]``, ``w_z [M, G, N+M]``, ``jp [M, B]``, … -> ``zs [M, T+1, B, N+M]``, …),
    one launch per direction for all of them (a grid of row tiles × members) and one
    weight-gradient product per member."""

    @staticmethod
    def forward(ctx, pre, w_z, w_head, b_head, h0, c0, s0, p0, r0, jp, spec):  # type: ignore[override]
        lstm, code, vcode, mem = spec
        T, B, _ = pre.shape[-3:]
        lead = pre.shape[:-3]  # (M,) with members
        members = lead[0] if lead else 1
        N, KH, SW = w_head.shape[-1], w_head.shape[-2], s0.shape[-1]
        strat, deque = mem in _STRAT, mem == _DEQUE
        M = KH - N_ACTIONS[mem]  # the reading's width
        D = p0.shape[-2] if strat else SW // 2 if deque else SW // M
        NZ = N + M
        pre, w_z, w_head, b_head = (t.contiguous() for t in (pre, w_z, w_head, b_head))
        zs = pre.new_empty(*lead, T + 1, B, NZ)
        zs[..., 0, :, :N] = h0
        zs[..., 0, :, N:] = r0
        cs = pre.new_empty(*lead, T + 1, B, N) if lstm else pre.new_empty(0)
        if lstm:
            cs[..., 0, :, :] = c0
        gates = torch.empty_like(pre)
        hd = pre.new_empty(*lead, T, B, KH)
        s = pre.new_empty(*lead, T + 1, B, SW)
        s[..., 0, :, :] = s0
        p = _values_buffer(pre, p0, mem, T, D, M)
        x = torch.empty(*lead, B, 2 * D, device=pre.device, dtype=torch.float32) if deque else s
        ovf = pre.new_zeros(*lead, T, B)
        if T > 0 and B > 0 and members > 0:
            _launch(_stack_fwd, triton.cdiv(B, BLOCK_B), (
                pre, w_z, w_head, b_head, zs, cs if lstm else zs, gates, hd, s, s if p is None else p, ovf,
                jp, x, zs, zs, zs, zs, zs, jp, T, B, N, M, D, SW, KH, T, lstm, code, vcode, mem,
                BLOCK_B, *unit_blocks(N), *_k_blocks(NZ), _head_block(KH), BLOCK_F, *_memory_blocks(mem, D, M),
                False,
            ), _preload(lstm, N, NZ, KH), _stack_warps(lstm, N, mem), members)  # fmt: skip
        if p is None:
            p = pre.new_empty(0)
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
        strat, deque = mem in _STRAT, mem == _DEQUE
        T, B, _ = gates.shape[-3:]
        lead = gates.shape[:-3]
        members = lead[0] if lead else 1
        N, KH, SW = w_head.shape[-1], w_head.shape[-2], s.shape[-1]
        NZ = N + M
        f32 = dict(device=zs.device, dtype=torch.float32)
        gz, gc = torch.zeros(*lead, 2, B, NZ, **f32), torch.zeros(*lead, 2, B, N, **f32)
        gs = torch.zeros(*lead, 2, B, SW, **f32)
        if not lstm:
            g_cs = None
        for buf, g in ((gz, g_zs), (gc, g_cs), (gs, g_s)):
            if g is not None:
                buf[..., T % 2, :, :] = g[..., T, :, :]
        gp = gs  # a placeholder but for the memories with values; contiguous, whatever g_p's strides
        if strat:
            gp = torch.zeros(*lead, T + D, B, M, **f32)
        if deque:
            gp = torch.zeros(*lead, 2 * (T + D), B, M // 2, **f32)
        if (strat or deque) and g_p is not None:
            gp.copy_(g_p)
        scratch = gs
        if strat:
            scratch = torch.empty(*lead, 2, B, D, **f32)
        if deque:
            scratch = torch.empty(*lead, 4, B, 2 * D, **f32)
        g_zs, g_cs, g_s = (None if g is None else g.contiguous() for g in (g_zs, g_cs, g_s))
        ga = torch.empty_like(gates)
        ghd = torch.empty_like(hd)
        if T > 0 and B > 0 and members > 0:
            _launch(_stack_bwd, triton.cdiv(B, BLOCK_B), (
                zs if g_zs is None else g_zs, zs if g_cs is None else g_cs, zs if g_s is None else g_s,
                w_z, w_head, zs, cs if lstm else zs, gates, hd, s, p if strat or deque else s,
                ga, ghd, gz, gc, gs, gp, scratch, jp, T, B, N, M, D, SW, KH,
                lstm, code, vcode, mem, g_zs is not None, g_cs is not None, g_s is not None,
                BLOCK_B, *unit_blocks(N), *_k_blocks(NZ), _head_block(KH), BLOCK_F, *_memory_blocks(mem, D, M),
            ), _preload(lstm, N, NZ, KH), _stack_warps(lstm, N, mem), members)  # fmt: skip
        dt = zs.dtype
        g_s0 = gs[..., 0, :, :].clone()
        g_r0 = g_p0 = None
        if strat or deque:  # the reading is a state field of its own
            g_r0 = gz[..., 0, :, N:].to(dt)
        else:  # the reading is the top (head) cell
            g_s0[..., :M] += gz[..., 0, :, N:]
        if strat:
            g_p0 = gp[..., T:, :, :].transpose(-3, -2).to(dt)
        if deque:
            g_p0 = gp[..., T : T + 2 * D, :, :].transpose(-3, -2).to(dt)
        g_w_z = g_w_head = g_b_head = None
        if ctx.needs_input_grad[1]:
            g_w_z = weight_grad(ga, zs[..., :T, :, :]).to(w_z.dtype)
        if ctx.needs_input_grad[2]:
            g_w_head = weight_grad(ghd, zs[..., 1:, :, :N]).to(dt)
        if ctx.needs_input_grad[3]:
            g_b_head = ghd.float().sum((-3, -2)).to(dt)
        g_c0 = gc[..., 0, :, :].to(dt) if lstm else None
        g_h0 = gz[..., 0, :, :N].to(dt)
        return ga, g_w_z, g_w_head, g_b_head, g_h0, g_c0, g_s0.to(dt), g_p0, g_r0, None, None


def _values_buffer(pre: Tensor, p0: Tensor | None, mem: int, steps: int, D: int, M: int) -> Tensor | None:
    """The sliding values' buffer of a launch over ``steps`` steps, its initial window from ``p0``
    (``[..., B, D, M]``; the DeQue's ``[..., B, 2D, M/2]``): ``[..., steps + D, B, M]``, the window
    at ``[steps : steps + D]``; the DeQue's bottom half's buffer, then its top half's, ``[...,
    2(steps + D), B, M/2]``; None for the memories without values."""
    lead, B = pre.shape[:-3], pre.shape[-2]
    if mem in _STRAT:
        p = pre.new_empty(*lead, steps + D, B, M)
        p[..., steps:, :, :] = p0.transpose(-3, -2)
        return p
    if mem == _DEQUE:
        p = pre.new_empty(*lead, 2 * (steps + D), B, M // 2)
        p[..., steps : steps + D, :, :] = p0[..., :D, :].transpose(-3, -2)
        p[..., steps + D : steps + 2 * D, :, :] = p0[..., D:, :].transpose(-3, -2)
        return p
    return None


#: without history, the steps between two rewinds of the ring (:func:`_rewind`): ``zs``, ``cs`` and
#: ``s`` hold ``RING + 1`` steps, the sliding values ``RING + D`` (the CPU loops' ``RING``,
#: :data:`memrnn.ops.stack_rnn.cpu.RING`; not timed on a GPU: a rewind copies the state once per
#: ``RING`` steps, each step reads it about three times)
RING = 2


def _forward_no_history(
    pre: Tensor,
    w_z: Tensor,
    w_head: Tensor,
    b_head: Tensor,
    h0: Tensor,
    c0: Tensor | None,
    s0: Tensor,
    p0: Tensor | None,
    r0: Tensor,
    jp: Tensor,
    spec: tuple[bool, int, int, int],
    lengths: Tensor | None,
) -> tuple[Tensor, Tensor, Tensor | None, Tensor, Tensor | None, Tensor]:
    """:class:`StackRNNTriton`'s forward for a call that nothing will differentiate, without history
    (``_stack_fwd``'s ``NO_HISTORY``): O(B × the state) memory besides the outputs instead of
    O(T × B × the state); the same arithmetic, op for op.  The arguments are
    :meth:`StackRNNTriton.forward`'s, ``lengths [B]`` (None: all ``T``) -> ``out [T, B, N+M]``
    (``[h ; r]`` of each step), each row's final ``[h ; r]`` ``[B, N+M]``, ``c [B, N]`` (None for
    Elman), cells or strengths ``[B, SW]``, values ``[B, D, M]`` (the DeQue's ``[B, 2D, M/2]``;
    None for the other memories), and ``overflow [T, B]``.  Members: every argument and result
    with the member dimension first (``lengths [M, B]``), one launch for all of them."""
    lstm, code, vcode, mem = spec
    T, B, _ = pre.shape[-3:]
    lead = pre.shape[:-3]
    members = lead[0] if lead else 1
    N, KH, SW = w_head.shape[-1], w_head.shape[-2], s0.shape[-1]
    strat, deque = mem in _STRAT, mem == _DEQUE
    M = KH - N_ACTIONS[mem]
    D = p0.shape[-2] if strat else SW // 2 if deque else SW // M
    NZ = N + M
    if lengths is None:
        lens = torch.full((*lead, B), T, dtype=torch.int64, device=pre.device)
    else:
        lens = lengths.to(device=pre.device, dtype=torch.int64).contiguous()
        bad = lens[(lens < 0) | (lens > T)]
        if bad.numel():  # a row that would never end: its final state unset
            raise ValueError(
                f"lengths must lie in [0, T] = [0, {T}] (x's steps); got a length of {int(bad[0])}"
            )
    pre, w_z, w_head, b_head = (t.contiguous() for t in (pre, w_z, w_head, b_head))
    R = max(1, min(T, RING))
    # the finals start at the initial state: the rows of length 0 keep it
    zf = pre.new_empty(*lead, B, NZ)
    zf[..., :N], zf[..., N:] = h0, r0
    cf = pre.new_empty(*lead, B, N).copy_(c0) if lstm else None
    sf = pre.new_empty(*lead, B, SW).copy_(s0)
    pf = pre.new_empty(p0.shape).copy_(p0) if strat or deque else None
    zs = pre.new_empty(*lead, R + 1, B, NZ)
    zs[..., 0, :, :] = zf
    cs = pre.new_empty(*lead, R + 1, B, N) if lstm else None
    if lstm:
        cs[..., 0, :, :] = c0
    s = pre.new_empty(*lead, R + 1, B, SW)
    s[..., 0, :, :] = s0
    hd = pre.new_empty(*lead, R, B, KH)
    p = _values_buffer(pre, p0, mem, R, D, M)
    x = torch.empty(*lead, B, 2 * D, device=pre.device, dtype=torch.float32) if deque else s
    out = pre.new_empty(*lead, T, B, NZ)
    ovf = pre.new_zeros(*lead, T, B)
    if T > 0 and B > 0 and members > 0:
        _launch(_stack_fwd, triton.cdiv(B, BLOCK_B), (
            pre, w_z, w_head, b_head, zs, zs if cs is None else cs, pre, hd, s, s if p is None else p, ovf,
            jp, x, out, zf, zf if cf is None else cf, sf, sf if pf is None else pf, lens,
            T, B, N, M, D, SW, KH, R, lstm, code, vcode, mem,
            BLOCK_B, *unit_blocks(N), *_k_blocks(NZ), _head_block(KH), BLOCK_F, *_memory_blocks(mem, D, M),
            True,
        ), _preload(lstm, N, NZ, KH), _stack_warps(lstm, N, mem), members)  # fmt: skip
    return out, zf, cf, sf, pf, ovf


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


def _launch(
    kernel: triton.JITFunction, programs: int, args: tuple, preload: bool, warps: int, members: int = 1
) -> None:
    """``kernel`` on a grid of ``programs`` row tiles × ``members`` with its arguments ``args`` and
    ``PRELOAD = preload`` last; a GPU whose shared memory cannot hold the preloaded weights beside
    the kernel's own stagings (Triton's ``OutOfResources`` at launch, before anything runs: 88 KiB
    in all at 64 LSTM units, more than a T4's 64 KB) runs it without."""
    grid = (programs, members)
    if preload:
        try:
            kernel[grid](*args, True, num_warps=warps)
            return
        except OutOfResources:
            pass
    kernel[grid](*args, False, num_warps=warps)


def _head_block(KH: int) -> int:
    """Columns of the head's tile: a power of 2, at least 16 (``tl.dot``)."""
    return max(16, triton.next_power_of_2(KH))


def _memory_blocks(mem: int, D: int, M: int) -> tuple[int, int]:
    """``(BLOCK_D, BLOCK_M)`` of memory ``mem`` (:func:`_depth_blocks`; the DeQue's ``2D``
    strengths and values of ``M / 2`` units)."""
    return _depth_blocks(2 * D, M // 2) if mem == _DEQUE else _depth_blocks(D, M)


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
    [B, T]``.  Members: every argument and result with the member dimension first (``x [M, B, T,
    n]``, ``w_rec [M, G, N]``, ``lengths [M, B]``, …), one launch per direction for all of them."""
    B, T, nx = x.shape[-3:]
    lead = x.shape[:-3]  # (M,) with members
    N = w_rec.shape[-1]
    lstm = controller == "lstm"
    code = 0 if lstm else CODES[activation]
    if value_activation not in VALUE_CODES:
        raise ValueError(f"the stack kernel has no value activation {value_activation!r}")
    if memory not in MEMORY_CODES:
        raise ValueError(f"the stack kernels have no memory {memory!r}; they have {sorted(MEMORY_CODES)}")
    mem = MEMORY_CODES[memory]
    if lead:  # x w_xᵀ + b per member: [M, B·T, G]
        w_x = w_in[..., :nx]
        pre = torch.baddbmm(b[:, None], x.reshape(lead[0], B * T, nx), w_x.transpose(1, 2))
        pre = pre.reshape(*lead, B, T, -1)
    else:
        pre = torch.nn.functional.linear(x, w_in[:, :nx], b)
    pre = pre.transpose(-3, -2)  # [..., T, B, G]
    w_z = torch.cat([w_rec, w_in[..., nx:]], -1)
    jump = None
    if mem in (*_STRAT, _DEQUE):
        values0, strengths0, reading0 = memory0
        D, M = values0.shape[-2] // (2 if mem == _DEQUE else 1), values0.shape[-1]
        s0, p0, r0 = strengths0, values0, reading0
    else:
        if mem == _TAPE_JUMP:
            jump, cells0 = memory0
        else:
            (cells0,) = memory0
        D, M = cells0.shape[-2:]
        s0, p0, r0 = cells0.reshape(*lead, B, D * M), None, cells0[..., 0, :]
    # the jump tape's jumps in cells, reduced mod D (int32); a placeholder for the other memories
    jp = (
        (torch.round(jump.detach()).to(torch.int64) % D).to(torch.int32).contiguous()
        if jump is not None
        else torch.zeros(1, dtype=torch.int32, device=x.device)
    )
    spec = (lstm, code, VALUE_CODES[value_activation], mem)
    args = (pre, w_z, w_head, b_head, h0, c0, s0, p0, r0)
    if not torch.is_grad_enabled() or not any(t is not None and t.requires_grad for t in (*args, jump)):
        # nothing can ask for a gradient (the test of memrnn.ops.stack_rnn.opaque.hand_written): no history
        with torch.no_grad():
            out, zf, cf, sf, pf, ovf = _forward_no_history(*args, jp, spec, lengths)
        out_b = out.transpose(-3, -2)  # [..., B, T, N+M]
        if mem in (*_STRAT, _DEQUE):
            finals = (pf, sf, zf[..., N:])
        else:
            cells = sf.reshape(*lead, B, D, M)
            finals = (cells,) if jump is None else (jump, cells)
        return out_b[..., :N], out_b[..., N:], zf[..., :N], cf, *finals, ovf.transpose(-2, -1)
    zs, cs, s, p, ovf = StackRNNTriton.apply(*args, jp, spec)
    rows = B * (lead[0] if lead else 1)  # the members' rows as one batch for the gathers

    def final(steps: Tensor) -> Tensor:  # [..., T+1, B, F] -> each row's state at its length [..., B, F]
        flat = steps.transpose(-3, -2).reshape(rows, T + 1, -1)
        return final_by_length(flat, None if lengths is None else lengths.reshape(rows)).reshape(*lead, B, -1)

    zs_b = zs.transpose(-3, -2)  # [..., B, T+1, N+M]
    h_fin = final(zs[..., :N])
    c_fin = final(cs) if lstm else None
    s_fin = final(s)
    if mem in (*_STRAT, _DEQUE):
        ends = (
            torch.full((rows,), T, device=x.device) if lengths is None else lengths.to(x.device).reshape(rows)
        )
        idx = (T - ends)[:, None] + torch.arange(D, device=x.device)  # [rows, D]: the final window
        p_rows = p.transpose(-3, -2).reshape(rows, p.shape[-3], -1)  # [rows, T+D (DeQue: 2(T+D)), ·]
        width = p_rows.shape[-1]
        values = p_rows[:, : T + D].gather(1, idx[..., None].expand(-1, -1, width))
        if mem == _DEQUE:  # the top half slides the other way: Pt[L : L + D]
            top = (T + D + ends)[:, None] + torch.arange(D, device=x.device)
            values = torch.cat([values, p_rows.gather(1, top[..., None].expand(-1, -1, width))], 1)
        finals = (values.reshape(*lead, B, -1, width), s_fin, final(zs[..., N:]))
    else:
        cells = s_fin.reshape(*lead, B, D, M)
        finals = (cells,) if jump is None else (jump, cells)
    return zs_b[..., 1:, :N], zs_b[..., 1:, N:], h_fin, c_fin, *finals, ovf.transpose(-2, -1)


def _k_blocks(K: int) -> tuple[int, int]:
    """``(BLOCK_K, NUM_K)`` over the controller's recurrent input ``[h ; r]`` (``N + M`` wide):
    blocks of 16 up to 128 (at N 64, M 8, blocks of 64 spilled 728 bytes per thread in the LSTM
    forward, of 16: 56; ``python -m benchmarks.kernel_compile``), of 32 beyond."""
    block = 16 if K <= 128 else 32
    return block, triton.cdiv(K, block)
