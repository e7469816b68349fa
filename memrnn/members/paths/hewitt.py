"""Hewitt et al.'s (2020) Dyck-(k,m) constructions' member paths: :class:`memrnn.constructions.HewittLSTM`
is an :class:`memrnn.layers.LSTMLayer` and :class:`memrnn.constructions.HewittSimpleRNN` a sigmoid
:class:`memrnn.layers.ElmanRNN` with constructed weights (neither overrides the recurrence), so
each takes its base class's member path (:mod:`memrnn.members.paths.gated`,
:mod:`memrnn.members.paths.elman`).

The LSTM's path runs :func:`memrnn.ops.lstm.lstm_sequence` where the single layer runs torch's
``nn.LSTM``: the same numbers to rounding.  The construction's many zero weights leave gradients
that are exactly 0 up to that rounding (below ``1e-7`` of the largest), and Adam's first step
turns a gradient of ``1e-9`` into a move of a tenth of the learning rate: in float32 a member
would leave its single run by ``~1e-3`` after one step.  So ``HewittLSTM`` takes the path in
float64 (the two agree to ``1e-10`` over training) and runs the loop over members otherwise."""

from __future__ import annotations

import torch
from torch import nn

from memrnn.constructions.hewitt import HewittLSTM, HewittSimpleRNN
from memrnn.layers import ElmanRNN, LSTMLayer
from memrnn.members.layer import MEMBER_PATHS, MemberPath, register_member_path
from memrnn.members.paths import elman, gated  # noqa: F401  (the base classes' paths, registered first)

_LSTM = MEMBER_PATHS[LSTMLayer]


def _hewitt_lstm_why_not(layer: nn.Module) -> str | None:
    dtype = layer.rnn.weight_hh_l0.dtype
    if dtype != torch.float64:
        return (
            f"{str(dtype).removeprefix('torch.')}: the construction's near-zero gradients round "
            "otherwise than nn.LSTM's, which Adam amplifies"
        )
    return _LSTM.why_not(layer)


register_member_path(HewittLSTM, MemberPath(_LSTM.name, _hewitt_lstm_why_not, _LSTM.run, _LSTM.initial))
register_member_path(HewittSimpleRNN, MEMBER_PATHS[ElmanRNN])
