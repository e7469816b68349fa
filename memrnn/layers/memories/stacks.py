"""The stratification family and the superposition stack: Joulin & Mikolov's (2015) superposition
stack and Grefenstette et al.'s (2015) stratification stack, neural queue and neural DeQue
(:mod:`memrnn.layers.memories`)."""

from __future__ import annotations

from typing import ClassVar, NamedTuple

import torch
from torch import Tensor

from memrnn.layers.memories.base import Memory
from memrnn.ops.deque import deque_step
from memrnn.ops.stack_rnn.specs import SPECS
from memrnn.ops.stratification import stratification_step
from memrnn.ops.superposition import superposition_step


class SuperpositionState(NamedTuple):
    """``stack [B, depth, width]``, top first."""

    stack: Tensor


class StratificationState(NamedTuple):
    """``values [B, depth, width]`` and ``strengths [B, depth]``, newest element first, and the
    last ``reading [B, width]``."""

    values: Tensor
    strengths: Tensor
    reading: Tensor


class DequeState(NamedTuple):
    """``values [B, 2·depth, width]`` and ``strengths [B, 2·depth]``, bottom first
    (:mod:`memrnn.ops.deque`), and the last ``reading [B, 2·width]`` (top, then bottom)."""

    values: Tensor
    strengths: Tensor
    reading: Tensor


class SuperpositionStack(Memory, spec=SPECS["superposition"]):
    """The superposition stack of Joulin & Mikolov (2015, section 3.1, equations 5–6), ``depth``
    cells of ``width`` units, top first.

    Actions ``softmax(W_a h + b_a)`` over push, pop and no-op; the pushed vector
    ``σ(W_v h + b_v)`` (``push_activation``: ``sigmoid`` as the paper and DuSell & Chiang's code,
    ``identity`` as Delétang et al.'s Stack-RNN, or ``tanh``).  Reads the top cell.
    """

    State = SuperpositionState

    def __init__(
        self,
        hidden_size: int,
        width: int = 8,
        depth: int = 32,
        push_activation: str = SPECS["superposition"].value_activation,
        **factory,
    ) -> None:
        super().__init__(hidden_size, width, depth, push_activation, **factory)

    def initial_state(self, batch_size: int, *, device, dtype) -> SuperpositionState:
        return SuperpositionState(torch.zeros(batch_size, self.depth, self.width, device=device, dtype=dtype))

    def read(self, state: SuperpositionState) -> Tensor:
        return state.stack[:, 0]

    def update(
        self, state: SuperpositionState, actions: Tensor, value: Tensor
    ) -> tuple[SuperpositionState, Tensor]:
        stack, overflow = superposition_step(state.stack, actions, value)
        return SuperpositionState(stack), overflow


class StratificationStack(Memory, spec=SPECS["stratification"]):
    """The stratification stack of Grefenstette et al. (2015, equations 1–3): ``depth`` elements
    of ``width`` units with strengths, newest first; the pop and the reading are cumulative sums
    over the strengths.

    Heads as DuSell & Chiang (2020): push strength ``d = σ(·)``, pop strength ``u = σ(·)``, value
    ``tanh(·)`` (``value_activation``).  Reads the strength-weighted top (a mix of at most one
    unit of strength)."""

    State = StratificationState
    #: ``"stack"`` (pop and read the newest) or ``"queue"`` (the oldest)
    order: ClassVar[str] = "stack"

    def __init__(
        self,
        hidden_size: int,
        width: int = 8,
        depth: int = 32,
        value_activation: str = SPECS["stratification"].value_activation,
        **factory,
    ) -> None:
        super().__init__(hidden_size, width, depth, value_activation, **factory)

    def initial_state(self, batch_size: int, *, device, dtype) -> StratificationState:
        z = torch.zeros(batch_size, self.depth, self.width, device=device, dtype=dtype)
        return StratificationState(z, z[..., 0].clone(), z[:, 0].clone())

    def read(self, state: StratificationState) -> Tensor:
        return state.reading

    def update(
        self, state: StratificationState, actions: Tensor, value: Tensor
    ) -> tuple[StratificationState, Tensor]:
        push, pop = actions.unbind(-1)
        values, strengths, reading, overflow = stratification_step(
            state.values, state.strengths, pop, push, value, self.order
        )
        return StratificationState(values, strengths, reading), overflow


class NeuralQueue(StratificationStack, spec=SPECS["queue"]):
    """The neural queue of Grefenstette et al. (2015, section 3.2): the stratification stack's
    elements and heads, popped and read from the oldest end."""

    order = "queue"


class NeuralDeque(Memory, spec=SPECS["deque"]):
    """The neural DeQue of Grefenstette et al. (2015, section 3.3): the stratification stack's
    elements with strengths, pushed, popped and read at both ends (:mod:`memrnn.ops.deque`);
    ``depth`` elements per end, ``width`` units each.

    Heads as the stratification stack's, one set per end: push strengths ``d_top``, ``d_bot`` and
    pop strengths ``u_top``, ``u_bot`` (``σ``), values ``v_top``, ``v_bot`` (``tanh``,
    ``value_activation``).  Reads both ends: ``[r_top, r_bot]``, ``2 · width`` units."""

    State = DequeState

    def __init__(
        self,
        hidden_size: int,
        width: int = 8,
        depth: int = 32,
        value_activation: str = SPECS["deque"].value_activation,
        **factory,
    ) -> None:
        super().__init__(hidden_size, width, depth, value_activation, **factory)

    def _head_size(self) -> int:
        return len(self.actions) + 2 * self.width

    @property
    def reading_size(self) -> int:
        return 2 * self.width

    def initial_state(self, batch_size: int, *, device, dtype) -> DequeState:
        z = torch.zeros(batch_size, 2 * self.depth, self.width, device=device, dtype=dtype)
        return DequeState(z, z[..., 0].clone(), z.new_zeros(batch_size, 2 * self.width))

    def read(self, state: DequeState) -> Tensor:
        return state.reading

    def update(self, state: DequeState, actions: Tensor, value: Tensor) -> tuple[DequeState, Tensor]:
        push_top, pop_top, push_bot, pop_bot = actions.unbind(-1)
        v_top, v_bot = value.split(self.width, -1)
        values, strengths, r_top, r_bot, overflow = deque_step(
            state.values,
            state.strengths,
            torch.stack([pop_top, pop_bot], -1),
            torch.stack([push_top, push_bot], -1),
            v_top,
            v_bot,
        )
        return DequeState(values, strengths, torch.cat([r_top, r_bot], -1)), overflow
