"""The neural network pushdown automaton (nnPDA) of Stogin, Mali & Giles 2020, Definition 3.6.

State ``(Q^t, K^t)``: a state vector and a differentiable stack (Definition 3.1).  One step, for
the input ``I^{t+1}``:

* ``R^t = (K^t_0, 1 − ‖K^t_0‖∞)``  (stack reading, Definition 3.4);
* ``Q^{t+1}_i = h_H(Σ_jkl (W_Q)_i^{jkl} Q^t_j I^{t+1}_k R^t_l − 1/2)``        (equation 1);
* ``p±^{t+1} = Σ_jkl (W_{p±})^{jkl} Q^t_j I^{t+1}_k R^t_l``,
  ``C^{t+1}_i = Σ_jkl (W_C)_i^{jkl} Q^t_j I^{t+1}_k R^t_l``;
* ``K^{t+1} = π(p+^{t+1}, p−^{t+1}, C^{t+1}) K^t``                            (equation 2).

The stack is stored as a window of ``depth`` cells plus the common value of all deeper cells
(``memrnn.ops.stack``); this is exactly the paper's infinite stack while the encoded stack
never holds more than ``depth`` symbols.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

import torch
from torch import Tensor, nn

from memrnn.core.checks import positive_int, refuses_removed_arguments
from memrnn.core.layer import MemoryLayer
from memrnn.core.registry import register_layer
from memrnn.layers.second_order import SensitivityMixin, input_ids, one_hot_ids
from memrnn.ops.buckets import final_by_length, masked_outputs
from memrnn.ops.nnpda import ACTIONS, activate_actions, nnpda_sequence, nnpda_step
from memrnn.ops.stack import stack_overflow, stack_reading, stack_size

Action = Literal["identity", "sigmoid", "clamp"]


class NNPDAState(NamedTuple):
    """State of ``NNPDA``: ``q`` ``Q [B, num_states]``, ``stack`` ``K_0..K_{D−1} [B, depth,
    stack_symbols]`` (top first) and ``tail`` ``[B, stack_symbols]`` (every deeper cell); batch
    first, so ``stack[:, 0]`` is the top cell.  One layer, no layer dimension: the nnPDA is one
    automaton with one stack (Stogin et al. 2020), so it takes no ``num_layers``, ``dropout`` or
    ``bidirectional``."""

    q: Tensor
    stack: Tensor
    tail: Tensor


class StackOverflowError(ValueError):
    """A push onto a full stack window under ``strict=True``."""


@register_layer("nnpda", tiny={"input_size": 3, "num_states": 3, "stack_symbols": 2, "depth": 4})
@refuses_removed_arguments
class NNPDA(SensitivityMixin, MemoryLayer[NNPDAState]):
    """Third-order neural network pushdown automaton (Stogin et al. 2020 Definition 3.6).

    Outputs ``y_t = (Q^{t+1}, R^{t+1})`` ``[B, T, num_states + stack_symbols + 1]``: the state and
    the reading of the new stack top (with its "empty" component), so a linear readout can
    express acceptance by final state and by empty stack; ``output="state"`` gives ``Q`` only.

    Args:
        input_size: ``m1``, size of the input ``I`` (the input alphabet for one-hot input).
        num_states: ``n``, size of ``Q``.
        stack_symbols: ``m2``, size of each stack cell ``K_i``.
        depth: cells kept in the stack window (see ``memrnn.ops.stack``).
        sensitivity: ``H``.  Theorem 3.7: large enough ``H`` keeps an encoded PDA within ε.
        learn_sensitivity: make ``H`` a parameter.
        action: how ``p+``, ``p−`` and ``C`` come from their contractions ``z``:
            ``"identity"`` is Definition 3.6 (``p = z``; right for encoded weights, unbounded when
            training); ``"sigmoid"`` uses ``h_H(z − 1/2)`` like the state units (keeps them in
            ``[0, 1]``, within ``h_H(−1/2)`` of the ideal values for encoded weights);
            ``"clamp"`` clips ``z`` to ``[0, 1]``.  The paper specifies only the first; it
            does not discuss training, nor ``p+ + p− ≤ 1``.
        one_hot_input: ``None`` (default, auto), ``True`` (inputs must be one-hot; no gradient
            to ``x``) or ``False`` (always dense), as for :class:`SecondOrderRNN`.
        strict: raise :class:`StackOverflowError`, naming the step and batch row, when a push
            (``p+ > 1/2``) meets a full window (``‖K_{D−1}‖∞ > 1/2``).  Otherwise the bottom
            cell is dropped and ``trace`` reports ``overflow``.
        output: ``"state_and_reading"`` (default) or ``"state"``.

    Parameters (index order as in the paper: output, state ``j``, input ``k``, reading ``l``):
    ``weight_q`` ``(W_Q)_i^{jkl}`` ``[n, n, m1, m2+1]``, ``weight_push`` / ``weight_pop``
    ``(W_{p±})^{jkl}`` ``[n, m1, m2+1]``, ``weight_c`` ``(W_C)_i^{jkl}`` ``[m2, n, m1, m2+1]``;
    buffers ``sensitivity`` and ``start`` (``Q^0``, state 0 on; set by ``encode_pda``).
    """

    def __init__(
        self,
        input_size: int,
        num_states: int,
        stack_symbols: int,
        depth: int = 32,
        sensitivity: float = 10.0,
        learn_sensitivity: bool = False,
        action: Action = "identity",
        one_hot_input: bool | None = None,
        strict: bool = False,
        output: Literal["state_and_reading", "state"] = "state_and_reading",
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        for name, v in (
            ("input_size", input_size),
            ("num_states", num_states),
            ("stack_symbols", stack_symbols),
            ("depth", depth),
        ):
            positive_int(name, v)
        if action not in ACTIONS:
            raise ValueError(f"unknown action {action!r}; choose one of {', '.join(ACTIONS)}")
        if output not in ("state_and_reading", "state"):
            raise ValueError(f"unknown output {output!r}; choose 'state_and_reading' or 'state'")
        self.input_size, self.num_states, self.stack_symbols, self.depth = (
            input_size,
            num_states,
            stack_symbols,
            depth,
        )
        self.action, self.one_hot_input, self.strict, self.output = action, one_hot_input, strict, output
        self.output_size = num_states + (stack_symbols + 1 if output == "state_and_reading" else 0)
        n, m1, L = num_states, input_size, stack_symbols + 1
        fk = {"device": device, "dtype": dtype}
        self.weight_q = nn.Parameter(torch.empty(n, n, m1, L, **fk))
        self.weight_push = nn.Parameter(torch.empty(n, m1, L, **fk))
        self.weight_pop = nn.Parameter(torch.empty(n, m1, L, **fk))
        self.weight_c = nn.Parameter(torch.empty(stack_symbols, n, m1, L, **fk))
        self._init_sensitivity(sensitivity, learn_sensitivity, fk)
        start = torch.zeros(n, **fk)
        start[0] = 1.0
        self.register_buffer("start", start)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Every weight uniform in ``[0, 2/n]``: with one-hot ``Q``, ``I`` and ``R`` each
        contraction starts near ``1/n``, inside the sensitive range of ``h_H(· − 1/2)``."""
        for p in (self.weight_q, self.weight_push, self.weight_pop, self.weight_c):
            nn.init.uniform_(p, 0.0, 2.0 / self.num_states)

    def extra_repr(self) -> str:
        return (
            f"{self.input_size}, num_states={self.num_states}, stack_symbols={self.stack_symbols}, "
            f"depth={self.depth}, sensitivity={float(self.sensitivity):g}, action={self.action!r}, "
            f"one_hot_input={self.one_hot_input}, strict={self.strict}, output={self.output!r}"
        )

    def initial_state(self, batch_size: int, *, device=None, dtype=None) -> NNPDAState:
        """``Q^0 = start``, empty stack ``K^0 = 0`` (window and tail)."""
        fk = self._default_factory(device, dtype)
        q = self.start.to(**fk).expand(batch_size, -1).clone()
        return NNPDAState(
            q,
            torch.zeros(batch_size, self.depth, self.stack_symbols, **fk),
            torch.zeros(batch_size, self.stack_symbols, **fk),
        )

    def weight(self) -> Tensor:
        """All four tensors stacked along the output index ``[n + 2 + m2, n, m1, m2 + 1]``:
        rows ``Q``, then ``p+``, ``p−``, then ``C``."""
        return torch.cat([self.weight_q, self.weight_push[None], self.weight_pop[None], self.weight_c], 0)

    def _act(self, z: Tensor) -> Tensor:
        """``p+``, ``p−`` or ``C`` from its contraction ``z`` (``action``)."""
        return activate_actions(z, self.action, self.sensitivity)

    def _advance(
        self,
        weight: Tensor,
        state: NNPDAState,
        x_t: Tensor | None,
        ids_t: Tensor | None,
        diagnostics: bool = True,
    ) -> tuple[Tensor, NNPDAState, dict[str, Tensor]]:
        q, stack, tail, a, reading = nnpda_step(
            weight, self.sensitivity, *state, self.action, x=x_t, tokens=ids_t
        )
        p_push, p_pop, push_vector = a[:, 0], a[:, 1], a[:, 2:]
        overflow = stack_overflow(state.stack, p_push) if diagnostics or self.strict else None
        new = NNPDAState(q, stack, tail)
        y = q if self.output == "state" else torch.cat([q, stack_reading(stack[:, 0])], -1)
        if not diagnostics:
            return y, new, {} if overflow is None else {"overflow": overflow}
        diag = {
            "push": p_push,
            "pop": p_pop,
            "push_vector": push_vector,
            "reading": reading,
            "overflow": overflow.to(q.dtype),
            "size": stack_size(stack).to(q.dtype),
        }
        return y, new, diag

    def _ids_or_x(self, x_t: Tensor) -> tuple[Tensor | None, Tensor | None]:
        if self.one_hot_input is True:
            return None, one_hot_ids(x_t, None, type(self).__name__)
        return x_t, None

    def _raise_overflow(self, flags: Tensor) -> None:
        """``flags [B, T]`` (or ``[B]``): raise naming the first overflowing row and step."""
        hit = flags.nonzero()
        if len(hit):
            first = hit[hit[:, -1].argmin()].tolist() if flags.dim() == 2 else hit[0].tolist()
            where = (
                f"step t={first[1]} (0-based), batch row {first[0]}"
                if flags.dim() == 2
                else f"batch row {first[0]}"
            )
            raise StackOverflowError(
                f"nnPDA stack overflow at {where}: push onto a full window of depth={self.depth} "
                f"(strict=True); raise depth"
            )

    def step(self, x_t: Tensor, state: NNPDAState) -> tuple[Tensor, NNPDAState]:
        """``x_t [B, input_size]`` -> ``(y [B, output_size], next state)``."""
        y, new, diag = self._advance(self.weight(), state, *self._ids_or_x(x_t), diagnostics=False)
        if self.strict:
            self._raise_overflow(diag["overflow"])
        return y, new

    def trace_step(self, x_t: Tensor, state: NNPDAState) -> tuple[Tensor, NNPDAState, dict[str, Tensor]]:
        """``step`` plus ``push``, ``pop`` ``[B]``, ``push_vector`` ``[B, m2]``, ``reading``
        (``R^t``, read before the step) ``[B, m2 + 1]``, ``overflow`` (1.0 where a push dropped a
        symbol) and ``size`` (the stack size ``s`` the new cells encode) ``[B]``."""
        return self._advance(self.weight(), state, *self._ids_or_x(x_t))

    def forward(
        self, x: Tensor, state: NNPDAState | None = None, mask: Tensor | None = None
    ) -> tuple[Tensor, NNPDAState]:
        """Fast path: the four weight tensors are concatenated once per call (not per step),
        one-hot ids are checked and extracted once, the recurrence runs in
        :func:`memrnn.ops.nnpda.nnpda_sequence` (bucketed contractions with a hand-written
        first-order backward on CPU, Triton kernels on CUDA; ``strict`` and a learned ``H``
        included), and ``strict`` costs one host sync at the end rather than one per step.  Dense
        inputs run step by step under autograd; inside :func:`memrnn.reference_paths`, the loop
        over ``step``."""
        state, mask = self.check_inputs(x, state, mask)
        if x.shape[1] == 0:
            return x.new_zeros(x.shape[0], 0, self.output_size), state
        weight = self.weight()
        flags: list[Tensor] = []
        ids = input_ids(x, mask, self.one_hot_input, type(self).__name__)
        if ids is not None:
            return self._sequence(weight, ids, state, mask)

        def step(v: Tensor, st: NNPDAState) -> tuple[Tensor, NNPDAState]:  # dense inputs
            y, new, diag = self._advance(weight, st, v, None, diagnostics=False)
            if self.strict:
                flags.append(diag["overflow"])
            return y, new

        y, state, _ = self._loop(x, state, mask, with_trace=False, step=step)
        if self.strict:
            f = torch.stack(flags, 1)
            self._raise_overflow(f if mask is None else f & mask)
        return y, state

    def _sequence(
        self, weight: Tensor, ids: Tensor, state: NNPDAState, mask: Tensor | None
    ) -> tuple[Tensor, NNPDAState]:
        """:func:`memrnn.ops.nnpda.nnpda_sequence` (every state of the sequence), then the
        outputs and each row's final state (right padding: the state after the row's last real
        step)."""
        Q, K, tails, push = nnpda_sequence(
            weight, self.sensitivity, state.q, state.stack, state.tail, ids, self.action
        )
        if self.strict:  # the steps that pushed onto a full window (stack_overflow), all at once
            flags = (push > 0.5) & (K[:, :-1, -1].amax(-1) > 0.5)
            self._raise_overflow(flags if mask is None else flags & mask)
        y = Q[:, 1:] if self.output == "state" else torch.cat([Q[:, 1:], stack_reading(K[:, 1:, 0])], -1)
        y, lengths = masked_outputs(y, mask)
        final = NNPDAState(*(final_by_length(v, lengths) for v in (Q, K, tails)))
        return y, final

    def trace(
        self, x: Tensor, state: NNPDAState | None = None, mask: Tensor | None = None
    ) -> dict[str, Tensor]:
        """Per-step diagnostics (``trace_step``); with ``strict=True`` an overflow raises."""
        out = super().trace(x, state, mask)
        if self.strict and "overflow" in out:
            self._raise_overflow(out["overflow"] > 0)
        return out
