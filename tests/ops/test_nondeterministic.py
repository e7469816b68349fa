"""DuSell & Chiang's nondeterministic stack (NS-RNN 2020, RNS-RNN 2022, memory-limited 2022):
the batched log-space step against the literal recurrences, hand-worked runs of a weighted PDA,
the window, long sequences, and the log-semiring product it is built on."""

from __future__ import annotations

import pytest
import torch

from memrnn.ops.nondeterministic import (
    LOG_ZERO,
    log_matmul,
    nondeterministic_initial,
    nondeterministic_reference,
    nondeterministic_step,
)


def run_fast(push, repl, pop, depth):
    """Forward weights ``log α [B, T, Q, S]`` (normalised per step) from the batched step."""
    B, T, Q, S = push.shape[:4]
    gamma, alpha = nondeterministic_initial(B, Q, S, depth, dtype=push.dtype)
    out = []
    for t in range(T):
        gamma, alpha = nondeterministic_step(
            gamma,
            alpha,
            push[:, t].reshape(B, Q * S, Q * S),
            repl[:, t].reshape(B, Q * S, Q * S),
            pop[:, t].reshape(B, Q * S, Q),
        )
        out.append(alpha[:, -1].reshape(B, Q, S))
    return torch.stack(out, 1), gamma, alpha


def normalised(log_alpha):
    B, T = log_alpha.shape[:2]
    return log_alpha.reshape(B, T, -1).log_softmax(-1).reshape(log_alpha.shape)


def transitions(Q, S, T, moves):
    """Log weights of a PDA with one state whose step ``t`` does only ``moves[t]``: ``("push",
    {y: w})`` pushes ``y`` with weight ``w`` whatever is on top, ``("pop",)`` pops."""
    push = torch.full((1, T, Q, S, Q, S), LOG_ZERO, dtype=torch.float64)
    repl = torch.full((1, T, Q, S, Q, S), LOG_ZERO, dtype=torch.float64)
    pop = torch.full((1, T, Q, S, Q), LOG_ZERO, dtype=torch.float64)
    for t, move in enumerate(moves):
        if move[0] == "push":
            for y, w in move[1].items():
                push[0, t, 0, :, 0, y] = torch.tensor(w, dtype=torch.float64).log()
        else:
            pop[0, t, 0, :, 0] = 0.0
    return push, repl, pop


def test_a_deterministic_run_by_hand():
    """Push a, push b, pop, pop: the top reads a, b, a, then the bottom symbol."""
    push, repl, pop = transitions(1, 3, 4, [("push", {1: 1}), ("push", {2: 1}), ("pop",), ("pop",)])
    ref = nondeterministic_reference(push, repl, pop)
    assert ref.exp()[0, :, 0].tolist() == [[0, 1, 0], [0, 0, 1], [0, 1, 0], [1, 0, 0]]
    fast, _, _ = run_fast(push, repl, pop, depth=4)
    torch.testing.assert_close(fast.exp(), ref.exp(), atol=1e-12, rtol=0)


def test_a_nondeterministic_run_by_hand():
    """Step 1 pushes a with weight 1 or b with weight 3: the top is a or b in proportion 1 : 3
    (total weight 4); step 2 pops either: the bottom is on top again, carrying both runs'
    weight, 4."""
    push, repl, pop = transitions(1, 3, 2, [("push", {1: 1, 2: 3}), ("pop",)])
    ref = nondeterministic_reference(push, repl, pop).exp()
    torch.testing.assert_close(ref[0, :, 0], torch.tensor([[0, 1, 3], [4, 0, 0]], dtype=torch.float64))
    fast, _, alpha = run_fast(push, repl, pop, depth=2)
    torch.testing.assert_close(
        fast.exp()[0, :, 0], torch.tensor([[0, 0.25, 0.75], [1, 0, 0]], dtype=torch.float64)
    )
    assert float(alpha[0, -1].logsumexp(0)) == pytest.approx(0.0, abs=1e-12)  # stored α is normalised


def random_transitions(B, T, Q, S, dtype, gen, scale=1.0):
    shape = (B, T, Q, S)
    push = (scale * torch.randn(*shape, Q, S, generator=gen, dtype=dtype)).requires_grad_()
    repl = (scale * torch.randn(*shape, Q, S, generator=gen, dtype=dtype)).requires_grad_()
    pop = (scale * torch.randn(*shape, Q, generator=gen, dtype=dtype)).requires_grad_()
    return push, repl, pop


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("depth", [None, 1, 2, 3])
def test_step_equals_the_reference_with_gradients(depth, dtype):
    gen = torch.Generator().manual_seed(0)
    B, T, Q, S = 2, 6, 2, 2
    push, repl, pop = random_transitions(B, T, Q, S, dtype, gen)
    ref = normalised(nondeterministic_reference(push, repl, pop, depth))
    fast, _, _ = run_fast(push, repl, pop, depth=T if depth is None else depth)
    tol = {"atol": 1e-12, "rtol": 0} if dtype == torch.float64 else {"atol": 1e-5, "rtol": 1e-5}
    torch.testing.assert_close(fast, ref, **tol)
    w = torch.randn(B, T, Q, S, generator=gen, dtype=dtype)
    inputs = (push, repl, pop)  # at depth 1 nothing can be popped: pop's gradient is 0
    for a, b in zip(
        torch.autograd.grad((fast.exp() * w).sum(), inputs, materialize_grads=True),
        torch.autograd.grad((ref.exp() * w).sum(), inputs, materialize_grads=True),
        strict=True,
    ):
        torch.testing.assert_close(a, b, **tol)


def test_the_window_is_exact_until_it_is_full():
    """Depth d keeps start times back to t − d: the first d steps equal the unlimited stack, and
    later ones differ once runs older than the window carry weight."""
    gen = torch.Generator().manual_seed(1)
    push, repl, pop = random_transitions(1, 7, 2, 2, torch.float64, gen)
    full = normalised(nondeterministic_reference(push, repl, pop))
    limited, _, _ = run_fast(push, repl, pop, depth=3)
    torch.testing.assert_close(limited[:, :3], full[:, :3], atol=1e-12, rtol=0)
    assert not torch.allclose(limited[:, 3:], full[:, 3:], atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_long_sequences_stay_finite_and_normalised(dtype):
    """400 steps of large unnormalised weights (logits of scale 10): without the per-step
    normalisation the raw log weights would grow by hundreds per step."""
    gen = torch.Generator().manual_seed(2)
    push, repl, pop = random_transitions(2, 400, 2, 3, dtype, gen, scale=10.0)
    fast, gamma, _ = run_fast(push, repl, pop, depth=6)
    assert torch.isfinite(fast).all() and torch.isfinite(gamma).all()
    torch.testing.assert_close(fast.exp().sum((-2, -1)), torch.ones(2, 400, dtype=dtype))
    (g,) = torch.autograd.grad(fast[:, -1].exp()[..., 0].sum(), (pop,))
    assert torch.isfinite(g).all()


def test_log_matmul_equals_the_naive_sum_with_gradients_and_broadcasting():
    gen = torch.Generator().manual_seed(3)
    a = torch.randn(2, 3, 4, 5, generator=gen, dtype=torch.float64, requires_grad=True)
    b = torch.randn(2, 1, 5, 6, generator=gen, dtype=torch.float64, requires_grad=True)
    b2 = b.detach().clone().requires_grad_()
    fast = log_matmul(a, b)
    naive = (a.unsqueeze(-1) + b2.unsqueeze(-3)).logsumexp(-2)
    torch.testing.assert_close(fast, naive, atol=1e-12, rtol=0)
    w = torch.randn(fast.shape, generator=gen, dtype=torch.float64)
    ga, gb = torch.autograd.grad((fast * w).sum(), (a, b))
    ga2, gb2 = torch.autograd.grad((naive * w).sum(), (a, b2))
    torch.testing.assert_close(ga, ga2, atol=1e-12, rtol=0)
    torch.testing.assert_close(gb, gb2, atol=1e-12, rtol=0)
    assert torch.autograd.gradcheck(log_matmul, (a[:1, :1], b[:1]))


def test_log_zero_entries_take_no_gradient_and_give_no_nan():
    a = torch.full((2, 3), LOG_ZERO, dtype=torch.float64, requires_grad=True)
    b = torch.zeros(3, 2, dtype=torch.float64, requires_grad=True)
    out = log_matmul(a, b)
    assert torch.all(out < LOG_ZERO / 2)
    ga, gb = torch.autograd.grad(out.sum(), (a, b))
    assert torch.isfinite(ga).all() and torch.isfinite(gb).all()


def test_log_matmul_has_second_derivatives():
    """The torch step's log-semiring product (what ``fused=False`` differentiates twice)."""
    from memrnn.ops.nondeterministic import log_matmul

    a = torch.randn(2, 3, 4, dtype=torch.float64, requires_grad=True)
    b = torch.randn(2, 4, 5, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradgradcheck(log_matmul, (a, b))
