"""The LSTM recurrence with counter cells (:class:`memrnn.layers.CounterLSTM`'s merged
controller-and-counters LSTM): the reference loop, the CPU fast path
(:class:`memrnn.ops.lstm.cpu.LSTMSequence`) and the GPU kernels behind one entry point,
:func:`lstm_sequence`."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor

from memrnn.ops.dispatch import choose
from memrnn.ops.lstm.cpu import LSTMSequence
from memrnn.ops.lstm.reference import lstm_reference


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
    :func:`memrnn.ops.elman.elman_sequence`."""
    impl = choose(x, impl)
    if impl == "reference":
        return lstm_reference(x, w_in, b, w_rec, h0, c0, tanh_units)
    if impl == "cpu":
        return LSTMSequence.apply(x, w_in, b, w_rec, h0, c0, tanh_units)
    from memrnn.ops.lstm.triton import lstm_triton

    return lstm_triton(F.linear(x, w_in, b), w_rec, h0, c0, tanh_units)


def sigmoids_first(w: Tensor) -> Tensor:
    """Gate blocks of ``w [4N, ...]`` (or ``[4N]``) from torch's order ``i, f, g, o`` to the fast
    paths' ``o, i, f, g`` (the three sigmoids first, one contiguous block)."""
    return w.view(4, w.shape[0] // 4, *w.shape[1:])[[3, 0, 1, 2]].reshape(w.shape)


__all__ = ["lstm_reference", "lstm_sequence", "sigmoids_first"]
