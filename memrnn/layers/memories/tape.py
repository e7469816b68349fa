"""Delétang et al.'s (2023) Tape-RNN tapes: :class:`Tape` and :class:`JumpTape`, which also jumps
by each row's input length (:mod:`memrnn.layers.memories`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch
from torch import Tensor

from memrnn.core.checks import exporting
from memrnn.layers.memories.base import Memory, mlp_sizes
from memrnn.ops.stack_rnn.specs import SPECS
from memrnn.ops.tape import tape_jump_step, tape_step


class TapeState(NamedTuple):
    """``tape [B, cells, width]``, the head's cell first."""

    tape: Tensor


class JumpTapeState(NamedTuple):
    """``jump [B]``: each row's jump in cells (its input length), −1 until set
    (:class:`JumpTape`); ``tape [B, cells, width]``, the head's cell first."""

    jump: Tensor
    tape: Tensor


class Tape(Memory, spec=SPECS["tape"]):
    """The tape of Delétang et al.'s (2023) Tape-RNN: ``depth`` circular cells of ``width``
    units; each step writes ``W_w h + b_w`` (``write_activation``) into the head's cell and moves by
    ``softmax(W_a h + b_a)`` over stay, left and right (:mod:`memrnn.ops.tape`).  Reads the head's
    cell.  Circular: nothing is dropped (``overflow`` is 0).

    ``write_mlp``: the hidden layer sizes of an MLP through which the written vector is computed
    from ``h`` (ReLU between layers, none after the last, then ``write_activation``), as the
    authors' Tape-RNN writes (``mlp_layers_size=(64, 64)``: ``Linear(N, 64) → ReLU → Linear(64,
    64) → ReLU → Linear(64, width)``; the actions keep their own linear head); ``()``, the
    default, writes ``W_w h + b_w``.  The layers are ``value_mlp`` (:class:`Memory`)."""

    State = TapeState

    def __init__(
        self,
        hidden_size: int,
        width: int = 8,
        depth: int = 32,
        write_activation: str = SPECS["tape"].value_activation,
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


class JumpTape(Tape, spec=SPECS["tape_jump"]):
    """The tape of Delétang et al.'s (2023) Tape-RNN with its two jumps (the authors'
    ``TapeInputLengthJumpCore``): each step writes into the head's cell and moves by
    ``softmax(W_a h + b_a)`` over stay, left, right, and a jump left or right by the row's input
    length ``L`` (:func:`memrnn.ops.tape.tape_jump_step`, one gather per jump).

    ``L`` lives in the state (``jump [B]``, rounded to whole cells): ``jump`` (a constructor argument) for every row of the
    empty state, or −1 when it is None, and running a state with −1 raises until it is set:
    ``state = layer.initial_state(B, input_lengths=input_lengths)`` (:class:`memrnn.layers.StackRNN`,
    through :meth:`with_input_lengths`), or :class:`memrnn.lit.SequenceModule` with a data module
    whose batches carry ``input_lengths`` (``ChomskyDataModule``).  ``write_mlp`` as :class:`Tape`'s."""

    State = JumpTapeState
    reads_input_lengths = True

    def __init__(
        self,
        hidden_size: int,
        width: int = 8,
        depth: int = 32,
        write_activation: str = SPECS["tape_jump"].value_activation,
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
