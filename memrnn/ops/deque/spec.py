"""Grefenstette et al.'s (2015) neural DeQue in the stack RNN's fused paths."""

import torch
from torch import Tensor

from memrnn.ops.deque import deque_step
from memrnn.ops.deque.cpu import DequeKernel
from memrnn.ops.memory import MemorySpec


def _step(
    state: tuple[Tensor, ...], actions: Tensor, value: Tensor
) -> tuple[tuple[Tensor, ...], Tensor, Tensor]:
    push_top, pop_top, push_bot, pop_bot = actions.unbind(-1)
    v_top, v_bot = value.chunk(2, -1)
    values, strengths, r_top, r_bot, overflow = deque_step(
        state[0],
        state[1],
        torch.stack([pop_top, pop_bot], -1),
        torch.stack([push_top, push_bot], -1),
        v_top,
        v_bot,
    )
    reading = torch.cat([r_top, r_bot], -1)
    return (values, strengths, reading), reading, overflow


SPEC = MemorySpec(
    name="deque",
    code=5,
    actions=("push_top", "pop_top", "push_bot", "pop_bot"),
    action_activation="sigmoid",
    reads=2,
    fields=("values", "strengths", "reading"),
    value_activation="tanh",
    triton=True,
    native=True,
    kernel=DequeKernel,
    step=_step,
    read=lambda state: state[2],
)
