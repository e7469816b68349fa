"""Grefenstette et al.'s (2015) neural queue in the stack RNN's fused paths: the stratification
stack's spec read from the other end (its kernels are the stratification stack's:
:mod:`memrnn.ops.queue`)."""

import dataclasses
import functools

from memrnn.ops.stratification.cpu import QueueKernel
from memrnn.ops.stratification.spec import SPEC as STRATIFICATION
from memrnn.ops.stratification.spec import stratification_spec_step

SPEC = dataclasses.replace(
    STRATIFICATION,
    name="queue",
    code=2,
    kernel=QueueKernel,
    step=functools.partial(stratification_spec_step, order="queue"),
)
