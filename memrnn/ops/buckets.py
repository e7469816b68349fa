"""Token buckets: the input-indexed contractions of higher-order RNNs at the cost of the symbols
actually read.

A second- or third-order layer with a one-hot input ``k`` multiplies each row by its own weight
slice: ``z_b = v_b W[k_b]`` with ``W [m, d_in, d_out]`` (``v`` is the state, or the state ⊗
stack reading).  The dense way computes ``v_b W[k]`` for every ``k`` and keeps one (``m``
times the work); gathering the slices copies ``B`` weight matrices per step.  Buckets instead
place row ``b`` in slot ``rank_b`` of bucket ``k_b`` (``rank_b``: how many earlier rows read the
same symbol at that step), multiply all buckets in one ``bmm`` ``[m, c, d_in] × [m, d_in, d_out]``
(``c``: the largest bucket over the sequence) and read the rows back: ``m·c·d_in·d_out``
multiply-adds per step instead of ``B·m·d_in·d_out`` (``c ≤ B``; about ``B/m`` for balanced
symbols).  The ids are known for the whole sequence, so the slots are computed once.

The weight gradient needs no per-step work: ``dW[k] = Σ_{(b,t): k_bt = k} v_btᵀ g_bt`` is one
matrix product per symbol over the whole sequence (:meth:`TokenBuckets.weight_grad`).
"""

from __future__ import annotations

import torch
from torch import Tensor

# the choice between the buckets and the reference loop is a dispatch heuristic; its former home
# keeps the name for the ops that import it from here


class TokenBuckets:
    """Bucket slots of the ids ``[B, T]`` (values in ``[0, m)``, checked by the caller).

    Attributes: ``slots [T, B]`` (flat slot ``k_b·c + rank_b`` of each row at each step),
    ``capacity`` ``c``, ``num_symbols`` ``m``.
    """

    def __init__(self, ids: Tensor, num_symbols: int) -> None:
        if ids.dim() != 2:
            raise ValueError(f"ids must be [batch, time], got shape {tuple(ids.shape)}")
        self.ids, self.num_symbols = ids, num_symbols
        self._scratch: dict[tuple, Tensor] = {}
        B, T = ids.shape
        if B == 0 or T == 0:
            self.capacity, self.slots = 1, ids.new_zeros(T, B)
            return
        tm = ids.t().contiguous()  # [T, B]
        # rank of each row among the rows reading the same symbol at that step, by a stable sort
        # per step (O(T·B) memory whatever the vocabulary)
        ordered, order = torch.sort(tm, dim=1, stable=True)
        first = torch.searchsorted(ordered, ordered)  # index of each symbol's first row
        positions = torch.arange(B, device=ids.device).expand(T, B)
        rank = torch.empty_like(tm).scatter_(1, order, positions - first)
        self.capacity = int(rank.max()) + 1  # the one host sync
        self.slots = tm * self.capacity + rank

    def contract(self, t: int, v: Tensor, weight: Tensor, out: Tensor | None = None) -> Tensor:
        """``z_b = v_b @ weight[k_bt]`` for step ``t``: ``v [B, d_in]``, ``weight [m, d_in, d_out]``
        -> ``[B, d_out]`` (written into ``out`` when given).

        The bucket buffer is allocated once per ``(d_in, dtype, device)`` and reused: slots no row
        fills at this step keep stale rows, whose products are never read (rows of a matrix
        product are independent).  Not for use under autograd (the buffer is written in place).
        """
        m, d_in, d_out = weight.shape
        key = (d_in, v.dtype, v.device)
        buf = self._scratch.get(key)
        if buf is None:
            buf = self._scratch[key] = v.new_zeros(m * self.capacity, d_in)
        buf.index_copy_(0, self.slots[t], v)
        prod = torch.bmm(buf.view(m, self.capacity, d_in), weight).view(m * self.capacity, d_out)
        return torch.index_select(prod, 0, self.slots[t], out=out)

    def weight_grad(self, v: Tensor, g: Tensor) -> Tensor:
        """``dW [m, d_in, d_out]`` with ``dW[k] = Σ_{(b,t): k_bt = k} v_btᵀ g_bt`` for ``v [B, T,
        d_in]``, ``g [B, T, d_out]`` (:func:`grouped_weight_grad`)."""
        return grouped_weight_grad(self.ids, v, g, self.num_symbols)


def grouped_weight_grad(ids: Tensor, v: Tensor, g: Tensor, num_symbols: int) -> Tensor:
    """The weight gradient of an input-indexed contraction ``z_bt = v_bt W[k_bt]``: ``dW [m, d_in,
    d_out]`` with ``dW[k] = Σ_{(b,t): k_bt = k} v_btᵀ g_bt`` for ``ids [B, T]``, ``v [B, T, d_in]``,
    ``g [B, T, d_out]``: the positions sorted by symbol, one matrix product per symbol that
    occurs (one host sync for the counts)."""
    d_in, d_out = v.shape[-1], g.shape[-1]
    flat = ids.reshape(-1)
    order = torch.argsort(flat, stable=True)
    counts = torch.bincount(flat, minlength=num_symbols).tolist()
    vs = v.reshape(-1, d_in).index_select(0, order).split(counts)
    gs = g.reshape(-1, d_out).index_select(0, order).split(counts)
    out = v.new_zeros(num_symbols, d_in, d_out)
    for k, (vk, gk) in enumerate(zip(vs, gs, strict=True)):
        if len(vk):
            torch.mm(vk.t(), gk, out=out[k])
    return out


def masked_outputs(y: Tensor, mask: Tensor | None) -> tuple[Tensor, Tensor | None]:
    """Outputs of a recurrence run over every step ``y [B, T, ...]`` with right padding ``mask
    [B, T]``: zero past each row's end, and each row's length ``[B]`` (``None`` without a mask)
    for :func:`final_by_length`."""
    if mask is None:
        return y, None
    return y.masked_fill(~mask.view(*mask.shape, *([1] * (y.dim() - 2))), 0), mask.sum(1)


def final_by_length(states: Tensor, lengths: Tensor | None) -> Tensor:
    """``states [B, T+1, ...]`` (initial state first) -> each row's state after its last real
    step ``[B, ...]`` (``lengths None``: the last)."""
    if lengths is None:
        return states[:, -1]
    idx = lengths.view(-1, *([1] * (states.dim() - 1))).expand(-1, 1, *states.shape[2:])
    return states.gather(1, idx)[:, 0]


def check_ids(ids: Tensor, num_symbols: int) -> None:
    """A ``ValueError`` naming the first id of ``ids`` outside ``[0, num_symbols)`` (one host sync)."""
    if ids.numel() and bool(((ids < 0) | (ids >= num_symbols)).any()):
        bad = ids[(ids < 0) | (ids >= num_symbols)][0].item()
        raise ValueError(f"token id {bad} is outside the vocabulary [0, {num_symbols})")


def member_buckets(ids: Tensor, num_symbols: int) -> TokenBuckets:
    """The buckets of M members' ids ``[M, B, T]`` as one batch of ``M·B`` rows over ``M·m``
    symbols, member ``μ``'s symbol ``k`` being symbol ``μ·m + k`` (:class:`memrnn.ops.second_order_rnn.cpu.SecondOrderSequence`
    and :class:`memrnn.ops.nnpda.cpu.NNPDASequence` with members): every member's rows read its
    own weight slices in one bucketed product.  An id outside ``[0, m)`` would read another
    member's weights, so it is a ``ValueError`` here (one host sync)."""
    M, B, T = ids.shape
    check_ids(ids, num_symbols)
    offset = torch.arange(M, device=ids.device).mul_(num_symbols).view(M, 1, 1)
    return TokenBuckets((ids + offset).reshape(M * B, T), M * num_symbols)
