"""The GRU recurrence (Cho et al. 2014, in ``nn.GRU``'s convention; :class:`memrnn.layers.GRULayer`):
the reference loop (:mod:`memrnn.ops.gru.reference`), torch's own kernel and the hand-written
backpropagation through time (:class:`memrnn.ops.gru.cpu.GRUSequence`) behind one entry point,
:func:`gru_sequence`.

Implementations (:func:`memrnn.ops.dispatch.choose`, :func:`gru_implementation`):

* ``"cpu"`` (the default on every device): torch's GRU kernel (ATen on CPU, cuDNN on CUDA), what
  ``GRULayer`` has always run, so results trained with it reproduce bit for bit;
* ``"bptt"`` (only when asked: ``impl="bptt"`` or ``implementation("bptt")``): ``GRUSequence``, on
  CPU 1.9–3.1x faster than torch's kernel forward+backward at hidden 16–64 and batch 1, 1.4–2.3x at
  batch 64, about equal at hidden 256 (``benchmarks/results/cpu-2core.md``); first order;
* ``"reference"`` (inside :func:`memrnn.reference_paths` or asked): the loop under autograd.

There is no Triton kernel: a forced ``"triton"`` or ``"native"`` runs ``"cpu"``.

Members (M runs as one model, ``docs/design.md``): every argument of :func:`gru_sequence` with a
leading member dimension.  torch's kernel has none, so there ``"cpu"`` and ``"bptt"`` both run
``GRUSequence`` with the member dimension (every product batched over the members, on any
device); ``"reference"`` loops over the members (:func:`memrnn.ops.gru.reference.gru_member_reference`).
"""

from __future__ import annotations

import torch
from torch import Tensor

from memrnn.ops.dispatch import choose
from memrnn.ops.gru.cpu import GRUSequence
from memrnn.ops.gru.reference import gru_cell, gru_member_reference, gru_reference


def gru_implementation(x: Tensor, impl: str | None = None) -> str:
    """``"reference"``, ``"cpu"`` or ``"bptt"`` for inputs ``x`` (module docstring); an explicit
    ``impl="triton"`` or ``"native"`` is a ``ValueError`` (the GRU has neither)."""
    if impl in ("triton", "native"):
        raise ValueError(
            f"impl={impl!r}: the GRU has no such implementation; choose 'reference', 'cpu' or 'bptt'"
        )
    return choose(x, impl, triton_ok=False, bptt_ok=True)


def gru_sequence(
    x: Tensor,
    w_ih: Tensor,
    b_ih: Tensor | None,
    w_hh: Tensor,
    b_hh: Tensor | None,
    h0: Tensor,
    *,
    impl: str | None = None,
) -> Tensor:
    """One GRU layer and direction over every step: ``x [B, T, n]``, ``w_ih [3H, n]``, ``b_ih [3H]``
    or None, ``w_hh [3H, H]``, ``b_hh [3H]`` or None (gate blocks ``r, z, n``), ``h0 [B, H]`` ->
    ``hs [B, T+1, H]`` (``hs[:, 0] = h0``).  ``impl``: ``None`` picks (module docstring), or
    ``"reference"``, ``"cpu"``, ``"bptt"``.

    Members: ``x [M, B, T, n]``, ``w_ih [M, 3H, n]``, ``b_ih [M, 3H]`` or None, ``w_hh [M, 3H, H]``,
    ``b_hh [M, 3H]`` or None, ``h0 [M, B, H]`` -> ``hs [M, B, T+1, H]``, member ``m`` exactly the
    call on its ``[m]`` slices: the reference loops over the members, ``"cpu"`` and ``"bptt"`` run
    :class:`memrnn.ops.gru.cpu.GRUSequence` with members (module docstring)."""
    if (b_ih is None) != (b_hh is None):
        raise ValueError("gru_sequence takes both biases (b_ih, b_hh) or neither")
    if w_hh.dim() == 3:
        return _members(x, w_ih, b_ih, w_hh, b_hh, h0, impl)
    impl = gru_implementation(x, impl)
    if impl == "reference":
        return gru_reference(x, w_ih, b_ih, w_hh, b_hh, h0)
    if impl == "bptt":
        if b_ih is None or b_hh is None:
            b_ih = b_hh = w_ih.new_zeros(w_ih.shape[0])
        return GRUSequence.apply(x, w_ih, b_ih, w_hh, b_hh, h0)
    weights = [w_ih, w_hh] if b_ih is None else [w_ih, w_hh, b_ih, b_hh]
    if x.shape[1] == 0:
        return h0[:, None]
    y, _ = torch.gru(x, h0[None].contiguous(), weights, b_ih is not None, 1, 0.0, False, False, True)
    return torch.cat([h0[:, None], y], 1)


def _members(x, w_ih, b_ih, w_hh, b_hh, h0, impl):
    M = w_hh.shape[0]
    args = (("x", x, 4), ("w_ih", w_ih, 3), ("b_ih", b_ih, 2), ("b_hh", b_hh, 2), ("h0", h0, 3))
    for name, t, dims in args:
        if t is not None and (t.dim() != dims or t.shape[0] != M):
            raise ValueError(
                f"with members every argument has the member dimension first: w_hh is {tuple(w_hh.shape)} "
                f"(M = {M}), so {name} must be {dims}-D with {M} first, got {tuple(t.shape)}"
            )
    if gru_implementation(x, impl) == "reference":
        return gru_member_reference(x, w_ih, b_ih, w_hh, b_hh, h0)
    if b_ih is None or b_hh is None:
        b_ih = b_hh = w_ih.new_zeros(M, w_ih.shape[1])
    return GRUSequence.apply(x, w_ih, b_ih, w_hh, b_hh, h0)


__all__ = [
    "GRUSequence",
    "gru_cell",
    "gru_implementation",
    "gru_member_reference",
    "gru_reference",
    "gru_sequence",
]
