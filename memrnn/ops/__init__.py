"""Pure tensor functions (no ``nn.Module``), each with a slow reference transcription beside it:
the differentiable stack of Stogin et al. 2020 and the higher-order contractions of tensor RNNs."""

from memrnn.ops.stack import (
    h_sigmoid,
    ideal_stack_op,
    long_stack_op_reference,
    stack_op,
    stack_op_reference,
    stack_overflow,
    stack_reading,
    stack_size,
)
from memrnn.ops.tensor import second_order, second_order_reference, third_order, third_order_reference

__all__ = [
    "h_sigmoid",
    "ideal_stack_op",
    "long_stack_op_reference",
    "second_order",
    "second_order_reference",
    "stack_op",
    "stack_op_reference",
    "stack_overflow",
    "stack_reading",
    "stack_size",
    "third_order",
    "third_order_reference",
]
