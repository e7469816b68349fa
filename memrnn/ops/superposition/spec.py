"""Joulin & Mikolov's (2015) superposition stack in the stack RNN's fused paths."""

from torch import Tensor

from memrnn.ops.memory import MemorySpec
from memrnn.ops.superposition import superposition_step
from memrnn.ops.superposition.cpu import SuperpositionKernel


def _step(
    state: tuple[Tensor, ...], actions: Tensor, value: Tensor
) -> tuple[tuple[Tensor, ...], Tensor, Tensor]:
    stack, overflow = superposition_step(state[0], actions, value)
    return (stack,), stack[:, 0], overflow


SPEC = MemorySpec(
    name="superposition",
    code=0,
    actions=("push", "pop", "noop"),
    action_activation="softmax",
    reads=1,
    fields=("stack",),
    value_activation="sigmoid",
    triton=True,
    native=True,
    kernel=SuperpositionKernel,
    step=_step,
    read=lambda state: state[0][:, 0],
)
