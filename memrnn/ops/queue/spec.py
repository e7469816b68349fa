"""Grefenstette et al.'s (2015) neural queue in the stack RNN's fused paths (its kernels are the
stratification stack's: :mod:`memrnn.ops.queue`)."""

import functools

from memrnn.ops.memory import MemorySpec
from memrnn.ops.stratification.cpu import QueueKernel
from memrnn.ops.stratification.spec import stratification_spec_step

SPEC = MemorySpec(
    name="queue",
    code=2,
    actions=("push", "pop"),
    action_activation="sigmoid",
    reads=1,
    fields=("values", "strengths", "reading"),
    value_activation="tanh",
    triton=True,
    native=True,
    kernel=QueueKernel,
    step=functools.partial(stratification_spec_step, order="queue"),
    read=lambda state: state[2],
)
