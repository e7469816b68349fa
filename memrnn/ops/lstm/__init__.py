"""The LSTM recurrence with counter cells (:class:`memrnn.layers.CounterLSTM`'s merged
controller-and-counters LSTM): the reference loop, the CPU fast path
(:class:`memrnn.ops.lstm.cpu.LSTMSequence`) and the GPU kernels behind one entry point,
:func:`lstm_sequence`."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from memrnn.ops.buckets import check_ids
from memrnn.ops.dispatch import choose
from memrnn.ops.lstm.cpu import FUSED_DTYPES, FusedLSTMSequence, FusedLSTMTokens, LSTMSequence
from memrnn.ops.lstm.reference import lstm_member_reference, lstm_reference
from memrnn.ops.members import member_rows


def lstm_sequence(
    x: Tensor,
    w_in: Tensor,
    b: Tensor,
    w_rec: Tensor,
    h0: Tensor,
    c0: Tensor,
    tanh_units: int,
    *,
    impl: str | None = None,
) -> tuple[Tensor, Tensor]:
    """``x [B, T, n]``, ``w_in [4N, n]``, ``b [4N]``, ``w_rec [4N, N]`` (gate order ``o, i, f, g``),
    ``h0``, ``c0`` ``[B, N]`` -> ``hs``, ``cs`` ``[B, T+1, N]``; units past ``tanh_units`` expose
    the cell itself (:mod:`memrnn.ops.lstm.reference`).  ``impl`` as
    :func:`memrnn.ops.elman.elman_sequence`.

    Members (M runs as one model, ``docs/design.md``): every argument with a leading member
    dimension, ``x [M, B, T, n]``, ``w_in [M, 4N, n]``, ``b [M, 4N]``, ``w_rec [M, 4N, N]``, ``h0``,
    ``c0`` ``[M, B, N]`` -> ``[M, B, T+1, N]``, member ``m`` exactly the call on its ``[m]`` slices:
    the reference loops over the members, the CPU path batches its products over them
    (:class:`memrnn.ops.lstm.cpu.LSTMSequence` with members; by default, ``"native"``, in float32
    and float64, the fused C++ cell :class:`memrnn.ops.lstm.cpu.FusedLSTMSequence`: within 1e-6
    float32 of the ``"cpu"`` loop, not bit for bit), the GPU kernels take them as a grid axis
    (:class:`memrnn.ops.lstm.triton.LSTMTriton` with members)."""
    if w_rec.dim() == 3:
        return _members(x, w_in, b, w_rec, h0, c0, tanh_units, impl)
    impl = choose(x, impl, native_ok=True)
    if impl == "reference":
        return lstm_reference(x, w_in, b, w_rec, h0, c0, tanh_units)
    if impl in ("cpu", "native"):
        return LSTMSequence.apply(x, w_in, b, w_rec, h0, c0, tanh_units, impl == "native")
    from memrnn.ops.lstm.triton import lstm_triton

    return lstm_triton(F.linear(x, w_in, b), w_rec, h0, c0, tanh_units)


def _members(x, w_in, b, w_rec, h0, c0, tanh_units, impl):
    M = w_rec.shape[0]
    for name, t, dims in (("x", x, 4), ("w_in", w_in, 3), ("b", b, 2), ("h0", h0, 3), ("c0", c0, 3)):
        if t.dim() != dims or t.shape[0] != M:
            raise ValueError(
                f"with members every argument has the member dimension first: w_rec is {tuple(w_rec.shape)} "
                f"(M = {M}), so {name} must be {dims}-D with {M} first, got {tuple(t.shape)}"
            )
    impl = choose(x, impl, native_ok=True)
    if impl == "reference":
        return lstm_member_reference(x, w_in, b, w_rec, h0, c0, tanh_units)
    if impl == "native" and x.dtype in FUSED_DTYPES:  # the fused cell (not the Python loop bit for bit)
        return FusedLSTMSequence.apply(x, w_in, b, w_rec, h0, c0, tanh_units)
    if impl in ("cpu", "native"):
        return LSTMSequence.apply(x, w_in, b, w_rec, h0, c0, tanh_units, impl == "native")
    from memrnn.ops.lstm.triton import lstm_triton

    B, T, n = x.shape[1:]  # the input projection one product per member, then one launch for all
    pre = torch.baddbmm(b[:, None], x.reshape(M, B * T, n), w_in.transpose(1, 2)).view(M, B, T, -1)
    return lstm_triton(pre, w_rec, h0, c0, tanh_units)


def lstm_sequence_tokens(
    ids: Tensor,
    table: Tensor,
    w_in: Tensor,
    b: Tensor,
    w_rec: Tensor,
    h0: Tensor,
    c0: Tensor,
    tanh_units: int,
    *,
    impl: str | None = None,
) -> tuple[Tensor, Tensor]:
    """:func:`lstm_sequence` with members on the embeddings of token ids: ``ids [B, T]`` (shared by
    the members) or ``[M, B, T]``, each member's embedding table ``table [M, V, n]`` (the input at
    position ``t`` is ``table[m, ids[t]]``), the rest as :func:`lstm_sequence`'s with members ->
    ``hs``, ``cs`` ``[M, B, T+1, N]``.

    The fused CPU cell (``impl="native"``, float32/64) reads each position's input projection from
    ``table w_inᵀ + b`` ``[M, V, 4N]`` by its id (:class:`memrnn.ops.lstm.cpu.FusedLSTMTokens`: no
    product over the ``B·T`` positions in the forward, none for the input's or ``w_in``'s
    gradient in the backward); other ``impl`` values, devices and dtypes look the embeddings up
    and call :func:`lstm_sequence`.  The ids must lie in ``0..V−1`` (the fused cell checks them)."""
    M = table.shape[0]
    if table.dim() != 3 or w_rec.dim() != 3:
        raise ValueError(
            f"lstm_sequence_tokens takes members: table [M, V, n] and w_rec [M, 4N, N], got "
            f"{tuple(table.shape)} and {tuple(w_rec.shape)}"
        )
    if ids.dim() not in (2, 3) or (ids.dim() == 3 and ids.shape[0] != M):
        raise ValueError(f"ids must be [B, T] or [{M}, B, T] (the members first), got {tuple(ids.shape)}")
    if ids.is_floating_point() or ids.dtype == torch.bool:
        raise ValueError(f"ids must be integer token ids, got dtype {ids.dtype}")
    if ids.device.type == "cpu":  # elsewhere a check costs a host sync
        check_ids(ids, table.shape[1])
    impl = choose(table, impl, native_ok=True)
    if impl == "native" and table.dtype in FUSED_DTYPES:
        proj = torch.baddbmm(b[:, None], table, w_in.transpose(1, 2))  # [M, V, 4N]
        return FusedLSTMTokens.apply(proj, ids.long(), w_rec, h0, c0, tanh_units)
    x = member_rows(table, ids, per_member=ids.dim() == 3)
    return lstm_sequence(x, w_in, b, w_rec, h0, c0, tanh_units, impl=impl)


def sigmoids_first(w: Tensor, dim: int = 0) -> Tensor:
    """Gate blocks of ``w [4N, ...]`` (or ``[4N]``) from torch's order ``i, f, g, o`` to the fast
    paths' ``o, i, f, g`` (the three sigmoids first, one contiguous block); ``dim`` is the gates'
    dimension (1 for members' ``[M, 4N, ...]``)."""
    blocks = w.unflatten(dim, (4, -1))
    return blocks.index_select(dim, torch.tensor([3, 0, 1, 2], device=w.device)).flatten(dim, dim + 1)


__all__ = [
    "lstm_member_reference",
    "lstm_reference",
    "lstm_sequence",
    "lstm_sequence_tokens",
    "sigmoids_first",
]
