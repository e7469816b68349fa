"""The nnPDA (Stogin, Mali & Giles 2020, Definition 3.6, with the stack operator π of
Definition 3.2 and the reading R of Definition 3.4) as two persistent Triton kernels: one launch
runs the forward pass of a whole sequence, one the backward.

One program per batch row (the contraction is a per-row gather, so rows need not come in tiles
of 16 as ``tl.dot`` wants), holding the row for every step:

* forward, per step: ``R^t = (K_0, 1 − ‖K_0‖∞)``; ``z_o = Σ_{j,l} W[o, j, k_t, l] Q_j R_l`` with
  the row's weight slice read in ``[BLOCK_O, BLOCK_C]`` tiles (``c = j·L + l``; the slice stays
  in L1/L2 across steps); ``Q^{t+1} = h_H(z_Q − 1/2)``; the actions; ``π(p+, p−, C)`` over the
  three shifted windows of the row's ``[C; K; tail]`` buffer (the layout of the CPU path).
* backward, per step: the transposed step, the running gradients of ``Q``, the window and the
  tail kept in registers; the windows' shifts go through a small per-row scratch with zero
  borders; ``∂z`` of every step is saved, and ``∂W = Σ_t (Q ⊗ R)ᵀ ∂z`` per symbol is one matrix
  product per symbol outside the kernel; ``∂H`` (a learned sensitivity) is summed per row.

Everything the backward reads is what the CPU path saves (``Q``, ``[C; K; tail]``, ``R``, ``z``,
``H·(p+, 1 − p+ − p−, p−)``), batch first, so memory is linear in T.  Accumulation is float32
whatever the storage dtype; the derivative conventions are autograd's (the reading's max splits
its gradient evenly over ties, as ``torch.amax``; ``clamp``'s gradient is 1 on ``[0, 1]``).

Tested under Triton's interpreter (``TRITON_INTERPRET=1``) against the reference loop
(``tests/ops/test_nnpda.py``) and on a GPU by the ``gpu``-marked tests.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

from memrnn.ops.autograd import first_order
from memrnn.ops.buckets import grouped_weight_grad
from memrnn.ops.triton_common import _sig

ACTION_CODES = {"identity": 0, "sigmoid": 1, "clamp": 2}


@triton.jit
def _indices(n, m2, D, BLOCK_N: tl.constexpr, BLOCK_L: tl.constexpr, BLOCK_D: tl.constexpr):
    """Offsets and masks of one row: state units ``jn`` (``< n``), stack symbols ``lm`` (``< m2``;
    ``BLOCK_L ≥ m2 + 1`` so the reading's "empty" component has a slot), window cells ``dd``, and
    the window's ``[BLOCK_D, BLOCK_L]`` offsets ``cells`` with their mask."""
    jn = tl.arange(0, BLOCK_N)
    lm = tl.arange(0, BLOCK_L)
    dd = tl.arange(0, BLOCK_D)
    mmask = lm < m2
    cells = dd[:, None] * m2 + lm[None, :]
    smask = (dd < D)[:, None] & mmask[None, :]
    return jn, jn < n, lm, mmask, dd, cells, smask


@triton.jit
def _nnpda_fwd(
    ids_ptr, wk_ptr, h_ptr, q_ptr, p_ptr, r_ptr, z_ptr, wh_ptr,
    T, n, m2, D, O,
    ACTION: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_L: tl.constexpr, BLOCK_D: tl.constexpr,
    BLOCK_O: tl.constexpr, BLOCK_C: tl.constexpr,
):  # fmt: skip
    """Row ``b = program_id``.  ``ids [B, T]``; ``wk [m1, O, n·L]`` (``wk[k, o, j·L + l] = W[o, j,
    k, l]``); ``q [B, T+1, n]`` (``q[:, 0] = Q^0``); ``p [B, T+1, D+2, m2]`` (``p[:, t] = [C^{t+1};
    K^t; tail^t]``, with ``K^0`` and ``tail^0`` set); ``r [B, T, L]``; ``z [B, T, O]``; ``wh [B, T,
    3]`` out.  Members: program ``(b, μ)`` runs row ``μ·B + b`` of the members' rows as one batch
    (``[M·B, ...]``; its ids already offset to the member's weight slices, ``μ·m1 + k``) with
    member ``μ``'s sensitivity ``h[μ]``."""
    mb = tl.program_id(1).to(tl.int64)
    b = mb * tl.num_programs(0) + tl.program_id(0).to(tl.int64)
    H = tl.load(h_ptr + mb).to(tl.float32)
    L = m2 + 1
    nL = n * L
    row = (D + 2) * m2  # one step of p
    jn, nmask, lm, mmask, _, cells, smask = _indices(n, m2, D, BLOCK_N, BLOCK_L, BLOCK_D)
    oo = tl.arange(0, BLOCK_O)
    cc = tl.arange(0, BLOCK_C)
    for t in range(T):
        k = tl.load(ids_ptr + b * T + t).to(tl.int64)
        pt = p_ptr + (b * (T + 1) + t) * row
        pn = pt + row
        rt = r_ptr + (b * T + t) * L
        zt = z_ptr + (b * T + t) * O
        qt = q_ptr + (b * (T + 1) + t) * n
        # the reading R^t (Definition 3.4)
        top = tl.load(pt + m2 + lm, mask=mmask, other=0.0).to(tl.float32)
        empty = 1.0 - tl.max(tl.where(mmask, top, float("-inf")), 0)
        tl.store(rt + lm, tl.where(mmask, top, empty).to(r_ptr.dtype.element_ty), mask=lm < L)
        tl.debug_barrier()
        # z = W[·, ·, k, ·] (Q^t ⊗ R^t)
        wk = wk_ptr + k * O * nL
        for o0 in range(0, O, BLOCK_O):
            o = o0 + oo
            omask = o < O
            acc = tl.zeros([BLOCK_O], dtype=tl.float32)
            for c0 in range(0, nL, BLOCK_C):
                c = c0 + cc
                cmask = c < nL
                qr = tl.load(qt + c // L, mask=cmask, other=0.0).to(tl.float32) * tl.load(
                    rt + c % L, mask=cmask, other=0.0
                ).to(tl.float32)
                w = tl.load(
                    wk + o[:, None] * nL + c[None, :], mask=omask[:, None] & cmask[None, :], other=0.0
                )
                acc += tl.sum(w.to(tl.float32) * qr[None, :], 1)
            tl.store(zt + o, acc.to(z_ptr.dtype.element_ty), mask=omask)
        tl.debug_barrier()
        # Q^{t+1} = h_H(z_Q − 1/2)   (equation 1)
        zq = tl.load(zt + jn, mask=nmask, other=0.0).to(tl.float32)
        tl.store(qt + n + jn, _sig(H * zq - H / 2).to(q_ptr.dtype.element_ty), mask=nmask)
        # the actions p+, p−, C
        a_push = tl.load(zt + n).to(tl.float32)
        a_pop = tl.load(zt + n + 1).to(tl.float32)
        a_c = tl.load(zt + n + 2 + lm, mask=mmask, other=0.0).to(tl.float32)
        if ACTION == 1:
            a_push = _sig(H * a_push - H / 2)
            a_pop = _sig(H * a_pop - H / 2)
            a_c = _sig(H * a_c - H / 2)
        elif ACTION == 2:
            a_push = tl.minimum(tl.maximum(a_push, 0.0), 1.0)
            a_pop = tl.minimum(tl.maximum(a_pop, 0.0), 1.0)
            a_c = tl.minimum(tl.maximum(a_c, 0.0), 1.0)
        tl.store(pt + lm, a_c.to(p_ptr.dtype.element_ty), mask=mmask)  # C^{t+1} above the top
        w0 = H * a_push
        w2 = H * a_pop
        w1 = H * (1.0 - a_push - a_pop)
        wht = wh_ptr + (b * T + t) * 3
        tl.store(wht, w0.to(wh_ptr.dtype.element_ty))
        tl.store(wht + 1, w1.to(wh_ptr.dtype.element_ty))
        tl.store(wht + 2, w2.to(wh_ptr.dtype.element_ty))
        tl.debug_barrier()
        # K^{t+1} = π(p+, p−, C) K^t over the window, and the tail   (equation 2, Definition 3.2)
        above = tl.load(pt + cells, mask=smask, other=0.0).to(tl.float32)
        own = tl.load(pt + m2 + cells, mask=smask, other=0.0).to(tl.float32)
        below = tl.load(pt + 2 * m2 + cells, mask=smask, other=0.0).to(tl.float32)
        new = _sig(w0 * above + w1 * own + w2 * below - H / 2)
        tl.store(pn + m2 + cells, new.to(p_ptr.dtype.element_ty), mask=smask)
        tail = tl.load(pt + (D + 1) * m2 + lm, mask=mmask, other=0.0).to(tl.float32)
        tl.store(pn + (D + 1) * m2 + lm, _sig(H * tail - H / 2).to(p_ptr.dtype.element_ty), mask=mmask)
        tl.debug_barrier()


@triton.jit
def _nnpda_bwd(
    ids_ptr, wk_ptr, h_ptr, q_ptr, p_ptr, r_ptr, z_ptr, wh_ptr,
    gq_ptr, gk_ptr, gt_ptr, gz_ptr, g0q_ptr, g0k_ptr, g0t_ptr, gh_ptr, gm_ptr, gc_ptr,
    T, n, m2, D, O,
    ACTION: tl.constexpr, LEARN_H: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_L: tl.constexpr,
    BLOCK_D: tl.constexpr, BLOCK_O: tl.constexpr, BLOCK_C: tl.constexpr,
):  # fmt: skip
    """Row ``b = program_id``.  Reads the forward's buffers and the incoming gradients ``gq [B,
    T+1, n]``, ``gk [B, T+1, D, m2]``, ``gt [B, T+1, m2]``; writes ``gz [B, T, O]`` (``∂L/∂z``),
    the initial state's gradients ``g0q [B, n]``, ``g0k [B, D, m2]``, ``g0t [B, m2]`` and the
    row's ``∂L/∂H`` into ``gh [B]`` (all float32).  Scratch: ``gm [B, D+2, m2]`` (zero rows 0 and
    D+1 around the window's ``∂`` for the shifts) and ``gc [B, n·L]`` (``∂L/∂(Q ⊗ R)``).  Members
    as :func:`_nnpda_fwd`."""
    mb = tl.program_id(1).to(tl.int64)
    b = mb * tl.num_programs(0) + tl.program_id(0).to(tl.int64)
    H = tl.load(h_ptr + mb).to(tl.float32)
    L = m2 + 1
    nL = n * L
    row = (D + 2) * m2
    jn, nmask, lm, mmask, dd, cells, smask = _indices(n, m2, D, BLOCK_N, BLOCK_L, BLOCK_D)
    oo = tl.arange(0, BLOCK_O)
    cc = tl.arange(0, BLOCK_C)
    gmb = gm_ptr + b * row
    gcb = gc_ptr + b * nL
    # running gradients of Q^{s+1}, K^{s+1}, tail^{s+1}, starting from the last state
    gq = tl.load(gq_ptr + (b * (T + 1) + T) * n + jn, mask=nmask, other=0.0).to(tl.float32)
    gs = tl.load(gk_ptr + (b * (T + 1) + T) * D * m2 + cells, mask=smask, other=0.0).to(tl.float32)
    gt = tl.load(gt_ptr + (b * (T + 1) + T) * m2 + lm, mask=mmask, other=0.0).to(tl.float32)
    gh = 0.0
    for i in range(T):
        s = T - 1 - i
        ps = p_ptr + (b * (T + 1) + s) * row
        pn = ps + row
        zs = z_ptr + (b * T + s) * O
        gzs = gz_ptr + (b * T + s) * O
        wh = wh_ptr + (b * T + s) * 3
        w0 = tl.load(wh).to(tl.float32)
        w1 = tl.load(wh + 1).to(tl.float32)
        w2 = tl.load(wh + 2).to(tl.float32)
        # through π: ∂ of the cells' pre-activations H·mix − H/2, and of the three weights
        kn = tl.load(pn + m2 + cells, mask=smask, other=0.0).to(tl.float32)
        gm = gs * kn * (1.0 - kn)
        above = tl.load(ps + cells, mask=smask, other=0.0).to(tl.float32)
        own = tl.load(ps + m2 + cells, mask=smask, other=0.0).to(tl.float32)
        below = tl.load(ps + 2 * m2 + cells, mask=smask, other=0.0).to(tl.float32)
        gw0 = tl.sum(tl.sum(above * gm, 1), 0)
        gw1 = tl.sum(tl.sum(own * gm, 1), 0)
        gw2 = tl.sum(tl.sum(below * gm, 1), 0)
        tl.store(gmb + m2 + cells, gm, mask=smask)
        tl.debug_barrier()
        g_stack = (
            gm * w1
            + tl.load(gmb + 2 * m2 + cells, mask=smask, other=0.0) * w0  # K_i is above cell i+1
            + tl.load(gmb + cells, mask=smask, other=0.0) * w2  # K_i is below cell i−1
        )
        tail_n = tl.load(pn + (D + 1) * m2 + lm, mask=mmask, other=0.0).to(tl.float32)
        g_tail_pre = gt * tail_n * (1.0 - tail_n)
        g_tail = H * g_tail_pre + tl.load(gmb + D * m2 + lm, mask=mmask, other=0.0) * w2
        g_push = H * (gw0 - gw1)
        g_pop = H * (gw2 - gw1)
        g_c = tl.load(gmb + m2 + lm, mask=mmask, other=0.0) * w0  # C is above cell 0
        qn = tl.load(q_ptr + (b * (T + 1) + s + 1) * n + jn, mask=nmask, other=0.0).to(tl.float32)
        g_q_pre = gq * qn * (1.0 - qn)
        if LEARN_H:
            # each h_H(u − 1/2) = σ(H u − H/2) adds Σ ∂pre · (u − 1/2); for the cells u − 1/2 =
            # Σ_i w_i window_i / H − 1/2
            gh += (gw0 * w0 + gw1 * w1 + gw2 * w2) / H - tl.sum(tl.sum(gm, 1), 0) / 2
            tail_s = tl.load(ps + (D + 1) * m2 + lm, mask=mmask, other=0.5).to(tl.float32)
            gh += tl.sum(g_tail_pre * (tail_s - 0.5), 0)
            zq = tl.load(zs + jn, mask=nmask, other=0.5).to(tl.float32)
            gh += tl.sum(g_q_pre * (zq - 0.5), 0)
        if ACTION == 1:
            z_push = tl.load(zs + n).to(tl.float32)
            z_pop = tl.load(zs + n + 1).to(tl.float32)
            z_c = tl.load(zs + n + 2 + lm, mask=mmask, other=0.5).to(tl.float32)
            a = _sig(H * z_push - H / 2)
            g_push = g_push * a * (1.0 - a)
            a = _sig(H * z_pop - H / 2)
            g_pop = g_pop * a * (1.0 - a)
            ac = _sig(H * z_c - H / 2)
            g_c = g_c * ac * (1.0 - ac)
            if LEARN_H:
                gh += g_push * (z_push - 0.5) + g_pop * (z_pop - 0.5) + tl.sum(g_c * (z_c - 0.5), 0)
            g_push = g_push * H
            g_pop = g_pop * H
            g_c = g_c * H
        elif ACTION == 2:
            z_push = tl.load(zs + n).to(tl.float32)
            z_pop = tl.load(zs + n + 1).to(tl.float32)
            z_c = tl.load(zs + n + 2 + lm, mask=mmask, other=0.0).to(tl.float32)
            g_push = tl.where((z_push >= 0.0) & (z_push <= 1.0), g_push, 0.0)
            g_pop = tl.where((z_pop >= 0.0) & (z_pop <= 1.0), g_pop, 0.0)
            g_c = tl.where((z_c >= 0.0) & (z_c <= 1.0), g_c, 0.0)
        tl.store(gzs + jn, H * g_q_pre, mask=nmask)
        tl.store(gzs + n, g_push)
        tl.store(gzs + n + 1, g_pop)
        tl.store(gzs + n + 2 + lm, g_c, mask=mmask)
        tl.debug_barrier()
        # ∂(Q ⊗ R)[c] = Σ_o W[o, j, k, l] ∂z_o
        k = tl.load(ids_ptr + b * T + s).to(tl.int64)
        wk = wk_ptr + k * O * nL
        for c0 in range(0, nL, BLOCK_C):
            c = c0 + cc
            cmask = c < nL
            acc = tl.zeros([BLOCK_C], dtype=tl.float32)
            for o0 in range(0, O, BLOCK_O):
                o = o0 + oo
                omask = o < O
                g = tl.load(gzs + o, mask=omask, other=0.0)
                w = tl.load(
                    wk + o[:, None] * nL + c[None, :], mask=omask[:, None] & cmask[None, :], other=0.0
                )
                acc += tl.sum(w.to(tl.float32) * g[:, None], 0)
            tl.store(gcb + c, acc, mask=cmask)
        tl.debug_barrier()
        gqr = tl.load(gcb + jn[:, None] * L + lm[None, :], mask=nmask[:, None] & (lm < L)[None, :], other=0.0)
        q_s = tl.load(q_ptr + (b * (T + 1) + s) * n + jn, mask=nmask, other=0.0).to(tl.float32)
        r_s = tl.load(r_ptr + (b * T + s) * L + lm, mask=lm < L, other=0.0).to(tl.float32)
        g_read = tl.sum(gqr * q_s[:, None], 0)  # ∂L/∂R^s  [L]
        # R^s = (K_0, 1 − max K_0): the max's gradient split evenly over ties, as torch.amax
        top = tl.load(ps + m2 + lm, mask=mmask, other=0.0).to(tl.float32)
        at_max = tl.where(mmask & (top == tl.max(tl.where(mmask, top, float("-inf")), 0)), 1.0, 0.0)
        g_empty = tl.sum(tl.where(lm == m2, g_read, 0.0), 0)
        g_top = tl.where(mmask, g_read - g_empty * at_max / tl.sum(at_max, 0), 0.0)
        g_stack += tl.where(dd[:, None] == 0, g_top[None, :], 0.0)
        gq = tl.load(gq_ptr + (b * (T + 1) + s) * n + jn, mask=nmask, other=0.0).to(tl.float32) + tl.sum(
            gqr * r_s[None, :], 1
        )
        gs = (
            tl.load(gk_ptr + (b * (T + 1) + s) * D * m2 + cells, mask=smask, other=0.0).to(tl.float32)
            + g_stack
        )
        gt = tl.load(gt_ptr + (b * (T + 1) + s) * m2 + lm, mask=mmask, other=0.0).to(tl.float32) + g_tail
    tl.store(g0q_ptr + b * n + jn, gq, mask=nmask)
    tl.store(g0k_ptr + b * D * m2 + cells, gs, mask=smask)
    tl.store(g0t_ptr + b * m2 + lm, gt, mask=mmask)
    tl.store(gh_ptr + b, gh)


def _blocks(n: int, m2: int, D: int, O: int) -> dict[str, int]:
    L = m2 + 1
    return {
        "BLOCK_N": triton.next_power_of_2(n),
        "BLOCK_L": triton.next_power_of_2(L),
        "BLOCK_D": triton.next_power_of_2(D),
        "BLOCK_O": min(32, triton.next_power_of_2(O)),
        "BLOCK_C": min(128, triton.next_power_of_2(n * L)),
    }


def _num_warps(D: int, m2: int) -> int:
    """Warps per program: 8, whose registers hold the window's tiles without spilling at the
    benchmark's sizes (``python -m benchmarks.kernel_compile``, sm_90, n 64, depth 64, 4
    symbols: 4 warps spilled 48 bytes per thread in the backward, 8 none), and 16 for windows of
    over 4,096 cells."""
    return 8 if D * triton.next_power_of_2(m2 + 1) <= 4096 else 16


class NNPDATriton(torch.autograd.Function):
    """``weight [O, n, m1, L]``, ``sensitivity`` (0-d), ``q0 [B, n]``, ``stack0 [B, D, m2]``,
    ``tail0 [B, m2]``, ``ids [B, T]``, ``action`` code -> ``Q [B, T+1, n]``, ``K [B, T+1, D,
    m2]``, ``tail [B, T+1, m2]``, ``p+ [B, T]`` (as :class:`memrnn.ops.nnpda.cpu.NNPDASequence`).
    Members: every argument and result with the member dimension first (``weight [M, O, n, m1,
    L]``, ``sensitivity [M]``, ``ids [M, B, T]`` -> ``Q [M, B, T+1, n]``, …), one launch per
    direction for all of them (a grid of rows × members)."""

    @staticmethod
    def forward(ctx, weight, sensitivity, q0, stack0, tail0, ids, action):  # type: ignore[override]
        O, n, m1, L = weight.shape[-4:]
        lead = weight.shape[:-4]  # (M,) with members
        members = lead[0] if lead else 1
        B, D, m2 = stack0.shape[-3:]
        T = ids.shape[-1]
        dt = q0.dtype
        # wk[k, o, j·L + l]; with members member μ's symbol k at μ·m1 + k, its rows' ids offset to it
        wk = weight.reshape(members, O, n, m1, L).permute(0, 3, 1, 2, 4).reshape(members * m1, O, n * L)
        wk = wk.contiguous()
        if lead:
            ids = ids + (torch.arange(members, device=ids.device) * m1).view(-1, 1, 1)
        ids = ids.reshape(members * B, T).contiguous()
        h = sensitivity.detach().reshape(members).to(torch.float32).contiguous()
        rows = members * B
        Q = q0.new_empty(rows, T + 1, n)
        P = q0.new_empty(rows, T + 1, D + 2, m2)
        Q[:, 0] = q0.reshape(rows, n)
        P[:, 0, 1 : D + 1] = stack0.reshape(rows, D, m2)
        P[:, 0, D + 1] = tail0.reshape(rows, m2)
        P[:, T, 0] = 0
        R = q0.new_empty(rows, T, L)
        Z = q0.new_empty(rows, T, O)
        Wh = q0.new_empty(rows, T, 3)
        blocks = _blocks(n, m2, D, O)
        if rows > 0 and T > 0:
            _nnpda_fwd[(B, members)](
                ids, wk, h, Q, P, R, Z, Wh, T, n, m2, D, O,
                ACTION_CODES[action], **blocks, num_warps=_num_warps(D, m2),
            )  # fmt: skip
        ctx.action, ctx.h_dtype, ctx.lead = action, sensitivity.dtype, lead
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(wk, h, ids, Q, P, R, Z, Wh)
        push = (Wh[:, :, 0].float() / h.repeat_interleave(B)[:, None]).to(dt)  # p+ of every step (strict)
        ctx.mark_non_differentiable(push)
        shape = (*lead, B)  # the members' rows back to [M, B, ...] (views)
        return tuple(t.unflatten(0, shape) for t in (Q, P[:, :, 1 : D + 1], P[:, :, D + 1], push))

    @staticmethod
    @first_order
    def backward(ctx, gQ, gK, gtail, _gpush):  # type: ignore[override]
        wk, h, ids, Q, P, R, Z, Wh = ctx.saved_tensors
        lead = ctx.lead
        members = lead[0] if lead else 1
        m1, O, nL = wk.shape
        m1 //= members
        rows, T1, D2, m2 = P.shape
        B = rows // members if members else 0
        T, D, n = T1 - 1, D2 - 2, Q.shape[2]
        L = m2 + 1
        dev = Q.device

        def incoming(g: Tensor | None, shape: tuple[int, ...]) -> Tensor:
            if g is None:
                return torch.zeros(shape, device=dev, dtype=torch.float32)
            return g.reshape(shape).contiguous()

        gQ = incoming(gQ, (rows, T1, n))
        gK = incoming(gK, (rows, T1, D, m2))
        gtail = incoming(gtail, (rows, T1, m2))
        f32 = {"device": dev, "dtype": torch.float32}
        GZ = torch.empty(rows, T, O, **f32)
        g0q, g0k, g0t = (
            torch.empty(rows, n, **f32),
            torch.empty(rows, D, m2, **f32),
            torch.empty(rows, m2, **f32),
        )
        gh = torch.zeros(rows, **f32)
        learn_h = ctx.needs_input_grad[1]
        if rows > 0 and T > 0:
            gm = torch.zeros(rows, D + 2, m2, **f32)
            gc = torch.empty(rows, nL, **f32)
            _nnpda_bwd[(B, members)](
                ids, wk, h, Q, P, R, Z, Wh, gQ, gK, gtail, GZ, g0q, g0k, g0t, gh, gm, gc,
                T, n, m2, D, O, ACTION_CODES[ctx.action], learn_h, **_blocks(n, m2, D, O),
                num_warps=_num_warps(D, m2),
            )  # fmt: skip
        else:
            g0q, g0k, g0t = gQ[:, 0].float(), gK[:, 0].float(), gtail[:, 0].float()
        grad_w = None
        if ctx.needs_input_grad[0]:
            QR = (Q[:, :-1, :, None].float() * R[:, :, None, :].float()).reshape(rows, T, n * L)
            dwk = grouped_weight_grad(ids, QR, GZ, members * m1)  # [M·m1, n·L, O]
            grad_w = dwk.view(members, m1, n, L, O).permute(0, 4, 2, 1, 3).reshape(*lead, O, n, m1, L)
            grad_w = grad_w.to(wk.dtype)
        grad_h = gh.view(members, B).sum(1).reshape(lead).to(ctx.h_dtype) if learn_h else None
        dt = Q.dtype
        g0q, g0k, g0t = (g.to(dt).unflatten(0, (*lead, B)) for g in (g0q, g0k, g0t))
        return grad_w, grad_h, g0q, g0k, g0t, None, None


def nnpda_triton(
    weight: Tensor, sensitivity: Tensor, q0: Tensor, stack0: Tensor, tail0: Tensor, ids: Tensor, action: str
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """:class:`NNPDATriton` (arguments and results as :func:`memrnn.ops.nnpda.nnpda_sequence`, with
    members or without)."""
    if action not in ACTION_CODES:
        raise ValueError(f"the nnPDA kernel has no action {action!r}; it has {', '.join(ACTION_CODES)}")
    return NNPDATriton.apply(weight, sensitivity, q0, stack0, tail0, ids, action)
