"""What memrnn's Triton kernels share: activation functions with autograd's derivative
conventions, the backward kernels' first move, and the tiling rule."""

from __future__ import annotations

import triton
import triton.language as tl

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


def unit_blocks(H: int) -> tuple[int, int]:
    """``(BLOCK_H, NUM_H)``: state units per block (16–64, a power of 2) and blocks per state."""
    block = max(16, min(64, triton.next_power_of_2(H)))
    return block, triton.cdiv(H, block)
