"""DuSell & Chiang's nondeterministic stack (NS-RNN 2020; RNS-RNN, its memory-limited variant
2022; the vector RNS-RNN 2023) over a whole sequence in Triton kernels: the run of
``native_step.cpp`` (whose header states the recurrences, the store and the live start offsets)
on GPUs: three launches per step forward and six backward (four kernels and two sums), where the
torch step launches about a hundred small kernels and copies the ``[depth, depth]`` window at
every step (``python -m benchmarks.nondeterministic_launches``).

The store (batch first here, a row's blocks contiguous; ``NC`` columns, ``DO`` start offsets,
``C = 1 + m`` channels: γ, then ζ per vector unit)::

    store  [B, NC, DO, C, QS, QS]   store[b, J − J0, o, ch, u, v] = log γ[i → j][u → v], i = j − 1 − o
    alphas [B, D + T + 1, QS]       alphas[b, J + 1] = log α[j]

and per step ``k`` (``[n, B, …]``, ``n`` the steps kept for the backward): ``R``, ``O`` the replace
and pop weights (the caller's tensors, read through their strides, not copied), ``colR [DO, C, QS, QS]`` (the replace term of offset ``o' = 1..L`` at ``o' − 1``),
``gp [E, QS, Q]`` (the popped runs of offset ``ko``), ``popped [E, C, QS, Q, S]`` (the pop term of
``o' = 2..L`` at ``o' − 2``), ``col [DO + 1, C, QS, QS]`` (the new column before normalisation),
``newA [QS]``, ``z``, ``eta [C − 1, QS]`` (η before normalisation).

Forward, step ``s`` (column ``J = D + s``, ``L = min(live + s, D)`` offsets):

* ``_ns_replace_fwd``, one program per (offset ``i < L``, row): ``colR[i] = store[J−1][i] ⊗ R``
  over the block's ``C·QS`` rows ``ρ = (ch, u)`` (every channel at once) and ``gp[i] =
  store[J−1][i][0] ⊗ O``;
* ``_ns_pop_fwd``, one program per (offset ``o' ≤ L``, row), over the rows ``ρ``: the push column
  (``o' = 0``), the replace term alone (``o' = 1``), or the pop term streamed over
  ``ko = 0..o'−2`` (one exact log-sum-exp, its running maximum and sum kept per output) and
  ``col[o'] = colR ⊕ popped``;
* ``_ns_alpha_fwd``, one program per row: ``newA``, ``η`` and ``z`` over the column, then the
  column normalised into the store, ``α[j]`` into ``alphas``.

Backward, step ``s`` in reverse: ``_ns_norm_bwd`` (the normaliser's gradient, per row),
``_ns_col_bwd`` (per offset: the column's gradient from the store's and the forward weights',
split into the replace and pop terms; the push's), ``_ns_pop_bwd`` (per ``ko``: the pop term's
gradient into the store blocks it read, each written by one program, and into ``gp``),
``_ns_replace_bwd`` (per offset: the replace and popped-run products' gradients into column
``J − 1`` and per-offset partial sums of ``R``'s and ``O``'s, summed by torch).

The loops over start offsets (the pop term's ``ko``, the forward weights' ``o'``, the pop
term's backward ``o'``) take as many offsets per iteration as fit a tile of :data:`TILE`
elements, folded into the axis they reduce, so that a program keeps that many independent loads
in flight instead of one chain of ``L`` dependent iterations.  Every log-sum-exp is exact (the
maximum of its own terms first); padded lanes hold ``−∞`` and drop out.  Float32 and float64.  Tested against the C++ run and the torch step under Triton's
interpreter (``tests/ops/test_nondeterministic.py``).
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl
from torch import Tensor

from memrnn.ops.nondeterministic import LOG_ZERO

_LZ: tl.constexpr = tl.constexpr(LOG_ZERO)
_ALIVE: tl.constexpr = tl.constexpr(LOG_ZERO / 2)


def warps(elements: int) -> int:
    """Warps per program for tiles of ``elements`` elements: 2 up to 512 (the plain stack at the
    papers' 2 states × 3 symbols: tiles of 128–512), then one more warp per 256, at most 8 (the
    vector stack's rows ``ρ = (ch, u)``: 4,096 at ``m = 5``, which spilled 700 bytes per thread
    of float64 with 2 warps on sm_90)."""
    return max(2, min(8, triton.next_power_of_2(elements) // 256))


# Helpers are called outside loops only: Triton's interpreter re-patches the language at every
# call of a nested function (about a millisecond), so the loops' running log-sum-exps are written
# out in place.
@triton.jit
def _lse(t, axis: tl.constexpr):
    """``log Σ exp(t)`` along ``axis``, exact (its own maximum first); all ``−∞``: ``−∞``."""
    m = tl.max(t, axis)
    m = tl.where(m == float("-inf"), 0.0, m)
    s = tl.sum(tl.exp(t - tl.expand_dims(m, axis)), axis)
    return tl.where(s > 0, m + tl.log(tl.where(s > 0, s, 1.0)), float("-inf"))


@triton.jit
def _lse_end(m, s):
    """``m + log s`` of a running log-sum-exp (maximum ``m``, sum ``s`` relative to it); ``−∞``
    where it had no term (no ``log 0`` is taken)."""
    return tl.where(s > 0, m + tl.log(tl.where(s > 0, s, 1.0)), float("-inf"))


@triton.jit
def _ns_replace_fwd(
    store, R, O, colR, gp, jc, L, NC, DO, E, sRb, sRr, sRc, sOb, sOr, sOc,
    QS: tl.constexpr, Q: tl.constexpr, C: tl.constexpr, UP: tl.constexpr, QP: tl.constexpr,
    RP: tl.constexpr,
):  # fmt: skip
    """``colR[i] = store[J−1][i] ⊗ R`` over the block's ``C·QS`` rows ``ρ = (ch, u)`` and
    ``gp[i] = store[J−1][i][0] ⊗ O`` (log vector-matrix products), program ``(i, b)``; ``jc``:
    column ``J − 1``'s index in the store."""
    i = tl.program_id(0)
    b = tl.program_id(1).to(tl.int64)
    BLK: tl.constexpr = C * QS * QS
    rho = tl.arange(0, RP)[:, None, None]
    w = tl.arange(0, UP)[None, :, None]
    v = tl.arange(0, UP)[None, None, :]
    blk = store + ((b * NC + jc) * DO + i) * BLK
    rt = tl.load(R + b * sRb + w * sRr + v * sRc, mask=(w < QS) & (v < QS), other=float("-inf"))
    a = tl.load(blk + rho * QS + w, mask=(rho < C * QS) & (w < QS), other=float("-inf"))
    r2 = tl.arange(0, RP)[:, None]
    v2 = tl.arange(0, UP)[None, :]
    tl.store(colR + (b * DO + i) * BLK + r2 * QS + v2, _lse(a + rt, 1), mask=(r2 < C * QS) & (v2 < QS))
    if i < L - 1:
        r = tl.arange(0, QP)[None, None, :]
        a0 = tl.load(blk + rho * QS + w, mask=(rho < QS) & (w < QS), other=float("-inf"))  # [w, v, 1]
        ot = tl.load(
            O + b * sOb + w * sOr + r * sOc, mask=(w < QS) & (r < Q), other=float("-inf")
        )  # [1, v, r]
        q2 = tl.arange(0, QP)[None, :]
        tl.store(gp + ((b * E + i) * QS + r2) * Q + q2, _lse(a0 + ot, 1), mask=(r2 < QS) & (q2 < Q))


@triton.jit
def _ns_pop_fwd(
    store, gp, colR, popped, col, P, V, jc, NC, DO, E, sPb, sPr, sPc,
    QS: tl.constexpr, Q: tl.constexpr, S: tl.constexpr, C: tl.constexpr,
    UP: tl.constexpr, QP: tl.constexpr, SP: tl.constexpr, RP: tl.constexpr, KB: tl.constexpr,
):  # fmt: skip
    """The new column before normalisation over its ``C·QS`` rows ``ρ = (ch, u)``, program
    ``(o', b)``: the push (``o' = 0``; channel ``ch ≥ 1`` adds the pushed vector's unit
    ``ch − 1``), the replace term (``o' = 1``), or ``colR ⊕ popped`` with the pop term
    ``popped[o'][ρ][r][y] = ⊕_{ko ≤ o'−2} ⊕_q store[J−2−ko][o'−2−ko][ρ][q y] ⊗ gp[ko][q y][r]``,
    ``KB`` values of ``ko`` at a time (the axis reduced holds ``(ko, q)``); ``jc``: column ``J``'s
    index in the store."""
    o = tl.program_id(0)
    b = tl.program_id(1).to(tl.int64)
    BLK: tl.constexpr = C * QS * QS
    r2 = tl.arange(0, RP)[:, None]
    v2 = tl.arange(0, UP)[None, :]
    m2 = (r2 < C * QS) & (v2 < QS)
    out_col = col + (b * (DO + 1) + o) * BLK
    if o == 0:
        p = tl.load(P + b * sPb + (r2 % QS) * sPr + v2 * sPc, mask=m2, other=0.0)
        p += tl.load(V + b * (C - 1) + r2 // QS - 1, mask=(r2 >= QS) & (r2 < C * QS), other=0.0)
        tl.store(out_col + r2 * QS + v2, p, mask=m2)
    elif o == 1:
        tl.store(
            out_col + r2 * QS + v2, tl.load(colR + (b * DO) * BLK + r2 * QS + v2, mask=m2, other=0.0), mask=m2
        )
    else:
        rho = tl.arange(0, RP)[:, None, None, None]
        kq = tl.arange(0, KB * QP)[None, :, None, None]  # (ko − k0, q)
        q = kq % QP
        y = tl.arange(0, SP)[None, None, :, None]
        r = tl.arange(0, QP)[None, None, None, :]
        back = (b * 0 + DO + 1) * BLK  # one column back and one offset down (ko + 1); int64, as b
        a_ptr = store + ((b * NC + jc - 2) * DO + o - 2) * BLK + rho * QS + q * S + y - (kq // QP) * back
        c_ptr = gp + b * E * QS * Q + ((kq // QP) * QS + q * S + y) * Q + r
        m = tl.full((RP, SP, QP), float("-inf"), popped.dtype.element_ty)
        s = tl.zeros((RP, SP, QP), popped.dtype.element_ty)
        for k0 in range(0, o - 1, KB):
            live = (kq // QP < o - 1 - k0) & (q < Q) & (y < S)
            t = tl.load(a_ptr - k0 * back, mask=live & (rho < C * QS), other=float("-inf"))
            t += tl.load(c_ptr + k0 * (QS * Q), mask=live & (r < Q), other=float("-inf"))
            mn = tl.maximum(m, tl.max(t, 1))
            mr = tl.where(mn == float("-inf"), 0.0, mn)
            s = s * tl.exp(m - mr) + tl.sum(tl.exp(t - mr[:, None, :, :]), 1)
            m = mn
        pop = _lse_end(m, s)  # [ρ, y, r]
        r3 = tl.arange(0, RP)[:, None, None]
        y3 = tl.arange(0, SP)[None, :, None]
        q3 = tl.arange(0, QP)[None, None, :]
        m3 = (r3 < C * QS) & (y3 < S) & (q3 < Q)
        tl.store(popped + (((b * E + o - 2) * C * QS + r3) * Q + q3) * S + y3, pop, mask=m3)
        cr = tl.load(colR + (b * DO + o - 1) * BLK + r3 * QS + q3 * S + y3, mask=m3, other=0.0)
        hi = tl.maximum(cr, pop)
        tl.store(out_col + r3 * QS + q3 * S + y3, hi + tl.log(tl.exp(cr - hi) + tl.exp(pop - hi)), mask=m3)


@triton.jit
def _ns_alpha_fwd(
    store, alphas, col, newA, z_out, eta, top, eta_out, J, jc, L, NORM, NC, DO, NA,
    QS: tl.constexpr, C: tl.constexpr, CP: tl.constexpr, UP: tl.constexpr, OB: tl.constexpr,
):  # fmt: skip
    """Program ``b``: ``newA[ch][v] = ⊕_{o'} ⊕_u alphas[J − o'][u] ⊗ col[o'][ch][u][v]`` (``α`` for
    channel 0, ``η`` for the others; ``OB`` offsets at a time, the axis reduced holding
    ``(o', u)``), ``z = ⊕_v newA[0][v]``, then ``α[j]``, ``η`` and the column's offsets
    ``0..NORM`` normalised by ``z`` (``jc``: column ``J``'s index in the store)."""
    b = tl.program_id(0).to(tl.int64)
    BLK: tl.constexpr = C * QS * QS
    c3 = tl.arange(0, CP)[:, None, None]
    ou = tl.arange(0, OB * UP)[None, :, None]  # (o' − o0, u)
    u3 = ou % UP
    v3 = tl.arange(0, UP)[None, None, :]
    mk = (c3 < C) & (u3 < QS) & (v3 < QS)
    cell = (ou // UP) * BLK + (c3 * QS + u3) * QS + v3
    al_ptr = alphas + (b * NA + J - ou // UP) * QS + u3  # o' = o0 + ou // UP
    col_ptr = col + b * (DO + 1) * BLK + cell
    m = tl.full((CP, UP), float("-inf"), col.dtype.element_ty)
    s = tl.zeros((CP, UP), col.dtype.element_ty)
    for o0 in range(0, L + 1, OB):
        live = ou // UP <= L - o0
        t = tl.load(al_ptr - o0 * QS, mask=live & (u3 < QS), other=float("-inf"))
        t += tl.load(col_ptr + o0 * BLK, mask=live & mk, other=float("-inf"))
        mn = tl.maximum(m, tl.max(t, 1))
        mr = tl.where(mn == float("-inf"), 0.0, mn)
        s = s * tl.exp(m - mr) + tl.sum(tl.exp(t - mr[:, None, :]), 1)
        m = mn
    na = _lse_end(m, s)  # [ch, v]
    c2 = tl.arange(0, CP)[:, None]
    v2 = tl.arange(0, UP)[None, :]
    first = tl.sum(tl.where(c2 == 0, na, 0.0), 0)  # newA [v]
    v1 = tl.arange(0, UP)
    z = _lse(tl.where(v1 < QS, first, float("-inf")), 0)
    tl.store(newA + b * QS + v1, first, mask=v1 < QS)
    tl.store(z_out + b, z)
    a_new = tl.where(first - z > _ALIVE, first - z, _LZ)
    tl.store(alphas + (b * NA + J + 1) * QS + v1, a_new, mask=v1 < QS)
    tl.store(top + b * QS + v1, a_new, mask=v1 < QS)
    me = (c2 >= 1) & (c2 < C) & (v2 < QS)
    tl.store(eta + (b * (C - 1) + c2 - 1) * QS + v2, na, mask=me)
    tl.store(eta_out + (b * (C - 1) + c2 - 1) * QS + v2, tl.where(na - z > _ALIVE, na - z, _LZ), mask=me)
    dst = store + (b * NC + jc) * DO * BLK + cell
    for o0 in range(0, NORM + 1, OB):
        live = mk & (ou // UP <= NORM - o0)
        x = tl.load(col_ptr + o0 * BLK, mask=live, other=0.0) - z
        tl.store(dst + o0 * BLK, tl.where(x > _ALIVE, x, _LZ), mask=live)


@triton.jit
def _ns_norm_bwd(
    gstore, galphas, g_top, g_eta, col, newA, z_in, eta, gna, J, jc, NORM, NC, DO, NA, sTb, sTv, sEb, sEc, sEv,
    QS: tl.constexpr, C: tl.constexpr, CP: tl.constexpr, UP: tl.constexpr, OB: tl.constexpr,
    HAS_TOP: tl.constexpr, HAS_ETA: tl.constexpr,
):  # fmt: skip
    """Program ``b``: the gradient of ``newA`` (channel 0, with the normaliser's) and of ``η``
    (channels ``1..``) before normalisation, into ``gna [B, C, QS]``; ``g_top`` is added to
    ``α[j]``'s gradient in ``galphas`` (``HAS_TOP``, ``HAS_ETA``: whether ``g_top``, ``g_eta``
    were sent)."""
    b = tl.program_id(0).to(tl.int64)
    BLK: tl.constexpr = C * QS * QS
    v1 = tl.arange(0, UP)
    vm = v1 < QS
    z = tl.load(z_in + b)
    ga = tl.load(galphas + (b * NA + J + 1) * QS + v1, mask=vm, other=0.0)
    if HAS_TOP:
        ga += tl.load(g_top + b * sTb + v1 * sTv, mask=vm, other=0.0)
    tl.store(galphas + (b * NA + J + 1) * QS + v1, ga, mask=vm)
    na = tl.load(newA + b * QS + v1, mask=vm, other=_LZ)
    gn = tl.where(vm & (na - z > _ALIVE), ga, 0.0)
    gz = -tl.sum(gn, 0)
    c2 = tl.arange(0, CP)[:, None]
    v2 = tl.arange(0, UP)[None, :]
    me = (c2 >= 1) & (c2 < C) & (v2 < QS)
    e = tl.load(eta + (b * (C - 1) + c2 - 1) * QS + v2, mask=me, other=_LZ)
    if HAS_ETA:
        ge = tl.load(g_eta + b * sEb + (c2 - 1) * sEc + v2 * sEv, mask=me, other=0.0)
    else:
        ge = tl.zeros((CP, UP), gna.dtype.element_ty)
    ge = tl.where(me & (e - z > _ALIVE), ge, 0.0)
    gz -= tl.sum(tl.sum(ge, 1), 0)
    c3 = tl.arange(0, CP)[:, None, None]
    ou = tl.arange(0, OB * UP)[None, :, None]  # (o' − o0, u): OB offsets at a time
    u3 = ou % UP
    v3 = tl.arange(0, UP)[None, None, :]
    mk = (c3 < C) & (u3 < QS) & (v3 < QS)
    cell = (ou // UP) * BLK + (c3 * QS + u3) * QS + v3
    col_ptr = col + b * (DO + 1) * BLK + cell
    gs_ptr = gstore + (b * NC + jc) * DO * BLK + cell
    kept = tl.zeros((CP, OB * UP, UP), col.dtype.element_ty)
    for o0 in range(0, NORM + 1, OB):
        live = mk & (ou // UP <= NORM - o0)
        cl = tl.load(col_ptr + o0 * BLK, mask=live, other=_LZ)
        gs = tl.load(gs_ptr + o0 * BLK, mask=live, other=0.0)
        kept += tl.where(live & (cl - z > _ALIVE), gs, 0.0)
    gz -= tl.sum(tl.sum(tl.sum(kept, 2), 1), 0)
    gn += gz * tl.exp(tl.where(vm, na - z, float("-inf")))
    tl.store(gna + b * C * QS + v1, gn, mask=vm)
    tl.store(gna + (b * C + c2) * QS + v2, ge, mask=me)


@triton.jit
def _ns_col_bwd(
    gstore, galphas, alphas, col, colR, popped, newA, z_in, eta, gna, gP, gV, gcolR, gpop,
    J, jc, D, NC, DO, E, NA,
    QS: tl.constexpr, Q: tl.constexpr, S: tl.constexpr, C: tl.constexpr, CP: tl.constexpr, UP: tl.constexpr,
):  # fmt: skip
    """Program ``(o', b)``: the gradient of the column's offset ``o'`` (from the store's, where
    it was kept and alive, and from ``newA``'s and ``η``'s), its forward weight's into
    ``galphas[J − o']``, then split into the push's (``gP``, ``gV``; ``o' = 0``), the replace
    term's (``gcolR``) and the pop term's (``gpop``)."""
    o = tl.program_id(0)
    b = tl.program_id(1).to(tl.int64)
    BLK: tl.constexpr = C * QS * QS
    z = tl.load(z_in + b)
    c3 = tl.arange(0, CP)[:, None, None]
    u3 = tl.arange(0, UP)[None, :, None]
    v3 = tl.arange(0, UP)[None, None, :]
    mk = (c3 < C) & (u3 < QS) & (v3 < QS)
    cell = (c3 * QS + u3) * QS + v3
    cl = tl.load(col + (b * (DO + 1) + o) * BLK + cell, mask=mk, other=_LZ)
    kept = mk & (c3 * 0 + o < D) & (c3 * 0 + o < DO)  # a tensor: scalar masks break the interpreter
    gs = tl.load(gstore + ((b * NC + jc) * DO + o) * BLK + cell, mask=kept, other=0.0)
    g = tl.where(kept & (cl - z > _ALIVE), gs, 0.0)
    # the forward weights: newA[ch][v] = ⊕ alphas[J − o'][u] ⊗ col[o'][ch][u][v]
    al = tl.load(alphas + (b * NA + J - o) * QS + u3, mask=u3 < QS, other=_LZ)
    na0 = tl.load(newA + b * QS + v3, mask=(c3 == 0) & (v3 < QS), other=_LZ)
    nae = tl.load(eta + (b * (C - 1) + c3 - 1) * QS + v3, mask=(c3 >= 1) & (c3 < C) & (v3 < QS), other=_LZ)
    gn = tl.load(gna + (b * C + c3) * QS + v3, mask=(c3 < C) & (v3 < QS), other=0.0)
    w = tl.exp(tl.where(mk, al + cl - tl.where(c3 == 0, na0, nae), float("-inf"))) * gn
    g += w
    u1 = tl.arange(0, UP)
    ga_at = galphas + (b * NA + J - o) * QS + u1
    tl.store(ga_at, tl.load(ga_at, mask=u1 < QS, other=0.0) + tl.sum(tl.sum(w, 2), 0), mask=u1 < QS)
    if o == 0:
        u2 = tl.arange(0, UP)[:, None]
        v2 = tl.arange(0, UP)[None, :]
        tl.store(gP + b * QS * QS + u2 * QS + v2, tl.sum(g, 0), mask=(u2 < QS) & (v2 < QS))
        c1 = tl.arange(0, CP)
        tl.store(gV + b * (C - 1) + c1 - 1, tl.sum(tl.sum(g, 2), 1), mask=(c1 >= 1) & (c1 < C))
    elif o == 1:
        tl.store(gcolR + b * DO * BLK + cell, g, mask=mk)
    else:
        rat = (b * DO + o - 1) * BLK + cell
        cr = tl.load(colR + rat, mask=mk, other=_LZ)
        tl.store(gcolR + rat, g * tl.exp(cr - cl), mask=mk)
        pat = (((b * E + o - 2) * C * QS + c3 * QS + u3) * Q + v3 // S) * S + v3 % S
        pp = tl.load(popped + pat, mask=mk, other=_LZ)
        tl.store(gpop + pat, g * tl.exp(pp - cl), mask=mk)


@triton.jit
def _ns_pop_bwd(
    store, gstore, gp, popped, gpop, ggp, jc, L, NC, DO, E,
    QS: tl.constexpr, Q: tl.constexpr, S: tl.constexpr, C: tl.constexpr,
    QP: tl.constexpr, SP: tl.constexpr, RP: tl.constexpr, OB: tl.constexpr,
):  # fmt: skip
    """Program ``(ko, b)``: the pop term's gradient into every store block it read with the
    popped runs of offset ``ko`` (``store[J−2−ko][o'−2−ko]``, ``o' = ko+2..L``: blocks no other
    program touches; ``OB`` of them at a time, the first axis holding ``(o', ρ)``) and into
    ``ggp[ko]``; ``jc``: column ``J``'s index in the store."""
    ko = tl.program_id(0)
    b = tl.program_id(1).to(tl.int64)
    BLK: tl.constexpr = C * QS * QS
    orho = tl.arange(0, OB * RP)[:, None, None, None]  # (o' − o0, ρ)
    rho = orho % RP
    q = tl.arange(0, QP)[None, :, None, None]
    y = tl.arange(0, SP)[None, None, :, None]
    r = tl.arange(0, QP)[None, None, None, :]
    mc = (q < Q) & (y < S) & (r < Q)
    c = tl.load(gp + ((b * E + ko) * QS + q * S + y) * Q + r, mask=mc, other=_LZ)
    # o' = o0 + orho // RP: the block store[J−2−ko][o'−2−ko], the pop term's entry o' − 2
    a_at = ((b * NC + jc - 2 - ko) * DO - 2 - ko + orho // RP) * BLK + rho * QS + q * S + y
    p_at = ((b * E - 2 + orho // RP) * C * QS + rho) * Q * S + r * S + y
    acc = tl.zeros((QP, SP, QP), gp.dtype.element_ty)
    for o0 in range(ko + 2, L + 1, OB):
        live = (orho // RP <= L - o0) & (rho < C * QS)
        ma = live & (q < Q) & (y < S)
        mo = live & (y < S) & (r < Q)
        a = tl.load(store + a_at + o0 * BLK, mask=ma, other=_LZ)
        out = tl.load(popped + p_at + o0 * (C * QS * Q * S), mask=mo, other=_LZ)
        g = tl.load(gpop + p_at + o0 * (C * QS * Q * S), mask=mo, other=0.0)
        w = tl.exp(tl.where(ma & mc, a + c - out, float("-inf"))) * g
        ga = tl.load(gstore + a_at + o0 * BLK, mask=ma, other=0.0) + tl.sum(w, 3)[:, :, :, None]
        tl.store(gstore + a_at + o0 * BLK, ga, mask=ma)
        acc += tl.sum(w, 0)
    q3 = tl.arange(0, QP)[:, None, None]
    y3 = tl.arange(0, SP)[None, :, None]
    r3 = tl.arange(0, QP)[None, None, :]
    tl.store(ggp + ((b * E + ko) * QS + q3 * S + y3) * Q + r3, acc, mask=(q3 < Q) & (y3 < S) & (r3 < Q))


@triton.jit
def _ns_replace_bwd(
    store, gstore, R, O, colR, gcolR, gp, ggp, gR_part, gO_part, jc, L, NC, DO, E, sRb, sRr, sRc, sOb, sOr, sOc,
    QS: tl.constexpr, Q: tl.constexpr, C: tl.constexpr, UP: tl.constexpr, QP: tl.constexpr,
    RP: tl.constexpr,
):  # fmt: skip
    """Program ``(i, b)``: the gradients of ``colR[i] = store[J−1][i] ⊗ R`` (rows ``ρ = (ch, u)``)
    and ``gp[i] = store[J−1][i][0] ⊗ O`` into the block ``store[J−1][i]`` (one program's) and
    into this offset's partial sums ``gR_part[b, i]``, ``gO_part[b, i]``; ``jc``: column ``J − 1``'s
    index."""
    i = tl.program_id(0)
    b = tl.program_id(1).to(tl.int64)
    BLK: tl.constexpr = C * QS * QS
    rho = tl.arange(0, RP)[:, None, None]
    w = tl.arange(0, UP)[None, :, None]
    v = tl.arange(0, UP)[None, None, :]
    blk = ((b * NC + jc) * DO + i) * BLK
    # the replace term over every row: colR[i][ρ][v] = ⊕_w store[J−1][i][ρ][w] ⊗ R[w][v]
    rt = tl.load(R + b * sRb + w * sRr + v * sRc, mask=(w < QS) & (v < QS), other=_LZ)  # [1, w, v]
    a = tl.load(store + blk + rho * QS + w, mask=(rho < C * QS) & (w < QS), other=_LZ)  # [ρ, w, 1]
    at = (b * DO + i) * BLK + rho * QS + v
    out = tl.load(colR + at, mask=(rho < C * QS) & (v < QS), other=_LZ)  # [ρ, 1, v]
    g = tl.load(gcolR + at, mask=(rho < C * QS) & (v < QS), other=0.0)
    wt = tl.exp(tl.where((rho < C * QS) & (w < QS) & (v < QS), a + rt - out, float("-inf"))) * g
    ga = tl.sum(wt, 2)  # [ρ, w]
    # the popped runs (offsets i < L − 1), on channel 0's rows ρ = w < QS:
    # gp[i][w][r] = ⊕_v store[J−1][i][0][w][v] ⊗ O[v][r]
    r = tl.arange(0, QP)[None, None, :]
    has_gp = (rho < QS) & (rho * 0 + i < L - 1)  # a tensor: scalar masks break the interpreter
    a0 = tl.load(store + blk + rho * QS + w, mask=(rho < QS) & (w < QS), other=_LZ)  # [w, v, 1]
    ot = tl.load(O + b * sOb + w * sOr + r * sOc, mask=(w < QS) & (r < Q), other=_LZ)  # [1, v, r]
    gpo = tl.load(gp + ((b * E + i) * QS + rho) * Q + r, mask=has_gp & (r < Q), other=_LZ)  # [w, 1, r]
    ggo = tl.load(ggp + ((b * E + i) * QS + rho) * Q + r, mask=has_gp & (r < Q), other=0.0)
    wp = tl.exp(tl.where(has_gp & (w < QS) & (r < Q), a0 + ot - gpo, float("-inf"))) * ggo  # [w, v, r]
    r2 = tl.arange(0, RP)[:, None]
    w2 = tl.arange(0, UP)[None, :]
    m2 = (r2 < C * QS) & (w2 < QS)
    dst = gstore + blk + r2 * QS + w2
    tl.store(dst, tl.load(dst, mask=m2, other=0.0) + ga + tl.sum(wp, 2), mask=m2)
    u2 = tl.arange(0, UP)[:, None]
    q2 = tl.arange(0, QP)[None, :]
    tl.store(gO_part + ((b * DO + i) * QS + u2) * Q + q2, tl.sum(wp, 0), mask=(u2 < QS) & (q2 < Q))
    tl.store(gR_part + ((b * DO + i) * QS + u2) * QS + w2, tl.sum(wt, 0), mask=(u2 < QS) & (w2 < QS))


def _p2(n: int) -> int:
    return triton.next_power_of_2(max(int(n), 1))


#: elements a serial loop's tile holds at most: the loops over start offsets take as many offsets
#: per iteration as fit (8 for the plain stack's pop term at 2 states × 3 symbols, 16 for its
#: forward weights), so that a program has that many independent loads in flight, not one
TILE = 1024


def per_iteration(elements: int) -> int:
    """Offsets per iteration of a loop whose tile holds ``elements`` per offset: a power of 2,
    at least 1, at most ``TILE // elements``."""
    return 1 << max(0, (TILE // max(elements, 1)).bit_length() - 1)


@functools.cache
def launch_options(C: int, QS: int, Q: int) -> dict[str, dict[str, int]]:
    """Each kernel family's compile-time sizes and warps for ``C`` channels and ``QS = Q·S``
    configurations: ``replace`` (both replace kernels), ``pop_fwd``, ``alpha`` (``_ns_alpha_fwd``
    and ``_ns_norm_bwd``), ``col`` and ``pop_bwd``."""
    S = QS // Q
    UP, RP, QP, SP, CP = _p2(QS), _p2(C * QS), _p2(Q), _p2(S), _p2(C)
    pop, cell = RP * QP * QP * SP, CP * UP * UP  # the tiles of one offset
    base = {"QS": QS, "C": C}
    return {
        "replace": {**base, "Q": Q, "UP": UP, "QP": QP, "RP": RP, "num_warps": warps(RP * UP * UP)},
        "pop_fwd": {**base, "Q": Q, "S": S, "UP": UP, "QP": QP, "SP": SP, "RP": RP, "KB": per_iteration(pop),
                    "num_warps": warps(max(TILE, pop))},
        "alpha": {**base, "UP": UP, "CP": CP, "OB": per_iteration(cell), "num_warps": warps(max(TILE, cell))},
        "col": {**base, "Q": Q, "S": S, "UP": UP, "CP": CP, "num_warps": warps(cell)},
        "pop_bwd": {**base, "Q": Q, "S": S, "QP": QP, "SP": SP, "RP": RP, "OB": per_iteration(pop),
                    "num_warps": warps(max(TILE, pop))},
    }  # fmt: skip


class TritonRunOps:
    """The operations of a :class:`memrnn.ops.nondeterministic.NondeterministicRun` (those of
    ``native_step.cpp``, with the same arguments) on the store above: CUDA tensors, or CPU tensors
    under Triton's interpreter.  The window's entries go in and out of the store by torch's
    indexing, once per sequence."""

    device_lengths = True  # lengths stay on the run's device

    # -- the window ---------------------------------------------------------------------------
    @staticmethod
    def _pairs(D: int, device: torch.device) -> tuple[Tensor, Tensor]:
        """The window's upper triangle: ``(a, c)`` with ``a ≤ c``, as two index tensors."""
        a, c = torch.triu_indices(D, D, device=device)
        return a, c

    def ns_run_start(
        self, gamma: Tensor, alpha: Tensor, zeta: Tensor | None, steps: int
    ) -> tuple[Tensor, Tensor, Tensor]:
        B, D, _, QS, _ = gamma.shape
        m = 0 if zeta is None else zeta.shape[-1]
        # the start offsets a with an entry alive (every entry, as the C++ run reads them)
        rows = (gamma > LOG_ZERO / 2).flatten(2).any(-1).any(0)  # [a]
        if zeta is not None:
            rows |= (zeta > LOG_ZERO / 2).flatten(2).any(-1).any(0)
        alive_a = rows.nonzero()
        live = D - int(alive_a.min()) if alive_a.numel() else 0  # one synchronisation per run
        Do, J0 = max(1, min(D, live + steps)), D - min(D, live)
        geo = torch.tensor([D, Do, J0, live], dtype=torch.long)
        store = gamma.new_full((B, D - J0 + steps, Do, 1 + m, QS, QS), LOG_ZERO)
        alphas = alpha.new_full((B, D + steps + 1, QS), LOG_ZERO)
        alphas[:, : D + 1] = alpha
        a, c = self._pairs(D, gamma.device)
        keep = (c >= J0) & (c - a < Do)
        a, c = a[keep], c[keep]
        store[:, c - J0, c - a, 0] = _snap_torch(gamma[:, a, c])
        if zeta is not None:
            store[:, c - J0, c - a, 1:] = _snap_torch(zeta[:, a, c].permute(0, 1, 4, 2, 3))
        return store, alphas, geo

    def _window_index(self, geo: Tensor, lengths: Tensor, NC: int):
        D, Do, J0, _ = geo.tolist()
        a, c = self._pairs(D, lengths.device)
        J = lengths[:, None] + c[None] - J0  # [B, P]: the store's column of each entry
        o = (c - a)[None].expand_as(J)
        ok = (J >= 0) & (J < NC) & (o < Do)
        return a, c, J.clamp(0, NC - 1), o.clamp(max=Do - 1), ok

    def ns_run_window(
        self, store: Tensor, alphas: Tensor, geo: Tensor, lengths: Tensor, B: int, fill: float
    ) -> list[Tensor]:
        D = int(geo[0])
        _, NC, _, C, QS, _ = store.shape
        a, c, J, o, ok = self._window_index(geo, lengths, NC)
        rows = torch.arange(B, device=store.device)[:, None]
        entries = store[rows, J, o]  # [B, P, C, QS, QS]
        entries = torch.where(ok[..., None, None, None], entries, entries.new_full((), fill))
        gamma = store.new_full((B, D, D, QS, QS), fill)
        gamma[:, a, c] = entries[:, :, 0]
        zeta = store.new_full((B, D, D, QS, QS, C - 1), fill)
        if C > 1:
            zeta[:, a, c] = entries[:, :, 1:].permute(0, 1, 3, 4, 2)
        p = torch.arange(D + 1, device=store.device)
        alpha = alphas[rows, lengths[:, None] + p[None]]
        return [gamma, alpha, zeta]

    def ns_run_window_backward(
        self,
        gstore: Tensor,
        galphas: Tensor,
        geo: Tensor,
        lengths: Tensor,
        g_gamma: Tensor,
        g_alpha: Tensor,
        g_zeta: Tensor,
    ) -> None:
        B, NC = gstore.shape[:2]
        D = int(geo[0])
        a, c, J, o, ok = self._window_index(geo, lengths, NC)
        rows = torch.arange(B, device=gstore.device)[:, None].expand_as(J)
        g = g_gamma[:, a, c][:, :, None]  # [B, P, 1, QS, QS]
        if gstore.shape[3] > 1:
            g = torch.cat([g, g_zeta[:, a, c].permute(0, 1, 4, 2, 3)], 2)
        gstore.index_put_((rows[ok], J[ok], o[ok]), g[ok], accumulate=True)
        p = torch.arange(D + 1, device=gstore.device)
        galphas.index_put_(
            (torch.arange(B, device=gstore.device)[:, None].expand(B, D + 1), lengths[:, None] + p[None]),
            g_alpha,
            accumulate=True,
        )

    # -- the steps -----------------------------------------------------------------------------
    def ns_run_buffers(self, store: Tensor, geo: Tensor, Q: int, n: int) -> list:
        """Every step's arrays, as ``native_step.cpp``'s, but for ``R`` and ``O``: the steps'
        replace and pop weights themselves (the caller's tensors, read in place through their
        strides, not copied)."""
        B, _, Do, C, QS, _ = store.shape
        S, E = QS // Q, max(Do - 1, 1)
        new = store.new_empty
        return [
            [None] * n,  # R
            [None] * n,  # O
            new(n, B, Do, C, QS, QS),  # colR
            new(n, B, E, QS, Q),  # gp
            new(n, B, E, C, QS, Q, S),  # popped
            new(n, B, Do + 1, C, QS, QS),  # col
            new(n, B, QS),  # newA
            new(n, B),  # z
            new(n, B, max(C - 1, 1), QS),  # eta
        ]

    def ns_run_step(
        self,
        store: Tensor,
        alphas: Tensor,
        buffers: list[Tensor],
        geo: Tensor,
        k: int,
        s: int,
        push: Tensor,
        repl: Tensor,
        pop: Tensor,
        vector: Tensor,
    ) -> list[Tensor]:
        D, Do, J0, live = geo.tolist()
        B, NC, _, C, QS, _ = store.shape
        Q = pop.shape[-1]
        E, m = max(Do - 1, 1), C - 1
        J, L = D + s, min(live + s, D)
        if s < 0 or J - J0 >= NC:
            raise RuntimeError(f"memrnn nondeterministic stack: step {s} is beyond the run")
        R, O = repl, pop
        buffers[0][k], buffers[1][k] = (R, R._version), (O, O._version)
        colR, gp, popped, col, newA, z, eta = (t[k] for t in buffers[2:])
        vec = vector.contiguous() if m else push  # the push's is never read without vectors
        opts = launch_options(C, QS, Q)
        if L > 0:
            _ns_replace_fwd[(L, B)](
                store, R, O, colR, gp, J - 1 - J0, L, NC, Do, E, *R.stride(), *O.stride(), **opts["replace"]
            )
        _ns_pop_fwd[(L + 1, B)](
            store, gp, colR, popped, col, push, vec, J - J0, NC, Do, E, *push.stride(), **opts["pop_fwd"]
        )
        top = store.new_empty(B, QS)
        eta_out = store.new_empty(B, m, QS)
        _ns_alpha_fwd[(B,)](
            store, alphas, col, newA, z, eta, top, eta_out if m else top, J, J - J0, L, min(L, D - 1),
            NC, Do, alphas.shape[1], **opts["alpha"],
        )  # fmt: skip
        return [top, eta_out]

    def ns_run_step_backward(
        self,
        store: Tensor,
        alphas: Tensor,
        buffers: list[Tensor],
        geo: Tensor,
        k: int,
        s: int,
        gstore: Tensor,
        galphas: Tensor,
        g_top: Tensor,
        g_eta: Tensor,
        Q: int,
    ) -> list[Tensor]:
        D, Do, J0, live = geo.tolist()
        B, NC, _, C, QS, _ = store.shape
        S, E, m = QS // Q, max(Do - 1, 1), C - 1
        J, L = D + s, min(live + s, D)
        NA = alphas.shape[1]
        (R, r_version), (O, o_version) = buffers[0][k], buffers[1][k]
        if (R._version, O._version) != (r_version, o_version):
            raise RuntimeError(
                f"nondeterministic stack: step {s}'s replace or pop weights were modified in place after the "
                "step read them; the Triton run reads them again in the backward pass"
            )
        colR, gp, popped, col, newA, z, eta = (t[k] for t in buffers[2:])
        has_top, has_eta = g_top is not None, g_eta is not None and m > 0  # None: nobody sent one
        g_top = g_top if has_top else gstore  # read in place through their strides (or never)
        g_eta = g_eta if has_eta else gstore
        new = store.new_empty
        gna, gP, gV = new(B, C, QS), new(B, QS, QS), new(B, m)
        gcolR, gpop, ggp = new(B, Do, C, QS, QS), new(B, E, C, QS, Q, S), new(B, E, QS, Q)
        gR_part, gO_part = new(B, Do, QS, QS), new(B, Do, QS, Q)
        opts = launch_options(C, QS, Q)
        _ns_norm_bwd[(B,)](
            gstore, galphas, g_top, g_eta, col, newA, z, eta, gna, J, J - J0, min(L, D - 1), NC, Do, NA,
            *(g_top.stride() if has_top else (0, 0)), *(g_eta.stride() if has_eta else (0, 0, 0)),
            HAS_TOP=has_top, HAS_ETA=has_eta, **opts["alpha"],
        )  # fmt: skip
        _ns_col_bwd[(L + 1, B)](
            gstore, galphas, alphas, col, colR, popped, newA, z, eta, gna, gP, gV if m else gP, gcolR, gpop,
            J, J - J0, D, NC, Do, E, NA, **opts["col"],
        )  # fmt: skip
        if L >= 2:
            _ns_pop_bwd[(L - 1, B)](
                store, gstore, gp, popped, gpop, ggp, J - J0, L, NC, Do, E, **opts["pop_bwd"]
            )
        if L >= 1:
            _ns_replace_bwd[(L, B)](
                store, gstore, R, O, colR, gcolR, gp, ggp, gR_part, gO_part, J - 1 - J0, L, NC, Do, E,
                *R.stride(), *O.stride(), **opts["replace"],
            )  # fmt: skip
            gR, gO = gR_part[:, :L].sum(1), gO_part[:, :L].sum(1)
        else:
            gR, gO = store.new_zeros(B, QS, QS), store.new_zeros(B, QS, Q)
        return [gP, gR, gO, gV]


def _snap_torch(x: Tensor) -> Tensor:
    return x.masked_fill(x <= LOG_ZERO / 2, LOG_ZERO)


#: the one instance (the ops hold no state)
TRITON_RUN_OPS = TritonRunOps()
