"""Grefenstette et al.'s (2015) stratification stack in the stack RNN's fused paths."""

from torch import Tensor

from memrnn.ops.memory import MemorySpec
from memrnn.ops.stratification import stratification_step
from memrnn.ops.stratification.cpu import StratificationKernel


def stratification_spec_step(
    state: tuple[Tensor, ...], actions: Tensor, value: Tensor, order: str = "stack"
) -> tuple[tuple[Tensor, ...], Tensor, Tensor]:
    """The spec's ``step``: ``actions`` push, pop; ``order`` ``"stack"`` or ``"queue"``."""
    push, pop = actions.unbind(-1)
    values, strengths, reading, overflow = stratification_step(state[0], state[1], pop, push, value, order)
    return (values, strengths, reading), reading, overflow


SPEC = MemorySpec(
    name="stratification",
    code=1,
    actions=("push", "pop"),
    action_activation="sigmoid",
    reads=1,
    fields=("values", "strengths", "reading"),
    value_activation="tanh",
    triton=True,
    native=True,
    kernel=StratificationKernel,
    step=stratification_spec_step,
    read=lambda state: state[2],
)
