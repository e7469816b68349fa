"""Every hand-written backward is re-entrant (docs/design.md, "One implementation switch"): a
second backward through the same graph (``retain_graph=True``) gives the first one's gradients
exactly and changes nothing the first one returned."""

from __future__ import annotations

import pytest
import torch

from memrnn.layers.stack_rnn import StackRNN
from memrnn.ops.dispatch import implementation, interpreting, native_available, triton_available
from memrnn.ops.nondeterministic import (
    NondeterministicRun,
    nondeterministic_initial,
    vector_nondeterministic_initial,
)

STACK_MEMORIES = ("superposition", "stratification", "queue", "deque", "tape", "tape_jump")
needs_triton = pytest.mark.skipif(
    not triton_available() or (not torch.cuda.is_available() and not interpreting()),
    reason="needs Triton and a GPU or TRITON_INTERPRET=1",
)
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def _needs_native(impl: str) -> None:
    if impl == "native" and not native_available():
        pytest.skip("memrnn's C++ loops did not build here")


def _two_backwards(loss, inputs):
    """Two ``autograd.grad`` of ``loss`` through the same graph, and a copy of the first taken
    before the second (None for an input the loss does not reach: a learnt initial content
    that the random initial state replaces)."""
    first = torch.autograd.grad(loss, inputs, retain_graph=True, allow_unused=True)
    kept = [None if g is None else g.clone() for g in first]
    again = torch.autograd.grad(loss, inputs, retain_graph=True, allow_unused=True)
    return first, kept, again


def _assert_same(first, kept, again):
    assert any(g is not None for g in kept), "the loss reaches none of the inputs"
    for i, (a, b, c) in enumerate(zip(first, kept, again, strict=True)):
        assert (a is None) == (c is None), f"gradient {i} arrives in one pass only"
        if a is None:
            continue
        # the first result is untouched, the second equals it, bit for bit
        torch.testing.assert_close(a, b, rtol=0, atol=0, msg=lambda m, i=i: f"gradient {i} changed: {m}")
        torch.testing.assert_close(c, b, rtol=0, atol=0, msg=lambda m, i=i: f"gradient {i} differs: {m}")


@pytest.mark.parametrize("impl", ["cpu", "native"])
@pytest.mark.parametrize("controller", ["lstm", "elman"])
@pytest.mark.parametrize("memory", STACK_MEMORIES)
def test_stack_rnn_backward_twice_gives_the_same_gradients(memory, controller, impl):
    """The new user's repro: the stratification stack, the queue and the DeQue's Python paths
    once kept views of the first backward's gradient buffer (a second backward added into it)."""
    _needs_native(impl)
    torch.manual_seed(0)
    args = {"jump": 2} if memory == "tape_jump" else {}
    m = StackRNN(
        2, 3, memory=memory, controller=controller, width=2, depth=3, memory_args=args, dtype=torch.float64
    )
    x = torch.randn(2, 6, 2, dtype=torch.float64, requires_grad=True)
    s0 = m.initial_state(2)
    s0 = type(s0)(*(t + 0.3 * torch.randn_like(t) if t.is_floating_point() else t for t in s0))
    leaves = [t.requires_grad_() for t in s0 if t.is_floating_point()]
    with implementation(impl):
        y, final = m(x, s0)
    loss = y.pow(2).sum() + sum(t.pow(2).sum() for t in final if t.is_floating_point())
    inputs = [x, *leaves, *m.parameters()]
    _assert_same(*_two_backwards(loss, inputs))


# -- the nondeterministic stack's runs: one gradient store shared by their nodes ----------------------
def _run_case(impl: str, vector: bool, dtype=torch.float64, device="cpu"):
    """Leaves of a small run (``B`` 2, ``Q`` = ``S`` = 2, depth 3, 3 steps) from a random start."""
    gen = torch.Generator().manual_seed(3)
    B, Q, S, D, T, m = 2, 2, 2, 3, 3, 2

    def randn(*shape):
        return torch.randn(*shape, generator=gen, dtype=dtype).to(device).requires_grad_()

    gamma0, alpha0 = nondeterministic_initial(B, Q, S, D, dtype=dtype, device=device)
    zeta0 = None
    if vector:
        zeta0, _ = vector_nondeterministic_initial(B, Q, S, m, D, torch.zeros(m, dtype=dtype, device=device))
        zeta0 = zeta0.requires_grad_()
    gamma0, alpha0 = gamma0.requires_grad_(), alpha0.requires_grad_()
    steps = [(randn(B, Q * S, Q * S), randn(B, Q * S, Q * S), randn(B, Q * S, Q)) for _ in range(T)]
    vectors = [randn(B, m) for _ in range(T)] if vector else [None] * T

    def build():
        run = NondeterministicRun(gamma0, alpha0, T, states=Q, zeta=zeta0, impl=impl)
        tops = [run.step(*w, v) if vector else run.step(*w) for w, v in zip(steps, vectors, strict=True)]
        tops = [t[0] for t in tops] if vector else tops
        return run, tops

    starts = [t for t in (gamma0, alpha0, zeta0) if t is not None]
    return build, starts, steps, vectors


@pytest.mark.parametrize("impl", ["native", pytest.param("triton", marks=needs_triton)])
def test_nondeterministic_run_pass_that_stops_early_leaves_nothing_behind(impl):
    """A run's nodes share one gradient store per backward pass.  It was zeroed when a node at
    or above the last one run came: a pass that stopped at step 1 (the gradient of a later step's
    weights only) left step 1's gradients in the store, and a next pass from step 0 added them
    to its own (an error of 6e4 on gradients of 1e-2).  The store is now one per pass, told
    apart by autograd's id of the pass."""
    _needs_native(impl)
    device = DEVICE if impl == "triton" else "cpu"
    dtype = torch.float32 if device == "cuda" else torch.float64
    build, starts, steps, _ = _run_case(impl, vector=False, dtype=dtype, device=device)
    wanted = [*starts, *steps[0]]
    _, fresh = build()
    expected = torch.autograd.grad(fresh[0].exp().pow(2).sum(), wanted, allow_unused=True)
    run, tops = build()
    arrays = run.arrays
    forward_state = [t.clone() for t in (arrays.store, arrays.alphas)]
    torch.autograd.grad(1e6 * tops[2].sum(), [steps[1][0]], retain_graph=True)  # stops at step 1
    got = torch.autograd.grad(tops[0].exp().pow(2).sum(), wanted, retain_graph=True, allow_unused=True)
    for a, b in zip(got, expected, strict=True):
        assert (a is None) == (b is None)
        if a is not None:
            torch.testing.assert_close(a, b, rtol=0, atol=0)
    for a, b in zip((arrays.store, arrays.alphas), forward_state, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0, msg="a backward wrote into the run's forward store")


def test_nondeterministic_run_with_two_final_windows_in_one_pass():
    """Two ``final()`` windows of one run read in one loss: their nodes run in the same pass and
    add into one gradient store (the second used to zero what the first had added)."""
    _needs_native("native")
    build, starts, steps, _ = _run_case("native", vector=False)
    gen = torch.Generator().manual_seed(4)
    w1, w2 = (torch.randn(2, 4, 4, generator=gen, dtype=torch.float64) for _ in range(2))
    wanted = [starts[1], *(w for s in steps for w in s)]

    def grads(twice: bool):
        run, _ = build()
        a1 = run.final()[1]
        a2 = run.final()[1] if twice else a1
        loss = (a1.exp() * w1).sum() + (a2.exp() * w2).sum()
        return torch.autograd.grad(loss, wanted)

    for a, b in zip(grads(True), grads(False), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("vector", [False, True])
@pytest.mark.parametrize("impl", ["native", pytest.param("triton", marks=needs_triton)])
def test_nondeterministic_run_backward_twice(impl, vector):
    """A whole run (plain and vector), every start and step leaf: two passes equal, the first
    unchanged."""
    _needs_native(impl)
    device = DEVICE if impl == "triton" else "cpu"
    dtype = torch.float32 if device == "cuda" else torch.float64
    build, starts, steps, vectors = _run_case(impl, vector, dtype=dtype, device=device)
    run, tops = build()
    outs = [*tops, *run.final()]
    gen = torch.Generator().manual_seed(5)
    loss = sum((o.exp() * torch.randn(o.shape, generator=gen, dtype=dtype).to(device)).sum() for o in outs)
    leaves = [*starts, *(w for s in steps for w in s), *(v for v in vectors if v is not None)]
    _assert_same(*_two_backwards(loss, leaves))
