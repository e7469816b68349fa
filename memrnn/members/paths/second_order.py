"""The second-order RNN's member path: :class:`memrnn.layers.SecondOrderRNN` (Giles et al. 1992).

One-hot inputs (what each member's layer would take its indexed path on) run
:func:`memrnn.ops.second_order_rnn.second_order_sequence` with the member dimension (on CPU
:class:`~memrnn.ops.second_order_rnn.cpu.SecondOrderSequence`: every member's rows and weight
slices in one bucketed product per step); dense inputs (a learned embedding's) run the layer's
dense contraction ``z = Σ_jk W_ijk s_j x_k`` step by step under autograd, each step one product
batched over the members."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from memrnn.layers import SecondOrderRNN
from memrnn.layers.second_order import SecondOrderState
from memrnn.members.layer import MemberPath, register_member_path
from memrnn.members.paths.common import check_dtype, lengths_final, member_ids
from memrnn.ops.second_order_rnn import second_order_sequence


def _run(
    layer: SecondOrderRNN, x: Tensor, state: Any, mask: Tensor | None
) -> tuple[Tensor, SecondOrderState]:
    M, B, T, _ = x.shape
    check_dtype("SecondOrderRNN", x, layer.weight)
    if T == 0:
        return x.new_zeros(M, B, 0, layer.hidden_size), state
    ids = member_ids(x, mask, layer.one_hot_input, "SecondOrderRNN")
    h = layer.sensitivity
    if ids is not None:
        states = second_order_sequence(layer.weight, layer.bias, h, state.s, ids)
    else:
        states = _dense(layer, x, state.s)
    y = states[:, :, 1:]
    if mask is not None:
        y = y.masked_fill(~mask[..., None], 0)
    return y, SecondOrderState(lengths_final(states, None if mask is None else mask.sum(-1)))


def _dense(layer: SecondOrderRNN, x: Tensor, s0: Tensor) -> Tensor:
    """``x [M, B, T, m]`` (dense), ``s0 [M, B, n]`` -> states ``[M, B, T+1, n]``: per step the
    state contracted first (one ``bmm`` over the members, as
    :func:`memrnn.ops.tensor.second_order`), then the input."""
    M, B, _, m = x.shape
    n = layer.hidden_size
    w = layer.weight.permute(0, 2, 1, 3).reshape(M, n, n * m)  # [M, n (j), n (i)·m]
    h = layer.sensitivity[:, None, None]
    bias = None if layer.bias is None else layer.bias[:, None]
    s, states = s0, [s0]
    for x_t in x.unbind(2):
        z = (torch.bmm(s, w).view(M, B, n, m) @ x_t[..., None])[..., 0]
        if bias is not None:
            z = z + bias
        s = torch.sigmoid(h * z)
        states.append(s)
    return torch.stack(states, 2)


def _initial(layer: SecondOrderRNN, batch_size: int, x: Tensor) -> SecondOrderState:
    start = layer.start.to(x.dtype)
    return SecondOrderState(start[:, None].expand(-1, batch_size, -1).clone())


register_member_path(
    SecondOrderRNN,
    MemberPath("second_order_sequence (members batched)", lambda layer: None, _run, _initial),
)
