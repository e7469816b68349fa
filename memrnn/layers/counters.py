"""Recurrent layers with explicit, trainable counting dimensions (Weiss, Goldberg & Yahav 2018, section 4).

``ReLUCounter``: a controller RNN plus ``k`` counters, each two non-negative ReLU units (Weiss et al. 2018,
"IRNN"): INC raises one, DEC the other, and the counter is their difference, which the
controller reads back (COMP0 compares it with 0)::

    z_t = [x_t; h_{t−1}; e_{t−1}]                      e = u⁺ − u⁻        [B, k]
    h_t = σ(W z_t + b)                                  (eq. 2 or 3)
    [inc_t; dec_t] = relu(W_c z_t + b_c)                [B, 2k]
    u⁺_t = u⁺_{t−1} + inc_t,   u⁻_t = u⁻_{t−1} + dec_t

``CounterLSTM``: an LSTM controller plus ``k`` counter cells with their own gates, the cell of
eq. 12 with the exposure ``g`` of eq. 13 chosen per footnote 3 (``identity``: counters can be
compared with each other; ``tanh``: torch's LSTM)::

    z_t = [x_t; h_{t−1}; e_{t−1}]
    i, f, c̃, o = σ, σ, tanh, σ (W z_t + b)             c_t = f c_{t−1} + i c̃,  h_t = o tanh(c_t)
    i', f', d, o' = σ, σ, tanh, σ (W' z_t + b')         n_t = f' n_{t−1} + i' d,  e_t = o' g(n_t)

Counting is ``i' = f' = 1`` with direction ``d = ±1``; resetting is ``i' = f' = 0``.  Both
layers output ``[h_t; e_t]`` (``output_size = hidden_size + counters``); ``trace`` reports the
counters (``counters [B, T, k]``) and their moves.  ``forward`` hoists the input projection
out of the time loop (one matrix product for all steps) and runs the recurrence as one
autograd Function with hand-written backpropagation through time (:mod:`memrnn.ops.bptt`).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from memrnn.core.activations import ACTIVATIONS, HIDDEN_ACTIVATIONS, resolve_activation
from memrnn.core.checks import finite_float, positive_int, refuses_removed_arguments
from memrnn.core.layer import MemoryLayer
from memrnn.core.registry import register_layer
from memrnn.layers.gated import lstm_pointwise
from memrnn.ops.buckets import final_by_length, masked_outputs
from memrnn.ops.counter import counter_sequence
from memrnn.ops.lstm import lstm_sequence, sigmoids_first

#: what the LSTM counter may apply to its cell before the output gate
CELL_ACTIVATIONS = ("identity", "tanh")


class ReLUCounterState(NamedTuple):
    """State of ``ReLUCounter``: ``h [B, hidden]``, ``up`` (u⁺) and ``down`` (u⁻) ``[B, counters]``,
    batch first.  One layer, no layer dimension: Weiss et al.'s (2018) counter layer is one
    controller with its counters, so it takes no ``num_layers``, ``dropout`` or ``bidirectional``."""

    h: Tensor
    up: Tensor
    down: Tensor


@register_layer("relu_counter", tiny={"input_size": 3, "hidden_size": 4, "counters": 2})
@refuses_removed_arguments
class ReLUCounter(MemoryLayer[ReLUCounterState]):
    """Controller RNN with ``counters`` ReLU counters of two units each (module docstring).

    Args:
        input_size: features of ``x_t``.
        hidden_size: controller units.
        counters: number of counters ``k``.
        activation: the controller's ``σ`` (``tanh``, ``relu``, ``sigmoid``, ...).

    Parameters: ``weight [hidden, input + hidden + k]``, ``bias [hidden]``,
    ``counter_weight [2k, input + hidden + k]`` (INC rows, then DEC rows), ``counter_bias [2k]``.
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        counters: int = 1,
        activation: str = "tanh",
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        positive_int("input_size", input_size)
        positive_int("hidden_size", hidden_size)
        positive_int("counters", counters)
        self.activation = resolve_activation(activation, HIDDEN_ACTIVATIONS)
        self.input_size, self.hidden_size, self.counters = input_size, hidden_size, counters
        self.output_size = hidden_size + counters
        fk = {"device": device, "dtype": dtype}
        z = input_size + hidden_size + counters
        self.weight = nn.Parameter(torch.empty(hidden_size, z, **fk))
        self.bias = nn.Parameter(torch.empty(hidden_size, **fk))
        self.counter_weight = nn.Parameter(torch.empty(2 * counters, z, **fk))
        self.counter_bias = nn.Parameter(torch.empty(2 * counters, **fk))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Uniform in ``±1/sqrt(hidden_size)``; counter biases at ``−0.5`` so counters start idle."""
        bound = 1.0 / math.sqrt(self.hidden_size)
        for p in (self.weight, self.bias, self.counter_weight):
            nn.init.uniform_(p, -bound, bound)
        nn.init.constant_(self.counter_bias, -0.5)

    def extra_repr(self) -> str:
        return (
            f"{self.input_size}, {self.hidden_size}, counters={self.counters}, activation={self.activation!r}"
        )

    def initial_state(self, batch_size: int, *, device=None, dtype=None) -> ReLUCounterState:
        """All zeros: ``h [B, hidden]``, ``up``, ``down`` ``[B, counters]``."""
        fk = self._default_factory(device, dtype)
        zk = torch.zeros(batch_size, self.counters, **fk)
        return ReLUCounterState(torch.zeros(batch_size, self.hidden_size, **fk), zk, zk.clone())

    def _project(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """Input parts of both pre-activations: ``[.., hidden]`` and ``[.., 2k]``."""
        n = self.input_size
        return F.linear(x, self.weight[:, :n], self.bias), F.linear(
            x, self.counter_weight[:, :n], self.counter_bias
        )

    def _step_parts(self, px: Tensor, pc: Tensor, state: ReLUCounterState):
        n = self.input_size
        rec = torch.cat([state.h, state.up - state.down], -1)
        h = ACTIVATIONS[self.activation](px + F.linear(rec, self.weight[:, n:]))
        moves = torch.relu(pc + F.linear(rec, self.counter_weight[:, n:]))
        inc, dec = moves.split(self.counters, -1)
        up, down = state.up + inc, state.down + dec
        y = torch.cat([h, up - down], -1)
        return y, ReLUCounterState(h, up, down), inc, dec

    def trace_step(self, x_t: Tensor, state: ReLUCounterState):
        px, pc = self._project(x_t)
        y, new, inc, dec = self._step_parts(px, pc, state)
        return y, new, {"inc": inc, "dec": dec, "counters": new.up - new.down}

    def step(self, x_t: Tensor, state: ReLUCounterState) -> tuple[Tensor, ReLUCounterState]:
        """``x_t [B, input]`` -> ``[h_t; e_t] [B, hidden + counters]``."""
        y, new, _ = self.trace_step(x_t, state)
        return y, new

    def forward(self, x: Tensor, state: ReLUCounterState | None = None, mask: Tensor | None = None):
        """Fast path (same numbers as the reference ``step``, to rounding): both input projections
        for all steps in one matrix product ``[B, T, hidden + 2k]``, then
        :class:`memrnn.ops.counter.cpu.CounterRNNSequence` (no autograd graph per step, hand-written
        backpropagation through time, first order); inside :func:`memrnn.reference_paths`, the
        reference loop under autograd (second derivatives)."""
        state, mask = self.check_inputs(x, state, mask)
        n, H, k = self.input_size, self.hidden_size, self.counters
        w = torch.cat([self.weight, self.counter_weight], 0)  # [H + 2k, input + H + k]
        b = torch.cat([self.bias, self.counter_bias])
        r0 = torch.cat([state.h, state.up - state.down], 1)
        act = ACTIVATIONS[self.activation]
        rs, moves = counter_sequence(x, w[:, :n], b, w[:, n:], r0, H, self.activation, act)
        y, lengths = masked_outputs(rs[:, 1:], mask)
        moves, _ = masked_outputs(moves, mask)
        r = final_by_length(rs, lengths)
        up = state.up + moves[..., :k].sum(1)
        down = state.down + moves[..., k:].sum(1)
        return y, ReLUCounterState(r[:, :H], up, down)


class CounterLSTMState(NamedTuple):
    """State of ``CounterLSTM``: controller ``h``, ``c`` ``[B, hidden]``; counter cells ``n`` and
    their exposures ``e = o' g(n)`` ``[B, counters]``; batch first.  One layer, no layer dimension
    (as :class:`ReLUCounterState`: no ``num_layers``, ``dropout`` or ``bidirectional``)."""

    h: Tensor
    c: Tensor
    n: Tensor
    e: Tensor


@register_layer("counter_lstm", tiny={"input_size": 3, "hidden_size": 4, "counters": 2})
@refuses_removed_arguments
class CounterLSTM(MemoryLayer[CounterLSTMState]):
    """LSTM controller with ``counters`` gated counter cells (module docstring).

    Args:
        input_size: features of ``x_t``.
        hidden_size: controller LSTM units.
        counters: counter cells ``k``.
        cell_activation: ``g`` of the counter cells' exposure: ``identity`` (default; Weiss et al. 2018
            footnote 3: counters can be compared) or ``tanh``.
        forget_bias: added to the counter cells' forget-gate bias (default 1: start counting).

    Parameters: ``weight [4·hidden, input + hidden + k]``, ``bias [4·hidden]`` (gate order
    ``i, f, c̃, o`` as ``nn.LSTM``); ``counter_weight [4k, input + hidden + k]``,
    ``counter_bias [4k]`` (``i', f', d, o'``).
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        counters: int = 1,
        cell_activation: str = "identity",
        forget_bias: float = 1.0,
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        positive_int("input_size", input_size)
        positive_int("hidden_size", hidden_size)
        positive_int("counters", counters)
        self.cell_activation = resolve_activation(cell_activation, CELL_ACTIVATIONS, "cell_activation")
        self.input_size, self.hidden_size, self.counters = input_size, hidden_size, counters
        self.output_size = hidden_size + counters
        self.forget_bias = finite_float("forget_bias", forget_bias)
        fk = {"device": device, "dtype": dtype}
        z = input_size + hidden_size + counters
        self.weight = nn.Parameter(torch.empty(4 * hidden_size, z, **fk))
        self.bias = nn.Parameter(torch.empty(4 * hidden_size, **fk))
        self.counter_weight = nn.Parameter(torch.empty(4 * counters, z, **fk))
        self.counter_bias = nn.Parameter(torch.empty(4 * counters, **fk))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Uniform in ``±1/sqrt(hidden_size)`` (as ``nn.LSTM``), plus ``forget_bias`` on ``f'``."""
        bound = 1.0 / math.sqrt(self.hidden_size)
        for p in self.parameters():
            nn.init.uniform_(p, -bound, bound)
        with torch.no_grad():
            self.counter_bias[self.counters : 2 * self.counters] += self.forget_bias

    def extra_repr(self) -> str:
        return (
            f"{self.input_size}, {self.hidden_size}, counters={self.counters}, "
            f"cell_activation={self.cell_activation!r}, forget_bias={self.forget_bias}"
        )

    def initial_state(self, batch_size: int, *, device=None, dtype=None) -> CounterLSTMState:
        """All zeros: ``h``, ``c`` ``[B, hidden]``; ``n``, ``e`` ``[B, counters]``."""
        fk = self._default_factory(device, dtype)
        zh, zk = torch.zeros(batch_size, self.hidden_size, **fk), torch.zeros(batch_size, self.counters, **fk)
        return CounterLSTMState(zh, zh.clone(), zk, zk.clone())

    def _project(self, x: Tensor) -> tuple[Tensor, Tensor]:
        n = self.input_size
        return F.linear(x, self.weight[:, :n], self.bias), F.linear(
            x, self.counter_weight[:, :n], self.counter_bias
        )

    def _step_parts(self, px: Tensor, pc: Tensor, state: CounterLSTMState):
        n = self.input_size
        rec = torch.cat([state.h, state.e], -1)
        h, c, (i, f, g, o) = lstm_pointwise(px + F.linear(rec, self.weight[:, n:]), state.c)
        ki, kf, kd, ko = (pc + F.linear(rec, self.counter_weight[:, n:])).chunk(4, -1)
        ki, kf, kd, ko = torch.sigmoid(ki), torch.sigmoid(kf), torch.tanh(kd), torch.sigmoid(ko)
        cnt = kf * state.n + ki * kd
        e = ko * ACTIVATIONS[self.cell_activation](cnt)
        diag = {"i": i, "f": f, "o": o, "c_tilde": g,
                "counter_i": ki, "counter_f": kf, "counter_direction": kd, "counter_o": ko, "counters": cnt}  # fmt: skip
        return torch.cat([h, e], -1), CounterLSTMState(h, c, cnt, e), diag

    def trace_step(self, x_t: Tensor, state: CounterLSTMState):
        px, pc = self._project(x_t)
        return self._step_parts(px, pc, state)

    def step(self, x_t: Tensor, state: CounterLSTMState) -> tuple[Tensor, CounterLSTMState]:
        """``x_t [B, input]`` -> ``[h_t; e_t] [B, hidden + counters]``."""
        y, new, _ = self.trace_step(x_t, state)
        return y, new

    def merged_weights(self) -> tuple[Tensor, Tensor, Tensor]:
        """The controller and the counter cells as one ``(hidden + k)``-unit LSTM: input weight
        ``[4(H+k), input]``, recurrent weight ``[4(H+k), H+k]`` and bias ``[4(H+k)]``, gate
        blocks ``i, f, c̃, o`` each ordered ``[controller; counters]`` (the recurrent input
        ``[h; e]`` is the merged hidden state)."""
        H, k, n = self.hidden_size, self.counters, self.input_size
        w = torch.cat([self.weight.view(4, H, -1), self.counter_weight.view(4, k, -1)], 1)
        b = torch.cat([self.bias.view(4, H), self.counter_bias.view(4, k)], 1)
        w = w.reshape(4 * (H + k), -1)
        return w[:, :n], w[:, n:], b.reshape(-1)

    def forward(self, x: Tensor, state: CounterLSTMState | None = None, mask: Tensor | None = None):
        """Fast path (same numbers as the reference ``step``, to rounding): the controller and the
        counter cells merged into one ``(H+k)``-unit LSTM (:meth:`merged_weights`), the input
        projection for all steps in one matrix product, then :class:`memrnn.ops.lstm.cpu.LSTMSequence`
        (no autograd graph per step, hand-written backpropagation through time, first order);
        inside :func:`memrnn.reference_paths`, the reference loop under autograd."""
        state, mask = self.check_inputs(x, state, mask)
        H, k = self.hidden_size, self.counters
        N = H + k
        w_in, w_rec, b = self.merged_weights()
        w_in, w_rec, b = (
            sigmoids_first(w_in),
            sigmoids_first(w_rec),
            sigmoids_first(b),
        )  # LSTMSequence's order
        h0, c0 = torch.cat([state.h, state.e], 1), torch.cat([state.c, state.n], 1)
        tanh_units = N if self.cell_activation == "tanh" else H
        hs, cs = lstm_sequence(x, w_in, b, w_rec, h0, c0, tanh_units)
        y, lengths = masked_outputs(hs[:, 1:], mask)
        h, c = final_by_length(hs, lengths), final_by_length(cs, lengths)
        return y, CounterLSTMState(h[:, :H], c[:, :H], c[:, H:], h[:, H:])


register_layer(
    "counter_lstm_tanh",
    tiny={"input_size": 3, "hidden_size": 4, "counters": 2, "cell_activation": "tanh"},
    cls=CounterLSTM,
)
register_layer(
    "relu_counter_relu",
    tiny={"input_size": 3, "hidden_size": 4, "counters": 1, "activation": "relu"},
    cls=ReLUCounter,
)
