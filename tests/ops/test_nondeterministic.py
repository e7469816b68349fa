"""DuSell & Chiang's nondeterministic stack (NS-RNN 2020, RNS-RNN 2022, memory-limited 2022,
vector RNS-RNN 2023): the batched log-space steps against the literal recurrences, hand-worked
runs of a weighted PDA, the window, long sequences, and the log-semiring product they are built
on."""

from __future__ import annotations

import pytest
import torch

from memrnn.ops.nondeterministic import (
    LOG_ZERO,
    log_matmul,
    nondeterministic_initial,
    nondeterministic_reference,
    nondeterministic_step,
    vector_nondeterministic_initial,
    vector_nondeterministic_reference,
    vector_nondeterministic_step,
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
    """The torch step's log-semiring product (what ``reference_paths()`` differentiates twice)."""
    from memrnn.ops.nondeterministic import log_matmul

    a = torch.randn(2, 3, 4, dtype=torch.float64, requires_grad=True)
    b = torch.randn(2, 4, 5, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradgradcheck(log_matmul, (a, b))


# -- the vector RNS-RNN (DuSell & Chiang 2023) ------------------------------------------------------


def run_vector(push, repl, pop, vectors, bottom, depth, impl=None):
    """Readings ``[B, T, Q, S, m]`` (the expected top vector per (state, symbol)) from the
    batched vector step (``impl``: torch's ``"cpu"``, C++ ``"native"``, None the dispatch's
    choice), and the final state."""
    B, T, Q, S = push.shape[:4]
    m = vectors.shape[-1]
    gamma, alpha = nondeterministic_initial(B, Q, S, depth, dtype=push.dtype)
    zeta, eta = vector_nondeterministic_initial(B, Q, S, m, depth, bottom)
    out = []
    for t in range(T):
        gamma, alpha, zeta, eta = vector_nondeterministic_step(
            gamma,
            alpha,
            zeta,
            push[:, t].reshape(B, Q * S, Q * S),
            repl[:, t].reshape(B, Q * S, Q * S),
            pop[:, t].reshape(B, Q * S, Q),
            vectors[:, t],
            impl=impl,
        )
        out.append(eta.exp().reshape(B, Q, S, m))
    return torch.stack(out, 1), (gamma, alpha, zeta, eta)


def log_vectors(rows):
    return torch.tensor(rows, dtype=torch.float64).log()[None]


def test_a_vector_run_by_hand():
    """Push a with v1, push b with v2, pop, replace the uncovered a by b, pop: the reading is v1
    at a, v2 at b, v1 at a again, v1 at b (a replace keeps the vector), then the bottom vector at
    the bottom symbol."""
    moves = [("push", {1: 1}), ("push", {2: 1}), ("pop",), ("repl",), ("pop",)]
    push, repl, pop = transitions(1, 3, 5, [m if m[0] != "repl" else ("push", {}) for m in moves])
    repl[0, 3, 0, 1, 0, 2] = 0.0  # step 4 replaces a by b, nothing else
    vectors = log_vectors([[0.1, 0.9], [0.7, 0.2], [0.5, 0.5], [0.5, 0.5], [0.5, 0.5]])
    bottom = torch.tensor([0.3, 0.6], dtype=torch.float64).log()
    _, ref = vector_nondeterministic_reference(push, repl, pop, vectors, bottom)
    expected = torch.zeros(5, 3, 2, dtype=torch.float64)
    expected[0, 1] = torch.tensor([0.1, 0.9], dtype=torch.float64)
    expected[1, 2] = torch.tensor([0.7, 0.2], dtype=torch.float64)
    expected[2, 1] = torch.tensor([0.1, 0.9], dtype=torch.float64)
    expected[3, 2] = torch.tensor([0.1, 0.9], dtype=torch.float64)
    expected[4, 0] = torch.tensor([0.3, 0.6], dtype=torch.float64)
    torch.testing.assert_close(ref[0, :, 0], expected, atol=1e-12, rtol=0)
    fast, _ = run_vector(push, repl, pop, vectors, bottom, depth=5)
    torch.testing.assert_close(fast[0, :, 0], expected, atol=1e-12, rtol=0)


def test_a_nondeterministic_vector_run_by_hand():
    """Step 1 pushes a with weight 1 or b with weight 3, both with v; step 2 pushes a with weight
    1 and w: the reading is v/4 at a and 3v/4 at b, then w at a; step 3 pops: the two runs'
    tops are a and b again, with v."""
    push, repl, pop = transitions(1, 3, 3, [("push", {1: 1, 2: 3}), ("push", {1: 1}), ("pop",)])
    vectors = log_vectors([[0.8, 0.4], [0.2, 0.6], [0.5, 0.5]])
    _, ref = vector_nondeterministic_reference(push, repl, pop, vectors)
    fast, _ = run_vector(push, repl, pop, vectors, torch.full((2,), LOG_ZERO, dtype=torch.float64), depth=3)
    v, w = torch.tensor([0.8, 0.4], dtype=torch.float64), torch.tensor([0.2, 0.6], dtype=torch.float64)
    expected = torch.zeros(3, 3, 2, dtype=torch.float64)
    expected[0, 1], expected[0, 2] = v / 4, 3 * v / 4
    expected[1, 1] = w
    expected[2, 1], expected[2, 2] = v / 4, 3 * v / 4
    for got in (ref, fast):
        torch.testing.assert_close(got[0, :, 0], expected, atol=1e-12, rtol=0)


@pytest.mark.parametrize("impl", ["cpu", "native"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("depth", [None, 1, 2, 3])
def test_vector_step_equals_the_reference_with_gradients(depth, dtype, impl):
    """Readings and the gradients of every transition weight, the pushed vectors and the bottom
    vector; the forward weights are the plain stack's."""
    gen = torch.Generator().manual_seed(4)
    B, T, Q, S, m = 2, 6, 2, 2, 3
    push, repl, pop = random_transitions(B, T, Q, S, dtype, gen)
    vectors = torch.nn.functional.logsigmoid(
        torch.randn(B, T, m, generator=gen, dtype=dtype)
    ).requires_grad_()
    bottom = torch.nn.functional.logsigmoid(torch.randn(m, generator=gen, dtype=dtype)).requires_grad_()
    log_alpha, ref = vector_nondeterministic_reference(push, repl, pop, vectors, bottom, depth)
    D = T if depth is None else depth
    fast, (_, alpha, _, _) = run_vector(push, repl, pop, vectors, bottom, D, impl)
    tol = {"atol": 1e-12, "rtol": 0} if dtype == torch.float64 else {"atol": 1e-5, "rtol": 1e-5}
    torch.testing.assert_close(fast, ref, **tol)
    torch.testing.assert_close(alpha[:, -1].reshape(B, Q, S), normalised(log_alpha)[:, -1], **tol)
    w = torch.randn(fast.shape, generator=gen, dtype=dtype)
    inputs = (push, repl, pop, vectors, bottom)
    for a, b in zip(
        torch.autograd.grad((fast * w).sum(), inputs, materialize_grads=True),
        torch.autograd.grad((ref * w).sum(), inputs, materialize_grads=True),
        strict=True,
    ):
        torch.testing.assert_close(a, b, **tol)


def test_vector_readings_are_expectations_and_stay_finite_over_long_sequences():
    """Each reading is an expectation of vectors in (0, 1) under a distribution over (state,
    symbol): summed over (r, y) it lies in (0, 1) per unit; 300 steps of large weights stay
    finite, with finite gradients."""
    gen = torch.Generator().manual_seed(5)
    B, T, Q, S, m = 2, 300, 2, 3, 2
    push, repl, pop = random_transitions(B, T, Q, S, torch.float32, gen, scale=10.0)
    vectors = torch.nn.functional.logsigmoid(3 * torch.randn(B, T, m, generator=gen)).requires_grad_()
    fast, (_, _, zeta, _) = run_vector(push, repl, pop, vectors, torch.zeros(m), depth=5)
    total = fast.sum((2, 3))
    assert torch.isfinite(zeta).all() and bool((total > 0).all()) and bool((total < 1 + 1e-5).all())
    (g,) = torch.autograd.grad(fast[:, -1].sum(), (vectors,))
    assert torch.isfinite(g).all()


def test_step_has_second_derivatives():
    """The torch step differentiates twice (a ``StackRNN`` under ``reference_paths()``), log 0 entries included:
    ``torch.logaddexp`` gave nan there (its backward's ``1 / (1 + exp(b − a))`` overflows)."""
    gen = torch.Generator().manual_seed(6)
    B, Q, S, D = 1, 1, 2, 2
    gamma, alpha = nondeterministic_initial(B, Q, S, D, dtype=torch.float64)
    acts = [torch.randn(*shape, generator=gen, dtype=torch.float64, requires_grad=True)
            for shape in ((B, Q * S, Q * S), (B, Q * S, Q * S), (B, Q * S, Q))]  # fmt: skip

    def two_steps(push, repl, pop):
        g, a = gamma, alpha
        for _ in range(2):
            g, a = nondeterministic_step(g, a, push, repl, pop, impl="cpu")
        return a[:, -1]

    assert torch.autograd.gradgradcheck(two_steps, acts)


def test_vector_step_has_second_derivatives():
    gen = torch.Generator().manual_seed(6)
    B, Q, S, m, D = 1, 1, 2, 2, 2
    gamma, alpha = nondeterministic_initial(B, Q, S, D, dtype=torch.float64)
    zeta, _ = vector_nondeterministic_initial(B, Q, S, m, D, torch.zeros(m, dtype=torch.float64))
    acts = [torch.randn(*shape, generator=gen, dtype=torch.float64, requires_grad=True)
            for shape in ((B, Q * S, Q * S), (B, Q * S, Q * S), (B, Q * S, Q), (B, m))]  # fmt: skip

    def two_steps(push, repl, pop, vector):
        state = (gamma, alpha, zeta)
        for _ in range(2):
            *state, eta = vector_nondeterministic_step(*state, push, repl, pop, vector, impl="cpu")
        return eta

    assert torch.autograd.gradgradcheck(two_steps, acts)


def test_the_bottom_vector_has_the_shape_of_the_vectors():
    with pytest.raises(ValueError, match=r"bottom vector has shape \(3,\), expected \(2,\)"):
        vector_nondeterministic_initial(1, 2, 2, 2, 4, torch.zeros(3))


# -- the sequence driver (a controller around the stack) --------------------------------------------


@pytest.mark.parametrize("memory", ["nondeterministic", "vector_nondeterministic"])
@pytest.mark.parametrize("impl", ["native", "cpu"])
def test_the_sequence_driver_equals_the_layers_reference_loop(memory, impl):
    """:func:`nondeterministic_sequence` (the run, or the torch step) around an Elman controller's
    steps gives the reference loop's hidden states, readings, final states and gradients, rows of
    lengths 5, 2 and 0 included; ``final=False`` builds no final stack."""
    from memrnn.core import reference_paths, state_leaves
    from memrnn.layers import StackRNN
    from memrnn.ops.dispatch import native_available
    from memrnn.ops.nondeterministic.sequence import nondeterministic_sequence

    if impl == "native" and not native_available():
        pytest.skip("memrnn's C++ loops did not build here")
    gen = torch.Generator().manual_seed(4)
    args = {"states": 2, "symbols": 2} | ({"vector_size": 2} if memory.startswith("vector") else {})
    torch.manual_seed(0)
    net = StackRNN(3, 5, memory, "elman", depth=3, output="hidden+reading", memory_args=args).double()
    x = torch.randn(3, 5, 3, generator=gen, dtype=torch.float64, requires_grad=True)
    mask = torch.arange(5)[None] < torch.tensor([5, 2, 0])[:, None]
    cs, ms = net.split(net.initial_state(3, dtype=torch.float64))

    def step(t, reading, cs):
        return net.controller._unchecked_step(torch.cat([x[:, t], reading], -1), cs)

    h, r, cs_end, ms_end = nondeterministic_sequence(
        x, step, cs, net.memory, ms, mask, readings=True, impl=impl
    )
    with reference_paths():
        y, final = net(x, mask=mask)
    got = [torch.cat([h, r], -1), *cs_end, *ms_end]
    want = [y, *state_leaves(final)]
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, atol=1e-12, rtol=0)
    w = [torch.randn(t.shape, generator=gen, dtype=torch.float64) for t in want]
    loss = lambda ts: sum((t * u).sum() for t, u in zip(ts, w, strict=True))  # noqa: E731
    params = [x, *net.parameters()]
    for a, b in zip(
        torch.autograd.grad(loss(got), params), torch.autograd.grad(loss(want), params), strict=True
    ):
        torch.testing.assert_close(a, b, atol=1e-12, rtol=0)
    h2, r2, _, none = nondeterministic_sequence(x, step, cs, net.memory, ms, mask, final=False, impl=impl)
    assert r2 is None and none is None
    torch.testing.assert_close(h2, h, atol=0, rtol=0)
