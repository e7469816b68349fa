"""Second-order (tensor) RNN: Giles et al. (1990), Stogin et al. 2020 appendix A.

``s^{t+1}_i = h_H(Σ_jk W_ijk s^t_j x^{t+1}_k + b_i)``, ``h_H(z) = 1 / (1 + e^{−Hz})``.

With ``W`` the DFA transition tensor of Definition A.3, ``b = −1/2`` and ``H`` large, this is
the vectorized DFA of equation 3 (:func:`memrnn.constructions.encode_dfa`).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import Tensor, nn

from memrnn.core.checks import exporting, finite_float, positive_int, refuses_removed_arguments
from memrnn.core.layer import MemoryLayer
from memrnn.core.registry import register_layer
from memrnn.ops.buckets import final_by_length, masked_outputs
from memrnn.ops.second_order_rnn import second_order_sequence
from memrnn.ops.stack import h_sigmoid
from memrnn.ops.tensor import second_order


def _one_hot_rows(x: Tensor, mask: Tensor | None) -> Tensor:
    ok = ((x == 0) | (x == 1)).all(-1) & (x.sum(-1) == 1)
    return ok if mask is None else ok | ~mask


def one_hot_ids(x: Tensor, mask: Tensor | None, layer: str) -> Tensor:
    """Ids ``[B, T]`` (or ``[B]``) of a one-hot input ``x [B, T, m]`` (or ``[B, m]``).

    Raises ``ValueError`` naming the row and step of the first real position that is not a
    one-hot vector (padded positions, where ``mask`` is False, may hold anything).
    """
    if exporting():  # no host sync can be traced: the caller promised one-hot input
        return x.argmax(-1)
    ok = _one_hot_rows(x, mask)
    if not bool(ok.all()):
        where = (~ok).nonzero()[0].tolist()
        at = f"row {where[0]}, step {where[1]}" if len(where) == 2 else f"row {where[0]}"
        raise ValueError(
            f"{layer} was built with one_hot_input=True but the input at {at} is not one-hot: "
            f"{x[tuple(where)].tolist()}"
        )
    return x.argmax(-1)


def input_ids(x: Tensor, mask: Tensor | None, mode: bool | None, layer: str) -> Tensor | None:
    """The ids of ``x`` when the indexed one-hot path applies, else ``None`` (dense path).

    ``mode=True``: ``x`` must be one-hot (error otherwise); ``False``: always dense; ``None``
    (auto): ids when ``x`` is exactly one-hot at every real position and needs no gradient
    (the two paths compute the same numbers; only the dense one gives ``x`` a gradient).
    """
    if mode is True:
        return one_hot_ids(x, mask, layer)
    if mode is False or x.requires_grad or x.shape[-1] == 0:
        return None
    return x.argmax(-1) if bool(_one_hot_rows(x, mask).all()) else None


class SensitivityMixin:
    """``H`` as a fixed buffer or a learned parameter, and the start state ``s^0``."""

    def _init_sensitivity(self, sensitivity: float, learn: bool, fk: dict) -> None:
        h = torch.tensor(finite_float("sensitivity H", sensitivity, positive=True), **fk)
        if learn:
            self.sensitivity = nn.Parameter(h)
        else:
            self.register_buffer("sensitivity", h)


class SecondOrderState(NamedTuple):
    """State of ``SecondOrderRNN``: ``s [B, hidden_size]``, batch first.  One layer, no layer
    dimension: the second-order RNN is one state machine (Giles et al. 1990; a DFA's encoding), so
    it takes no ``num_layers``, ``dropout`` or ``bidirectional``."""

    s: Tensor


@register_layer("second_order", tiny={"input_size": 3, "hidden_size": 4})
@refuses_removed_arguments
class SecondOrderRNN(SensitivityMixin, MemoryLayer[SecondOrderState]):
    """Second-order recurrent layer (Giles et al. 1990; Stogin et al. 2020 appendix A, equation 3).

    ``s^{t+1} = h_H(W ×_j s^t ×_k x^{t+1} + b)``; outputs ``s^{t+1}`` ``[B, T, hidden_size]``.

    Args:
        input_size: ``m``, features of ``x_t``.
        hidden_size: ``n``, units of ``s_t``; also ``output_size``.
        sensitivity: ``H`` of ``h_H`` (1 is the plain logistic sigmoid).
        learn_sensitivity: make ``H`` a parameter.
        bias: learn ``b`` (else ``b = 0``).
        one_hot_input: ``None`` (default, auto): ``forward`` takes the indexed path
            (:mod:`memrnn.ops.tensor`) when the input is exactly one-hot and needs no gradient,
            else the dense contraction; ``True``: inputs must be one-hot (an error names the
            first row and step that is not), and no gradient flows to ``x``; ``False``: always
            dense.

    Parameters / buffers: ``weight`` ``W [n, n, m]`` (next unit, current unit, input, as
    ``W_i^{jk}`` of Definition A.3); ``bias`` ``[n]``; ``sensitivity``; ``start`` ``s^0 [n]``
    (a buffer, unit 0 on: Giles et al.'s start neuron; :func:`encode_dfa` sets it).
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        sensitivity: float = 1.0,
        learn_sensitivity: bool = False,
        bias: bool = True,
        one_hot_input: bool | None = None,
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        positive_int("input_size", input_size)
        positive_int("hidden_size", hidden_size)
        self.input_size, self.hidden_size, self.output_size = input_size, hidden_size, hidden_size
        self.one_hot_input = one_hot_input
        fk = {"device": device, "dtype": dtype}
        self.weight = nn.Parameter(torch.empty(hidden_size, hidden_size, input_size, **fk))
        self.bias = nn.Parameter(torch.empty(hidden_size, **fk)) if bias else None
        self._init_sensitivity(sensitivity, learn_sensitivity, fk)
        start = torch.zeros(hidden_size, **fk)
        start[0] = 1.0
        self.register_buffer("start", start)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """``W`` and ``b`` uniform in ``±1/sqrt(hidden_size)``."""
        bound = 1.0 / math.sqrt(self.hidden_size)
        nn.init.uniform_(self.weight, -bound, bound)
        if self.bias is not None:
            nn.init.uniform_(self.bias, -bound, bound)

    def extra_repr(self) -> str:
        return (
            f"{self.input_size}, {self.hidden_size}, sensitivity={float(self.sensitivity):g}, "
            f"learn_sensitivity={isinstance(self.sensitivity, nn.Parameter)}, bias={self.bias is not None}, "
            f"one_hot_input={self.one_hot_input}"
        )

    def initial_state(self, batch_size: int, *, device=None, dtype=None) -> SecondOrderState:
        """``s^0 = start`` ``[B, hidden_size]``."""
        fk = self._default_factory(device, dtype)
        return SecondOrderState(self.start.to(**fk).expand(batch_size, -1).clone())

    def _advance(self, state: SecondOrderState, x_t: Tensor | None, ids_t: Tensor | None) -> Tensor:
        z = second_order(self.weight, state.s, x=x_t, tokens=ids_t)
        if self.bias is not None:
            z = z + self.bias
        return h_sigmoid(z, self.sensitivity)

    def step(self, x_t: Tensor, state: SecondOrderState) -> tuple[Tensor, SecondOrderState]:
        """``x_t [B, input_size]`` -> ``s^{t+1} [B, hidden_size]``."""
        if self.one_hot_input is True:
            s = self._advance(state, None, one_hot_ids(x_t, None, type(self).__name__))
        else:
            s = self._advance(state, x_t, None)
        return s, SecondOrderState(s)

    def forward(
        self, x: Tensor, state: SecondOrderState | None = None, mask: Tensor | None = None
    ) -> tuple[Tensor, SecondOrderState]:
        """Fast path for one-hot inputs: the ids are checked and extracted once for the whole
        sequence (one host sync), then :func:`memrnn.ops.second_order_rnn.second_order_sequence` runs
        the recurrence (token buckets and a hand-written first-order backward on CPU, Triton kernels
        on CUDA; the indexed contraction step by step under autograd where buckets do not pay or
        inside :func:`memrnn.reference_paths`, which runs the loop over ``step``).  Dense inputs
        take the reference loop."""
        state, mask = self.check_inputs(x, state, mask)
        ids = None if x.shape[1] == 0 else input_ids(x, mask, self.one_hot_input, type(self).__name__)
        if ids is None:
            return super().forward(x, state, mask)
        states = second_order_sequence(self.weight, self.bias, self.sensitivity, state.s, ids)
        y, lengths = masked_outputs(states[:, 1:], mask)
        return y, SecondOrderState(final_by_length(states, lengths))
