"""The differentiable memories a :class:`memrnn.layers.StackRNN` controller drives.

Each memory is an ``nn.Module`` that owns its action head (one ``nn.Linear`` from the
controller's output ``h [B, hidden_size]``) and keeps its contents in a flat NamedTuple of
batch-first tensors.  A step reads the controller's output, turns the head's output into the
memory's actions and updates the structure; :meth:`Memory.read` is what the controller sees at the
next step (``[B, width]``).  The structures themselves are pure tensor functions in
:mod:`memrnn.ops` (``superposition``, ``stratification``, ``tape``), each tested against a literal
transcription of its paper.

======================  ======================================  ================================
memory                  actions from ``h``                      structure
======================  ======================================  ================================
``SuperpositionStack``  softmax(push, pop, no-op), pushed       Joulin & Mikolov 2015, eqs. 5–6
                        vector σ(W h + b) (``push_activation``)
``StratificationStack`` push ``d`` = σ, pop ``u`` = σ, value    Grefenstette et al. 2015, eqs. 1–3
                        tanh (DuSell & Chiang 2020's heads)
``NeuralQueue``         as the stratification stack             Grefenstette et al. 2015, §3.2
``Tape``                softmax(stay, left, right), written     Delétang et al. 2023, Tape-RNN
                        vector W h + b (``write_activation``)
======================  ======================================  ================================

Bounded windows: the stacks and the queue keep ``depth`` cells; a step that moves content out of
the window reports the mass it dropped (``overflow [B]``); with ``depth ≥ T`` nothing is ever
dropped and the window equals the paper's unbounded structure.  The tape is circular and drops
nothing.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar, NamedTuple

import torch
from torch import Tensor, nn

from memrnn.core.activations import ACTIVATIONS, resolve_activation
from memrnn.core.checks import positive_int
from memrnn.ops.stratification import stratification_step
from memrnn.ops.superposition import superposition_step
from memrnn.ops.tape import tape_step

#: what a pushed or written vector may pass through
VALUE_ACTIVATIONS = ("sigmoid", "tanh", "identity")


class SuperpositionState(NamedTuple):
    """``stack [B, depth, width]``, top first."""

    stack: Tensor


class StratificationState(NamedTuple):
    """``values [B, depth, width]`` and ``strengths [B, depth]``, newest element first, and the
    last ``reading [B, width]``."""

    values: Tensor
    strengths: Tensor
    reading: Tensor


class TapeState(NamedTuple):
    """``tape [B, cells, width]``, the head's cell first."""

    tape: Tensor


class Memory(nn.Module, ABC):
    """A differentiable data structure driven by a controller's output ``h [B, hidden_size]``.

    Subclasses set ``kind`` (the name the fused paths dispatch on), ``State`` and ``actions``
    (the names of the actions in the head's first outputs), and implement ``initial_state``,
    ``read`` and ``update``.
    """

    kind: ClassVar[str]
    State: ClassVar[type]
    #: names of the first ``len(actions)`` outputs of the head, in order
    actions: ClassVar[tuple[str, ...]]

    def __init__(
        self,
        hidden_size: int,
        width: int,
        depth: int,
        value_activation: str,
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.hidden_size = positive_int("hidden_size", hidden_size)
        self.width = positive_int("width", width)
        self.depth = positive_int("depth", depth)
        self.value_activation = resolve_activation(value_activation, VALUE_ACTIVATIONS, "value activation")
        self.head = nn.Linear(hidden_size, len(self.actions) + width, device=device, dtype=dtype)

    def extra_repr(self) -> str:
        return f"width={self.width}, depth={self.depth}, value_activation={self.value_activation!r}"

    def heads(self, h: Tensor) -> tuple[Tensor, Tensor]:
        """``h [B, hidden_size]`` -> (actions ``[B, len(actions)]``, value ``[B, width]``)."""
        out = self.head(h)
        k = len(self.actions)
        return self._action_fn(out[:, :k]), ACTIVATIONS[self.value_activation](out[:, k:])

    @staticmethod
    def _action_fn(a: Tensor) -> Tensor:
        return torch.softmax(a, -1)

    @abstractmethod
    def initial_state(self, batch_size: int, *, device: torch.device | str, dtype: torch.dtype) -> NamedTuple:
        """The empty structure, every tensor ``[batch_size, ...]``."""

    @abstractmethod
    def read(self, state: NamedTuple) -> Tensor:
        """What the controller reads at the next step, ``[B, width]``."""

    @abstractmethod
    def update(self, state: NamedTuple, actions: Tensor, value: Tensor) -> tuple[NamedTuple, Tensor]:
        """One step of the structure; returns the new state and ``overflow [B]``."""

    def step(self, h: Tensor, state: NamedTuple) -> tuple[NamedTuple, dict[str, Tensor]]:
        """Act on ``h [B, hidden_size]``: returns the new state and diagnostics ``{name: [B, ...]}``
        (each action ``[B]``, ``value [B, width]``, ``overflow [B]``)."""
        actions, value = self.heads(h)
        new, overflow = self.update(state, actions, value)
        diag = {name: a for name, a in zip(self.actions, actions.unbind(-1), strict=True)}
        diag.update(value=value, overflow=overflow)
        return new, diag


class SuperpositionStack(Memory):
    """The superposition stack of Joulin & Mikolov (2015, section 3.1, equations 5–6), ``depth``
    cells of ``width`` units, top first.

    Actions ``softmax(W_a h + b_a)`` over push, pop and no-op; the pushed vector
    ``σ(W_v h + b_v)`` (``push_activation``: ``sigmoid`` as the paper and DuSell & Chiang's code,
    ``identity`` as Delétang et al.'s Stack-RNN, or ``tanh``).  Reads the top cell.
    """

    kind = "superposition"
    State = SuperpositionState
    actions = ("push", "pop", "noop")

    def __init__(
        self, hidden_size: int, width: int = 8, depth: int = 32, push_activation: str = "sigmoid", **factory
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


class StratificationStack(Memory):
    """The stratification stack of Grefenstette et al. (2015, equations 1–3): ``depth`` elements
    of ``width`` units with strengths, newest first; the pop and the reading are cumulative sums
    over the strengths.

    Heads as DuSell & Chiang (2020): push strength ``d = σ(·)``, pop strength ``u = σ(·)``, value
    ``tanh(·)`` (``value_activation``).  Reads the strength-weighted top (a mix of at most one
    unit of strength)."""

    kind = "stratification"
    State = StratificationState
    actions = ("push", "pop")
    #: ``"stack"`` (pop and read the newest) or ``"queue"`` (the oldest)
    order: ClassVar[str] = "stack"

    def __init__(
        self, hidden_size: int, width: int = 8, depth: int = 32, value_activation: str = "tanh", **factory
    ) -> None:
        super().__init__(hidden_size, width, depth, value_activation, **factory)

    @staticmethod
    def _action_fn(a: Tensor) -> Tensor:
        return torch.sigmoid(a)

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


class NeuralQueue(StratificationStack):
    """The neural queue of Grefenstette et al. (2015, section 3.2): the stratification stack's
    elements and heads, popped and read from the oldest end."""

    kind = "queue"
    order = "queue"


class Tape(Memory):
    """The tape of Delétang et al.'s (2023) Tape-RNN: ``depth`` circular cells of ``width``
    units; each step writes ``W_w h + b_w`` (``write_activation``) into the head's cell and moves by
    ``softmax(W_a h + b_a)`` over stay, left and right (:mod:`memrnn.ops.tape`).  Reads the head's
    cell.  Circular: nothing is dropped (``overflow`` is 0)."""

    kind = "tape"
    State = TapeState
    actions = ("stay", "left", "right")

    def __init__(
        self, hidden_size: int, width: int = 8, depth: int = 32, write_activation: str = "identity", **factory
    ) -> None:
        super().__init__(hidden_size, width, depth, write_activation, **factory)

    def initial_state(self, batch_size: int, *, device, dtype) -> TapeState:
        return TapeState(torch.zeros(batch_size, self.depth, self.width, device=device, dtype=dtype))

    def read(self, state: TapeState) -> Tensor:
        return state.tape[:, 0]

    def update(self, state: TapeState, actions: Tensor, value: Tensor) -> tuple[TapeState, Tensor]:
        return TapeState(tape_step(state.tape, actions, value)), value.new_zeros(value.shape[0])


#: the memories by name (``StackRNN(memory="…")``)
MEMORIES: dict[str, type[Memory]] = {
    m.kind: m for m in (SuperpositionStack, StratificationStack, NeuralQueue, Tape)
}
