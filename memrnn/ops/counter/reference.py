"""The ReLU-counter recurrence behind :class:`memrnn.layers.ReLUCounter` as a plain loop under
autograd (Weiss, Goldberg & Yahav 2018, section 4: counters of two ReLU units, INC and DEC)::

    a_t = x_t w_inᵀ + b + r_{t−1} w_recᵀ,   h_t = σ(a_t[:H]),   [inc; dec] = relu(a_t[H:]),
    e_t = e_{t−1} + inc − dec,   r_t = [h_t; e_t]
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from memrnn.ops.members import per_member


def counter_reference(
    x: Tensor,
    w_in: Tensor,
    b: Tensor,
    w_rec: Tensor,
    r0: Tensor,
    hidden: int,
    activation: Callable[[Tensor], Tensor],
) -> tuple[Tensor, Tensor]:
    """``x [B, T, n]``, ``w_in [H + 2k, n]``, ``b [H + 2k]``, ``w_rec [H + 2k, H + k]``, ``r0 [B, H + k]``
    -> ``rs [B, T+1, H + k]`` (the initial state first) and the moves ``[inc; dec]`` ``[B, T, 2k]``."""
    H, K = hidden, r0.shape[1] - hidden
    r, rs, moves = r0, [r0], []
    for pre_t in F.linear(x, w_in, b).unbind(1):
        a = pre_t + r @ w_rec.t()
        m = torch.relu(a[:, H:])
        r = torch.cat([activation(a[:, :H]), r[:, H:] + m[:, :K] - m[:, K:]], -1)
        rs.append(r)
        moves.append(m)
    moves_t = torch.stack(moves, 1) if moves else x.new_zeros(x.shape[0], 0, 2 * K)
    return torch.stack(rs, 1), moves_t


def counter_member_reference(
    x: Tensor,
    w_in: Tensor,
    b: Tensor,
    w_rec: Tensor,
    r0: Tensor,
    hidden: int,
    activation: Callable[[Tensor], Tensor],
) -> tuple[Tensor, Tensor]:
    """Members: member ``m`` is :func:`counter_reference` on its ``[m]`` slices: ``x [M, B, T, n]``,
    ``w_in [M, H + 2k, n]``, ``b [M, H + 2k]``, ``w_rec [M, H + 2k, H + k]``, ``r0 [M, B, H + k]``
    -> ``rs [M, B, T+1, H + k]``, moves ``[M, B, T, 2k]``."""
    return per_member(counter_reference, x.shape[0], x, w_in, b, w_rec, r0, hidden, activation)
