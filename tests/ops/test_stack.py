"""The differentiable stack (Stogin et al. 2020 Definitions 3.2, 3.4, B.5; Proposition 3.3; Lemma 3.5)."""

import math

import pytest
import torch

from memrnn.ops import (
    h_sigmoid,
    ideal_stack_op,
    long_stack_op_reference,
    stack_op,
    stack_op_reference,
    stack_overflow,
    stack_reading,
    stack_size,
)

D64 = torch.float64


def one_hot_stack(contents, depth, m2):
    """Ideal stack ``[B, depth, m2]`` from symbol lists, top first."""
    k = torch.zeros(len(contents), depth, m2, dtype=D64)
    for b, cells in enumerate(contents):
        for i, sym in enumerate(cells):
            k[b, i, sym] = 1.0
    return k


def test_h_sigmoid_is_the_sensitivity_sigmoid():
    x = torch.tensor([-1.0, 0.0, 0.25], dtype=D64)
    torch.testing.assert_close(h_sigmoid(x, 7.0), 1 / (1 + torch.exp(-7.0 * x)))
    assert h_sigmoid(torch.tensor(0.0), 100.0) == 0.5


@pytest.mark.parametrize("sensitivity", [5.0, 10.0, 20.0, 40.0])
def test_push_pop_noop_within_h_of_minus_half_and_equal_to_the_ideal_in_the_limit(sensitivity):
    """π(1,0,C), π(0,1,C), π(0,0,C) on one-hot stacks = push, pop, no-op up to h_H(−1/2)."""
    contents = [[0, 1, 1], [2], [], [1, 0, 2, 2]]
    k = one_hot_stack(contents, 6, 3)
    tail = torch.zeros(4, 3, dtype=D64)
    c = torch.eye(3, dtype=D64)[[2, 0, 1, 1]]
    err = h_sigmoid(torch.tensor(-0.5, dtype=D64), sensitivity)
    for p in [(1.0, 0.0), (0.0, 1.0), (0.0, 0.0)]:
        pp, pm = torch.full((4,), p[0], dtype=D64), torch.full((4,), p[1], dtype=D64)
        new, new_tail = stack_op(k, tail, pp, pm, c, sensitivity)
        ideal = ideal_stack_op(k, pp, pm, c)
        # the classical operation, by hand
        want = [
            [int(c[b].argmax()), *cells] if p[0] else cells[1:] if p[1] else cells
            for b, cells in enumerate(contents)
        ]
        torch.testing.assert_close(ideal, one_hot_stack(want, 6, 3), atol=0, rtol=0)
        gap = (new - ideal).abs().max()
        torch.testing.assert_close(gap, err, atol=1e-15, rtol=1e-12)  # exactly h_H(−1/2) on ideal stacks
        torch.testing.assert_close(new_tail.max(), err)
    if sensitivity == 40.0:
        assert err < 1e-8


def test_fast_operator_equals_the_reference_values_and_gradients(gen):
    b, d, m = 3, 5, 2
    stack = torch.rand(b, d, m, generator=gen, dtype=D64).requires_grad_()
    tail = torch.rand(b, m, generator=gen, dtype=D64).requires_grad_()
    pp = torch.rand(b, generator=gen, dtype=D64).requires_grad_()
    pm = (torch.rand(b, generator=gen, dtype=D64) * (1 - pp.detach())).requires_grad_()
    c = torch.rand(b, m, generator=gen, dtype=D64).requires_grad_()
    args = (stack, tail, pp, pm, c)
    fast = stack_op(*args, 6.0)
    ref = stack_op_reference(*args, 6.0)
    for a, r in zip(fast, ref, strict=True):
        torch.testing.assert_close(a, r, atol=1e-14, rtol=0)
    w = [torch.randn(t.shape, generator=gen, dtype=D64) for t in fast]
    g_fast = torch.autograd.grad(sum((a * x).sum() for a, x in zip(fast, w, strict=True)), args)
    g_ref = torch.autograd.grad(sum((a * x).sum() for a, x in zip(ref, w, strict=True)), args)
    for a, r in zip(g_fast, g_ref, strict=True):
        torch.testing.assert_close(a, r, atol=1e-13, rtol=0)
    assert torch.autograd.gradcheck(lambda *a: stack_op(*a, 6.0), args)


def test_window_and_tail_equal_the_papers_infinite_stack(gen):
    """With depth ≥ s0 + T the window-plus-tail is the infinite stack exactly: compare with a
    plain list of N = s0 + 2T + 1 cells over zeros (exact in its first N − T cells)."""
    s0, steps, m = 2, 12, 2
    depth = s0 + steps
    n_cells = s0 + 2 * steps + 1
    init = one_hot_stack([[1, 0]], depth, m)
    stack, tail = init.clone(), torch.zeros(1, m, dtype=D64)
    cells = [init[0, i] for i in range(s0)] + [torch.zeros(m, dtype=D64)] * (n_cells - s0)
    for _ in range(steps):
        p = torch.rand(3, generator=gen, dtype=D64)
        pp, pm = p[0], (1 - p[0]) * p[1]
        c = torch.rand(m, generator=gen, dtype=D64)
        stack, tail = stack_op(stack, tail, pp[None], pm[None], c[None], 8.0)
        cells = long_stack_op_reference(cells, pp, pm, c, 8.0)
    exact = n_cells - steps
    torch.testing.assert_close(stack[0], torch.stack(cells[:depth]), atol=1e-15, rtol=0)
    for i in range(depth, exact):  # every deeper cell holds the tail's value
        torch.testing.assert_close(tail[0], cells[i], atol=1e-15, rtol=0)


def test_proposition_3_3_pi_tracks_pi_bar_within_epsilon(gen):
    """ε-close inputs and H with h_H(−(1/2 − 7ε)) ≤ ε give ε-close outputs (Proposition 3.3)."""
    eps = 0.05
    sensitivity = math.log((1 - eps) / eps) / (0.5 - 7 * eps)  # Lemma C.1's condition, with equality
    b, d, m = 64, 6, 3
    for _ in range(20):
        sizes = torch.randint(0, d, (b,), generator=gen)
        contents = [torch.randint(0, m, (int(s),), generator=gen).tolist() for s in sizes]
        ideal = one_hot_stack(contents, d, m)
        choice = torch.randint(0, 3, (b,), generator=gen)
        pp_bar, pm_bar = (choice == 0).to(D64), (choice == 1).to(D64)
        c_bar = torch.eye(m, dtype=D64)[torch.randint(0, m, (b,), generator=gen)]

        def near(t):
            return (t + eps * (2 * torch.rand(t.shape, generator=gen, dtype=D64) - 1)).clamp(0, 1)

        out, out_tail = stack_op(
            near(ideal),
            eps * torch.rand(b, m, generator=gen, dtype=D64),
            near(pp_bar),
            near(pm_bar),
            near(c_bar),
            sensitivity,
        )
        want = ideal_stack_op(ideal, pp_bar, pm_bar, c_bar)
        assert (out - want).abs().max() <= eps + 1e-12
        assert out_tail.abs().max() <= eps + 1e-12


def test_lemma_3_5_reading_distance_equals_top_distance(gen):
    for _ in range(200):
        m = int(torch.randint(1, 5, (1,), generator=gen))
        top_bar = torch.zeros(m, dtype=D64)
        if torch.rand(1, generator=gen) < 0.7:
            top_bar[torch.randint(0, m, (1,), generator=gen)] = 1.0
        top = (top_bar + 0.2 * (2 * torch.rand(m, generator=gen, dtype=D64) - 1)).clamp(0, 1)
        lhs = (top - top_bar).abs().max()
        rhs = (stack_reading(top) - stack_reading(top_bar)).abs().max()
        torch.testing.assert_close(lhs, rhs, atol=1e-15, rtol=0)
    r = stack_reading(torch.tensor([[0.0, 0.0], [0.0, 1.0]], dtype=D64))
    torch.testing.assert_close(r, torch.tensor([[0.0, 0.0, 1.0], [0.0, 1.0, 0.0]], dtype=D64))


def test_overflow_and_size():
    k = one_hot_stack([[0, 1, 0], [1], []], 3, 2)
    assert stack_size(k).tolist() == [3, 1, 0]
    pp = torch.tensor([1.0, 1.0, 0.0], dtype=D64)
    assert stack_overflow(k, pp).tolist() == [True, False, False]


def test_shape_errors_name_the_argument():
    k = torch.zeros(2, 3, 2)
    with pytest.raises(ValueError, match="p_push"):
        stack_op(k, torch.zeros(2, 2), torch.zeros(3), torch.zeros(2), torch.zeros(2, 2), 1.0)
    with pytest.raises(ValueError, match="batch, depth"):
        stack_op(k[0], torch.zeros(2, 2), torch.zeros(2), torch.zeros(2), torch.zeros(2, 2), 1.0)
