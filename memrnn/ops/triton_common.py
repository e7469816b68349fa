"""What memrnn's Triton kernels share: activation functions with autograd's derivative
conventions, the backward kernels' first move, and the tiling rule."""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

#: activation codes of the kernels
CODES = {"tanh": 0, "sigmoid": 1, "relu": 2, "heaviside": 3, "saturated_linear": 4, "identity": 5}


@triton.jit
def _act(z, CODE: tl.constexpr):
    if CODE == 0:
        e = tl.exp(-2.0 * tl.abs(z))
        t = (1.0 - e) / (1.0 + e)
        return tl.where(z >= 0, t, -t)
    elif CODE == 1:
        return 1.0 / (1.0 + tl.exp(-z))
    elif CODE == 2:
        return tl.maximum(z, 0.0)
    elif CODE == 3:
        return tl.where(z > 0, 1.0, 0.0)
    elif CODE == 4:
        return tl.minimum(tl.maximum(z, 0.0), 1.0)
    else:
        return z


@triton.jit
def _act_grad(z, CODE: tl.constexpr):
    if CODE == 0:
        e = tl.exp(-2.0 * tl.abs(z))
        t = (1.0 - e) / (1.0 + e)
        return 1.0 - t * t
    elif CODE == 1:
        s = 1.0 / (1.0 + tl.exp(-z))
        return s * (1.0 - s)
    elif CODE == 2:
        return tl.where(z > 0, 1.0, 0.0)
    elif CODE == 3:
        return z * 0.0
    elif CODE == 4:
        return tl.where((z >= 0) & (z <= 1), 1.0, 0.0)
    else:
        return z * 0.0 + 1.0


@triton.jit
def _sig(z):
    """The logistic function without overflow: ``exp(−|z|)`` only."""
    e = tl.exp(-tl.abs(z))
    return tl.where(z >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


@triton.jit
def _tanh(z):
    """``tanh`` from ``exp(−2|z|)`` only."""
    e = tl.exp(-2.0 * tl.abs(z))
    t = (1.0 - e) / (1.0 + e)
    return tl.where(z >= 0, t, -t)


@triton.jit
def _seed_slot(dst_ptr, src_ptr, T, B, N, rows, rmask, cols, BLOCK: tl.constexpr, NUM: tl.constexpr):
    """The first move of a persistent backward kernel: ``dst[T % 2] = src[T]`` in float32 for the
    program's ``rows``, where ``src [T+1, B, N]`` holds the gradients of the states (its row ``T``:
    the final state's) and ``dst [2, B, N]`` is the float32 scratch whose slot ``t % 2`` holds
    ``∂L/∂state_t`` as the kernel walks ``t`` down (ping-pong).  ``cols`` is
    ``tl.arange(0, BLOCK)``; ``NUM`` blocks cover ``N``."""
    for jb in tl.static_range(NUM):
        j = jb * BLOCK + cols
        m2 = rmask[:, None] & (j < N)[None, :]
        off = rows[:, None] * N + j[None, :]
        v = tl.load(src_ptr + T * B * N + off, mask=m2, other=0.0).to(tl.float32)
        tl.store(dst_ptr + (T % 2) * B * N + off, v, mask=m2)


#: rows per program: ``tl.dot`` needs at least 16
BLOCK_B = 16

#: warps per program of the kernels built on ``tl.dot`` (Elman, Jordan, counters, LSTM,
#: second-order).  Chosen from the compiled kernels' resources at state 64 (sm_90, tf32x3 dots,
#: plain ``ptxas -v``): with 4 warps 84–1,040 bytes of spill stores per thread (the LSTM's four gate
#: accumulators the most), with 8 warps 0–160; as Triton compiles them, 0–208 over sm_90/sm_80
#: and float32/bfloat16 (``python -m benchmarks.kernel_compile``,
#: ``benchmarks/results/kernels-compiled.md``).
DOT_WARPS = 8

#: the products' precision: three TF32 tensor-core products per float32 product (Triton's
#: ``"tf32x3"``), about float32's accuracy.  Plain ``"ieee"`` float32 dots are lowered to FMA loops
#: whose operands spilled 3–14 KB per thread at state 64 (same tool); ``"tf32"`` alone rounds
#: inputs to 10 significand bits.
DOT_PRECISION: tl.constexpr = tl.constexpr("tf32x3")


def weight_grad(g: Tensor, inputs: Tensor) -> Tensor:
    """A recurrent weight's gradient outside the kernels, ``Σ_{t,b} g[t, b]ᵀ inputs[t, b]`` in
    float32: ``g [T, B, K]``, ``inputs [T, B, J]`` -> ``[K, J]``; members ``[M, T, B, ·]`` -> ``[M,
    K, J]``, one product per member."""
    K, J = g.shape[-1], inputs.shape[-1]
    if g.dim() == 4:
        M = g.shape[0]
        return torch.bmm(g.reshape(M, -1, K).transpose(1, 2).float(), inputs.reshape(M, -1, J).float())
    return g.reshape(-1, K).t().float() @ inputs.reshape(-1, J).float()


def unit_blocks(H: int) -> tuple[int, int]:
    """``(BLOCK_H, NUM_H)``: state units per block (16–64, a power of 2) and blocks per state."""
    block = max(16, min(64, triton.next_power_of_2(H)))
    return block, triton.cdiv(H, block)


# -- what the memories' steps share (``memrnn/ops/<memory>/triton.py``) ---------------------------
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


@triton.jit
def _softmax3_grads(grow, rmask, a0, a1, a2, g0, g1, g2):
    """The three actions' pre-activation gradients through their softmax into ``ghd[t]``."""
    dot = a0 * g0 + a1 * g1 + a2 * g2
    gty = grow.dtype.element_ty
    tl.store(grow, (a0 * (g0 - dot)).to(gty), mask=rmask)
    tl.store(grow + 1, (a1 * (g1 - dot)).to(gty), mask=rmask)
    tl.store(grow + 2, (a2 * (g2 - dot)).to(gty), mask=rmask)


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


# -- the recurrent products of the ``tl.dot`` kernels (Elman, Jordan, counters, LSTM, second-order,
# the stack RNN's controller and head) ---------------------------------------------------------------
@triton.jit
def _load_tile(ptr, r, rmask, c, cmask, stride_r, stride_c):
    """The float32 tile ``[len(r), len(c)]`` of element ``(r, c)`` at ``ptr + r·stride_r +
    c·stride_c``, zero outside ``rmask ⊗ cmask``: a tile of a state (``r`` the rows of the batch,
    ``c`` its units), of a weight matrix ``W[j, k]`` (``r = j``, ``c = k``), or of its transpose
    (``r = k``, ``c = j``, the strides swapped: the right operand of ``x Wᵀ``)."""
    v = tl.load(
        ptr + r[:, None] * stride_r + c[None, :] * stride_c, mask=rmask[:, None] & cmask[None, :], other=0.0
    )
    return v.to(tl.float32)


@triton.jit
def _rec_matvec(
    accs, x_ptr, stride_x, rows, rmask, w_ptr, stride_wj, stride_wk, gate_rows, j, jmask, K,
    BLOCK_K: tl.constexpr, NUM_K: tl.constexpr, PRECISION: tl.constexpr,
    tiles=(), FIRST: tl.constexpr = 0, PRELOAD: tl.constexpr = False,
):  # fmt: skip
    """The recurrent product of one block of output units ``j`` for one tile of rows: ``accs[q] +
    x W[q·gate_rows + j, :]ᵀ`` for each accumulator ``accs[q]`` ``[BLOCK_B, BLOCK_J]`` float32 (a
    tuple: one, or the LSTM's four gates, whose weight rows are ``gate_rows`` apart).

    ``x [B, K]`` is the previous state, row ``b`` at ``x_ptr + b·stride_x`` (unit stride); ``W``
    the recurrent weight matrix, ``W[j, k]`` at ``w_ptr + j·stride_wj + k·stride_wk``; ``rows``
    ``[BLOCK_B]`` and ``j`` ``[BLOCK_J]`` index the tile with masks ``rmask`` and ``jmask``.  The
    sum runs over ``NUM_K`` blocks of ``BLOCK_K`` units of ``k`` in order, each block a ``tl.dot``
    of the float32 tiles ``x[rows, k]`` and ``W[j, k]ᵀ`` with ``input_precision=PRECISION`` added
    to each accumulator in turn (``q`` in order), so that a block's ``x`` tile is loaded once for
    every gate.  ``PRELOAD``: the weight tiles are not loaded but taken from ``tiles`` (float32
    ``[BLOCK_K, BLOCK_J]``, ``W[q·gate_rows + j, k]ᵀ`` of block ``kb`` at ``tiles[FIRST + kb ·
    len(accs) + q]``)."""
    NQ: tl.constexpr = len(accs)
    kcols = tl.arange(0, BLOCK_K)
    for kb in tl.static_range(NUM_K):
        k = kb * BLOCK_K + kcols
        kmask = k < K
        x = _load_tile(x_ptr, rows, rmask, k, kmask, stride_x, 1)
        summed = ()
        for q in tl.static_range(NQ):
            if PRELOAD:
                wt = tiles[FIRST + kb * NQ + q]
            else:
                wt = _load_tile(w_ptr + q * gate_rows * stride_wj, k, kmask, j, jmask, stride_wk, stride_wj)
            summed = summed + (accs[q] + tl.dot(x, wt, input_precision=PRECISION),)  # noqa: RUF005
        accs = summed
    return accs


@triton.jit
def _rec_matvec_t(
    acc, g_ptr, stride_g, rows, rmask, w_ptr, stride_wj, stride_wk, gate, k, kmask, J,
    BLOCK_J: tl.constexpr, NUM_J: tl.constexpr, NQ: tl.constexpr, PRECISION: tl.constexpr,
):  # fmt: skip
    """The backward's transposed product of :func:`_rec_matvec` for one block of input units
    ``k``: ``acc + Σ_q g[:, q·gate + j] W[q·gate + j, k]`` over ``j < J``, ``acc`` ``[BLOCK_B,
    BLOCK_K]`` float32 (``∂L/∂x`` from the outputs' gradients ``g``; ``NQ`` gates, the LSTM's 4,
    ``gate`` apart in both ``g``'s columns and ``W``'s rows).

    ``g [B, NQ·gate]``: row ``b`` at ``g_ptr + b·stride_g`` (unit stride); ``W[j, k]`` at ``w_ptr
    + j·stride_wj + k·stride_wk``.  The sum runs over ``NUM_J`` blocks of ``BLOCK_J`` units of
    ``j`` in order and, within a block, the gates in order, each a ``tl.dot`` of the float32 tiles
    ``g[rows, q·gate + j]`` and ``W[q·gate + j, k]`` with ``input_precision=PRECISION``.  (The
    stack RNN's backward with preloaded weights keeps its own loop: each gate's gradient loaded once
    for every block of ``k``, which spills less there.)"""
    jcols = tl.arange(0, BLOCK_J)
    for jb in tl.static_range(NUM_J):
        j = jb * BLOCK_J + jcols
        jmask = j < J
        for q in tl.static_range(NQ):
            gq = _load_tile(g_ptr + q * gate, rows, rmask, j, jmask, stride_g, 1)
            w = _load_tile(w_ptr + q * gate * stride_wj, j, jmask, k, kmask, stride_wj, stride_wk)
            acc += tl.dot(gq, w, input_precision=PRECISION)
    return acc
