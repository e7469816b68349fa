"""The Elman recurrence as a plain loop under autograd: the reference the fast paths are tested
against (Elman 1990; the lecture notes' "Elman and Jordan Networks"; the leaky form of echo state
networks, Jaeger 2001, with leak ``α``)::

    z_t = pre_t + h_{t−1} Uᵀ,   h_t = (1 − α) h_{t−1} + α σ(z_t)
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from memrnn.ops.members import per_member


def elman_reference(
    pre: Tensor, weight_hh: Tensor, h0: Tensor, activation: Callable[[Tensor], Tensor], leak: float = 1.0
) -> Tensor:
    """``pre [B, T, H]`` (the projected inputs ``x_t Vᵀ + b``), ``weight_hh`` ``U [H, H]``,
    ``h0 [B, H]`` -> ``hs [B, T+1, H]`` (``hs[:, 0] = h0``)."""
    hs = [h0]
    h = h0
    for pre_t in pre.unbind(1):  # unbind, never pre[:, t] (docs/ecosystem.md, trap 6)
        a = activation(pre_t + h @ weight_hh.t())
        h = a if leak == 1.0 else (1 - leak) * h + leak * a
        hs.append(h)
    return torch.stack(hs, 1)


def elman_member_reference(
    pre: Tensor, weight_hh: Tensor, h0: Tensor, activation: Callable[[Tensor], Tensor], leak: float = 1.0
) -> Tensor:
    """Members: member ``m`` is :func:`elman_reference` on ``pre[m]``, ``weight_hh[m]``, ``h0[m]``:
    ``pre [M, B, T, H]``, ``weight_hh [M, H, H]``, ``h0 [M, B, H]`` -> ``hs [M, B, T+1, H]``."""
    return per_member(elman_reference, pre.shape[0], pre, weight_hh, h0, activation, leak)
