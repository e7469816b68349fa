"""A controller RNN (LSTM, gate blocks o, i, f, g, or Elman) driving Joulin & Mikolov's (2015)
superposition stack, as two persistent Triton kernels: one launch for the forward pass of a whole
sequence and one for the backward (the tiling of :mod:`memrnn.ops.elman.triton`: one program per
tile of ``BLOCK_B`` batch rows, the state kept by the program for every step, blocks ordered by a
barrier).  The CPU path of the same computation is :class:`memrnn.ops.stack_rnn.cpu.StackRNNSequence`;
the reference is :class:`memrnn.layers.StackRNN`'s loop over ``step``.

Forward, per step ``t`` (time-major buffers):

1. the controller's gate pre-activations ``pre_t + z_{t−1} W_zᵀ`` with ``z = [h ; r]`` (the
   controller's output and the stack's reading) by ``tl.dot``, then the LSTM or Elman update; ``h_t``
   goes to ``zs[t+1, :, :N]``;
2. the head ``h_t W_headᵀ + b_head``: the actions ``softmax`` over (push, pop, no-op), the pushed
   vector ``v_t = act(·)`` (Joulin & Mikolov 2015, section 3.1), into ``hd[t]``;
3. the stack (their equations 5–6) over the flattened ``[depth · width]`` cells in chunks:
   ``S_t[i] = push · S_{t−1}[i−1] + pop · S_{t−1}[i+1] + noop · S_{t−1}[i]`` with ``S_{t−1}[−1] = v_t``
   and an empty cell below the window; the top cell is the reading ``r_t`` (``zs[t+1, :, N:]``);
   ``overflow_t = push · max|S_{t−1}[depth−1]|``, the mass a push moves out of the window.

Backward, per step, the same three phases reversed: the stack's ``∂S_{t−1}``, the three action
gradients (sums over the cells) and ``∂v``; the softmax's and the value activation's derivatives
into ``ghd``; ``∂h_t += ghd W_head`` and the controller's gate gradients into ``ga``; then
``∂z_{t−1} = ga W_z`` by ``tl.dot``.  The weight gradients are single matrix products outside the
kernels, and the input projection's through autograd.  Float32 accumulation whatever the storage
dtype (float32, bfloat16, float16).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

from memrnn.ops.autograd import first_order
from memrnn.ops.buckets import final_by_length
from memrnn.ops.triton_common import BLOCK_B, CODES, DOT_WARPS, _act, _act_grad, _sig, _tanh, unit_blocks

#: flattened stack cells per chunk of the stack phases
BLOCK_F = 128
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
def _actions(hrow, rmask):
    """Push, pop and no-op of each row of the tile, ``[BLOCK_B]`` float32, from ``hd[t]``."""
    push = tl.load(hrow, mask=rmask, other=0.0).to(tl.float32)
    pop = tl.load(hrow + 1, mask=rmask, other=0.0).to(tl.float32)
    noop = tl.load(hrow + 2, mask=rmask, other=0.0).to(tl.float32)
    return push, pop, noop


@triton.jit
def _stack_fwd(
    pre_ptr, wz_ptr, wh_ptr, bh_ptr, zs_ptr, cs_ptr, gates_ptr, hd_ptr, s_ptr, ovf_ptr,
    T, B, N, M, DM, KH,
    LSTM: tl.constexpr, CODE: tl.constexpr, VCODE: tl.constexpr,
    BLOCK_B: tl.constexpr, BLOCK_N: tl.constexpr, NUM_N: tl.constexpr,
    BLOCK_K: tl.constexpr, NUM_K: tl.constexpr, BLOCK_KH: tl.constexpr, BLOCK_F: tl.constexpr,
):  # fmt: skip
    """``pre``/``gates`` ``[T, B, G]`` (``G = 4N`` LSTM, ``N`` Elman; ``gates`` holds the LSTM's
    activated gates or the Elman pre-activation), ``wz [G, N+M]``, ``wh [KH, N]``, ``bh [KH]``,
    ``zs [T+1, B, N+M]``, ``cs [T+1, B, N]``, ``hd [T, B, KH]`` (actions, then the pushed vector),
    ``s [T+1, B, DM]`` (the stack, ``DM = depth · M``), ``ovf [T, B]``; index 0 of ``zs``, ``cs``
    and ``s`` holds the initial state."""
    rows = tl.program_id(0) * BLOCK_B + tl.arange(0, BLOCK_B)
    rmask = rows < B
    cols = tl.arange(0, BLOCK_N)
    kcols = tl.arange(0, BLOCK_K)
    hcols = tl.arange(0, BLOCK_KH)
    NZ = N + M
    G = 4 * N if LSTM else N
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
                a0 += tl.dot(
                    z, tl.load(wt, mask=wm, other=0.0).to(tl.float32), input_precision=STACK_DOT_PRECISION
                )
                if LSTM:
                    a1 += tl.dot(
                        z,
                        tl.load(wt + N * NZ, mask=wm, other=0.0).to(tl.float32),
                        input_precision=STACK_DOT_PRECISION,
                    )
                    a2 += tl.dot(
                        z,
                        tl.load(wt + 2 * N * NZ, mask=wm, other=0.0).to(tl.float32),
                        input_precision=STACK_DOT_PRECISION,
                    )
                    a3 += tl.dot(
                        z,
                        tl.load(wt + 3 * N * NZ, mask=wm, other=0.0).to(tl.float32),
                        input_precision=STACK_DOT_PRECISION,
                    )
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
            wt = tl.load(  # wt[k, q] = W_head[q, k]
                wh_ptr + hcols[None, :] * N + k[:, None], mask=kmask[:, None] & hmask[None, :], other=0.0
            ).to(tl.float32)
            acc += tl.sum(h[:, :, None] * wt[None, :, :], 1)  # a tl.dot here: 43 KB/thread of spills
        is_act = (hcols < 3)[None, :]
        logits = tl.where(is_act, acc, float("-inf"))
        e = tl.where(is_act, tl.exp(logits - tl.max(logits, 1)[:, None]), 0.0)
        heads = tl.where(is_act, e / tl.sum(e, 1)[:, None], _act(acc, VCODE))
        tl.store(
            hd_ptr + t * B * KH + rows[:, None] * KH + hcols[None, :],
            heads.to(hd_ptr.dtype.element_ty),
            mask=rmask[:, None] & hmask[None, :],
        )
        tl.debug_barrier()
        # 3. the stack
        push1, pop1, noop1 = _actions(hd_ptr + t * B * KH + rows * KH, rmask)
        push, pop, noop = push1[:, None], pop1[:, None], noop1[:, None]
        old_row = s_ptr + t * B * DM + rows[:, None] * DM
        new_row = s_ptr + (t + 1) * B * DM + rows[:, None] * DM
        lost = tl.zeros((BLOCK_B,), dtype=tl.float32)
        for f0 in range(0, DM, BLOCK_F):
            fi = f0 + tl.arange(0, BLOCK_F)
            mf = rmask[:, None] & (fi < DM)[None, :]
            topf = (fi < M)[None, :]
            old = tl.load(old_row + fi[None, :], mask=mf, other=0.0).to(tl.float32)
            up = tl.load(old_row + fi[None, :] + M, mask=mf & (fi + M < DM)[None, :], other=0.0).to(
                tl.float32
            )
            below = tl.load(old_row + fi[None, :] - M, mask=mf & ~topf, other=0.0).to(tl.float32)
            v = tl.load(
                hd_ptr + t * B * KH + rows[:, None] * KH + 3 + fi[None, :], mask=mf & topf, other=0.0
            ).to(tl.float32)
            new = push * tl.where(topf, v, below) + pop * up + noop * old
            tl.store(new_row + fi[None, :], new.to(s_ptr.dtype.element_ty), mask=mf)
            tl.store(
                zs_ptr + (t + 1) * B * NZ + rows[:, None] * NZ + N + fi[None, :],
                new.to(zs_ptr.dtype.element_ty),
                mask=mf & topf,
            )
            last = mf & (fi >= DM - M)[None, :]
            lost = tl.maximum(lost, tl.max(tl.where(last, tl.abs(old), 0.0), 1))
        tl.store(ovf_ptr + t * B + rows, (push1 * lost).to(ovf_ptr.dtype.element_ty), mask=rmask)
        tl.debug_barrier()


@triton.jit
def _stack_bwd(
    gzx_ptr, gcx_ptr, gsx_ptr, wz_ptr, wh_ptr, zs_ptr, cs_ptr, gates_ptr, hd_ptr, s_ptr,
    ga_ptr, ghd_ptr, gz_ptr, gc_ptr, gs_ptr,
    T, B, N, M, DM, KH,
    LSTM: tl.constexpr, CODE: tl.constexpr, VCODE: tl.constexpr,
    HAS_GZ: tl.constexpr, HAS_GC: tl.constexpr, HAS_GS: tl.constexpr,
    BLOCK_B: tl.constexpr, BLOCK_N: tl.constexpr, NUM_N: tl.constexpr,
    BLOCK_K: tl.constexpr, NUM_K: tl.constexpr, BLOCK_KH: tl.constexpr, BLOCK_F: tl.constexpr,
):  # fmt: skip
    """The gradients from outside: ``gzx [T+1, B, N+M]`` (of ``zs``), ``gcx [T+1, B, N]`` (of
    ``cs``), ``gsx [T+1, B, DM]`` (of the stacks), each used only when its ``HAS_*`` is set.  Out:
    ``ga [T, B, G]`` (gate pre-activations), ``ghd [T, B, KH]`` (head pre-activations).  Float32
    ping-pong scratch ``gz [2, B, N+M]``, ``gc [2, B, N]``, ``gs [2, B, DM]`` hold the gradients of
    step ``t``'s state in slot ``t % 2`` (slot ``T % 2`` filled by the caller); slot 0 ends with
    the initial state's (``gs`` without the initial reading's share, which ``gz`` holds)."""
    rows = tl.program_id(0) * BLOCK_B + tl.arange(0, BLOCK_B)
    rmask = rows < B
    cols = tl.arange(0, BLOCK_N)
    kcols = tl.arange(0, BLOCK_K)
    hcols = tl.arange(0, BLOCK_KH)
    hmask = hcols < KH
    NZ = N + M
    G = 4 * N if LSTM else N
    for step in range(T):
        t = T - 1 - step
        cur, nxt = (t + 1) % 2, t % 2
        # A. the stack: ∂S_t, the actions' and the pushed vector's gradients
        push1, pop1, noop1 = _actions(hd_ptr + t * B * KH + rows * KH, rmask)
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
            v = tl.load(
                hd_ptr + t * B * KH + rows[:, None] * KH + 3 + fi[None, :], mask=mf & topf, other=0.0
            ).to(tl.float32)
            g_push += tl.sum(g0 * tl.where(topf, v, below), 1)
            g_pop += tl.sum(g0 * up, 1)
            g_noop += tl.sum(g0 * old, 1)
            g_old = noop * g0 + push * g_dn + pop * g_hi
            if HAS_GS:
                g_old += tl.load(
                    gsx_ptr + t * B * DM + rows[:, None] * DM + fi[None, :], mask=mf, other=0.0
                ).to(tl.float32)
            tl.store(out_row + fi[None, :], g_old, mask=mf)
            gv = push * g0 * _value_grad_from_output(v, VCODE)
            tl.store(
                ghd_ptr + t * B * KH + rows[:, None] * KH + 3 + fi[None, :],
                gv.to(ghd_ptr.dtype.element_ty),
                mask=mf & topf,
            )
        dot = push1 * g_push + pop1 * g_pop + noop1 * g_noop
        gty = ghd_ptr.dtype.element_ty
        grow = ghd_ptr + t * B * KH + rows * KH
        tl.store(grow, (push1 * (g_push - dot)).to(gty), mask=rmask)
        tl.store(grow + 1, (pop1 * (g_pop - dot)).to(gty), mask=rmask)
        tl.store(grow + 2, (noop1 * (g_noop - dot)).to(gty), mask=rmask)
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
            w = tl.load(
                wh_ptr + hcols[:, None] * N + j[None, :], mask=hmask[:, None] & jmask[None, :], other=0.0
            )
            gh = tl.load(gz_ptr + cur * B * NZ + rows[:, None] * NZ + j[None, :], mask=m2, other=0.0)
            gh += tl.dot(ghd, w.to(tl.float32), input_precision=STACK_DOT_PRECISION)
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
        for kb in tl.static_range(NUM_K):
            k = kb * BLOCK_K + kcols
            kmask = k < NZ
            m2 = rmask[:, None] & kmask[None, :]
            if HAS_GZ:
                acc = tl.load(gzx_ptr + t * B * NZ + rows[:, None] * NZ + k[None, :], mask=m2, other=0.0).to(
                    tl.float32
                )
            else:
                acc = tl.zeros((BLOCK_B, BLOCK_K), dtype=tl.float32)
            for jb in tl.static_range(NUM_N):
                j = jb * BLOCK_N + cols
                jmask = j < N
                am = rmask[:, None] & jmask[None, :]
                wm = jmask[:, None] & kmask[None, :]
                ab = ga_ptr + t * B * G + rows[:, None] * G + j[None, :]
                wb = wz_ptr + j[:, None] * NZ + k[None, :]  # W_z[q·N + j, k]
                for q in tl.static_range(4 if LSTM else 1):
                    ga = tl.load(ab + q * N, mask=am, other=0.0).to(tl.float32)
                    w = tl.load(wb + q * N * NZ, mask=wm, other=0.0).to(tl.float32)
                    acc += tl.dot(ga, w, input_precision=STACK_DOT_PRECISION)
            tl.store(gz_ptr + nxt * B * NZ + rows[:, None] * NZ + k[None, :], acc, mask=m2)
        tl.debug_barrier()


class SuperpositionStackTriton(torch.autograd.Function):
    """``pre [T, B, G]`` (time-major ``x w_xᵀ + b``), ``w_z [G, N+M]`` (over ``[h ; r]``),
    ``w_head [3+M, N]``, ``b_head [3+M]`` (push, pop, no-op, then the value), ``h0 [B, N]``,
    ``c0 [B, N]`` (ignored for Elman), ``s0 [B, D·M]`` -> ``zs [T+1, B, N+M]``, ``cs [T+1, B, N]``
    (empty for Elman), ``stacks [T+1, B, D·M]``, ``overflow [T, B]`` (not differentiable)."""

    @staticmethod
    def forward(ctx, pre, w_z, w_head, b_head, h0, c0, s0, spec):  # type: ignore[override]
        lstm, code, vcode = spec
        T, B, _ = pre.shape
        N, KH, DM = w_head.shape[1], w_head.shape[0], s0.shape[1]
        M = KH - 3
        NZ = N + M
        pre, w_z, w_head, b_head = (t.contiguous() for t in (pre, w_z, w_head, b_head))
        zs = pre.new_empty(T + 1, B, NZ)
        zs[0, :, :N] = h0
        zs[0, :, N:] = s0[:, :M]
        cs = pre.new_empty(T + 1, B, N) if lstm else pre.new_empty(0)
        if lstm:
            cs[0] = c0
        gates = torch.empty_like(pre)
        hd = pre.new_empty(T, B, KH)
        stacks = pre.new_empty(T + 1, B, DM)
        stacks[0] = s0
        ovf = pre.new_zeros(T, B)
        if T > 0 and B > 0:
            _stack_fwd[(triton.cdiv(B, BLOCK_B),)](
                pre, w_z, w_head, b_head, zs, cs if lstm else zs, gates, hd, stacks, ovf, T, B, N, M, DM, KH,
                lstm, code, vcode, BLOCK_B, *unit_blocks(N), *_k_blocks(NZ), _head_block(KH), BLOCK_F,
                num_warps=DOT_WARPS,
            )  # fmt: skip
        ctx.spec = spec
        ctx.set_materialize_grads(False)
        ctx.mark_non_differentiable(ovf)
        ctx.save_for_backward(w_z, w_head, zs, cs, gates, hd, stacks)
        return zs, cs, stacks, ovf

    @staticmethod
    @first_order
    def backward(ctx, g_zs, g_cs, g_stacks, _g_ovf):  # type: ignore[override]
        w_z, w_head, zs, cs, gates, hd, stacks = ctx.saved_tensors
        lstm, code, vcode = ctx.spec
        T, B, G = gates.shape
        N, KH, DM = w_head.shape[1], w_head.shape[0], stacks.shape[2]
        M, NZ = KH - 3, N + KH - 3
        f32 = dict(device=zs.device, dtype=torch.float32)
        gz, gc, gs = torch.zeros(2, B, NZ, **f32), torch.zeros(2, B, N, **f32), torch.zeros(2, B, DM, **f32)
        if not lstm:
            g_cs = None
        for buf, g in ((gz, g_zs), (gc, g_cs), (gs, g_stacks)):
            if g is not None:
                buf[T % 2] = g[T]
        g_zs, g_cs, g_stacks = (None if g is None else g.contiguous() for g in (g_zs, g_cs, g_stacks))
        ga = torch.empty_like(gates)
        ghd = torch.empty_like(hd)
        if T > 0 and B > 0:
            _stack_bwd[(triton.cdiv(B, BLOCK_B),)](
                zs if g_zs is None else g_zs, zs if g_cs is None else g_cs, zs if g_stacks is None else g_stacks,
                w_z, w_head, zs, cs if lstm else zs, gates, hd, stacks, ga, ghd, gz, gc, gs, T, B, N, M, DM, KH,
                lstm, code, vcode, g_zs is not None, g_cs is not None, g_stacks is not None,
                BLOCK_B, *unit_blocks(N), *_k_blocks(NZ), _head_block(KH), BLOCK_F,
                num_warps=DOT_WARPS,
            )  # fmt: skip
        dt = zs.dtype
        g_s0 = gs[0].clone()
        g_s0[:, :M] += gz[0, :, N:]
        g_w_z = g_w_head = g_b_head = None
        if ctx.needs_input_grad[1]:
            g_w_z = (ga.reshape(T * B, G).t().float() @ zs[:T].reshape(T * B, NZ).float()).to(w_z.dtype)
        if ctx.needs_input_grad[2]:
            g_w_head = (ghd.reshape(T * B, KH).t().float() @ zs[1:, :, :N].reshape(T * B, N).float()).to(dt)
        if ctx.needs_input_grad[3]:
            g_b_head = ghd.float().sum((0, 1)).to(dt)
        g_c0 = gc[0].to(dt) if lstm else None
        return ga, g_w_z, g_w_head, g_b_head, gz[0, :, :N].to(dt), g_c0, g_s0.to(dt), None


def _head_block(KH: int) -> int:
    """Columns of the head's tile: a power of 2, at least 16 (``tl.dot``)."""
    return max(16, triton.next_power_of_2(KH))


def superposition_stack_rnn_triton(
    x: Tensor,
    w_in: Tensor,
    b: Tensor,
    w_rec: Tensor,
    w_head: Tensor,
    b_head: Tensor,
    h0: Tensor,
    c0: Tensor | None,
    stack0: Tensor,
    *,
    controller: str,
    activation: str,
    value_activation: str,
    lengths: Tensor | None = None,
) -> tuple[Tensor, ...]:
    """:func:`memrnn.ops.stack_rnn.stack_rnn_sequence` for the superposition stack on the two
    kernels above: ``x [B, T, n]``, ``stack0 [B, D, M]`` -> ``h [B, T, N]``, ``r [B, T, M]``,
    final ``h``, ``c`` (None for Elman), ``stack [B, D, M]`` at each row's length, ``overflow
    [B, T]``."""
    B, _, nx = x.shape
    N = w_rec.shape[1]
    _, D, M = stack0.shape
    lstm = controller == "lstm"
    code = 0 if lstm else CODES[activation]
    if value_activation not in VALUE_CODES:
        raise ValueError(f"the stack kernel has no value activation {value_activation!r}")
    pre = torch.nn.functional.linear(x, w_in[:, :nx], b).transpose(0, 1)
    w_z = torch.cat([w_rec, w_in[:, nx:]], 1)
    zs, cs, stacks, ovf = SuperpositionStackTriton.apply(
        pre,
        w_z,
        w_head,
        b_head,
        h0,
        c0,
        stack0.reshape(B, D * M),
        (lstm, code, VALUE_CODES[value_activation]),
    )
    zs_b = zs.transpose(0, 1)  # [B, T+1, N+M]
    h_fin = final_by_length(zs_b[:, :, :N], lengths)
    c_fin = final_by_length(cs.transpose(0, 1), lengths) if lstm else None
    s_fin = final_by_length(stacks.transpose(0, 1), lengths).reshape(B, D, M)
    return zs_b[:, 1:, :N], zs_b[:, 1:, N:], h_fin, c_fin, s_fin, ovf.t()


def _k_blocks(K: int) -> tuple[int, int]:
    """``(BLOCK_K, NUM_K)`` over the controller's recurrent input ``[h ; r]`` (``N + M`` wide):
    blocks of 16 up to 128 (at N 64, M 8, blocks of 64 spilled 728 bytes per thread in the LSTM
    forward, of 16: 56; ``python -m benchmarks.kernel_compile``), of 32 beyond."""
    block = 16 if K <= 128 else 32
    return block, triton.cdiv(K, block)
