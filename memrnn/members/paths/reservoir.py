"""The reservoirs' member path: :class:`memrnn.layers.Reservoir` (every kind; frozen weights, the
leak ``α``): the input projection ``U x`` as one product per member, then
:func:`memrnn.ops.elman.elman_sequence` with the member dimension and the layer's leak."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from memrnn.layers.reservoir import Reservoir, ReservoirState
from memrnn.members.layer import MemberPath, register_member_path
from memrnn.members.paths.common import lengths_final
from memrnn.ops.elman import elman_sequence


def _reservoir_why_not(layer: Reservoir) -> str | None:
    return None  # one layer, one direction, no dropout: every reservoir


def _reservoir_run(
    layer: Reservoir, x: Tensor, state: Any, mask: Tensor | None
) -> tuple[Tensor, ReservoirState]:
    """``x [M, B, T, n]`` -> ``(h [M, B, T, m], final state)``; the weights in the inputs' dtype
    (the layer's ``dtype_policy = "follow"``)."""
    M, B, T, n = x.shape
    u_t = layer.input_weight.to(x.dtype).transpose(1, 2)  # [M, n, m]
    drive = torch.bmm(x.reshape(M, B * T, n), u_t).view(M, B, T, -1)
    w = layer.recurrent_weight.to(x.dtype)
    hs = elman_sequence(drive, w, state.h, layer.activation_name, layer.activation, float(layer.leak))
    y = hs[:, :, 1:]
    if mask is not None:
        y = y * mask[..., None].to(y.dtype)
    return y, ReservoirState(lengths_final(hs, None if mask is None else mask.sum(-1)))


def _reservoir_initial(layer: Reservoir, batch_size: int, x: Tensor) -> ReservoirState:
    return ReservoirState(x.new_zeros(x.shape[0], batch_size, layer.units))


register_member_path(
    Reservoir,
    MemberPath("elman_sequence (members batched)", _reservoir_why_not, _reservoir_run, _reservoir_initial),
)
