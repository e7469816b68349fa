"""The GRU (Cho et al. 2014) as a plain loop under autograd: the reference the fast paths are
tested against, in torch's gate convention (``nn.GRU``'s equations, parameter layout and gate order
``r, z, n``; the reset gate applied after ``W_hn h``, as cuDNN does)::

    r_t = σ(W_ir x_t + b_ir + W_hr h_{t−1} + b_hr)
    z_t = σ(W_iz x_t + b_iz + W_hz h_{t−1} + b_hz)
    n_t = tanh(W_in x_t + b_in + r_t ⊙ (W_hn h_{t−1} + b_hn))
    h_t = (1 − z_t) ⊙ n_t + z_t ⊙ h_{t−1}

(Cho et al.'s paper writes the update gate the other way round, ``h_t = z ⊙ h_{t−1} + (1 − z) ⊙
h̃``, the same equation; it applies ``r`` before the product, ``W (r ⊙ h)``, which torch does not.)
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from memrnn.ops.members import per_member


def gru_cell(
    x_t: Tensor, h: Tensor, w_ih: Tensor, w_hh: Tensor, b_ih: Tensor | None, b_hh: Tensor | None
) -> tuple[Tensor, tuple[Tensor, Tensor, Tensor]]:
    """One step: ``x_t [B, n]``, ``h [B, H]``, ``w_ih [3H, n]``, ``w_hh [3H, H]``, ``b_ih``,
    ``b_hh [3H]`` or None -> ``(h_t [B, H], (r, z, n))``, each gate ``[B, H]``."""
    gi = F.linear(x_t, w_ih, b_ih).chunk(3, dim=-1)
    gh = F.linear(h, w_hh, b_hh).chunk(3, dim=-1)
    r = torch.sigmoid(gi[0] + gh[0])
    z = torch.sigmoid(gi[1] + gh[1])
    n = torch.tanh(gi[2] + r * gh[2])
    return (1 - z) * n + z * h, (r, z, n)


def gru_reference(
    x: Tensor, w_ih: Tensor, b_ih: Tensor | None, w_hh: Tensor, b_hh: Tensor | None, h0: Tensor
) -> Tensor:
    """One layer and direction: ``x [B, T, n]``, ``w_ih [3H, n]``, ``b_ih [3H]`` or None, ``w_hh
    [3H, H]``, ``b_hh [3H]`` or None, ``h0 [B, H]`` -> ``hs [B, T+1, H]`` (``hs[:, 0] = h0``)."""
    h, hs = h0, [h0]
    for x_t in x.unbind(1):  # unbind, never x[:, t] (docs/ecosystem.md, trap 6)
        h, _ = gru_cell(x_t, h, w_ih, w_hh, b_ih, b_hh)
        hs.append(h)
    return torch.stack(hs, 1)


def gru_member_reference(
    x: Tensor, w_ih: Tensor, b_ih: Tensor | None, w_hh: Tensor, b_hh: Tensor | None, h0: Tensor
) -> Tensor:
    """Members: member ``m`` is :func:`gru_reference` on ``x[m]`` with ``w_ih[m]``, ``b_ih[m]``,
    ``w_hh[m]``, ``b_hh[m]``, ``h0[m]``: ``x [M, B, T, n]``, ``w_ih [M, 3H, n]``, ``b_ih [M, 3H]``
    or None, ``w_hh [M, 3H, H]``, ``b_hh [M, 3H]`` or None, ``h0 [M, B, H]`` -> ``hs [M, B, T+1,
    H]``."""
    return per_member(gru_reference, x.shape[0], x, w_ih, b_ih, w_hh, b_hh, h0)
