"""Joulin & Mikolov's (2015) superposition stack (``memrnn.ops.superposition``) on every path: its
literal reference by hand, the batched torch step against it (every reading and gradient, and
what a bounded window drops), and in the stack RNN the reference sequence against the CPU path,
the C++ loop and the Triton kernels."""

from __future__ import annotations

import pytest
import torch

from memrnn.ops.superposition import superposition_reference, superposition_step
from tests.ops import memory_paths as paths
from tests.ops.backends import needs_native, needs_triton
from tests.ops.memory_paths import step_inputs


def run_superposition(actions, pushed, depth):
    B, T, m = pushed.shape
    stack = pushed.new_zeros(B, depth, m)
    readings, overflow = [], []
    for t in range(T):
        stack, lost = superposition_step(stack, actions[:, t], pushed[:, t])
        readings.append(stack[:, 0])
        overflow.append(lost)
    return torch.stack(readings, 1), stack, torch.stack(overflow, 1)


def test_superposition_by_hand():
    """Push [1, 0], push [0, 1], pop (the [2, 2] offered is not pushed): [1, 0] on top again;
    then half a push of [4, 0] and half a no-op: 0.5·[4, 0] + 0.5·[1, 0] on top."""
    v = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [2.0, 2.0], [4.0, 0.0]]], dtype=torch.float64)
    a = torch.tensor([[[1.0, 0, 0], [1.0, 0, 0], [0, 1.0, 0], [0.5, 0, 0.5]]], dtype=torch.float64)
    r, stack, _ = run_superposition(a, v, depth=4)
    assert r[0].tolist() == [[1.0, 0.0], [0.0, 1.0], [1.0, 0.0], [2.5, 0.0]]
    # below the top: 0.5·(v1 pushed down) + 0.5·(empty) = [0.5, 0]
    assert stack[0, 1].tolist() == [0.5, 0.0]
    ref, cells = superposition_reference(a, v)
    assert torch.equal(ref, r) and len(cells[0]) == 4


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_superposition_step_equals_the_reference_with_gradients(dtype):
    gen = torch.Generator().manual_seed(0)
    actions, pushed = step_inputs(3, 9, 4, dtype, gen)
    w = torch.randn(3, 9, 4, generator=gen, dtype=dtype)
    fast, stack, overflow = run_superposition(actions, pushed, depth=9)
    ref, cells = superposition_reference(actions, pushed)
    tol = {"atol": 1e-12, "rtol": 0} if dtype == torch.float64 else {"atol": 1e-6, "rtol": 1e-5}
    torch.testing.assert_close(fast, ref, **tol)
    torch.testing.assert_close(stack, torch.stack([torch.stack(c) for c in cells]), **tol)
    assert bool((overflow == 0).all())  # depth = T: nothing leaves the window
    g_fast = torch.autograd.grad((fast * w).sum(), (actions, pushed))
    g_ref = torch.autograd.grad((ref * w).sum(), (actions, pushed))
    for a, b in zip(g_fast, g_ref, strict=True):
        torch.testing.assert_close(a, b, **tol)


def test_superposition_window_reports_what_it_drops():
    gen = torch.Generator().manual_seed(1)
    actions, pushed = step_inputs(2, 12, 3, torch.float64, gen)
    fast, _, overflow = run_superposition(actions, pushed, depth=4)
    ref, _ = superposition_reference(actions, pushed)
    assert bool((overflow[:, :4] == 0).all()) and bool((overflow[:, 4:] > 0).all())
    # content needs depth steps down and back up to reach the top: the first 2·depth readings agree
    torch.testing.assert_close(fast[:, :8], ref[:, :8], atol=1e-12, rtol=0)
    assert not torch.allclose(fast, ref, atol=1e-12)
    # hard pushes and pops that stay within 4 cells drop nothing and agree everywhere
    seq = [0, 0, 0, 1, 0, 1, 1, 2, 0, 1, 1, 1]  # push push push pop push pop pop no-op push pop pop pop
    hard = torch.nn.functional.one_hot(torch.tensor([seq, seq]), 3).double()
    fast, _, overflow = run_superposition(hard, pushed.detach(), depth=4)
    assert bool((overflow == 0).all())
    torch.testing.assert_close(fast, superposition_reference(hard, pushed.detach())[0], atol=0, rtol=0)


# -- in the stack RNN: the harnesses of tests/ops/memory_paths.py ---------------------------------
@pytest.mark.parametrize("controller", ["lstm", "elman"])
@pytest.mark.parametrize("memory", ["superposition"])
def test_reference_sequence_equals_the_cpu_path_with_gradients(memory, controller):
    paths.check_reference_sequence_equals_the_cpu_path_with_gradients(memory, controller)


@needs_native
@pytest.mark.parametrize("memory", ["superposition"])
@pytest.mark.parametrize(("controller", "activation", "opts"), paths.NATIVE_CASES)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_native_loops_equal_python_loops_and_reference(memory, controller, activation, opts, dtype, gen):
    paths.check_native_loops_equal_python_loops_and_reference(
        memory, controller, activation, opts, dtype, gen
    )


@needs_native
@pytest.mark.parametrize("memory", ["superposition"])
def test_value_activations_and_the_overflow(memory, gen):
    paths.check_value_activations_and_the_overflow(memory, gen)


@needs_triton
@pytest.mark.parametrize("memory", ["superposition"])
@pytest.mark.parametrize("controller", ["lstm", "elman"])
@pytest.mark.parametrize(("activation", "push_activation", "depth"), paths.KERNEL_CASES)
def test_stack_rnn_kernels_equal_the_reference(memory, controller, activation, push_activation, depth):
    paths.check_stack_rnn_kernels_equal_the_reference(memory, controller, activation, push_activation, depth)


@needs_triton
@pytest.mark.parametrize("memory", ["superposition"])
def test_stack_rnn_kernels_in_bfloat16_and_strict_mode(memory):
    paths.check_stack_rnn_kernels_in_bfloat16_and_strict_mode(memory)


@needs_triton
@pytest.mark.parametrize(
    ("memory", "controller", "hidden"),
    [("superposition", "lstm", 7), ("superposition", "elman", 7), ("superposition", "elman", 70)],
)
def test_stack_rnn_kernels_with_and_without_preloaded_weights(memory, controller, hidden, monkeypatch):
    paths.check_stack_rnn_kernels_with_and_without_preloaded_weights(memory, controller, hidden, monkeypatch)
