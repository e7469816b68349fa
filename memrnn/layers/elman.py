"""Elman and Jordan recurrent layers (Cotterell et al. 2023, "Elman and Jordan Networks").

Elman:  ``h_t = σ(U h_{t-1} + V x_t + b)``
Jordan: ``h_t = σ(U r_{t-1} + V x_t + b_h)``,  ``r_t = σ_o(E h_t)``

``σ`` is one of ``tanh``, ``sigmoid``, ``relu``, ``heaviside`` or ``saturated_linear``.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from memrnn.core.activations import ACTIVATIONS, HIDDEN_ACTIVATIONS, resolve_activation
from memrnn.core.checks import positive_int
from memrnn.core.layer import MemoryLayer
from memrnn.core.registry import register_layer
from memrnn.ops.buckets import final_by_length, masked_outputs
from memrnn.ops.elman import elman_sequence
from memrnn.ops.jordan import jordan_sequence

#: the hidden activations ``ElmanRNN`` accepts; ``ElmanOutputRNN``'s output may also be linear or a softmax
OUTPUT_ACTIVATIONS = (*HIDDEN_ACTIVATIONS, "identity", "softmax")


class ElmanState(NamedTuple):
    """State of ``ElmanRNN``: ``h [B, hidden_size]``."""

    h: Tensor


@register_layer("elman", tiny={"input_size": 3, "hidden_size": 5})
class ElmanRNN(MemoryLayer[ElmanState]):
    """Elman (simple) RNN, Cotterell et al. 2023: ``h_t = σ(U h_{t-1} + V x_t + b)``.

    Args:
        input_size: features of ``x_t``.
        hidden_size: units ``d`` of ``h_t``; also ``output_size``.
        activation: ``tanh`` | ``sigmoid`` | ``relu`` | ``heaviside`` | ``saturated_linear``.
        bias: learn ``b``.
        fused: ``forward`` computes ``V x_t + b`` for all steps in one matrix product and runs the
            recurrence through :func:`memrnn.ops.elman.elman_sequence` (a hand-written backward on
            CPU, Triton kernels on CUDA; the default); ``False``: the reference loop over ``step``
            under autograd (also inside :func:`memrnn.reference_paths`).  Same numbers; the fused
            backward is first order.

    Parameters: ``weight_ih`` (V) ``[hidden, input]``, ``weight_hh`` (U) ``[hidden, hidden]``,
    ``bias`` (b) ``[hidden]``.
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        activation: str = "tanh",
        bias: bool = True,
        fused: bool = True,
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        positive_int("input_size", input_size)
        positive_int("hidden_size", hidden_size)
        self.fused = bool(fused)
        self.activation = resolve_activation(activation, HIDDEN_ACTIVATIONS)
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.output_size = hidden_size
        fk = {"device": device, "dtype": dtype}
        self.weight_ih = nn.Parameter(torch.empty(hidden_size, input_size, **fk))
        self.weight_hh = nn.Parameter(torch.empty(hidden_size, hidden_size, **fk))
        self.bias = nn.Parameter(torch.empty(hidden_size, **fk)) if bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Uniform in ``±1/sqrt(hidden_size)``, as ``torch.nn.RNN``."""
        bound = 1.0 / math.sqrt(self.hidden_size)
        for p in self.parameters():
            nn.init.uniform_(p, -bound, bound)

    def extra_repr(self) -> str:
        return (
            f"{self.input_size}, {self.hidden_size}, activation={self.activation!r}, "
            f"bias={self.bias is not None}, fused={self.fused}"
        )

    def initial_state(self, batch_size: int, *, device=None, dtype=None) -> ElmanState:
        """``h_0 = 0`` ``[B, hidden_size]``."""
        return ElmanState(torch.zeros(batch_size, self.hidden_size, **self._default_factory(device, dtype)))

    def _step_projected(self, pre_t: Tensor, state: ElmanState) -> tuple[Tensor, ElmanState]:
        """One step from the already projected input ``pre_t = V x_t + b`` ``[B, hidden_size]``."""
        h = ACTIVATIONS[self.activation](pre_t + F.linear(state.h, self.weight_hh))
        return h, ElmanState(h)

    def step(self, x_t: Tensor, state: ElmanState) -> tuple[Tensor, ElmanState]:
        """``x_t [B, input_size]`` -> ``h_t [B, hidden_size]``."""
        return self._step_projected(F.linear(x_t, self.weight_ih, self.bias), state)

    def forward(
        self, x: Tensor, state: ElmanState | None = None, mask: Tensor | None = None
    ) -> tuple[Tensor, ElmanState]:
        """Fast path: the input projection ``V x + b`` for all steps in one matrix product
        ``[B, T, hidden]``, then :func:`memrnn.ops.elman.elman_sequence` over the recurrence;
        ``fused=False``: the reference loop."""
        if not self.fused:
            return super().forward(x, state, mask)
        state, mask = self.check_inputs(x, state, mask)
        pre = F.linear(x, self.weight_ih, self.bias)
        hs = elman_sequence(pre, self.weight_hh, state.h, self.activation, ACTIVATIONS[self.activation])
        y, lengths = masked_outputs(hs[:, 1:], mask)
        return y, ElmanState(final_by_length(hs, lengths))


for _act in ("sigmoid", "relu", "heaviside", "saturated_linear"):
    register_layer(
        f"elman_{_act}", tiny={"input_size": 3, "hidden_size": 5, "activation": _act}, cls=ElmanRNN
    )


class JordanState(NamedTuple):
    """State of ``JordanRNN``: the fed-back output ``r [B, feedback_size]``."""

    r: Tensor


@register_layer("jordan", tiny={"input_size": 3, "hidden_size": 5, "feedback_size": 4})
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
        fused: ``forward`` runs :func:`memrnn.ops.jordan.jordan_sequence` (input projection for
            all steps at once, hand-written backpropagation through time; the default);
            ``False``: the reference step loop under autograd.  Same numbers either way; the fused
            backward is first order, so second derivatives need ``False``.

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
        fused: bool = True,
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
        self.fused = bool(fused)
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
            f"activation={self.activation!r}, output_activation={self.output_activation!r}, fused={self.fused}"
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
        steps in one matrix product, then :func:`memrnn.ops.jordan.jordan_sequence`;
        ``fused=False``: the reference loop."""
        if not self.fused:
            return super().forward(x, state, mask)
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
