"""Grefenstette et al.'s (2015) DeQue (``memrnn.ops.deque``) on every path: its literal reference by
hand, the batched torch step against it (every reading and gradient, one end idle: the stack or
the queue, and what a bounded window drops), and in the stack RNN the reference sequence against
the CPU path, the C++ loop and the Triton kernels."""

from __future__ import annotations

import pytest
import torch

from memrnn.ops.deque import deque_reference, deque_step
from tests.ops import memory_paths as paths
from tests.ops.backends import needs_native, needs_triton
from tests.ops.memory_paths import run_stratification


def run_deque(pops, pushes, v_top, v_bot, capacity):
    """``pops``, ``pushes`` ``[B, T, 2]`` (top, bottom)."""
    B, T, m = v_top.shape
    V, s = v_top.new_zeros(B, 2 * capacity, m), v_top.new_zeros(B, 2 * capacity)
    tops, bots, overflow = [], [], []
    for t in range(T):
        V, s, r_top, r_bot, lost = deque_step(V, s, pops[:, t], pushes[:, t], v_top[:, t], v_bot[:, t])
        tops.append(r_top)
        bots.append(r_bot)
        overflow.append(lost)
    return torch.stack(tops, 1), torch.stack(bots, 1), s, torch.stack(overflow, 1)


def test_deque_by_hand():
    """Two steps worked by hand (Grefenstette et al. 2015, section 3.3: pop the top, then the
    bottom, then push both ends).  Step 1 pushes e1 (0.8) on top and e2 (0.5) below; step 2 pops
    0.9 from the top (all of e1, 0.1 of e2) and 0.3 from the bottom (e2: 0.4 -> 0.1), then pushes
    e3 (0.2) on top and e4 (0) below."""
    e = torch.eye(4, dtype=torch.float64)
    v_top, v_bot = torch.stack([e[0], e[2]])[None], torch.stack([e[1], e[3]])[None]
    pops = torch.tensor([[[0.0, 0.0], [0.9, 0.3]]], dtype=torch.float64)
    pushes = torch.tensor([[[0.8, 0.5], [0.2, 0.0]]], dtype=torch.float64)
    r_top, r_bot, s, _ = run_deque(pops, pushes, v_top, v_bot, capacity=2)
    f64 = {"dtype": torch.float64}
    torch.testing.assert_close(r_top[0, 0], torch.tensor([0.8, 0.2, 0, 0], **f64))
    torch.testing.assert_close(r_bot[0, 0], torch.tensor([0.5, 0.5, 0, 0], **f64))
    torch.testing.assert_close(r_top[0, 1], torch.tensor([0, 0.1, 0.2, 0], **f64))
    torch.testing.assert_close(r_bot[0, 1], torch.tensor([0, 0.1, 0.2, 0], **f64))
    torch.testing.assert_close(s[0], torch.tensor([0.0, 0.1, 0.0, 0.2], **f64))  # e4, e2 | e1, e3
    ref_top, ref_bot, ref_s = deque_reference(
        pops[..., 0], pops[..., 1], pushes[..., 0], pushes[..., 1], v_top, v_bot
    )
    torch.testing.assert_close(ref_top, r_top)
    torch.testing.assert_close(ref_bot, r_bot)
    torch.testing.assert_close(ref_s, s)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_deque_step_equals_the_reference_with_gradients(dtype):
    gen = torch.Generator().manual_seed(5)
    B, T, m = 3, 7, 4
    pops = torch.rand(B, T, 2, generator=gen, dtype=dtype).requires_grad_()
    pushes = torch.rand(B, T, 2, generator=gen, dtype=dtype).requires_grad_()
    v_top = torch.randn(B, T, m, generator=gen, dtype=dtype).requires_grad_()
    v_bot = torch.randn(B, T, m, generator=gen, dtype=dtype).requires_grad_()
    w_top, w_bot = torch.randn(2, B, T, m, generator=gen, dtype=dtype)
    r_top, r_bot, s, overflow = run_deque(pops, pushes, v_top, v_bot, capacity=T)
    ref_top, ref_bot, ref_s = deque_reference(
        pops[..., 0], pops[..., 1], pushes[..., 0], pushes[..., 1], v_top, v_bot
    )
    tol = {"atol": 1e-12, "rtol": 0} if dtype == torch.float64 else {"atol": 1e-6, "rtol": 1e-5}
    torch.testing.assert_close(r_top, ref_top, **tol)
    torch.testing.assert_close(r_bot, ref_bot, **tol)
    torch.testing.assert_close(s, ref_s, **tol)  # with capacity T the window is the paper's 2T slots
    assert bool((overflow == 0).all())
    inputs = (pops, pushes, v_top, v_bot)
    fast = (r_top * w_top + r_bot * w_bot).sum()
    ref = (ref_top * w_top + ref_bot * w_bot).sum()
    for a, b in zip(torch.autograd.grad(fast, inputs), torch.autograd.grad(ref, inputs), strict=True):
        torch.testing.assert_close(a, b, **tol)


def test_deque_with_one_end_idle_is_the_stack_or_the_queue():
    """Pushing and popping only at the top makes the DeQue a stratification stack read at the top;
    pushing at the top and popping at the bottom makes it the neural queue read at the bottom."""
    gen = torch.Generator().manual_seed(6)
    B, T, m = 2, 9, 3
    u, d = torch.rand(2, B, T, generator=gen, dtype=torch.float64)
    v = torch.randn(B, T, m, generator=gen, dtype=torch.float64)
    zero = torch.zeros_like(u)
    r_top, _, _, _ = run_deque(
        torch.stack([u, zero], -1), torch.stack([d, zero], -1), v, torch.zeros_like(v), T
    )
    torch.testing.assert_close(r_top, run_stratification(u, d, v, T, "stack")[0], atol=1e-12, rtol=0)
    _, r_bot, _, _ = run_deque(
        torch.stack([zero, u], -1), torch.stack([d, zero], -1), v, torch.zeros_like(v), T
    )
    torch.testing.assert_close(r_bot, run_stratification(u, d, v, T, "queue")[0], atol=1e-12, rtol=0)


def test_deque_window_reports_what_it_drops():
    """Elements popped to strength 0 leave a small window silently; live ones are reported, one per
    end per step once both halves are full."""
    B, T, m = 1, 8, 2
    v = torch.randn(B, T, m, dtype=torch.float64)
    ones, zeros = torch.ones(B, T, 2, dtype=torch.float64), torch.zeros(B, T, 2, dtype=torch.float64)
    pops = torch.stack([torch.ones(B, T), torch.ones(B, T)], -1).double()  # both ends popped empty each step
    r_top, r_bot, _, overflow = run_deque(pops, ones, v, v, capacity=2)
    assert bool((overflow == 0).all())
    ref_top, ref_bot, _ = deque_reference(pops[..., 0], pops[..., 1], ones[..., 0], ones[..., 1], v, v)
    torch.testing.assert_close(r_top, ref_top, atol=1e-12, rtol=0)
    torch.testing.assert_close(r_bot, ref_bot, atol=1e-12, rtol=0)
    _, _, _, overflow = run_deque(zeros, ones, v, v, capacity=2)
    assert overflow[0].tolist() == [0.0, 0.0] + [2.0] * 6


# -- in the stack RNN: the harnesses of tests/ops/memory_paths.py ---------------------------------
@pytest.mark.parametrize("controller", ["lstm", "elman"])
@pytest.mark.parametrize("memory", ["deque"])
def test_reference_sequence_equals_the_cpu_path_with_gradients(memory, controller):
    paths.check_reference_sequence_equals_the_cpu_path_with_gradients(memory, controller)


@needs_native
@pytest.mark.parametrize("memory", ["deque"])
@pytest.mark.parametrize(("controller", "activation", "opts"), paths.NATIVE_CASES)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_native_loops_equal_python_loops_and_reference(memory, controller, activation, opts, dtype, gen):
    paths.check_native_loops_equal_python_loops_and_reference(
        memory, controller, activation, opts, dtype, gen
    )


@needs_native
@pytest.mark.parametrize("memory", ["deque"])
def test_value_activations_and_the_overflow(memory, gen):
    paths.check_value_activations_and_the_overflow(memory, gen)


@needs_triton
@pytest.mark.parametrize("memory", ["deque"])
@pytest.mark.parametrize("controller", ["lstm", "elman"])
@pytest.mark.parametrize(("activation", "push_activation", "depth"), paths.KERNEL_CASES)
def test_stack_rnn_kernels_equal_the_reference(memory, controller, activation, push_activation, depth):
    paths.check_stack_rnn_kernels_equal_the_reference(memory, controller, activation, push_activation, depth)


@needs_triton
@pytest.mark.parametrize("memory", ["deque"])
def test_stack_rnn_kernels_in_bfloat16_and_strict_mode(memory):
    paths.check_stack_rnn_kernels_in_bfloat16_and_strict_mode(memory)


@needs_triton
@pytest.mark.parametrize(("memory", "controller", "hidden"), [("deque", "lstm", 7), ("deque", "elman", 7)])
def test_stack_rnn_kernels_with_and_without_preloaded_weights(memory, controller, hidden, monkeypatch):
    paths.check_stack_rnn_kernels_with_and_without_preloaded_weights(memory, controller, hidden, monkeypatch)
