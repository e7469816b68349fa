"""The Elman RNN's member path: :class:`memrnn.layers.ElmanRNN` (one layer, one direction): the
input projection as one product per member, then :func:`memrnn.ops.elman.elman_sequence` with the
member dimension."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from memrnn.core.activations import ACTIVATIONS
from memrnn.layers import ElmanRNN
from memrnn.layers.elman import ElmanState
from memrnn.members.layer import MemberPath, register_member_path
from memrnn.members.paths.common import check_dtype, learned_or_zeros, lengths_final
from memrnn.ops.elman import elman_sequence


def _elman_why_not(layer: nn.Module) -> str | None:
    return None if layer._single else "stacked or bidirectional"


def _elman_run(layer: ElmanRNN, x: Tensor, state: Any, mask: Tensor | None) -> tuple[Tensor, ElmanState]:
    M, B, T, n = x.shape
    check_dtype("ElmanRNN", x, layer.weight_hh)
    w_t = layer.weight_ih.transpose(1, 2)
    flat = x.reshape(M, B * T, n)
    pre = torch.bmm(flat, w_t) if layer.bias is None else torch.baddbmm(layer.bias[:, None], flat, w_t)
    act = layer.activation
    hs = elman_sequence(pre.view(M, B, T, -1), layer.weight_hh, state.h, act, ACTIVATIONS[act])
    y = hs[:, :, 1:]
    if mask is not None:
        y = y * mask[..., None].to(y.dtype)
    return y, ElmanState(lengths_final(hs, None if mask is None else mask.sum(-1)))


def _elman_initial(layer: ElmanRNN, batch_size: int, x: Tensor) -> ElmanState:
    h = learned_or_zeros(
        layer.h0_input, ACTIVATIONS[layer.activation], x.shape[0], batch_size, 1, layer.hidden_size, x
    )
    return ElmanState(h[:, :, 0])


def _elman_output_at(layer: ElmanRNN, state: Any) -> Tensor:
    """The members' outputs at ``state``: ``h [M, B, hidden_size]`` (one layer, one direction)."""
    return state[0]


register_member_path(
    ElmanRNN,
    MemberPath(
        "elman_sequence (members batched)", _elman_why_not, _elman_run, _elman_initial, _elman_output_at
    ),
)
