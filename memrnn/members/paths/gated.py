"""The gated recurrences' member paths.

* :class:`memrnn.layers.LSTMLayer` (unidirectional, no dropout between layers in training): its
  ``nn.LSTM`` weights per member in the op's gate order, through
  :func:`memrnn.ops.lstm.lstm_sequence` with the member dimension (the CPU path batches every
  product over the members; one layer after another); from token ids, the first layer through
  :func:`memrnn.ops.lstm.lstm_sequence_tokens` (the embedding folded into its input projection).
* :class:`memrnn.layers.GRULayer` (unidirectional, no dropout between layers in training): its
  ``nn.GRU`` weights per member (gate order ``r, z, n`` as they are), through
  :func:`memrnn.ops.gru.gru_sequence` with the member dimension
  (:class:`memrnn.ops.gru.cpu.GRUSequence` batched over the members; one layer after another)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from memrnn.layers import GRULayer, LSTMLayer
from memrnn.layers.gated import GRUState, LSTMState
from memrnn.members.layer import MemberPath, register_member_path
from memrnn.members.paths.common import check_dtype, learned_or_zeros, lengths_final
from memrnn.ops.gru import gru_sequence
from memrnn.ops.lstm import lstm_sequence, lstm_sequence_tokens, sigmoids_first


def _lstm_initial(layer: LSTMLayer, batch_size: int, x: Tensor) -> LSTMState:
    M, rows = x.shape[0], layer.num_layers * layer.num_directions
    h = learned_or_zeros(layer.h0_input, torch.tanh, M, batch_size, rows, layer.hidden_size, x)
    return LSTMState(h, x.new_zeros(M, batch_size, rows, layer.hidden_size))


def _top_h(layer: nn.Module, state: Any) -> Tensor:
    """The members' outputs at ``state``: the top layer's ``h``, ``[M, B, hidden_size]`` (the
    single layer's ``output_at``, ``state[0][:, -1]``, per member)."""
    return state[0][:, :, -1]


def _gated_why_not(layer: nn.Module) -> str | None:
    if layer.bidirectional:
        return "bidirectional"
    if layer.training and layer.dropout:
        return "dropout between layers in training"
    return None


def _lstm_run(
    layer: LSTMLayer,
    x: Tensor | None,
    state: Any,
    mask: Tensor | None,
    tokens: tuple[Tensor, Tensor] | None = None,
) -> tuple[Tensor, LSTMState]:
    """The members through their stacked layers; with ``tokens = (ids, table)`` the first layer's
    input is the embeddings ``table [M, V, n]`` of ``ids`` (:func:`memrnn.ops.lstm.lstm_sequence_tokens`)."""
    M = state.h.shape[0]
    check_dtype("LSTMLayer", x if tokens is None else tokens[1], layer.rnn.weight_ih_l0)
    lengths = None if mask is None else mask.sum(-1)
    rnn, H = layer.rnn, layer.hidden_size
    hs_out, cs_out, h_in = [], [], x
    for lay in range(layer.num_layers):
        w_ih, w_hh = getattr(rnn, f"weight_ih_l{lay}"), getattr(rnn, f"weight_hh_l{lay}")
        if rnn.bias:
            b = getattr(rnn, f"bias_ih_l{lay}") + getattr(rnn, f"bias_hh_l{lay}")
        else:
            b = w_ih.new_zeros(M, 4 * H)
        weights = (sigmoids_first(w_ih, 1), sigmoids_first(b, 1), sigmoids_first(w_hh, 1))
        init = (state.h[:, :, lay], state.c[:, :, lay], H)
        if lay == 0 and tokens is not None:
            hs, cs = lstm_sequence_tokens(*tokens, *weights, *init)
        else:
            hs, cs = lstm_sequence(h_in, *weights, *init)
        hs_out.append(lengths_final(hs, lengths))
        cs_out.append(lengths_final(cs, lengths))
        h_in = hs[:, :, 1:]
    y = h_in if mask is None else h_in * mask[..., None].to(h_in.dtype)
    return y, LSTMState(torch.stack(hs_out, 2), torch.stack(cs_out, 2))


def _lstm_tokens(layer: LSTMLayer, ids: Tensor, table: Tensor, state: Any, mask: Tensor | None) -> Tensor:
    return _lstm_run(layer, None, state, mask, (ids, table))[0]


def _gru_initial(layer: GRULayer, batch_size: int, x: Tensor) -> GRUState:
    M, rows = x.shape[0], layer.num_layers * layer.num_directions
    return GRUState(learned_or_zeros(layer.h0_input, torch.tanh, M, batch_size, rows, layer.hidden_size, x))


def _gru_run(layer: GRULayer, x: Tensor, state: Any, mask: Tensor | None) -> tuple[Tensor, GRUState]:
    check_dtype("GRULayer", x, layer.rnn.weight_ih_l0)
    lengths = None if mask is None else mask.sum(-1)
    rnn = layer.rnn
    hs_out, h_in = [], x
    for lay in range(layer.num_layers):
        w_ih, w_hh = getattr(rnn, f"weight_ih_l{lay}"), getattr(rnn, f"weight_hh_l{lay}")
        b_ih, b_hh = (
            (getattr(rnn, f"bias_ih_l{lay}"), getattr(rnn, f"bias_hh_l{lay}")) if rnn.bias else (None, None)
        )
        hs = gru_sequence(h_in, w_ih, b_ih, w_hh, b_hh, state.h[:, :, lay])
        hs_out.append(lengths_final(hs, lengths))
        h_in = hs[:, :, 1:]
    y = h_in if mask is None else h_in * mask[..., None].to(h_in.dtype)
    return y, GRUState(torch.stack(hs_out, 2))


register_member_path(
    LSTMLayer,
    MemberPath(
        "lstm_sequence (members batched)",
        _gated_why_not,
        _lstm_run,
        _lstm_initial,
        _top_h,
        tokens=_lstm_tokens,
    ),
)
register_member_path(
    GRULayer, MemberPath("gru_sequence (members batched)", _gated_why_not, _gru_run, _gru_initial, _top_h)
)
