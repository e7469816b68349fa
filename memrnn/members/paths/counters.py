"""The counter layers' member paths (Weiss, Goldberg & Yahav 2018, section 4).

* :class:`memrnn.layers.CounterLSTM`: the controller and the counter cells merged into one
  ``(hidden + k)``-unit LSTM per member (as :meth:`memrnn.layers.CounterLSTM.merged_weights`), through
  :func:`memrnn.ops.lstm.lstm_sequence` with the member dimension (its ``tanh_units`` as the single
  layer's).
* :class:`memrnn.layers.ReLUCounter`: the controller's and the counters' rows as one weight per
  member, through :func:`memrnn.ops.counter.counter_sequence` with the member dimension
  (:class:`memrnn.ops.counter.cpu.CounterRNNSequence` batched over the members)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from memrnn.core.activations import ACTIVATIONS
from memrnn.layers.counters import CounterLSTM, CounterLSTMState, ReLUCounter, ReLUCounterState
from memrnn.members.layer import MemberPath, register_member_path
from memrnn.members.paths.common import check_dtype, lengths_final
from memrnn.ops.counter import counter_sequence
from memrnn.ops.lstm import lstm_sequence, sigmoids_first


def _always(layer: Any) -> str | None:
    return None  # one layer, one direction, no dropout: every such layer


def _merged_weights(layer: CounterLSTM) -> tuple[Tensor, Tensor, Tensor]:
    """:meth:`memrnn.layers.CounterLSTM.merged_weights` per member: ``w_in [M, 4(H+k), n]``,
    ``w_rec [M, 4(H+k), H+k]``, ``b [M, 4(H+k)]`` (gate blocks ``i, f, c̃, o``)."""
    H, k, n = layer.hidden_size, layer.counters, layer.input_size
    M = layer.weight.shape[0]
    w = torch.cat([layer.weight.view(M, 4, H, -1), layer.counter_weight.view(M, 4, k, -1)], 2)
    b = torch.cat([layer.bias.view(M, 4, H), layer.counter_bias.view(M, 4, k)], 2)
    w = w.reshape(M, 4 * (H + k), -1)
    return w[:, :, :n], w[:, :, n:], b.reshape(M, -1)


def _counter_lstm_run(
    layer: CounterLSTM, x: Tensor, state: Any, mask: Tensor | None
) -> tuple[Tensor, CounterLSTMState]:
    check_dtype("CounterLSTM", x, layer.weight)
    H = layer.hidden_size
    w_in, w_rec, b = (sigmoids_first(w, 1) for w in _merged_weights(layer))  # LSTMSequence's order
    h0, c0 = torch.cat([state.h, state.e], -1), torch.cat([state.c, state.n], -1)
    tanh_units = H + layer.counters if layer.cell_activation == "tanh" else H
    hs, cs = lstm_sequence(x, w_in, b, w_rec, h0, c0, tanh_units)
    y = hs[:, :, 1:]
    if mask is not None:
        y = y * mask[..., None].to(y.dtype)
    lengths = None if mask is None else mask.sum(-1)
    h, c = lengths_final(hs, lengths), lengths_final(cs, lengths)
    return y, CounterLSTMState(h[..., :H], c[..., :H], c[..., H:], h[..., H:])


def _counter_lstm_initial(layer: CounterLSTM, batch_size: int, x: Tensor) -> CounterLSTMState:
    M = x.shape[0]
    zh = x.new_zeros(M, batch_size, layer.hidden_size)
    zk = x.new_zeros(M, batch_size, layer.counters)
    return CounterLSTMState(zh, zh.clone(), zk, zk.clone())


register_member_path(
    CounterLSTM,
    MemberPath("lstm_sequence (members batched)", _always, _counter_lstm_run, _counter_lstm_initial),
)


def _relu_counter_run(
    layer: ReLUCounter, x: Tensor, state: Any, mask: Tensor | None
) -> tuple[Tensor, ReLUCounterState]:
    check_dtype("ReLUCounter", x, layer.weight)
    n, H, k = layer.input_size, layer.hidden_size, layer.counters
    w = torch.cat([layer.weight, layer.counter_weight], 1)  # [M, H + 2k, input + H + k]
    b = torch.cat([layer.bias, layer.counter_bias], 1)
    r0 = torch.cat([state.h, state.up - state.down], -1)
    act = layer.activation
    rs, moves = counter_sequence(x, w[:, :, :n], b, w[:, :, n:], r0, H, act, ACTIVATIONS[act])
    y = rs[:, :, 1:]
    lengths = None
    if mask is not None:  # as the single layer's masked_outputs: zero past each row's end
        y, moves = (t.masked_fill(~mask[..., None], 0) for t in (y, moves))
        lengths = mask.sum(-1)
    r = lengths_final(rs, lengths)
    up = state.up + moves[..., :k].sum(2)
    down = state.down + moves[..., k:].sum(2)
    return y, ReLUCounterState(r[..., :H], up, down)


def _relu_counter_initial(layer: ReLUCounter, batch_size: int, x: Tensor) -> ReLUCounterState:
    M = x.shape[0]
    zk = x.new_zeros(M, batch_size, layer.counters)
    return ReLUCounterState(x.new_zeros(M, batch_size, layer.hidden_size), zk, zk.clone())


register_member_path(
    ReLUCounter,
    MemberPath("counter_sequence (members batched)", _always, _relu_counter_run, _relu_counter_initial),
)
