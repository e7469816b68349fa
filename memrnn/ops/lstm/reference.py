"""The LSTM recurrence behind :class:`memrnn.layers.CounterLSTM` as a plain loop under autograd
(Hochreiter & Schmidhuber 1997; gate order ``o, i, f, g``; Weiss, Goldberg & Yahav 2018, eq. 12–13
and footnote 3: units past ``tanh_units`` expose the cell itself)::

    o, i, f, g = σ, σ, σ, tanh (x_t w_inᵀ + b + h_{t−1} w_recᵀ)
    c_t = f c_{t−1} + i g,   h_t = o X(c_t),   X = tanh on the first tanh_units, identity after
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from memrnn.ops.members import per_member


def lstm_reference(
    x: Tensor, w_in: Tensor, b: Tensor, w_rec: Tensor, h0: Tensor, c0: Tensor, tanh_units: int
) -> tuple[Tensor, Tensor]:
    """``x [B, T, n]``, ``w_in [4N, n]``, ``b [4N]``, ``w_rec [4N, N]``, ``h0``, ``c0`` ``[B, N]``
    -> ``hs``, ``cs`` ``[B, T+1, N]`` (the initial state first)."""
    N = w_rec.shape[1]
    h, c, hs, cs = h0, c0, [h0], [c0]
    for pre_t in F.linear(x, w_in, b).unbind(1):
        a = pre_t + h @ w_rec.t()
        o, i, f = torch.sigmoid(a[:, : 3 * N]).chunk(3, -1)
        g = torch.tanh(a[:, 3 * N :])
        c = f * c + i * g
        h = o * torch.cat([torch.tanh(c[:, :tanh_units]), c[:, tanh_units:]], -1)
        hs.append(h)
        cs.append(c)
    return torch.stack(hs, 1), torch.stack(cs, 1)


def lstm_member_reference(
    x: Tensor, w_in: Tensor, b: Tensor, w_rec: Tensor, h0: Tensor, c0: Tensor, tanh_units: int
) -> tuple[Tensor, Tensor]:
    """Members: member ``m`` is :func:`lstm_reference` on ``x[m]`` with
    ``w_in[m]``, ``b[m]``, ``w_rec[m]``, ``h0[m]``, ``c0[m]``: ``x [M, B, T, n]``, ``w_in [M, 4N,
    n]``, ``b [M, 4N]``, ``w_rec [M, 4N, N]``, ``h0``, ``c0`` ``[M, B, N]`` -> ``hs``, ``cs``
    ``[M, B, T+1, N]``."""
    return per_member(lstm_reference, x.shape[0], x, w_in, b, w_rec, h0, c0, tanh_units)
