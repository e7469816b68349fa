"""Grefenstette et al.'s (2015) stratification stack (``memrnn.ops.stratification``) on every path:
its literal reference by hand (their figure 1), the batched torch step against it (every reading
and gradient, and what a bounded window drops), and in the stack RNN the reference sequence
against the CPU path, the C++ loop and the Triton kernels.  The neural queue runs the same step
read from the other end (``tests/ops/test_queue.py``)."""

from __future__ import annotations

import pytest
import torch

from memrnn.ops.stratification import stratification_reference
from tests.ops import memory_paths as paths
from tests.ops.backends import needs_native, needs_triton
from tests.ops.memory_paths import run_stratification


def test_stratification_by_hand():
    """Grefenstette et al.'s (2015) worked example (their figure 1): r3 = 0.9·v3 + 0.1·v1."""
    v = torch.eye(3, dtype=torch.float64)[None]
    u = torch.tensor([[0.0, 0.1, 0.9]], dtype=torch.float64)
    d = torch.tensor([[0.8, 0.5, 0.9]], dtype=torch.float64)
    r, s, _ = run_stratification(u, d, v, capacity=3, kind="stack")
    torch.testing.assert_close(
        r[0], torch.tensor([[0.8, 0, 0], [0.5, 0.5, 0], [0.1, 0, 0.9]], dtype=torch.float64)
    )
    torch.testing.assert_close(s[0], torch.tensor([0.9, 0.0, 0.3], dtype=torch.float64))  # newest first
    ref_r, ref_s = stratification_reference(u, d, v)
    torch.testing.assert_close(ref_r, r)
    torch.testing.assert_close(ref_s.flip(-1), s)
    # the queue reads and pops from the front: v1 first
    rq, _, _ = run_stratification(u, d, v, capacity=3, kind="queue")
    torch.testing.assert_close(rq[0, 1], torch.tensor([0.7, 0.3, 0], dtype=torch.float64))


@pytest.mark.parametrize("kind", ["stack"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_stratification_step_equals_the_reference_with_gradients(kind, dtype):
    paths.check_stratification_step_equals_the_reference_with_gradients(kind, dtype)


def test_stratification_window_drops_only_spent_elements_silently():
    """A stack whose old elements were popped to strength 0 loses nothing when they leave a
    small window; one that still holds strength there reports it."""
    B, T, m = 1, 10, 2
    values = torch.randn(B, T, m, dtype=torch.float64)
    pushes = torch.ones(B, T, dtype=torch.float64)
    pops = torch.ones(B, T, dtype=torch.float64)  # every step pops the previous element entirely
    fast, _, overflow = run_stratification(pops, pushes, values, capacity=2, kind="stack")
    assert bool((overflow == 0).all())
    torch.testing.assert_close(fast, stratification_reference(pops, pushes, values)[0], atol=1e-12, rtol=0)
    _, _, overflow = run_stratification(torch.zeros_like(pops), pushes, values, capacity=2, kind="stack")
    assert overflow[0, 2:].tolist() == [1.0] * 8


def test_reference_rejects_an_unknown_kind():
    with pytest.raises(ValueError, match="kind must be 'stack' or 'queue', got 'deque'"):
        stratification_reference(torch.zeros(1, 1), torch.zeros(1, 1), torch.zeros(1, 1, 1), "deque")  # type: ignore[arg-type]


# -- in the stack RNN: the harnesses of tests/ops/memory_paths.py ---------------------------------
@pytest.mark.parametrize("controller", ["lstm", "elman"])
@pytest.mark.parametrize("memory", ["stratification"])
def test_reference_sequence_equals_the_cpu_path_with_gradients(memory, controller):
    paths.check_reference_sequence_equals_the_cpu_path_with_gradients(memory, controller)


@needs_native
@pytest.mark.parametrize("memory", ["stratification"])
@pytest.mark.parametrize(("controller", "activation", "opts"), paths.NATIVE_CASES)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_native_loops_equal_python_loops_and_reference(memory, controller, activation, opts, dtype, gen):
    paths.check_native_loops_equal_python_loops_and_reference(
        memory, controller, activation, opts, dtype, gen
    )


@needs_native
@pytest.mark.parametrize("memory", ["stratification"])
def test_value_activations_and_the_overflow(memory, gen):
    paths.check_value_activations_and_the_overflow(memory, gen)


@needs_triton
@pytest.mark.parametrize("memory", ["stratification"])
@pytest.mark.parametrize("controller", ["lstm", "elman"])
@pytest.mark.parametrize(("activation", "push_activation", "depth"), paths.KERNEL_CASES)
def test_stack_rnn_kernels_equal_the_reference(memory, controller, activation, push_activation, depth):
    paths.check_stack_rnn_kernels_equal_the_reference(memory, controller, activation, push_activation, depth)


@needs_triton
@pytest.mark.parametrize("memory", ["stratification"])
def test_stack_rnn_kernels_in_bfloat16_and_strict_mode(memory):
    paths.check_stack_rnn_kernels_in_bfloat16_and_strict_mode(memory)


@needs_triton
@pytest.mark.parametrize(
    ("memory", "controller", "hidden"), [("stratification", "lstm", 7), ("stratification", "elman", 7)]
)
def test_stack_rnn_kernels_with_and_without_preloaded_weights(memory, controller, hidden, monkeypatch):
    paths.check_stack_rnn_kernels_with_and_without_preloaded_weights(memory, controller, hidden, monkeypatch)
