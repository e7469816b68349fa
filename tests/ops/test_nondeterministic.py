"""DuSell & Chiang's nondeterministic stack (NS-RNN 2020, RNS-RNN 2022, memory-limited 2022,
vector RNS-RNN 2023) on every path: the batched log-space steps against the literal recurrences,
hand-worked runs of a weighted PDA, the window, long sequences, and the log-semiring product they
are built on; the sequence driver; the C++ step and run (``native_step.cpp``) against the torch
step and the layer's reference loop over ``step``; and the run of Triton kernels
(``memrnn/ops/nondeterministic/triton.py``) against the torch step, the reference loop and the C++
run, with masks, a non-fresh initial state and every gradient.  On CPU the kernels run under
Triton's interpreter (``TRITON_INTERPRET=1``, set by ``tests/conftest.py``), so the sizes are
small; ``-m gpu`` runs the compiled kernels at DuSell & Chiang's size.  What the bottom of the
stack is, across paths, is ``tests/ops/test_nondeterministic_bottom.py``."""

from __future__ import annotations

import contextlib

import pytest
import torch

from memrnn.core import MemoryLayer, reference_paths
from memrnn.layers import StackRNN
from memrnn.ops.dispatch import implementation
from memrnn.ops.nondeterministic import (
    LOG_ZERO,
    NondeterministicRun,
    log_matmul,
    nondeterministic_initial,
    nondeterministic_reference,
    nondeterministic_step,
    run_impl,
    vector_nondeterministic_initial,
    vector_nondeterministic_reference,
    vector_nondeterministic_step,
)
from tests.ops.backends import DEVICE, needs_native, needs_triton
from tests.ops.memory_paths import assert_native_equals_cpu


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


# -- the C++ step and run ---------------------------------------------------------------------------
@needs_native
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize(("B", "depth", "Q", "S"), [(3, 1, 1, 1), (2, 2, 2, 3), (17, 5, 2, 3), (3, 4, 3, 2)])
def test_nondeterministic_step_in_cpp_equals_torch(B, depth, Q, S, dtype, gen):
    """DuSell & Chiang's step (``native_step.cpp``, a run of one step) against the torch step it replaces on CPU:
    the new window and forward weights and every gradient, from a state a few steps in (so the
    window holds real runs and log-0 entries), batches that are and are not whole vectors."""
    from memrnn.ops.nondeterministic import nondeterministic_initial, nondeterministic_step

    QS = Q * S

    def weights(scale=1.0):
        return (
            torch.randn(B, QS, QS, generator=gen, dtype=dtype) * scale,
            torch.randn(B, QS, QS, generator=gen, dtype=dtype) * scale,
            torch.randn(B, QS, Q, generator=gen, dtype=dtype) * scale,
        )

    gamma, alpha = nondeterministic_initial(B, Q, S, depth, dtype=dtype)
    for _ in range(depth + 2):
        gamma, alpha = nondeterministic_step(gamma, alpha, *weights(), impl="cpu")
    inputs = [gamma, alpha, *weights(3.0)]
    # below the diagonal (an end before its start) the window is log 0 by definition: the torch
    # step slides whatever it holds there along, the C++ run never reads it; neither is weighed
    upper = torch.ones(depth, depth, dtype=torch.bool).triu()[None, :, :, None, None]
    w_gamma = torch.randn(gamma.shape, generator=gen, dtype=dtype) * upper
    w_alpha = torch.randn(alpha.shape, generator=gen, dtype=dtype)
    results = {}
    for impl in ("cpu", "native"):
        xs = [t.clone().requires_grad_() for t in inputs]
        g2, a2 = nondeterministic_step(*xs, impl=impl)
        ((g2 * w_gamma).sum() + (a2 * w_alpha).sum()).backward()
        grads = [torch.zeros_like(x) if x.grad is None else x.grad for x in xs]
        results[impl] = [g2.detach(), a2.detach(), *grads]
    tol = {"atol": 1e-12, "rtol": 1e-12} if dtype == torch.float64 else {"atol": 2e-5, "rtol": 1e-5}
    for a, b in zip(results["native"], results["cpu"], strict=True):
        torch.testing.assert_close(a, b, **tol)


@needs_native
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize(("B", "depth", "Q", "S", "m"), [(3, 1, 1, 1, 1), (17, 5, 2, 3, 2), (3, 4, 3, 2, 4)])
def test_vector_nondeterministic_step_in_cpp_equals_torch(B, depth, Q, S, m, dtype, gen):
    """The vector RNS-RNN's step (a C++ run of one step with the ζ channels) against the torch
    step, from a state a few steps in: the new windows, η and every gradient."""
    from memrnn.ops.nondeterministic import (
        nondeterministic_initial,
        vector_nondeterministic_initial,
        vector_nondeterministic_step,
    )

    QS = Q * S

    def weights(scale=1.0):
        return (
            torch.randn(B, QS, QS, generator=gen, dtype=dtype) * scale,
            torch.randn(B, QS, QS, generator=gen, dtype=dtype) * scale,
            torch.randn(B, QS, Q, generator=gen, dtype=dtype) * scale,
            torch.nn.functional.logsigmoid(torch.randn(B, m, generator=gen, dtype=dtype) * scale),
        )

    gamma, alpha = nondeterministic_initial(B, Q, S, depth, dtype=dtype)
    zeta, _ = vector_nondeterministic_initial(B, Q, S, m, depth, torch.full((m,), -0.5, dtype=dtype))
    for _ in range(depth + 2):
        gamma, alpha, zeta, _ = vector_nondeterministic_step(gamma, alpha, zeta, *weights(), impl="cpu")
    inputs = [gamma, alpha, zeta, *weights(3.0)]
    upper = torch.ones(depth, depth, dtype=torch.bool).triu()[None, :, :, None, None]
    ws = [torch.randn(gamma.shape, generator=gen, dtype=dtype) * upper,
          torch.randn(alpha.shape, generator=gen, dtype=dtype),
          torch.randn(zeta.shape, generator=gen, dtype=dtype) * upper[..., None],
          torch.randn(B, QS, m, generator=gen, dtype=dtype)]  # fmt: skip
    results = {}
    for impl in ("cpu", "native"):
        xs = [t.clone().requires_grad_() for t in inputs]
        out = vector_nondeterministic_step(*xs, impl=impl)
        sum((o * w).sum() for o, w in zip(out, ws, strict=True)).backward()
        grads = [torch.zeros_like(x) if x.grad is None else x.grad for x in xs]
        results[impl] = [o.detach() for o in out] + grads
    tol = {"atol": 1e-12, "rtol": 1e-12} if dtype == torch.float64 else {"atol": 2e-5, "rtol": 1e-5}
    for a, b in zip(results["native"], results["cpu"], strict=True):
        torch.testing.assert_close(a, b, **tol)


@needs_native
def test_nondeterministic_layer_runs_native_on_cpu(gen):
    """The RNS-RNN layer: outputs and gradients with the C++ step equal those with the torch step."""
    torch.manual_seed(0)
    net = StackRNN(
        3, 6, "nondeterministic", "lstm", depth=4, memory_args={"states": 2, "symbols": 2}
    ).double()
    x = torch.randn(2, 9, 3, generator=gen, dtype=torch.float64)
    w = torch.randn(2, 9, net.output_size, generator=gen, dtype=torch.float64)
    assert_native_equals_cpu(net, x, None, None, w, atol=1e-11, rtol=0)


@needs_native
def test_nondeterministic_layer_under_reference_paths_has_second_derivatives(gen):
    """Under ``reference_paths()`` the whole loop stays on torch's ops: a gradient penalty works
    (the default path's C++ step is first order and refuses it)."""
    for reference, ok in ((True, True), (False, False)):
        torch.manual_seed(0)
        net = StackRNN(3, 5, "nondeterministic", "lstm", depth=3,
                       memory_args={"states": 2, "symbols": 2}).double()  # fmt: skip
        x = torch.randn(2, 5, 3, generator=gen, dtype=torch.float64)
        params = list(net.parameters())
        with reference_paths() if reference else contextlib.nullcontext():
            grads = torch.autograd.grad(net(x)[0].square().sum(), params, create_graph=True)
        penalty = sum(g.square().sum() for g in grads)
        if ok:
            penalty.backward()
        else:
            with pytest.raises(RuntimeError, match="differentiate twice"):
                penalty.backward()


@needs_native
def test_nondeterministic_layer_compiles(gen):
    """Under ``torch.compile`` the nondeterministic step is traced as torch operations (the C++
    op has no fake kernel), and gives the eager numbers."""
    torch.manual_seed(0)
    net = StackRNN(3, 6, "nondeterministic", "lstm", depth=3, memory_args={"states": 2, "symbols": 2})
    x = torch.randn(2, 5, 3, generator=gen)
    compiled = torch.compile(net, backend="eager")
    torch.testing.assert_close(compiled(x)[0], net(x)[0])


@needs_native
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize(
    ("memory", "depth", "args"),
    [
        ("nondeterministic", 3, {}),  # the memory-limited window, shallower than the sequence
        ("nondeterministic", 14, {}),  # deeper than the sequence: start times still log 0 are skipped
        ("nondeterministic", 14, {"normalize_transitions": True, "states_in_reading": False}),  # NS-RNN 2020
        ("vector_nondeterministic", 3, {"vector_size": 2}),  # the vector RNS-RNN (2023), limited
        ("vector_nondeterministic", 14, {"vector_size": 3, "bottom": "one"}),
    ],
)
def test_nondeterministic_run_equals_the_reference_loop(memory, depth, args, dtype, gen):
    """The layer's nondeterministic stack as one run (``NondeterministicRun``: each column written
    once, log-0 start times skipped, rows past their length run on) against the reference loop
    over ``step`` with the torch step (the window masked at every step): outputs, the final
    state, every gradient (input, parameters, a non-fresh initial state), rows of lengths T, 5
    and 0.  Final-state entries that are log 0 are weighed 0."""
    from memrnn.ops.nondeterministic import LOG_ZERO

    torch.manual_seed(5)
    memory_args = {"states": 2, "symbols": 3, **args}
    net = StackRNN(4, 7, memory, "lstm", depth=depth, output="hidden+reading", memory_args=memory_args)
    net = net.to(dtype)
    B, T = 3, 9
    with torch.no_grad():  # a state two steps in: its window holds runs, its gradient is checked
        _, state = MemoryLayer.forward(net, torch.randn(B, 2, 4, generator=gen, dtype=dtype))
    x = torch.randn(B, T, 4, generator=gen, dtype=dtype)
    mask = torch.arange(T)[None] < torch.tensor([T, 5, 0])[:, None]
    w = torch.randn(B, T, net.output_size, generator=gen, dtype=dtype)
    w_state = [torch.randn(t.shape, generator=gen, dtype=dtype) for t in state]
    results = {}
    for impl in ("native", "cpu", "reference"):  # cpu: StackRNN's own loop on the torch step
        xx = x.clone().requires_grad_()
        st = type(state)(*(t.clone().requires_grad_() for t in state))
        net.zero_grad()
        if impl == "reference":
            with implementation("cpu"):
                y, final = MemoryLayer.forward(net, xx, st, mask)
        else:
            with implementation(impl):
                y, final = net(xx, st, mask)
        alive = [t > LOG_ZERO / 2 for t in final]
        loss = (y * w).sum() + sum((t * v * a).sum() for t, v, a in zip(final, w_state, alive, strict=True))
        loss.backward()
        grads = [xx.grad, *(p.grad for p in net.parameters()), *(t.grad for t in st)]
        results[impl] = [y, *(torch.where(a, t, LOG_ZERO) for t, a in zip(final, alive, strict=True)), *grads]
    tol = {"atol": 1e-11, "rtol": 0} if dtype == torch.float64 else {"atol": 2e-5, "rtol": 1e-4}
    for impl in ("native", "cpu"):
        for a, b in zip(results[impl], results["reference"], strict=True):
            torch.testing.assert_close(a, b, **tol)


@needs_native
def test_nondeterministic_run_checks_its_steps_and_refuses_a_second_order(gen):
    """A run takes at most the steps it was made for; a second backward pass (``retain_graph``)
    gives the first one's gradients; its backward is first order."""
    from memrnn.ops.nondeterministic import NondeterministicRun, nondeterministic_initial

    gamma, alpha = nondeterministic_initial(2, 2, 2, 3, dtype=torch.float64)
    run = NondeterministicRun(gamma, alpha, 1, states=2)
    w = [torch.randn(2, 4, n, generator=gen, dtype=torch.float64, requires_grad=True) for n in (4, 4, 2)]
    with pytest.raises(
        ValueError, match=r"a vector run .* takes a pushed vector at every step, a plain run none"
    ):
        run.step(*w, torch.zeros(2, 3, dtype=torch.float64))
    top = run.step(*w)
    with pytest.raises(RuntimeError, match="made for 1 steps"):
        run.step(*w)
    loss = top.square().sum()
    first = torch.autograd.grad(loss, w, retain_graph=True)
    again = torch.autograd.grad(loss, w, retain_graph=True)  # a second pass starts from zero
    for a, b in zip(first, again, strict=True):
        torch.testing.assert_close(a, b, atol=0, rtol=0)
    (g,) = torch.autograd.grad(loss, w[0], create_graph=True)
    with pytest.raises(RuntimeError, match="differentiate twice"):
        g.sum().backward()


@needs_native
def test_nondeterministic_run_is_freed_without_the_cycle_collector(gen):
    """A run's arrays (its store: tens of MB per batch) go with its graph by reference counting
    alone: no run → token → autograd node → run cycle (which leaked 20 GB over one epoch)."""
    import gc
    import weakref

    from memrnn.ops.nondeterministic import NondeterministicRun, nondeterministic_initial

    gamma, alpha = nondeterministic_initial(2, 2, 2, 3, dtype=torch.float64)
    w = [torch.randn(2, 4, n, generator=gen, dtype=torch.float64, requires_grad=True) for n in (4, 4, 2)]
    gc.disable()
    try:
        run = NondeterministicRun(gamma, alpha, 2, states=2)
        loss = run.step(*w).sum() + run.step(*w).sum() + run.final()[0].sum()
        loss.backward()
        arrays = weakref.ref(run.arrays)
        del run, loss
        assert arrays() is None
    finally:
        gc.enable()


# -- the Triton run (under Triton's interpreter on CPU; ``-m gpu``: compiled, at DuSell & Chiang's size)
def _leaf(t: torch.Tensor, device: str) -> torch.Tensor:
    """A fresh leaf copy of ``t`` on ``device`` for one run's gradient.  Never
    ``t.to(device).requires_grad_()``: on ``t``'s own device that is ``t`` itself, so two runs
    share one ``.grad`` (the second backward adds into the tensor the first run's result still
    holds: the runs compared agree by construction, or differ by a factor of 2), and once ``t``
    requires grad, ``t.to("cuda")`` is no leaf and its ``.grad`` stays None.  Both read as a GPU
    bug on an H200 (``benchmarks/results/stack-rnn-h200.md``)."""
    return t.detach().clone().to(device).requires_grad_()


def _weights(B, Q, S, m, dtype, gen, scale=1.0):
    QS = Q * S
    out = [torch.randn(B, QS, QS, generator=gen, dtype=dtype) * scale,
           torch.randn(B, QS, QS, generator=gen, dtype=dtype) * scale,
           torch.randn(B, QS, Q, generator=gen, dtype=dtype) * scale]  # fmt: skip
    if m:
        out.append(torch.nn.functional.logsigmoid(torch.randn(B, m, generator=gen, dtype=dtype) * scale))
    return out


@needs_triton
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize(("B", "depth", "Q", "S", "m"), [(3, 1, 1, 1, 0), (2, 4, 2, 3, 0), (3, 3, 3, 2, 2)])
def test_one_step_equals_the_torch_step(B, depth, Q, S, m, dtype, gen):
    """A Triton run of one step from a state a few steps in (the window holds runs and log-0
    entries) against the torch step: the new window, forward weights (and ζ, η for the vector
    stack) and every gradient; states and symbols from 1 to 3, a window of depth 1."""
    gamma, alpha = nondeterministic_initial(B, Q, S, depth, dtype=dtype)
    zeta = None
    if m:
        zeta, _ = vector_nondeterministic_initial(B, Q, S, m, depth, torch.full((m,), -0.5, dtype=dtype))
    for _ in range(depth + 2):
        if m:
            gamma, alpha, zeta, _ = vector_nondeterministic_step(gamma, alpha, zeta, *_weights(B, Q, S, m, dtype, gen), impl="cpu")  # fmt: skip
        else:
            gamma, alpha = nondeterministic_step(gamma, alpha, *_weights(B, Q, S, m, dtype, gen), impl="cpu")
    inputs = [gamma, alpha, *([zeta] if m else []), *_weights(B, Q, S, m, dtype, gen, 3.0)]
    # below the diagonal (an end before its start) the window is log 0 by definition: the torch
    # step slides whatever it holds there along, the runs never read it; neither is weighed
    upper = torch.ones(depth, depth, dtype=torch.bool).triu()[None, :, :, None, None]
    ws = [torch.randn(gamma.shape, generator=gen, dtype=dtype) * upper,
          torch.randn(alpha.shape, generator=gen, dtype=dtype)]  # fmt: skip
    if m:
        ws += [torch.randn(zeta.shape, generator=gen, dtype=dtype) * upper[..., None],
               torch.randn(B, Q * S, m, generator=gen, dtype=dtype)]  # fmt: skip
    step = vector_nondeterministic_step if m else nondeterministic_step
    results = {}
    for impl in ("cpu", "triton"):
        xs = [_leaf(t, DEVICE if impl == "triton" else "cpu") for t in inputs]
        out = step(*xs, impl=impl)
        sum((o * w.to(o.device)).sum() for o, w in zip(out, ws, strict=True)).backward()
        grads = [torch.zeros_like(x) if x.grad is None else x.grad for x in xs]
        results[impl] = [t.detach().cpu() for t in (*out, *grads)]
    tol = {"atol": 1e-12, "rtol": 1e-12} if dtype == torch.float64 else {"atol": 2e-5, "rtol": 1e-5}
    for a, b in zip(results["triton"], results["cpu"], strict=True):
        torch.testing.assert_close(a, b, **tol)


#: (memory, depth, memory args): windows shallower and deeper than the sequence, plain and vector
LAYER_CASES = [
    ("nondeterministic", 2, {}),  # the memory-limited window: offsets past the depth drop out
    ("nondeterministic", 9, {}),  # deeper than the sequence: start times still log 0 are skipped
    ("vector_nondeterministic", 2, {"vector_size": 2}),  # the vector RNS-RNN (2023), limited
    ("vector_nondeterministic", 9, {"vector_size": 3, "bottom": "one"}),
    # DuSell & Chiang's 2020/2022 bottom symbol: no start time −1, no bottom vector
    ("vector_nondeterministic", 2, {"vector_size": 2, "bottom": None, "bottom_symbol": "original"}),
]


@needs_triton
@pytest.mark.parametrize(("memory", "depth", "args", "dtype"), [
    (*case, dtype) for case, dtype in zip(LAYER_CASES, [torch.float64, torch.float32] * 3, strict=False)
])  # fmt: skip
def test_the_layer_on_the_triton_run_equals_the_reference_loop(memory, depth, args, dtype, gen):
    """The layer's stack as one Triton run (each column written once, log-0 start times skipped,
    rows past their length run on) against the reference loop over ``step`` with the torch step
    and against the C++ run: outputs, the final state, every gradient (input, parameters, a
    non-fresh initial state), rows of lengths T, 4 and 0.  Final-state entries that are log 0 are
    weighed 0."""
    torch.manual_seed(5)
    net = StackRNN(3, 5, memory, "lstm", depth=depth, output="hidden+reading",
                   memory_args={"states": 2, "symbols": 2, **args}).to(dtype)  # fmt: skip
    B, T = 3, 6
    with torch.no_grad():  # a state two steps in: its window holds runs, its gradient is checked
        _, state = MemoryLayer.forward(net, torch.randn(B, 2, 3, generator=gen, dtype=dtype))
    x = torch.randn(B, T, 3, generator=gen, dtype=dtype)
    mask = torch.arange(T)[None] < torch.tensor([T, 4, 0])[:, None]
    w = torch.randn(B, T, net.output_size, generator=gen, dtype=dtype)
    w_state = [torch.randn(t.shape, generator=gen, dtype=dtype) for t in state]
    results = {}
    for impl in ("triton", "native", "reference"):
        device = DEVICE if impl == "triton" else "cpu"
        net = net.to(device)
        xx = _leaf(x, device)
        st = type(state)(*(_leaf(t, device) for t in state))
        net.zero_grad()
        if impl == "reference":
            with implementation("cpu"):
                y, final = MemoryLayer.forward(net, xx, st, mask)
        else:
            with implementation(impl):
                y, final = net(xx, st, mask.to(device))
        alive = [t > LOG_ZERO / 2 for t in final]
        loss = (y * w.to(device)).sum()
        loss = loss + sum((t * v.to(device) * a).sum() for t, v, a in zip(final, w_state, alive, strict=True))
        loss.backward()
        grads = [xx.grad, *(p.grad for p in net.parameters()), *(t.grad for t in st)]
        finals = [torch.where(a, t, LOG_ZERO) for t, a in zip(final, alive, strict=True)]
        results[impl] = [None if t is None else t.detach().cpu() for t in (y, *finals, *grads)]
    tol = {"atol": 1e-11, "rtol": 0} if dtype == torch.float64 else {"atol": 2e-5, "rtol": 1e-4}
    for impl in ("triton", "native"):
        for a, b in zip(results[impl], results["reference"], strict=True):
            torch.testing.assert_close(a, b, **tol)


@needs_triton
@pytest.mark.parametrize("tile", [16, 2**16])
def test_the_loops_over_offsets_give_the_same_run_whatever_offsets_they_take_at_once(tile, monkeypatch, gen):
    """The kernels' loops over start offsets take as many offsets per iteration as fit a tile
    (``TILE``): with one offset per iteration (many iterations) and with every offset in one
    iteration, the layer's outputs and gradients equal the C++ run's (depth 9, 8 steps, the
    vector stack)."""
    from memrnn.ops.nondeterministic import triton as kernels

    monkeypatch.setattr(kernels, "TILE", tile)
    kernels.launch_options.cache_clear()
    try:
        opts = kernels.launch_options(3, 4, 2)
        per = (opts["pop_fwd"]["KB"], opts["alpha"]["OB"], opts["pop_bwd"]["OB"])
        assert per == ((1, 1, 1) if tile == 16 else (512, 1024, 512))
        torch.manual_seed(0)
        net = StackRNN(3, 5, "vector_nondeterministic", "lstm", depth=9,
                       memory_args={"states": 2, "symbols": 2, "vector_size": 2}).double()  # fmt: skip
        x = torch.randn(2, 8, 3, generator=gen, dtype=torch.float64)
        results = {}
        for impl in ("native", "triton"):
            device = DEVICE if impl == "triton" else "cpu"
            net = net.to(device)
            net.zero_grad()
            xx = _leaf(x, device)
            with implementation(impl):
                y, _ = net(xx)
            y.square().sum().backward()
            results[impl] = [t.detach().cpu() for t in (y, xx.grad, *(p.grad for p in net.parameters()))]
        for a, b in zip(results["triton"], results["native"], strict=True):
            torch.testing.assert_close(a, b, atol=1e-11, rtol=0)
    finally:
        kernels.launch_options.cache_clear()


@needs_triton
def test_inference_keeps_one_step_of_arrays_and_gives_the_same_numbers(gen):
    """Under ``torch.no_grad`` a Triton run keeps one step's arrays (not every step's) and gives
    the C++ run's outputs and final state, padded rows included."""
    torch.manual_seed(0)
    net = StackRNN(3, 5, "vector_nondeterministic", "lstm", depth=3,
                   memory_args={"states": 2, "symbols": 2, "vector_size": 2}).double()  # fmt: skip
    x = torch.randn(2, 5, 3, generator=gen, dtype=torch.float64)
    mask = torch.arange(5)[None] < torch.tensor([5, 2])[:, None]
    results = {}
    for impl in ("native", "triton"):
        device = DEVICE if impl == "triton" else "cpu"
        net = net.to(device)
        with torch.no_grad(), implementation(impl):
            y, state = net(x.to(device), mask=mask.to(device))
        results[impl] = [t.cpu() for t in (y, *state)]
    for a, b in zip(results["triton"], results["native"], strict=True):
        torch.testing.assert_close(a, b, atol=1e-12, rtol=0)
    gamma, alpha = nondeterministic_initial(2, 2, 2, 3, dtype=torch.float64, device=DEVICE)
    with torch.no_grad():
        run = NondeterministicRun(gamma, alpha, 4, states=2, impl="triton")
    assert run.arrays.buffers[2].shape[0] == 1  # colR: one step's


@needs_triton
def test_the_dispatch_and_what_a_run_refuses(gen):
    """``run_impl`` sends float32/float64 to the Triton run when Triton is forced (or on CUDA),
    half precision to the torch step; a run asked for where neither run can go says so."""
    x = torch.zeros(2, 3, dtype=torch.float64, device=DEVICE)
    with implementation("triton"):
        assert run_impl(x) == "triton"
        assert run_impl(x.float()) == "triton"
        assert run_impl(x.bfloat16()) == "cpu"  # log weights in bfloat16 would not stay exact
    gamma, alpha = nondeterministic_initial(2, 2, 2, 3, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"runs in C\+\+ .* or in Triton .*: use nondeterministic_step"):
        NondeterministicRun(gamma, alpha, 1, states=2, impl="cpu")
    with pytest.raises(ValueError, match="unknown implementation 'cuda'"):
        NondeterministicRun(gamma, alpha, 1, states=2, impl="cuda")


@needs_triton
def test_cuda_takes_the_triton_run_and_only_the_one_switch_moves_it():
    """CUDA tensors of the stack's dtypes go to the Triton run, others to the torch step; no module
    flag (``TRITON_RUN_BY_DEFAULT`` is gone): only ``implementation(...)``, ``impl=`` and
    ``reference_paths()`` choose (fake CUDA tensors: no GPU needed)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from memrnn.core import reference_paths
    from memrnn.ops import nondeterministic

    with FakeTensorMode():
        x = torch.empty(2, 3, device="cuda", dtype=torch.float64)
    assert not hasattr(nondeterministic, "TRITON_RUN_BY_DEFAULT")
    assert run_impl(x) == "triton" and run_impl(x.float()) == "triton" and run_impl(x.half()) == "cpu"
    assert run_impl(x, "cpu") == "cpu"
    with implementation("cpu"):
        assert run_impl(x) == "cpu"
    with reference_paths():
        assert run_impl(x) == "reference"


@needs_triton
def test_a_triton_run_checks_its_steps_and_restarts_a_second_backward_pass(gen):
    """As the C++ run: at most the steps it was made for; a second backward pass
    (``retain_graph``) gives the first one's gradients; first order only."""
    gamma, alpha = nondeterministic_initial(2, 2, 2, 3, dtype=torch.float64, device=DEVICE)
    run = NondeterministicRun(gamma, alpha, 2, states=2, impl="triton")
    w = [
        torch.randn(2, 4, n, generator=gen, dtype=torch.float64).to(DEVICE).requires_grad_()
        for n in (4, 4, 2)
    ]
    loss = run.step(*w).square().sum() + run.step(*w).square().sum()
    with pytest.raises(RuntimeError, match="made for 2 steps"):
        run.step(*w)
    first = torch.autograd.grad(loss, w, retain_graph=True)
    again = torch.autograd.grad(loss, w, retain_graph=True)
    for a, b in zip(first, again, strict=True):
        torch.testing.assert_close(a, b, atol=0, rtol=0)
    (g,) = torch.autograd.grad(loss, w[0], create_graph=True)
    with pytest.raises(RuntimeError, match="differentiate twice"):
        g.sum().backward()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("impl", ["triton", "cpu"])  # the Triton run (CUDA's default), the torch step
@pytest.mark.parametrize(
    ("memory", "args"), [("nondeterministic", {}), ("vector_nondeterministic", {"vector_size": 5})]
)
def test_the_compiled_kernels_equal_the_cpp_run_at_the_papers_size(memory, args, impl, gen):
    """On a GPU, at DuSell & Chiang's size (20-unit LSTM controller, 2 states × 3 symbols, the
    unlimited stack of depth 104, batch 10, T 80; ragged lengths), in float64: the compiled
    kernels (``impl="triton"``, CUDA's default) and the torch step on CUDA (``impl="cpu"``)
    against the C++ run on CPU, outputs and every gradient (a gradient that never arrives fails
    as such)."""
    torch.manual_seed(0)
    net = StackRNN(3, 20, memory, "lstm", depth=104, memory_args={"states": 2, "symbols": 3, **args}).double()
    B, T = 10, 80
    x = torch.randn(B, T, 3, generator=gen, dtype=torch.float64)
    mask = torch.arange(T)[None] < torch.randint(40, T + 1, (B,), generator=gen)[:, None]
    results = []
    for device in ("cpu", "cuda"):
        net = net.to(device)
        xx = _leaf(x, device)
        net.zero_grad()
        with implementation(impl) if device == "cuda" else contextlib.nullcontext():
            y, _ = net(xx, mask=mask.to(device))
        y.square().sum().backward()
        named = [("x", xx.grad), *((n, p.grad) for n, p in net.named_parameters())]
        assert not [n for n, g in named if g is None], f"no gradient on {device}"
        results.append([t.detach().cpu() for t in (y, *(g for _, g in named))])
    for a, b in zip(*results, strict=True):
        torch.testing.assert_close(a, b, atol=1e-9, rtol=1e-9)
