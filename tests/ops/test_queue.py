"""Grefenstette et al.'s (2015) neural queue (``memrnn.ops.queue``: the stratification step read
and popped from the front) on every path: the batched torch step against the literal reference
(every reading and gradient; the worked example is in ``tests/ops/test_stratification.py``), and
in the stack RNN the reference sequence against the CPU path, the C++ loop and the Triton
kernels."""

from __future__ import annotations

import pytest
import torch

from tests.ops import memory_paths as paths
from tests.ops.backends import needs_native, needs_triton


@pytest.mark.parametrize("kind", ["queue"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_stratification_step_equals_the_reference_with_gradients(kind, dtype):
    paths.check_stratification_step_equals_the_reference_with_gradients(kind, dtype)


# -- in the stack RNN: the harnesses of tests/ops/memory_paths.py ---------------------------------
@pytest.mark.parametrize("controller", ["lstm", "elman"])
@pytest.mark.parametrize("memory", ["queue"])
def test_reference_sequence_equals_the_cpu_path_with_gradients(memory, controller):
    paths.check_reference_sequence_equals_the_cpu_path_with_gradients(memory, controller)


@needs_native
@pytest.mark.parametrize("memory", ["queue"])
@pytest.mark.parametrize(("controller", "activation", "opts"), paths.NATIVE_CASES)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_native_loops_equal_python_loops_and_reference(memory, controller, activation, opts, dtype, gen):
    paths.check_native_loops_equal_python_loops_and_reference(
        memory, controller, activation, opts, dtype, gen
    )


@needs_native
@pytest.mark.parametrize("memory", ["queue"])
def test_value_activations_and_the_overflow(memory, gen):
    paths.check_value_activations_and_the_overflow(memory, gen)


@needs_triton
@pytest.mark.parametrize("memory", ["queue"])
@pytest.mark.parametrize("controller", ["lstm", "elman"])
@pytest.mark.parametrize(("activation", "push_activation", "depth"), paths.KERNEL_CASES)
def test_stack_rnn_kernels_equal_the_reference(memory, controller, activation, push_activation, depth):
    paths.check_stack_rnn_kernels_equal_the_reference(memory, controller, activation, push_activation, depth)


@needs_triton
@pytest.mark.parametrize("memory", ["queue"])
def test_stack_rnn_kernels_in_bfloat16_and_strict_mode(memory):
    paths.check_stack_rnn_kernels_in_bfloat16_and_strict_mode(memory)
