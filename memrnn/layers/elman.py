"""Elman and Jordan recurrent layers (Cotterell et al. 2023, "Elman and Jordan Networks").

Elman:  ``h_t = σ(U h_{t-1} + V x_t + b)``
Jordan: ``h_t = σ(U r_{t-1} + V x_t + b_h)``,  ``r_t = σ_o(E h_t)``

``σ`` is one of ``tanh``, ``sigmoid``, ``relu``, ``heaviside`` or ``saturated_linear``.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from memrnn.core.activations import ACTIVATIONS, HIDDEN_ACTIVATIONS, resolve_activation
from memrnn.core.checks import positive_int, refuses_removed_arguments
from memrnn.core.layer import MemoryLayer
from memrnn.core.registry import register_layer
from memrnn.layers.stacking import (
    bidirectional_loop,
    check_dropout,
    check_flag,
    stacked_sequence,
    stepless_error,
)
from memrnn.ops.buckets import final_by_length, masked_outputs
from memrnn.ops.elman import elman_sequence
from memrnn.ops.jordan import jordan_sequence

#: the hidden activations ``ElmanRNN`` accepts; ``ElmanOutputRNN``'s output may also be linear or a softmax
OUTPUT_ACTIVATIONS = (*HIDDEN_ACTIVATIONS, "identity", "softmax")


class ElmanState(NamedTuple):
    """State of ``ElmanRNN``: ``h [B, hidden_size]`` for one layer and one direction (the default);
    ``h [B, num_layers * num_directions, hidden_size]`` when stacked or bidirectional, batch first
    (the last layer is ``state.h[:, -1]``, ``state.h[-1]`` the last batch row; bidirectional:
    ``state.h[:, 2 * l + d]`` is layer ``l``'s direction ``d``, ``nn.RNN``'s order).
    ``ElmanRNN.to_torch_state``/``from_torch_state`` convert to and from ``nn.RNN``'s ``h_n``
    ``[num_layers * num_directions, B, hidden_size]``."""

    h: Tensor


@register_layer("elman", tiny={"input_size": 3, "hidden_size": 5})
@refuses_removed_arguments
class ElmanRNN(MemoryLayer[ElmanState]):
    """Elman (simple) RNN, Cotterell et al. 2023: ``h_t = σ(U h_{t-1} + V x_t + b)``.

    Args:
        input_size: features of ``x_t``.
        hidden_size: units ``d`` of ``h_t``; also ``output_size`` (twice it when bidirectional).
        activation: ``tanh`` | ``sigmoid`` | ``relu`` | ``heaviside`` | ``saturated_linear``.
        bias: learn ``b``.
        num_layers: stacked Elman layers, each reading the outputs of the one below, as
            ``nn.RNN``'s ``num_layers``.
        dropout: as ``nn.RNN``'s: on the outputs of each layer but the last, in training mode only
            (0 by default; > 0 needs ``num_layers > 1``).
        bidirectional: as ``nn.RNN``'s: a backward direction per layer, started at each row's own
            last real token; ``output_size = 2 * hidden_size``; ``forward``/``outputs`` only
            (``step`` raises: no generation, no StackRNN controller).
        learned_initial_state: ``h_0 = σ(h0_input)``, a learned parameter ``h0_input
            [num_layers * num_directions, hidden_size]`` (0 at first: ``h_0 = σ(0)``, the zero state
            for tanh and relu), passed through the layer's own activation: rau's
            ``SimpleRNN(learned_hidden_state=True)``, FLaRe's RNN (Butoi et al. 2025).  Used by
            ``initial_state`` and so by ``forward``'s default state.

    Parameters: ``weight_ih`` (V) ``[hidden, input]``, ``weight_hh`` (U) ``[hidden, hidden]``,
    ``bias`` (b) ``[hidden]`` (and ``h0_input`` with ``learned_initial_state``).  Stacked or bidirectional, each layer ``k`` and direction has its
    own, named as ``nn.RNN``'s: ``weight_ih_l{k}``, ``weight_hh_l{k}``, ``bias_l{k}``, with the
    suffix ``_reverse`` for the backward direction (layer ``k > 0`` reads ``num_directions *
    hidden`` features).  With the default ``activation="tanh"`` (or ``"relu"``) the layer is
    ``nn.RNN`` with ``bias_hh = 0``.

    Coming from ``nn.RNN``: always batch first, and ``y, state = layer(x)`` gives ``state`` as a
    NamedTuple :class:`ElmanState` whose ``h`` has the batch first: ``[B, hidden_size]`` for one
    layer and direction, else ``[B, num_layers * num_directions, hidden_size]`` (the last layer
    ``state.h[:, -1]``; ``state.h[-1]`` is the last batch row).  ``layer.to_torch_state(state)``
    gives ``nn.RNN``'s ``h_n``, ``layer.from_torch_state(h_n)`` converts back.
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        activation: str = "tanh",
        bias: bool = True,
        num_layers: int = 1,
        dropout: float = 0.0,
        bidirectional: bool = False,
        learned_initial_state: bool = False,
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        positive_int("input_size", input_size)
        positive_int("hidden_size", hidden_size)
        self.num_layers = positive_int("num_layers", num_layers)
        self.learned_initial_state = check_flag("learned_initial_state", learned_initial_state)
        self.dropout = check_dropout(dropout, self.num_layers)
        self.bidirectional = check_flag("bidirectional", bidirectional)
        self.num_directions = 2 if self.bidirectional else 1
        self.activation = resolve_activation(activation, HIDDEN_ACTIVATIONS)
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.output_size = hidden_size * self.num_directions
        fk = {"device": device, "dtype": dtype}
        for layer in range(self.num_layers):
            for direction in range(self.num_directions):
                sfx = self._suffix(layer, direction)
                n_in = input_size if layer == 0 else self.output_size
                setattr(self, f"weight_ih{sfx}", nn.Parameter(torch.empty(hidden_size, n_in, **fk)))
                setattr(self, f"weight_hh{sfx}", nn.Parameter(torch.empty(hidden_size, hidden_size, **fk)))
                setattr(self, f"bias{sfx}", nn.Parameter(torch.empty(hidden_size, **fk)) if bias else None)
        #: ``h_0 = σ(h0_input)`` ``[num_layers * num_directions, hidden_size]`` (``learned_initial_state``)
        self.h0_input = (
            nn.Parameter(torch.zeros(self.num_layers * self.num_directions, hidden_size, **fk))
            if self.learned_initial_state
            else None
        )
        self.reset_parameters()

    @property
    def _single(self) -> bool:
        """One layer, one direction: Cotterell et al.'s layer, state ``[B, hidden_size]``."""
        return self.num_layers == 1 and not self.bidirectional

    def _suffix(self, layer: int, direction: int) -> str:
        return "" if self._single else f"_l{layer}" + ("_reverse" if direction else "")

    def _params(self, layer: int, direction: int) -> tuple[Tensor, Tensor, Tensor | None]:
        """``(weight_ih, weight_hh, bias)`` of ``layer``'s ``direction`` (0 forward, 1 backward)."""
        sfx = self._suffix(layer, direction)
        return getattr(self, f"weight_ih{sfx}"), getattr(self, f"weight_hh{sfx}"), getattr(self, f"bias{sfx}")

    def reset_parameters(self) -> None:
        """Uniform in ``±1/sqrt(hidden_size)``, as ``torch.nn.RNN``; ``h0_input`` 0."""
        bound = 1.0 / math.sqrt(self.hidden_size)
        for p in self.parameters():
            if p is not self.h0_input:
                nn.init.uniform_(p, -bound, bound)
        if self.h0_input is not None:
            with torch.no_grad():
                self.h0_input.zero_()

    def extra_repr(self) -> str:
        stacked = (f", num_layers={self.num_layers}" if self.num_layers > 1 else "") + (
            f", dropout={self.dropout}" if self.dropout else ""
        )
        return (
            f"{self.input_size}, {self.hidden_size}, activation={self.activation!r}, "
            f"bias={self._params(0, 0)[2] is not None}{stacked}"
            + (", bidirectional=True" if self.bidirectional else "")
            + (", learned_initial_state=True" if self.learned_initial_state else "")
        )

    def initial_state(self, batch_size: int, *, device=None, dtype=None) -> ElmanState:
        """``h_0 = 0`` (with ``learned_initial_state``, ``σ(h0_input)`` for every row): ``[B,
        hidden_size]`` for one layer and direction, else ``[B, num_layers * num_directions,
        hidden_size]`` (:class:`ElmanState`)."""
        fk = self._default_factory(device, dtype)
        if self.h0_input is None:
            h = torch.zeros(batch_size, self.num_layers * self.num_directions, self.hidden_size, **fk)
        else:  # a copy per row, so that the fast paths get a contiguous state
            h0 = ACTIVATIONS[self.activation](self.h0_input).to(**fk)
            h = h0.expand(batch_size, *h0.shape).contiguous()
        return ElmanState(h[:, 0] if self._single else h)

    def output_at(self, state: ElmanState) -> Tensor:
        """The output ``[B, hidden_size]`` at ``state``: the top layer's ``h`` (what ``step``
        returned on reaching it); at ``initial_state``, ``h_0`` (0, or ``σ(h0_input)``): rau's
        ``include_first=True`` first output (:meth:`memrnn.layers.LSTMLayer.output_at`).  A
        bidirectional layer has none."""
        if self.bidirectional:
            raise stepless_error(self, "give an output at a state")
        return state[0] if self._single else state[0][:, -1]

    def _step_projected(self, pre_t: Tensor, state: ElmanState) -> tuple[Tensor, ElmanState]:
        """One step from the already projected input ``pre_t = V x_t + b`` ``[B, hidden_size]``
        (one layer, one direction)."""
        h = ACTIVATIONS[self.activation](pre_t + F.linear(state.h, self.weight_hh))
        return h, ElmanState(h)

    def _cell(
        self, layer: int, direction: int, x_t: Tensor, leaves: tuple[Tensor, ...]
    ) -> tuple[Tensor, tuple[Tensor, ...], dict[str, Tensor]]:
        """One step of one layer and direction: ``x_t [B, n]``, ``(h [B, hidden],)``."""
        w_ih, w_hh, b = self._params(layer, direction)
        h = ACTIVATIONS[self.activation](F.linear(x_t, w_ih, b) + F.linear(leaves[0], w_hh))
        return h, (h,), {}

    def step(self, x_t: Tensor, state: ElmanState) -> tuple[Tensor, ElmanState]:
        """``x_t [B, input_size]`` -> the top layer's ``h_t [B, hidden_size]``.

        Stacked, with ``dropout`` in training mode, each step draws its own mask between layers
        (the distribution of ``forward``'s, other numbers).  Bidirectional: raises, its backward
        direction cannot run step by step."""
        if self.bidirectional:
            raise stepless_error(self)
        if self._single:
            return self._step_projected(F.linear(x_t, self.weight_ih, self.bias), state)
        inp, hs = x_t, []
        for layer, h in enumerate(state.h.unbind(1)):
            if layer and self.dropout and self.training:
                inp = F.dropout(inp, self.dropout, True)
            inp, _, _ = self._cell(layer, 0, inp, (h,))
            hs.append(inp)
        return inp, ElmanState(torch.stack(hs, 1))

    def _loop(self, x: Tensor, state: ElmanState, mask: Tensor | None, *, with_trace: bool, step=None):
        """The reference loop: over ``step`` when unidirectional, else
        :func:`memrnn.layers.gated.bidirectional_loop` over the layers' cells."""
        if not self.bidirectional:
            return super()._loop(x, state, mask, with_trace=with_trace, step=step)
        return bidirectional_loop(self, x, state, mask, self._cell, with_trace=with_trace)

    def to_torch_state(self, state: ElmanState) -> Tensor:
        """``nn.RNN``'s ``h_n`` ``[num_layers * num_directions, B, hidden_size]`` (contiguous) of
        ``state``; a ``ValueError`` names another shape."""
        h = state[0] if isinstance(state, tuple) else state
        lead = self.num_layers * self.num_directions
        want = (self.hidden_size,) if self._single else (lead, self.hidden_size)
        if not isinstance(h, Tensor) or tuple(h.shape[1:]) != want or h.dim() != len(want) + 1:
            got = list(h.shape) if isinstance(h, Tensor) else type(h).__name__
            raise ValueError(
                f"ElmanRNN.to_torch_state: h has shape {got}, expected [batch, {', '.join(map(str, want))}]"
            )
        return h[None].contiguous() if self._single else h.transpose(0, 1).contiguous()

    def from_torch_state(self, h_n: Any) -> ElmanState:
        """The :class:`ElmanState` of ``nn.RNN``'s ``h_n`` ``[num_layers * num_directions, B,
        hidden_size]``; a ``ValueError`` names another shape."""
        lead = self.num_layers * self.num_directions
        if (
            not isinstance(h_n, Tensor)
            or h_n.dim() != 3
            or h_n.shape[0] != lead
            or h_n.shape[2] != self.hidden_size
        ):
            got = list(h_n.shape) if isinstance(h_n, Tensor) else type(h_n).__name__
            raise ValueError(
                f"ElmanRNN.from_torch_state: h_n has shape {got}, expected nn.RNN's "
                f"[num_layers * num_directions, batch, hidden_size] = [{lead}, batch, {self.hidden_size}]"
            )
        return ElmanState(h_n[0] if self._single else h_n.transpose(0, 1))

    def forward(
        self, x: Tensor, state: ElmanState | None = None, mask: Tensor | None = None
    ) -> tuple[Tensor, ElmanState]:
        """Fast path: the input projection ``V x + b`` for all steps in one matrix product
        ``[B, T, hidden]``, then :func:`memrnn.ops.elman.elman_sequence` over the recurrence, per
        layer and direction when stacked or bidirectional (:func:`memrnn.layers.gated.stacked_sequence`:
        the backward direction over each row's real tokens reversed, dropout between layers).
        ``elman_sequence`` picks its implementation (a hand-written first-order backward on CPU,
        Triton kernels on CUDA); inside :func:`memrnn.reference_paths`, the reference loop over
        ``step`` under autograd (second derivatives).  Same numbers, to rounding."""
        state, mask = self.check_inputs(x, state, mask)
        act = ACTIVATIONS[self.activation]
        if self._single:
            pre = F.linear(x, self.weight_ih, self.bias)
            hs = elman_sequence(pre, self.weight_hh, state.h, self.activation, act)
            y, lengths = masked_outputs(hs[:, 1:], mask)
            return y, ElmanState(final_by_length(hs, lengths))

        def run(layer: int, direction: int, inp: Tensor, h0: Tensor) -> Tensor:
            w_ih, w_hh, b = self._params(layer, direction)
            return elman_sequence(F.linear(inp, w_ih, b), w_hh, h0, self.activation, act)

        y, final = stacked_sequence(
            x,
            state.h,
            None if mask is None else mask.sum(1),
            run,
            num_layers=self.num_layers,
            num_directions=self.num_directions,
            dropout=self.dropout,
            training=self.training,
        )
        y, _ = masked_outputs(y, mask)
        return y, ElmanState(final)


for _act in ("sigmoid", "relu", "heaviside", "saturated_linear"):
    register_layer(
        f"elman_{_act}", tiny={"input_size": 3, "hidden_size": 5, "activation": _act}, cls=ElmanRNN
    )
register_layer("elman_2layer", tiny={"input_size": 3, "hidden_size": 4, "num_layers": 2}, cls=ElmanRNN)


class JordanState(NamedTuple):
    """State of ``JordanRNN``: the fed-back output ``r [B, feedback_size]``, batch first.  One
    layer, no layer dimension: a Jordan network's recurrence runs through its output, so it takes
    no ``num_layers``, ``dropout`` or ``bidirectional`` (stack an :class:`ElmanRNN` for that)."""

    r: Tensor


@register_layer("jordan", tiny={"input_size": 3, "hidden_size": 5, "feedback_size": 4})
@refuses_removed_arguments
class JordanRNN(MemoryLayer[JordanState]):
    """Jordan RNN, Cotterell et al. 2023: ``h_t = σ(U r_{t-1} + V x_t + b_h)``, ``r_t = σ_o(E h_t)``.

    The recurrence runs through the output ``r`` rather than the hidden state.  The layer
    returns ``h_t`` (``output_size = hidden_size``) and carries ``r_t`` as its state;
    ``r_0 = 0``.

    Args:
        input_size: features of ``x_t``.
        hidden_size: units of ``h_t``.
        feedback_size: size of ``r_t`` (for a language model, the vocabulary size).
        activation: ``σ``, as in ``ElmanRNN``.
        output_activation: ``σ_o``: ``softmax`` (the usual choice of Cotterell et al. 2023), ``identity``
            (feed back the logits), or any hidden activation.

    Parameters: ``weight_ih`` (V) ``[hidden, input]``, ``weight_fb`` (U) ``[hidden, feedback]``,
    ``bias`` (b_h) ``[hidden]``, ``weight_out`` (E) ``[feedback, hidden]``.
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        feedback_size: int,
        activation: str = "tanh",
        output_activation: str = "softmax",
        bias: bool = True,
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        for n, v in (
            ("input_size", input_size),
            ("hidden_size", hidden_size),
            ("feedback_size", feedback_size),
        ):
            positive_int(n, v)
        self.activation = resolve_activation(activation, HIDDEN_ACTIVATIONS)
        self.output_activation = resolve_activation(
            output_activation, OUTPUT_ACTIVATIONS, "output_activation"
        )
        self.input_size, self.hidden_size, self.feedback_size = input_size, hidden_size, feedback_size
        self.output_size = hidden_size
        fk = {"device": device, "dtype": dtype}
        self.weight_ih = nn.Parameter(torch.empty(hidden_size, input_size, **fk))
        self.weight_fb = nn.Parameter(torch.empty(hidden_size, feedback_size, **fk))
        self.bias = nn.Parameter(torch.empty(hidden_size, **fk)) if bias else None
        self.weight_out = nn.Parameter(torch.empty(feedback_size, hidden_size, **fk))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Uniform in ``±1/sqrt(fan)``: hidden-side weights by ``hidden_size``, ``E`` likewise."""
        bound = 1.0 / math.sqrt(self.hidden_size)
        for p in self.parameters():
            nn.init.uniform_(p, -bound, bound)

    def extra_repr(self) -> str:
        return (
            f"{self.input_size}, {self.hidden_size}, feedback_size={self.feedback_size}, "
            f"activation={self.activation!r}, output_activation={self.output_activation!r}"
        )

    def initial_state(self, batch_size: int, *, device=None, dtype=None) -> JordanState:
        """``r_0 = 0`` ``[B, feedback_size]``."""
        return JordanState(
            torch.zeros(batch_size, self.feedback_size, **self._default_factory(device, dtype))
        )

    def trace_step(self, x_t: Tensor, state: JordanState) -> tuple[Tensor, JordanState, dict[str, Tensor]]:
        pre = F.linear(x_t, self.weight_ih, self.bias) + F.linear(state.r, self.weight_fb)
        h = ACTIVATIONS[self.activation](pre)
        r = ACTIVATIONS[self.output_activation](F.linear(h, self.weight_out))
        return h, JordanState(r), {"h": h, "r": r}

    def step(self, x_t: Tensor, state: JordanState) -> tuple[Tensor, JordanState]:
        """``x_t [B, input_size]`` -> ``h_t [B, hidden_size]``; state ``r_t``."""
        h, new, _ = self.trace_step(x_t, state)
        return h, new

    def forward(self, x: Tensor, state: JordanState | None = None, mask: Tensor | None = None):
        """Fast path (same numbers as the reference ``step``, to rounding): ``V x_t + b_h`` for all
        steps in one matrix product, then :func:`memrnn.ops.jordan.jordan_sequence` (hand-written
        backpropagation through time, first order); inside :func:`memrnn.reference_paths`, the
        reference step loop under autograd (second derivatives)."""
        state, mask = self.check_inputs(x, state, mask)
        pre = F.linear(x.transpose(0, 1), self.weight_ih, self.bias)  # [T, B, hidden]
        hs, rs = jordan_sequence(
            pre,
            self.weight_fb,
            self.weight_out,
            state.r,
            self.activation,
            self.output_activation,
            (ACTIVATIONS[self.activation], ACTIVATIONS[self.output_activation]),
        )
        y, lengths = masked_outputs(hs.transpose(0, 1), mask)
        return y, JordanState(final_by_length(rs.transpose(0, 1), lengths))
