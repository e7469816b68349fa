"""The Jordan RNN's member path: :class:`memrnn.layers.JordanRNN` (Cotterell et al. 2023; every
activation and output activation): the input projection ``V x_t + b_h`` as one product per
member, then :func:`memrnn.ops.jordan.jordan_sequence` with the member dimension
(:class:`memrnn.ops.jordan.cpu.JordanSequence` batched over the members)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from memrnn.core.activations import ACTIVATIONS
from memrnn.layers import JordanRNN
from memrnn.layers.elman import JordanState
from memrnn.members.layer import MemberPath, register_member_path
from memrnn.members.paths.common import check_dtype, lengths_final
from memrnn.ops.jordan import jordan_sequence


def _jordan_why_not(layer: JordanRNN) -> str | None:
    return None  # one layer, one direction, no dropout: every Jordan RNN


def _jordan_run(layer: JordanRNN, x: Tensor, state: Any, mask: Tensor | None) -> tuple[Tensor, JordanState]:
    M, B, T, n = x.shape
    check_dtype("JordanRNN", x, layer.weight_fb)
    flat = x.transpose(1, 2).reshape(M, T * B, n)  # time-major rows per member
    w_t = layer.weight_ih.transpose(1, 2)
    pre = torch.bmm(flat, w_t) if layer.bias is None else torch.baddbmm(layer.bias[:, None], flat, w_t)
    act, out = layer.activation, layer.output_activation
    hs, rs = jordan_sequence(
        pre.view(M, T, B, -1),
        layer.weight_fb,
        layer.weight_out,
        state.r,
        act,
        out,
        (ACTIVATIONS[act], ACTIVATIONS[out]),
    )
    y = hs.transpose(1, 2)  # [M, B, T, H]
    lengths = None
    if mask is not None:  # as the single layer's masked_outputs: zero past each row's end
        y = y.masked_fill(~mask[..., None], 0)
        lengths = mask.sum(-1)
    return y, JordanState(lengths_final(rs.transpose(1, 2), lengths))


def _jordan_initial(layer: JordanRNN, batch_size: int, x: Tensor) -> JordanState:
    return JordanState(x.new_zeros(x.shape[0], batch_size, layer.feedback_size))


register_member_path(
    JordanRNN, MemberPath("jordan_sequence (members batched)", _jordan_why_not, _jordan_run, _jordan_initial)
)
