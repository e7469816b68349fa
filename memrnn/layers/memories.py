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
``NeuralDeque``         push and pop strengths σ and a tanh     Grefenstette et al. 2015, §3.3
                        value for each end (top, bottom)
``Tape``                softmax(stay, left, right), written     Delétang et al. 2023, Tape-RNN
                        vector W h + b (``write_activation``),  without its jumps
                        or an MLP of ``h`` (``write_mlp``)
``JumpTape``            the tape's actions and jumps left and   Delétang et al. 2023, Tape-RNN
                        right by each row's input length
``Nondeterministic``    log weights of every push, replace and  DuSell & Chiang 2020 (NS-RNN),
``Stack``               pop of a weighted PDA (Q states, S      2022 (RNS-RNN, memory-limited)
                        stack symbols)
``VectorNondeter-       the same, and a pushed vector           DuSell & Chiang 2023 (vector
ministicStack``         σ(W h + b) of ``vector_size``           RNS-RNN)
======================  ======================================  ================================

Bounded windows: the stacks and the queue keep ``depth`` cells (the DeQue ``depth`` per end); a step that moves content out of
the window reports the mass it dropped (``overflow [B]``); with ``depth ≥ T`` nothing is ever
dropped and the window equals the paper's unbounded structure.  The tape is circular and drops
nothing.  The nondeterministic stack keeps a window of ``depth`` start times and is exact for
``depth ≥ T`` (its memory-limited variant below that).
"""

from __future__ import annotations

import itertools
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import ClassVar, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from memrnn.core.activations import ACTIVATIONS, resolve_activation
from memrnn.core.checks import exporting, positive_int
from memrnn.ops.deque import deque_step
from memrnn.ops.nondeterministic import (
    LOG_ZERO,
    check_bottom_symbol,
    nondeterministic_initial,
    nondeterministic_step,
    vector_nondeterministic_initial,
    vector_nondeterministic_step,
)
from memrnn.ops.stratification import stratification_step
from memrnn.ops.superposition import superposition_step
from memrnn.ops.tape import tape_jump_step, tape_step

#: what a pushed or written vector may pass through
VALUE_ACTIVATIONS = ("sigmoid", "tanh", "identity")


def mlp_sizes(name: str, sizes: Sequence[int]) -> tuple[int, ...]:
    """``sizes`` (an MLP's hidden layer sizes: a list or tuple of positive integers, possibly
    empty) as a tuple, else a ``ValueError`` naming ``name`` and the bad value."""
    if not isinstance(sizes, (list, tuple)):
        raise ValueError(
            f"{name} must be a list or tuple of hidden layer sizes (e.g. (64, 64)), got {sizes!r}"
        )
    for size in sizes:
        try:
            positive_int(name, size)
        except ValueError:
            raise ValueError(
                f"{name}'s hidden layer sizes must be positive integers, got {size!r} in {sizes!r}"
            ) from None
    return tuple(int(size) for size in sizes)


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


class TapeState(NamedTuple):
    """``tape [B, cells, width]``, the head's cell first."""

    tape: Tensor


class JumpTapeState(NamedTuple):
    """``jump [B]``: each row's jump in cells (its input length), −1 until set
    (:class:`JumpTape`); ``tape [B, cells, width]``, the head's cell first."""

    jump: Tensor
    tape: Tensor


class Memory(nn.Module, ABC):
    """A differentiable data structure driven by a controller's output ``h [B, hidden_size]``.

    Subclasses set ``kind`` (the name the fused paths dispatch on), ``State`` and ``actions``
    (the names of the actions in the head's first outputs), and implement ``initial_state``,
    ``read`` and ``update``.

    ``value_mlp`` (hidden layer sizes; empty by default): the pushed or written value comes from
    an MLP of ``h`` (``value_mlp``, an ``nn.ModuleList`` of ``nn.Linear``, ReLU between layers
    and none after the last; torch's default initialisation) instead of the head's last rows;
    the head then gives the actions only.  Without it the parameters are the head's alone, as
    before the option existed.
    """

    kind: ClassVar[str]
    State: ClassVar[type]
    #: names of the first ``len(actions)`` outputs of the head, in order
    actions: ClassVar[tuple[str, ...]]
    #: whether the state holds each row's input length (:meth:`with_input_lengths`)
    reads_input_lengths: ClassVar[bool] = False

    def __init__(
        self,
        hidden_size: int,
        width: int,
        depth: int,
        value_activation: str,
        *,
        value_mlp: Sequence[int] = (),
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.hidden_size = positive_int("hidden_size", hidden_size)
        self.width = positive_int("width", width)
        self.depth = positive_int("depth", depth)
        self.value_activation = resolve_activation(value_activation, VALUE_ACTIVATIONS, "value activation")
        self.value_mlp_sizes = mlp_sizes("value_mlp", value_mlp)
        k = len(self.actions)
        fk = {"device": device, "dtype": dtype}
        if not self.value_mlp_sizes:
            self.head = nn.Linear(hidden_size, self._head_size(), **fk)
            self.value_mlp: nn.ModuleList | None = None
            return
        self.head = nn.Linear(hidden_size, k, **fk)  # the actions; the value from the MLP
        sizes = (hidden_size, *self.value_mlp_sizes, self._head_size() - k)
        self.value_mlp = nn.ModuleList(nn.Linear(a, b, **fk) for a, b in itertools.pairwise(sizes))

    def _head_size(self) -> int:
        """Outputs of the head: the actions, then the pushed or written vector (which a value MLP
        gives instead)."""
        return len(self.actions) + self.width

    def reset_parameters(self) -> None:
        """The head's and the value MLP's layers re-drawn (torch's ``nn.Linear`` initialisation)."""
        self.head.reset_parameters()
        for layer in self.value_mlp or ():
            layer.reset_parameters()

    @property
    def reading_size(self) -> int:
        """Units of :meth:`read` (what the controller reads): ``width`` unless a memory reads more."""
        return self.width

    def extra_repr(self) -> str:
        return f"width={self.width}, depth={self.depth}, value_activation={self.value_activation!r}"

    def heads(self, h: Tensor) -> tuple[Tensor, Tensor]:
        """``h [B, hidden_size]`` -> (actions ``[B, len(actions)]``, value ``[B, width]``)."""
        out = self.head(h)
        k = len(self.actions)
        if self.value_mlp is None:
            actions, value = out[:, :k], out[:, k:]
        else:
            actions, value = out, h
            for i, layer in enumerate(self.value_mlp):
                value = layer(value if i == 0 else torch.relu(value))
        return self._action_fn(actions), ACTIVATIONS[self.value_activation](value)

    def value_layers(self) -> tuple[tuple[Tensor, Tensor], ...] | None:
        """The value MLP's ``(weight, bias)`` pairs (:func:`memrnn.ops.stack_rnn.stack_rnn_sequence`'s
        ``value_mlp``), or None without one."""
        if self.value_mlp is None:
            return None
        return tuple((layer.weight, layer.bias) for layer in self.value_mlp)

    @staticmethod
    def _action_fn(a: Tensor) -> Tensor:
        return torch.softmax(a, -1)

    @abstractmethod
    def initial_state(self, batch_size: int, *, device: torch.device | str, dtype: torch.dtype) -> NamedTuple:
        """The empty structure, every tensor ``[batch_size, ...]``."""

    def check_state(self, state: NamedTuple) -> None:
        """Raise ``ValueError`` when ``state`` cannot be run (default: any state can)."""

    def with_input_lengths(self, state: NamedTuple, input_lengths: Tensor) -> NamedTuple:
        """``state`` with each row's input length ``input_lengths [B]`` (a transduction's input,
        before its blanks) where the memory reads it (:attr:`reads_input_lengths`: the jump
        tape); other memories return ``state`` as it is."""
        return state

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


class NeuralDeque(Memory):
    """The neural DeQue of Grefenstette et al. (2015, section 3.3): the stratification stack's
    elements with strengths, pushed, popped and read at both ends (:mod:`memrnn.ops.deque`);
    ``depth`` elements per end, ``width`` units each.

    Heads as the stratification stack's, one set per end: push strengths ``d_top``, ``d_bot`` and
    pop strengths ``u_top``, ``u_bot`` (``σ``), values ``v_top``, ``v_bot`` (``tanh``,
    ``value_activation``).  Reads both ends: ``[r_top, r_bot]``, ``2 · width`` units."""

    kind = "deque"
    State = DequeState
    actions = ("push_top", "pop_top", "push_bot", "pop_bot")

    def __init__(
        self, hidden_size: int, width: int = 8, depth: int = 32, value_activation: str = "tanh", **factory
    ) -> None:
        super().__init__(hidden_size, width, depth, value_activation, **factory)

    def _head_size(self) -> int:
        return len(self.actions) + 2 * self.width

    @property
    def reading_size(self) -> int:
        return 2 * self.width

    @staticmethod
    def _action_fn(a: Tensor) -> Tensor:
        return torch.sigmoid(a)

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


class Tape(Memory):
    """The tape of Delétang et al.'s (2023) Tape-RNN: ``depth`` circular cells of ``width``
    units; each step writes ``W_w h + b_w`` (``write_activation``) into the head's cell and moves by
    ``softmax(W_a h + b_a)`` over stay, left and right (:mod:`memrnn.ops.tape`).  Reads the head's
    cell.  Circular: nothing is dropped (``overflow`` is 0).

    ``write_mlp``: the hidden layer sizes of an MLP through which the written vector is computed
    from ``h`` (ReLU between layers, none after the last, then ``write_activation``), as the
    authors' Tape-RNN writes (``mlp_layers_size=(64, 64)``: ``Linear(N, 64) → ReLU → Linear(64,
    64) → ReLU → Linear(64, width)``; the actions keep their own linear head); ``()``, the
    default, writes ``W_w h + b_w``.  The layers are ``value_mlp`` (:class:`Memory`)."""

    kind = "tape"
    State = TapeState
    actions = ("stay", "left", "right")

    def __init__(
        self,
        hidden_size: int,
        width: int = 8,
        depth: int = 32,
        write_activation: str = "identity",
        write_mlp: Sequence[int] = (),
        **factory,
    ) -> None:
        super().__init__(
            hidden_size,
            width,
            depth,
            write_activation,
            value_mlp=mlp_sizes("write_mlp", write_mlp),
            **factory,
        )

    @property
    def write_mlp(self) -> tuple[int, ...]:
        """The write MLP's hidden layer sizes (``()``: one linear head)."""
        return self.value_mlp_sizes

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, write_mlp={self.write_mlp}"

    def initial_state(self, batch_size: int, *, device, dtype) -> TapeState:
        return TapeState(torch.zeros(batch_size, self.depth, self.width, device=device, dtype=dtype))

    def read(self, state: TapeState) -> Tensor:
        return state.tape[:, 0]

    def update(self, state: TapeState, actions: Tensor, value: Tensor) -> tuple[TapeState, Tensor]:
        return TapeState(tape_step(state.tape, actions, value)), value.new_zeros(value.shape[0])


class JumpTape(Tape):
    """The tape of Delétang et al.'s (2023) Tape-RNN with its two jumps (the authors'
    ``TapeInputLengthJumpCore``): each step writes into the head's cell and moves by
    ``softmax(W_a h + b_a)`` over stay, left, right, and a jump left or right by the row's input
    length ``L`` (:func:`memrnn.ops.tape.tape_jump_step`, one gather per jump).

    ``L`` lives in the state (``jump [B]``, rounded to whole cells): ``jump`` (a constructor argument) for every row of the
    empty state, or −1 when it is None, and running a state with −1 raises until it is set:
    ``state = layer.initial_state(B, input_lengths=input_lengths)`` (:class:`memrnn.layers.StackRNN`,
    through :meth:`with_input_lengths`), or :class:`memrnn.lit.SequenceModule` with a data module
    whose batches carry ``input_lengths`` (``ChomskyDataModule``).  ``write_mlp`` as :class:`Tape`'s."""

    kind = "tape_jump"
    State = JumpTapeState
    actions = ("stay", "left", "right", "jump_left", "jump_right")
    reads_input_lengths = True

    def __init__(
        self,
        hidden_size: int,
        width: int = 8,
        depth: int = 32,
        write_activation: str = "identity",
        jump: int | None = None,
        write_mlp: Sequence[int] = (),
        **factory,
    ) -> None:
        super().__init__(hidden_size, width, depth, write_activation, write_mlp, **factory)
        if jump is not None and (isinstance(jump, bool) or not isinstance(jump, int) or jump < 0):
            raise ValueError(f"jump must be a whole number of cells >= 0 or None, got {jump!r}")
        self.jump = jump

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, jump={self.jump}"

    def initial_state(self, batch_size: int, *, device, dtype) -> JumpTapeState:
        tape = torch.zeros(batch_size, self.depth, self.width, device=device, dtype=dtype)
        fill = -1.0 if self.jump is None else float(self.jump)
        return JumpTapeState(torch.full((batch_size,), fill, device=device, dtype=dtype), tape)

    def check_state(self, state: JumpTapeState) -> None:
        if exporting():  # a data-dependent check: torch.export cannot trace it
            return
        bad = state.jump < 0
        if bool(bad.any()):
            row = int(bad.nonzero()[0, 0])
            raise ValueError(
                f"JumpTape: row {row} has jump {float(state.jump[row])}; each row needs its input length "
                "(cells >= 0) in state.jump: layer.initial_state(B, input_lengths=input_lengths)"
            )

    def with_input_lengths(self, state: JumpTapeState, input_lengths: Tensor) -> JumpTapeState:
        """``state`` jumping by ``input_lengths [B]`` cells in each row (its ``jump``)."""
        jump = state.jump
        if input_lengths.shape != jump.shape:
            raise ValueError(
                f"input_lengths must hold one length per row, shape {tuple(jump.shape)}, got "
                f"{tuple(input_lengths.shape)}"
            )
        return state._replace(jump=input_lengths.to(device=jump.device, dtype=jump.dtype))

    def update(self, state: JumpTapeState, actions: Tensor, value: Tensor) -> tuple[JumpTapeState, Tensor]:
        tape = tape_jump_step(state.tape, actions, value, state.jump)
        return JumpTapeState(state.jump, tape), value.new_zeros(value.shape[0])


class NondeterministicState(NamedTuple):
    """``steps [B]``, the steps taken (a float, as every state field, for masking and gradients
    alike), the window of log inner weights ``gamma [B, depth, depth, QS, QS]`` and the log
    forward weights ``alpha [B, depth + 1, QS]`` (:mod:`memrnn.ops.nondeterministic`)."""

    steps: Tensor
    gamma: Tensor
    alpha: Tensor


class NondeterministicStack(Memory):
    """The nondeterministic stack of DuSell & Chiang: a weighted PDA with ``states`` states and
    ``symbols`` stack symbols whose transition weights the controller emits at each step, simulated
    exactly over all its runs by the dynamic programme of inner and forward weights
    (:mod:`memrnn.ops.nondeterministic`, in log space).

    Heads (DuSell & Chiang's ``operation_layer``): one linear map from ``h`` to the log weights of
    every push ``q, x → r, xy``, replace ``q, x → r, y`` and pop ``q, x → r``
    (``QS · (2·QS + Q)`` outputs).  Two switches select the published variants:

    * ``normalize_transitions``: log-softmax over each ``(q, x)``'s transitions (a probabilistic
      PDA, the NS-RNN of 2020), or raw ``exp`` weights (the RNS-RNN of 2022, the default);
    * ``states_in_reading``: the reading is the normalised ``α[t][r, y]`` over every ``(r, y)``
      (``width = Q·S``, RNS-RNN, the default) or over the top symbol ``y`` alone (``width = S``,
      NS-RNN).

    ``bottom_symbol``: ``"fixed"`` (the default: DuSell & Chiang's 2023 code, whose stack puts the
    bottom symbol on with a fake push from step −1, so that a pop can uncover it) or
    ``"original"`` (the code that produced the published NS-RNN, CoNLL 2020, and RNS-RNN, ICLR
    2022, numbers: ``nsrnn/models/nondeterministic_stack.py`` at tags ``conll2020`` and
    ``iclr2022``, ``OldNondeterministicStack`` / ``original_bottom_symbol_behavior=True`` in the
    2023 code): no start time −1 (no ``α[−1]``, no ``γ[−1 → j]``), so that once a symbol is pushed
    the bottom symbol is never on top again.  It is the initial state alone
    (:func:`memrnn.ops.nondeterministic.nondeterministic_initial`): every step and run is the same.

    ``depth``: the window of start times kept (the memory-limited RNS-RNN, DuSell & Chiang 2022,
    section 5).  With ``depth ≥ T`` the stack is the unlimited one; from step ``depth + 1`` on, runs
    whose top element was pushed more than ``depth`` steps earlier are dropped, and ``overflow``
    is 1 at each such step (0 before).  Each step costs ``O(depth² · Q³ · S²)`` per row with the
    torch step; ``StackRNN``'s run (C++ on CPU, Triton kernels on CUDA) computes only start times
    that can be alive, ``O(min(s, depth)² · Q³ · S²)`` at step ``s`` from the fresh stack.
    """

    kind = "nondeterministic"
    State = NondeterministicState
    actions = ("push", "repl", "pop")

    def __init__(
        self,
        hidden_size: int,
        width: int | None = None,
        depth: int = 32,
        states: int = 2,
        symbols: int = 3,
        normalize_transitions: bool = False,
        states_in_reading: bool = True,
        bottom_symbol: str = "fixed",
        **factory,
    ) -> None:
        self.states = positive_int("states", states)
        self.symbols = positive_int("symbols", symbols)
        self.bottom_symbol = check_bottom_symbol(bottom_symbol)
        self.normalize_transitions = bool(normalize_transitions)
        self.states_in_reading = bool(states_in_reading)
        reading, what = self._reading_units()
        if width is not None and width != reading:
            raise ValueError(
                f"the {self._name}'s reading has {reading} units ({what}), got width={width}; leave width out"
            )
        super().__init__(hidden_size, reading, depth, "identity", **factory)

    _name = "nondeterministic stack"

    def _reading_units(self) -> tuple[int, str]:
        """Units of the reading and what they count."""
        if self.states_in_reading:
            return self.states * self.symbols, "states × symbols"
        return self.symbols, "symbols"

    def _head_size(self) -> int:
        qs = self.states * self.symbols
        return qs * (2 * qs + self.states)

    def extra_repr(self) -> str:
        return (
            f"states={self.states}, symbols={self.symbols}, depth={self.depth}, "
            f"normalize_transitions={self.normalize_transitions}, "
            f"states_in_reading={self.states_in_reading}, bottom_symbol={self.bottom_symbol!r}"
        )

    def transitions(self, h: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """``h [B, hidden_size]`` -> log weights ``push, repl [B, QS, QS]``, ``pop [B, QS, Q]``."""
        return self._pda(self.head(h))

    def _pda(self, out: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """The head's first ``QS · (2·QS + Q)`` outputs ``[B, …]`` as ``push, repl, pop``."""
        qs, Q = self.states * self.symbols, self.states
        logits = out[:, : qs * (2 * qs + Q)].reshape(out.shape[0], qs, 2 * qs + Q)
        if self.normalize_transitions:
            logits = torch.log_softmax(logits, -1)
        push, repl, pop = logits.split([qs, qs, Q], -1)
        return push, repl, pop

    def initial_state(self, batch_size: int, *, device, dtype) -> NondeterministicState:
        gamma, alpha = nondeterministic_initial(
            batch_size, self.states, self.symbols, self.depth, device=device, dtype=dtype,
            bottom_symbol=self.bottom_symbol,
        )  # fmt: skip
        return NondeterministicState(alpha.new_zeros(batch_size), gamma, alpha)

    def read(self, state: NondeterministicState) -> Tensor:
        return self.reading(state.alpha[:, -1])

    def reading(self, top: Tensor) -> Tensor:
        """The reading ``[B, width]`` from what a :class:`NondeterministicRun` step returns: the
        log forward weights ``top = log α[t] [B, QS]``."""
        if not self.states_in_reading:
            top = torch.logsumexp(top.view(-1, self.states, self.symbols), 1)
        return torch.softmax(top, -1)

    def update(
        self,
        state: NondeterministicState,
        actions: tuple[Tensor, Tensor, Tensor],
        value: Tensor | None = None,
    ) -> tuple[NondeterministicState, Tensor]:
        """One step on the log weights ``actions = (push, repl, pop)`` (:meth:`transitions`; no
        pushed vector); ``overflow [B]`` is 1 where the window drops runs."""
        gamma, alpha = nondeterministic_step(state.gamma, state.alpha, *actions)
        overflow = (state.steps.detach() >= self.depth).to(alpha.dtype)
        return NondeterministicState(state.steps + 1, gamma, alpha), overflow

    def step(
        self, h: Tensor, state: NondeterministicState
    ) -> tuple[NondeterministicState, dict[str, Tensor]]:
        """Act on ``h [B, hidden_size]``; diagnostics: the log weights ``push [B, QS, QS]``,
        ``repl [B, QS, QS]``, ``pop [B, QS, Q]`` and ``overflow [B]``."""
        actions = self.transitions(h)
        new, overflow = self.update(state, actions)
        return new, dict(zip(self.actions, actions, strict=True), overflow=overflow)


class VectorNondeterministicState(NamedTuple):
    """:class:`NondeterministicState`'s fields, then the window of log ``ζ``
    ``zeta [B, depth, depth, QS, QS, m]`` and the reading's log ``eta [B, QS, m]``
    (:func:`memrnn.ops.nondeterministic.vector_nondeterministic_step`)."""

    steps: Tensor
    gamma: Tensor
    alpha: Tensor
    zeta: Tensor
    eta: Tensor


class VectorNondeterministicStack(NondeterministicStack):
    """The vector RNS-RNN's stack (DuSell & Chiang 2023, "The Surprising Computational Power of
    Nondeterministic Stack RNNs"): the renormalizing nondeterministic stack whose elements also
    carry a vector in ``(0, 1)^m``.  A push pushes ``σ(W h + b)`` with its symbol, a replace keeps
    the vector, a pop uncovers the one below; the bottom element holds ``σ(bottom)``.  The reading
    is the expected top vector for each ``(state, top symbol)`` under the PDA's runs (``width =
    Q·S·m``, flattened ``[Q, S, m]``), which lets a PDA of few symbols carry real-valued content
    (the recurrences: :mod:`memrnn.ops.nondeterministic.reference`).

    Args beyond :class:`NondeterministicStack`'s: ``vector_size`` (``m``), ``bottom``:
    ``"learned"`` (a parameter ``bottom`` of ``m`` logits, 0 at first: the vector 0.5; None means
    it), ``"one"`` or ``"zero"``.  With ``bottom_symbol="original"`` (DuSell & Chiang's
    ``OldVectorNondeterministicStack``, ``original_bottom_symbol_behavior=True``) there is no
    bottom element to carry a vector: ``bottom`` must be left out (None; their code requires
    ``bottom_vector=None``), the first reading is zeros and every later one an expectation of
    pushed vectors alone.  A learnt
    bottom vector is part of :meth:`initial_state`, which therefore carries its gradient: make a
    fresh initial state for each batch (``StackRNN`` does when no state is given).  The reading
    always ranges over states and symbols.  ``StackRNN`` runs it as
    the plain stack's run with ``1 + m`` channels (γ, then ζ per vector unit; C++ on CPU, Triton
    kernels on CUDA); the torch step elsewhere, ``O(depth² · Q³ · S² · m)`` per row and step.
    """

    kind = "vector_nondeterministic"
    State = VectorNondeterministicState
    actions = ("push", "repl", "pop", "vector")
    _name = "vector nondeterministic stack"
    BOTTOMS = ("learned", "one", "zero")

    def __init__(
        self,
        hidden_size: int,
        width: int | None = None,
        depth: int = 32,
        states: int = 2,
        symbols: int = 3,
        vector_size: int = 4,
        bottom: str | None = None,
        normalize_transitions: bool = False,
        bottom_symbol: str = "fixed",
        **factory,
    ) -> None:
        self.vector_size = positive_int("vector_size", vector_size)
        if check_bottom_symbol(bottom_symbol) == "original":
            if bottom is not None:
                raise ValueError(
                    f"bottom_symbol='original' has no bottom vector (DuSell & Chiang's "
                    f"OldVectorNondeterministicStack), got bottom={bottom!r}; leave bottom out"
                )
        elif bottom is None:
            bottom = "learned"
        if bottom_symbol == "fixed" and bottom not in self.BOTTOMS:
            raise ValueError(f"bottom must be one of {', '.join(self.BOTTOMS)}, got {bottom!r}")
        self.bottom_kind = bottom
        super().__init__(
            hidden_size,
            width,
            depth,
            states,
            symbols,
            normalize_transitions,
            states_in_reading=True,
            bottom_symbol=bottom_symbol,
            **factory,
        )
        if bottom == "learned":
            self.bottom = nn.Parameter(torch.zeros(self.vector_size, **factory))

    def _reading_units(self) -> tuple[int, str]:
        return self.states * self.symbols * self.vector_size, "states × symbols × vector_size"

    def reset_parameters(self) -> None:
        super().reset_parameters()
        if self.bottom_kind == "learned":
            nn.init.zeros_(self.bottom)

    def _head_size(self) -> int:
        return super()._head_size() + self.vector_size

    def extra_repr(self) -> str:
        return (
            f"states={self.states}, symbols={self.symbols}, vector_size={self.vector_size}, depth={self.depth}, "
            f"bottom={self.bottom_kind!r}, normalize_transitions={self.normalize_transitions}, "
            f"bottom_symbol={self.bottom_symbol!r}"
        )

    def transitions(self, h: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """``h [B, hidden_size]`` -> log weights ``push, repl [B, QS, QS]``, ``pop [B, QS, Q]``
        and the log pushed vector ``[B, m]``."""
        out = self.head(h)
        return (*self._pda(out), F.logsigmoid(out[:, -self.vector_size :]))

    def log_bottom(self, *, device=None, dtype=None) -> Tensor | None:
        """The bottom vector's logarithm ``[m]`` (``LOG_ZERO`` for the zero vector; None with
        ``bottom_symbol="original"``, which has none)."""
        if self.bottom_kind is None:
            return None
        if self.bottom_kind == "learned":
            return F.logsigmoid(self.bottom.to(device=device, dtype=dtype))
        value = 0.0 if self.bottom_kind == "one" else LOG_ZERO
        return torch.full((self.vector_size,), value, device=device, dtype=dtype)

    def initial_state(self, batch_size: int, *, device, dtype) -> VectorNondeterministicState:
        steps, gamma, alpha = super().initial_state(batch_size, device=device, dtype=dtype)
        zeta, eta = vector_nondeterministic_initial(
            batch_size,
            self.states,
            self.symbols,
            self.vector_size,
            self.depth,
            self.log_bottom(device=device, dtype=dtype or torch.get_default_dtype()),
            bottom_symbol=self.bottom_symbol,
            device=device,
            dtype=dtype,
        )
        return VectorNondeterministicState(steps, gamma, alpha, zeta, eta)

    def read(self, state: VectorNondeterministicState) -> Tensor:
        return self.reading((state.alpha[:, -1], state.eta))

    def reading(self, out: tuple[Tensor, Tensor]) -> Tensor:
        """The reading ``[B, Q·S·m]`` from what a vector :class:`NondeterministicRun` step
        returns: ``(log α [B, QS], eta [B, QS, m])``, the expected top vectors being ``exp(eta)``."""
        return out[1].exp().flatten(1)

    def update(
        self,
        state: VectorNondeterministicState,
        actions: tuple[Tensor, Tensor, Tensor, Tensor],
        value: Tensor | None = None,
    ) -> tuple[VectorNondeterministicState, Tensor]:
        """One step on ``actions = (push, repl, pop, vector)`` (:meth:`transitions`);
        ``overflow [B]`` is 1 where the window drops runs."""
        gamma, alpha, zeta, eta = vector_nondeterministic_step(state.gamma, state.alpha, state.zeta, *actions)
        overflow = (state.steps.detach() >= self.depth).to(alpha.dtype)
        return VectorNondeterministicState(state.steps + 1, gamma, alpha, zeta, eta), overflow

    def step(
        self, h: Tensor, state: VectorNondeterministicState
    ) -> tuple[VectorNondeterministicState, dict[str, Tensor]]:
        """Act on ``h [B, hidden_size]``; diagnostics: the log weights ``push``, ``repl``,
        ``pop`` (as :class:`NondeterministicStack`), the pushed ``vector [B, m]`` in ``(0, 1)``
        and ``overflow [B]``."""
        actions = self.transitions(h)
        new, overflow = self.update(state, actions)
        diag = dict(zip(self.actions[:3], actions[:3], strict=True))
        return new, {**diag, "vector": actions[3].exp(), "overflow": overflow}


#: the memories by name, the one table of ``StackRNN(memory="…")``'s shortcuts (each ``kind``)
MEMORIES: dict[str, type[Memory]] = {
    m.kind: m
    for m in (
        SuperpositionStack,
        StratificationStack,
        NeuralQueue,
        NeuralDeque,
        Tape,
        JumpTape,
        NondeterministicStack,
        VectorNondeterministicStack,
    )
}
