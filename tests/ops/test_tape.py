"""The tape of Delétang et al.'s (2023) Tape-RNN and its jump tape (``memrnn.ops.tape``) on every
path: the literal reference by hand, the batched torch steps against it (every reading and
gradient; jumps past the tape's end), and in the stack RNN the reference sequence against the CPU
path, the C++ loop and the Triton kernels."""

from __future__ import annotations

import pytest
import torch

from memrnn.ops.tape import tape_jump_step, tape_reference, tape_step
from tests.ops import memory_paths as paths
from tests.ops.backends import needs_native, needs_triton
from tests.ops.memory_paths import step_inputs


def run_tape(actions, written, cells):
    B, T, m = written.shape
    tape = written.new_zeros(B, cells, m)
    readings = []
    for t in range(T):
        tape = tape_step(tape, actions[:, t], written[:, t])
        readings.append(tape[:, 0])
    return torch.stack(readings, 1), tape


def test_tape_by_hand():
    """Three cells, head on cell 0; "right" rolls the contents one cell on (new[i] = W[i−1]),
    "left" one cell back (new[i] = W[i+1]), after the write W:

    write a, right: [0, a, 0];  write b, right: [0, b, a];  write c, left: [b, a, c] (reads b);
    write 0, left: [a, c, 0] (reads a: the tape is a circle)."""
    a, b, c = torch.eye(3, dtype=torch.float64)
    zero = torch.zeros(3, dtype=torch.float64)
    w = torch.stack([a, b, c, zero])[None]
    _, left, right = torch.eye(3, dtype=torch.float64)
    acts = torch.stack([right, right, left, left])[None]
    r, tape = run_tape(acts, w, cells=3)
    assert r[0].tolist() == [zero.tolist(), zero.tolist(), b.tolist(), a.tolist()]
    assert tape[0].tolist() == [a.tolist(), c.tolist(), zero.tolist()]
    ref_r, ref_tape = tape_reference(acts, w, cells=3)
    assert torch.equal(ref_r, r) and torch.equal(ref_tape, tape)
    # write a, b, c moving right each time: [a, c, b], the head is back on a
    r3, _ = run_tape(torch.stack([right] * 3)[None], torch.stack([a, b, c])[None], cells=3)
    assert r3[0, 2].tolist() == a.tolist()


@pytest.mark.parametrize("cells", [1, 2, 5])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_tape_step_equals_the_reference_with_gradients(cells, dtype):
    gen = torch.Generator().manual_seed(3)
    actions, written = step_inputs(3, 7, 2, dtype, gen)
    w = torch.randn(3, 7, 2, generator=gen, dtype=dtype)
    fast, tape = run_tape(actions, written, cells)
    ref, ref_tape = tape_reference(actions, written, cells)
    tol = {"atol": 1e-12, "rtol": 0} if dtype == torch.float64 else {"atol": 1e-6, "rtol": 1e-5}
    torch.testing.assert_close(fast, ref, **tol)
    torch.testing.assert_close(tape, ref_tape, **tol)
    for x, y in zip(
        torch.autograd.grad((fast * w).sum(), (actions, written)),
        torch.autograd.grad((ref * w).sum(), (actions, written)),
        strict=True,
    ):
        torch.testing.assert_close(x, y, **tol)


def run_jump_tape(actions, written, cells, jumps):
    B, T, m = written.shape
    tape = written.new_zeros(B, cells, m)
    readings = []
    for t in range(T):
        tape = tape_jump_step(tape, actions[:, t], written[:, t], jumps)
        readings.append(tape[:, 0])
    return torch.stack(readings, 1), tape


def test_jump_tape_by_hand():
    """Five cells, input length 2 (Delétang et al.'s jumps, c'_i = W_{i+L} left, W_{i−L} right):
    write a and jump left: a moves to cell 3 and the head reads cell 2 (0); write b and jump right:
    the head is back over a (cell 3 of the previous tape) and reads it."""
    a, b = torch.eye(2, dtype=torch.float64)
    zero = torch.zeros(2, dtype=torch.float64)
    jl, jr = torch.eye(5, dtype=torch.float64)[3], torch.eye(5, dtype=torch.float64)[4]
    r, tape = run_jump_tape(torch.stack([jl, jr])[None], torch.stack([a, b])[None], 5, torch.tensor([2]))
    assert r[0].tolist() == [zero.tolist(), a.tolist()]
    assert tape[0, 2].tolist() == b.tolist()  # b was written two cells to the right of a
    ref_r, ref_tape = tape_reference(
        torch.stack([jl, jr])[None], torch.stack([a, b])[None], 5, torch.tensor([2])
    )
    assert torch.equal(ref_r, r) and torch.equal(ref_tape, tape)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_jump_tape_step_equals_the_reference_with_gradients(dtype):
    """Rows with jumps 0, 3 and 11 (more than the 5 cells: the tape is a circle)."""
    gen = torch.Generator().manual_seed(4)
    actions = torch.randn(3, 7, 5, generator=gen, dtype=dtype).softmax(-1).requires_grad_()
    written = torch.randn(3, 7, 2, generator=gen, dtype=dtype).requires_grad_()
    jumps = torch.tensor([0, 3, 11])
    w = torch.randn(3, 7, 2, generator=gen, dtype=dtype)
    fast, tape = run_jump_tape(actions, written, 5, jumps.to(dtype))
    ref, ref_tape = tape_reference(actions, written, 5, jumps)
    tol = {"atol": 1e-12, "rtol": 0} if dtype == torch.float64 else {"atol": 1e-6, "rtol": 1e-5}
    torch.testing.assert_close(fast, ref, **tol)
    torch.testing.assert_close(tape, ref_tape, **tol)
    for x, y in zip(
        torch.autograd.grad((fast * w).sum(), (actions, written)),
        torch.autograd.grad((ref * w).sum(), (actions, written)),
        strict=True,
    ):
        torch.testing.assert_close(x, y, **tol)
    # with both jumps at 0 the jump tape is the three-move tape
    three = actions.detach()[..., :3].softmax(-1)
    five = torch.cat([three, torch.zeros_like(three[..., :2])], -1)
    torch.testing.assert_close(
        run_jump_tape(five, written.detach(), 5, jumps)[0], run_tape(three, written.detach(), 5)[0]
    )


# -- in the stack RNN: the harnesses of tests/ops/memory_paths.py ---------------------------------
@pytest.mark.parametrize("controller", ["lstm", "elman"])
@pytest.mark.parametrize("memory", ["tape", "tape_jump"])
def test_reference_sequence_equals_the_cpu_path_with_gradients(memory, controller):
    paths.check_reference_sequence_equals_the_cpu_path_with_gradients(memory, controller)


@needs_native
@pytest.mark.parametrize("memory", ["tape", "tape_jump"])
@pytest.mark.parametrize(("controller", "activation", "opts"), paths.NATIVE_CASES)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_native_loops_equal_python_loops_and_reference(memory, controller, activation, opts, dtype, gen):
    paths.check_native_loops_equal_python_loops_and_reference(
        memory, controller, activation, opts, dtype, gen
    )


@needs_native
@pytest.mark.parametrize("memory", ["tape", "tape_jump"])
def test_value_activations_and_the_overflow(memory, gen):
    paths.check_value_activations_and_the_overflow(memory, gen)


@needs_triton
@pytest.mark.parametrize("memory", ["tape", "tape_jump"])
@pytest.mark.parametrize("controller", ["lstm", "elman"])
@pytest.mark.parametrize(("activation", "push_activation", "depth"), paths.KERNEL_CASES)
def test_stack_rnn_kernels_equal_the_reference(memory, controller, activation, push_activation, depth):
    paths.check_stack_rnn_kernels_equal_the_reference(memory, controller, activation, push_activation, depth)


@needs_triton
@pytest.mark.parametrize("memory", ["tape"])
def test_stack_rnn_kernels_in_bfloat16_and_strict_mode(memory):
    paths.check_stack_rnn_kernels_in_bfloat16_and_strict_mode(memory)
