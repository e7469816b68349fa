"""The Elman recurrence as two persistent Triton kernels, one launch each for the forward and the
backward pass of a whole sequence (the design of FlashRNN and flash-linear-attention's recurrent
kernels: the batch split into tiles of rows, one program per tile, the state kept by the program
for every step).  Members (M runs as one model, issue 67) are the grid's second axis: a program
per tile of rows and member, its weights, inputs, states and outputs offset by its member; one
model is ``M = 1``, the same kernels and launch signature.

Forward, per step, for each block of ``BLOCK_H`` state units: ``z = pre_t + Σ_k h_{t−1}[:, k]
U[j, k]ᵀ`` by ``tl.dot`` over blocks of ``k`` (``U`` stays in L1/L2 across steps), then
``h_t = (1 − α) h_{t−1} + α σ(z)``; ``h_t`` and ``z_t`` go to ``hs``/``zs`` (the backward reads
them).  The blocks of a step read the previous state from ``hs``, written by the same program one
step earlier (a barrier orders them), so any state size works with the same kernel.
Backward, per step: ``∂z_t = α σ'(z_t) ∂h_t`` into ``gz``, then ``∂h_{t−1} = ∂hs_{t−1} + (1 − α)
∂h_t + ∂z_t U`` by ``tl.dot``; ``∂U = Σ_t ∂z_tᵀ h_{t−1}`` and the input projection's gradients are
single matrix products outside the kernel.

Accumulation is float32 whatever the storage dtype (float32, bfloat16 or float16).  The derivative
conventions are autograd's: ``relu'(0) = 0``, ``clamp``'s gradient is 1 on the closed interval
``[0, 1]``, the Heaviside step has derivative 0 (``sign(relu(x))``).

Tested under Triton's interpreter (``TRITON_INTERPRET=1``) on CPU against the reference loop
(``tests/ops/test_elman.py``), and on a GPU by the ``gpu``-marked tests.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

from memrnn.ops.autograd import first_order
from memrnn.ops.triton_common import (
    BLOCK_B,
    CODES,
    DOT_PRECISION,
    DOT_WARPS,
    _act,
    _act_grad,
    _rec_matvec,
    _rec_matvec_t,
    _seed_slot,
    unit_blocks,
    weight_grad,
)


@triton.jit
def _elman_fwd(
    pre_ptr, w_ptr, hs_ptr, zs_ptr, T, B, H, leak,
    CODE: tl.constexpr, BLOCK_B: tl.constexpr, BLOCK_H: tl.constexpr, NUM_H: tl.constexpr,
):  # fmt: skip
    """One program per tile of ``BLOCK_B`` rows; ``pre``/``zs`` ``[T, B, H]``, ``hs`` ``[T+1, B, H]``
    (``hs[0]`` holds ``h0``), ``w`` ``U [H, H]``, all contiguous.  Members: one program per tile
    and member (grid axis 1), every buffer with the member first (``pre [M, T, B, H]``, ``U [M, H,
    H]``, …; one model is ``M = 1``)."""
    rows = tl.program_id(0) * BLOCK_B + tl.arange(0, BLOCK_B)
    rmask = rows < B
    cols = tl.arange(0, BLOCK_H)
    m = tl.program_id(1).to(tl.int64)  # the member: its weights, inputs, states and outputs
    pre_ptr += m * T * B * H
    zs_ptr += m * T * B * H
    hs_ptr += m * (T + 1) * B * H
    w_ptr += m * H * H
    for t in range(T):
        h_prev = hs_ptr + t * B * H
        for jb in tl.static_range(NUM_H):
            j = jb * BLOCK_H + cols
            jmask = j < H
            m2 = rmask[:, None] & jmask[None, :]
            acc = tl.load(pre_ptr + t * B * H + rows[:, None] * H + j[None, :], mask=m2, other=0.0).to(
                tl.float32
            )
            acc = _rec_matvec(
                (acc,), h_prev, H, rows, rmask, w_ptr, H, 1, 0, j, jmask, H, BLOCK_H, NUM_H, DOT_PRECISION
            )[0]
            a = _act(acc, CODE)
            if leak != 1.0:
                own = tl.load(h_prev + rows[:, None] * H + j[None, :], mask=m2, other=0.0).to(tl.float32)
                a = (1.0 - leak) * own + leak * a
            tl.store(
                zs_ptr + t * B * H + rows[:, None] * H + j[None, :], acc.to(zs_ptr.dtype.element_ty), mask=m2
            )
            tl.store(
                hs_ptr + (t + 1) * B * H + rows[:, None] * H + j[None, :],
                a.to(hs_ptr.dtype.element_ty),
                mask=m2,
            )
        tl.debug_barrier()


@triton.jit
def _elman_bwd(
    ghs_ptr, w_ptr, zs_ptr, gz_ptr, g_ptr, T, B, H, leak,
    CODE: tl.constexpr, BLOCK_B: tl.constexpr, BLOCK_H: tl.constexpr, NUM_H: tl.constexpr,
):  # fmt: skip
    """``ghs`` ``[T+1, B, H]`` (``∂L/∂hs``), ``gz`` ``[T, B, H]`` out; ``g`` ``[2, B, H]`` float32
    scratch holding ``∂L/∂h_t`` in slot ``t % 2`` (ping-pong); slot 0 ends as ``∂L/∂h_0``.
    Members as :func:`_elman_fwd` (grid axis 1; ``g [M, 2, B, H]``)."""
    rows = tl.program_id(0) * BLOCK_B + tl.arange(0, BLOCK_B)
    rmask = rows < B
    cols = tl.arange(0, BLOCK_H)
    m = tl.program_id(1).to(tl.int64)
    ghs_ptr += m * (T + 1) * B * H
    zs_ptr += m * T * B * H
    gz_ptr += m * T * B * H
    g_ptr += m * 2 * B * H
    w_ptr += m * H * H
    _seed_slot(g_ptr, ghs_ptr, T, B, H, rows, rmask, cols, BLOCK_H, NUM_H)  # g[T % 2] = ∂L/∂h_T
    tl.debug_barrier()
    for i in range(T):
        t = T - 1 - i
        cur = g_ptr + ((t + 1) % 2) * B * H  # ∂L/∂h_{t+1}
        nxt = g_ptr + (t % 2) * B * H  # ∂L/∂h_t, written below
        for jb in tl.static_range(NUM_H):
            j = jb * BLOCK_H + cols
            m2 = rmask[:, None] & (j < H)[None, :]
            gh = tl.load(cur + rows[:, None] * H + j[None, :], mask=m2, other=0.0)
            z = tl.load(zs_ptr + t * B * H + rows[:, None] * H + j[None, :], mask=m2, other=0.0).to(
                tl.float32
            )
            gz = leak * gh * _act_grad(z, CODE)
            tl.store(
                gz_ptr + t * B * H + rows[:, None] * H + j[None, :], gz.to(gz_ptr.dtype.element_ty), mask=m2
            )
        tl.debug_barrier()
        for kb in tl.static_range(NUM_H):
            k = kb * BLOCK_H + cols
            kmask = k < H
            m2 = rmask[:, None] & kmask[None, :]
            acc = tl.load(ghs_ptr + t * B * H + rows[:, None] * H + k[None, :], mask=m2, other=0.0).to(
                tl.float32
            )
            if leak != 1.0:
                acc += (1.0 - leak) * tl.load(cur + rows[:, None] * H + k[None, :], mask=m2, other=0.0)
            acc = _rec_matvec_t(
                acc, gz_ptr + t * B * H, H, rows, rmask, w_ptr, H, 1, 0, k, kmask, H, BLOCK_H, NUM_H, 1,
                DOT_PRECISION,
            )  # fmt: skip
            tl.store(nxt + rows[:, None] * H + k[None, :], acc, mask=m2)
        tl.debug_barrier()


class ElmanTriton(torch.autograd.Function):
    """As :class:`memrnn.ops.elman.cpu.ElmanSequence` (``pre [T, B, H]`` time-major ->
    ``hs [T+1, B, H]``), with the two kernels above.  Members: ``pre [M, T, B, H]``, ``weight_hh [M,
    H, H]``, ``h0 [M, B, H]`` -> ``hs [M, T+1, B, H]``, one launch per direction for all members (a
    grid of row tiles × members) and one weight-gradient product per member."""

    @staticmethod
    def forward(ctx, pre, weight_hh, h0, code, leak):  # type: ignore[override]
        T, B, H = pre.shape[-3:]
        lead = pre.shape[:-3]  # (M,) with members
        M = lead[0] if lead else 1
        pre, weight_hh = pre.contiguous(), weight_hh.contiguous()
        hs = pre.new_empty(*lead, T + 1, B, H)
        hs[..., 0, :, :] = h0
        zs = pre.new_empty(*lead, T, B, H)
        block_h, num_h = unit_blocks(H)
        grid = (triton.cdiv(B, BLOCK_B), M)
        if T > 0 and B > 0 and M > 0:
            _elman_fwd[grid](
                pre, weight_hh, hs, zs, T, B, H, float(leak), code, BLOCK_B, block_h, num_h,
                num_warps=DOT_WARPS,
            )  # fmt: skip
        ctx.code, ctx.leak = code, float(leak)
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(weight_hh, zs, hs)
        return hs

    @staticmethod
    @first_order
    def backward(ctx, grad_hs):  # type: ignore[override]
        if grad_hs is None:
            return None, None, None, None, None
        weight_hh, zs, hs = ctx.saved_tensors
        T, B, H = zs.shape[-3:]
        lead = zs.shape[:-3]
        M = lead[0] if lead else 1
        grad_hs = grad_hs.contiguous()
        gz = torch.empty_like(zs)
        g = torch.zeros(*lead, 2, B, H, device=zs.device, dtype=torch.float32)
        block_h, num_h = unit_blocks(H)
        if T > 0 and B > 0 and M > 0:
            _elman_bwd[(triton.cdiv(B, BLOCK_B), M)](
                grad_hs, weight_hh, zs, gz, g, T, B, H, ctx.leak, ctx.code, BLOCK_B, block_h, num_h,
                num_warps=DOT_WARPS,
            )  # fmt: skip
            g_h0 = g[..., 0, :, :].to(zs.dtype)
        else:
            g_h0 = grad_hs[..., 0, :, :]
        grad_w = weight_grad(gz, hs[..., :-1, :, :]).to(weight_hh.dtype) if ctx.needs_input_grad[1] else None
        return gz, grad_w, g_h0, None, None


def elman_triton(pre: Tensor, weight_hh: Tensor, h0: Tensor, activation: str, leak: float = 1.0) -> Tensor:
    """:class:`ElmanTriton` batch first: ``pre [B, T, H]`` -> ``hs [B, T+1, H]``; members ``pre [M,
    B, T, H]``, ``weight_hh [M, H, H]``, ``h0 [M, B, H]`` -> ``hs [M, B, T+1, H]``; ``activation`` a
    name of :data:`CODES`."""
    if activation not in CODES:
        raise ValueError(f"the Elman kernel has no activation {activation!r}; it has {', '.join(CODES)}")
    hs = ElmanTriton.apply(pre.transpose(-3, -2).contiguous(), weight_hh, h0, CODES[activation], leak)
    return hs.transpose(-3, -2)
