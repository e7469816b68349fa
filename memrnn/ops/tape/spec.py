"""Delétang et al.'s (2023) tape and their Tape-RNN's jump tape in the stack RNN's fused paths (the
jump tape is the tape with two more moves: both live here)."""

from torch import Tensor

from memrnn.ops.memory import MemorySpec
from memrnn.ops.tape import tape_jump_step, tape_step
from memrnn.ops.tape.cpu import JumpTapeKernel, TapeKernel


def _step(
    state: tuple[Tensor, ...], actions: Tensor, value: Tensor
) -> tuple[tuple[Tensor, ...], Tensor, Tensor]:
    tape = tape_step(state[0], actions, value)
    return (tape,), tape[:, 0], value.new_zeros(value.shape[0])


def _jump_step(
    state: tuple[Tensor, ...], actions: Tensor, value: Tensor
) -> tuple[tuple[Tensor, ...], Tensor, Tensor]:
    jump, tape = state
    tape = tape_jump_step(tape, actions, value, jump)
    return (jump, tape), tape[:, 0], value.new_zeros(value.shape[0])


SPEC = MemorySpec(
    name="tape",
    code=3,
    actions=("stay", "left", "right"),
    action_activation="softmax",
    reads=1,
    fields=("tape",),
    value_activation="identity",
    triton=True,
    native=True,
    kernel=TapeKernel,
    step=_step,
    read=lambda state: state[0][:, 0],
)

JUMP_SPEC = MemorySpec(
    name="tape_jump",
    code=4,
    actions=("stay", "left", "right", "jump_left", "jump_right"),
    action_activation="softmax",
    reads=1,
    fields=("jump", "tape"),
    value_activation="identity",
    triton=True,
    native=True,
    kernel=JumpTapeKernel,
    step=_jump_step,
    read=lambda state: state[1][:, 0],
)
