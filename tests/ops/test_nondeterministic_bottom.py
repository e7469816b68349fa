"""The nondeterministic stack's bottom symbol, both of DuSell & Chiang's behaviours
(``bottom_symbol``): ``"fixed"`` (their 2023 code, memrnn's default: a pop can uncover the bottom)
and ``"original"`` (the code of the published NS-RNN, CoNLL 2020, and RNS-RNN, ICLR 2022, numbers:
``nsrnn/models/nondeterministic_stack.py`` at tags ``conll2020``/``iclr2022``, kept as
``OldNondeterministicStack`` in the 2023 code: once a symbol is pushed the bottom is never on top
again).  Hand-worked runs, a transcription of the authors' stack updates compared number for number,
and every path (the literal reference, the torch step, the C++ run, the Triton run under the
interpreter, the layer) against the reference for both behaviours, with gradients."""

from __future__ import annotations

import pytest
import torch

from memrnn.core import MemoryLayer
from memrnn.layers import StackRNN
from memrnn.layers.memories import NondeterministicStack, VectorNondeterministicStack
from memrnn.ops.dispatch import implementation, interpreting, triton_available
from memrnn.ops.native import load
from memrnn.ops.nondeterministic import (
    LOG_ZERO,
    NondeterministicRun,
    nondeterministic_initial,
    nondeterministic_reference,
    nondeterministic_step,
    vector_nondeterministic_initial,
    vector_nondeterministic_reference,
    vector_nondeterministic_step,
)

BEHAVIOURS = ("fixed", "original")
needs_native = pytest.mark.skipif(load() is None, reason="memrnn's C++ ops did not build")
needs_triton = pytest.mark.skipif(
    not triton_available() or (not torch.cuda.is_available() and not interpreting()),
    reason="needs Triton (pip install triton) and a GPU or TRITON_INTERPRET=1",
)
F64 = {"atol": 1e-12, "rtol": 1e-12}
F32 = {"atol": 2e-5, "rtol": 1e-4}


# -- the authors' stack update, transcribed ---------------------------------------------------------
def log_einsum(equation: str, *xs: torch.Tensor) -> torch.Tensor:
    """``torch_semiring_einsum``'s log-semiring einsum, by brute force: every operand broadcast to
    all indices, added, the indices not in the output log-sum-exp'd."""
    ins, out = equation.split("->")
    specs = ins.split(",")
    letters = sorted(set("".join(specs)))
    total = 0
    for spec, x in zip(specs, xs, strict=True):
        order = [c for c in letters if c in spec]
        y = x.permute([spec.index(c) for c in order])
        total = total + y.reshape([y.shape[order.index(c)] if c in spec else 1 for c in letters])
    gone = [k for k, c in enumerate(letters) if c not in out]
    total = torch.logsumexp(total, gone) if gone else total
    kept = [c for c in letters if c in out]
    return total.permute([kept.index(c) for c in out])


def authors_stack(push, repl, pop, vectors=None, bottom=None, *, fixed: bool):
    """DuSell & Chiang's stack WFA as their code updates it, transcribed: ``fixed=False`` is
    ``NondeterministicStack.update`` at ``iclr2022`` (``nsrnn/models/nondeterministic_stack.py``;
    ``OldNondeterministicStack``/``OldVectorNondeterministicStack`` in the 2023 code), ``fixed=True``
    the 2023 ``NondeterministicStack``/``VectorNondeterministicStack`` (one more start time, −1, and
    ``γ[−1 → 0]``).  Their layout: ``gamma[:, i + o, j − 1 + o] = log γ[i → j]``,
    ``alpha[:, j + o] = log α[j]`` (``o`` 1 when fixed, else 0), in the log semiring; their einsum equations.

    Log weights ``push, repl [B, T, Q, S, Q, S]``, ``pop [B, T, Q, S, Q]``, ``vectors [B, T, m]``,
    ``bottom [m]`` -> ``(log α [B, T, Q, S]`` of steps 1..T, readings ``[B, T, Q, S, m]`` or None)."""
    B, T, Q, S = push.shape[:4]
    o, n = int(fixed), T + 1
    ninf = float("-inf")
    alpha = push.new_full((B, n + 1 + o, Q, S), ninf)
    gamma = push.new_full((B, n + o, n + o, Q, S, Q, S), ninf)
    alpha[:, : 1 + o, 0, 0] = 0.0  # α[0] (and α[−1])
    zeta = None
    if vectors is not None:
        zeta = push.new_full((B, n + o, n + o, Q, S, Q, S, vectors.shape[-1]), ninf)
    if fixed:
        gamma[:, 0, 0, 0, 0, 0, 0] = 0.0  # γ[−1 → 0]
        if zeta is not None:
            zeta[:, 0, 0, 0, 0, 0, 0] = bottom
    alphas, readings = [], []
    for j in range(1, T + 1):
        P, R, O = push[:, j - 1], repl[:, j - 1], pop[:, j - 1]
        rows = j + o  # start times i = −o .. j − 1
        empty = push.new_empty(B, 0, Q, S, Q, S)
        repl_t = (
            log_einsum("biqxsz,bszry->biqxry", gamma[:, : rows - 1, j - 2 + o], R) if rows >= 2 else empty
        )
        pop_t = empty
        if rows >= 3:
            pop_t = log_einsum(
                "bikqxty,bktysz,bszr->biqxry",
                gamma[:, : rows - 2, : rows - 2],
                gamma[:, 1 : rows - 1, j - 2 + o],
                O,
            )
        col = torch.cat([torch.logaddexp(repl_t[:, :-1], pop_t), repl_t[:, -1:], P[:, None]], 1)
        gamma[:, :rows, j - 1 + o] = col
        alpha[:, j + o] = log_einsum("biqx,biqxry->bry", alpha[:, :rows], col)
        alphas.append(alpha[:, j + o])
        if zeta is not None:
            m = zeta.shape[-1]
            zempty = push.new_empty(B, 0, Q, S, Q, S, m)
            zrepl = zempty
            if rows >= 2:
                zrepl = log_einsum("biqxszm,bszry->biqxrym", zeta[:, : rows - 1, j - 2 + o], R)
            zpop = zempty
            if rows >= 3:
                zpop = log_einsum(
                    "bikqxtym,bktysz,bszr->biqxrym",
                    zeta[:, : rows - 2, : rows - 2],
                    gamma[:, 1 : rows - 1, j - 2 + o],
                    O,
                )
            zpush = P[..., None] + vectors[:, j - 1, None, None, None, None, :]
            zcol = torch.cat([torch.logaddexp(zrepl[:, :-1], zpop), zrepl[:, -1:], zpush[:, None]], 1)
            zeta[:, :rows, j - 1 + o] = zcol
            eta = log_einsum("biqx,biqxrym->brym", alpha[:, :rows], zcol)
            denom = torch.logsumexp(alpha[:, j + o].reshape(B, -1), -1)
            readings.append(torch.exp(eta - denom[:, None, None, None]))
    return torch.stack(alphas, 1), (torch.stack(readings, 1) if zeta is not None else None)


def random_weights(B, T, Q, S, m, dtype, gen, scale=1.0):
    shape = (B, T, Q, S)
    push = scale * torch.randn(*shape, Q, S, generator=gen, dtype=dtype)
    repl = scale * torch.randn(*shape, Q, S, generator=gen, dtype=dtype)
    pop = scale * torch.randn(*shape, Q, generator=gen, dtype=dtype)
    vectors = torch.nn.functional.logsigmoid(torch.randn(B, T, m, generator=gen, dtype=dtype)) if m else None
    return push, repl, pop, vectors


def normalised(log_alpha: torch.Tensor) -> torch.Tensor:
    """``log α [B, T, Q, S]`` normalised per step, as memrnn stores it: ``[B, T, QS]``."""
    return log_alpha.flatten(2).log_softmax(-1)


@pytest.mark.parametrize("vector", [False, True])
@pytest.mark.parametrize("behaviour", BEHAVIOURS)
def test_the_reference_is_the_authors_stack_number_for_number(behaviour, vector, gen):
    """memrnn's literal reference against the transcription of the authors' update (2022 for
    ``"original"``, 2023 for ``"fixed"``): 5 steps, 2 states, 2 symbols, 2 rows, float64, the
    forward weights unnormalised and the vector stack's readings; the NS-RNN's and RNS-RNN's
    readings (softmax over symbols or over (state, symbol)) from memrnn's layer."""
    B, T, Q, S, m = 2, 5, 2, 2, 2
    push, repl, pop, vectors = random_weights(B, T, Q, S, m if vector else 0, torch.float64, gen)
    bottom = torch.tensor([-0.3, -1.2], dtype=torch.float64) if vector and behaviour == "fixed" else None
    theirs, their_readings = authors_stack(push, repl, pop, vectors, bottom, fixed=behaviour == "fixed")
    if vector:
        ours, our_readings = vector_nondeterministic_reference(
            push, repl, pop, vectors, bottom, bottom_symbol=behaviour
        )
        torch.testing.assert_close(our_readings, their_readings, **F64)
    else:
        ours = nondeterministic_reference(push, repl, pop, bottom_symbol=behaviour)
    torch.testing.assert_close(ours, theirs, **F64)
    for states_in_reading in (False, True):  # NS-RNN, RNS-RNN
        mem = NondeterministicStack(4, states=Q, symbols=S, states_in_reading=states_in_reading)
        # their reading: the softmax over (state, symbol), or over symbols of the sum over states
        expected = (theirs.flatten(2) if states_in_reading else torch.logsumexp(theirs, 2)).softmax(-1)
        got = torch.stack([mem.reading(ours.flatten(2)[:, t]) for t in range(T)], 1)
        torch.testing.assert_close(got, expected, **F64)


def test_the_two_behaviours_differ_as_the_authors_stacks_do(gen):
    """On the same weights the 2022 and 2023 stacks (transcribed) differ, and memrnn's two
    behaviours differ the same way (a test that cannot pass by both being one stack)."""
    push, repl, pop, _ = random_weights(1, 4, 2, 2, 0, torch.float64, gen)
    old = authors_stack(push, repl, pop, fixed=False)[0]
    new = authors_stack(push, repl, pop, fixed=True)[0]
    assert (normalised(old) - normalised(new)).abs().max() > 1e-3
    run = {}
    for behaviour in BEHAVIOURS:
        gamma, alpha = nondeterministic_initial(1, 2, 2, 4, dtype=torch.float64, bottom_symbol=behaviour)
        tops = []
        for t in range(4):
            gamma, alpha = nondeterministic_step(gamma, alpha, *flat(push, repl, pop, t), impl="cpu")
            tops.append(alpha[:, -1])
        run[behaviour] = torch.stack(tops, 1)
    torch.testing.assert_close(run["original"], normalised(old), **F64)
    torch.testing.assert_close(run["fixed"], normalised(new), **F64)


# -- hand-worked runs -----------------------------------------------------------------------------
def one_state_moves(T: int, S: int):
    """Log weights of a one-state PDA that does nothing (log 0 everywhere) until set."""
    push = torch.full((1, T, 1, S, 1, S), LOG_ZERO, dtype=torch.float64)
    return push, push.clone(), torch.full((1, T, 1, S, 1), LOG_ZERO, dtype=torch.float64)


def flat(push, repl, pop, t, vectors=None):
    """Step ``t``'s weights in the step's layout ``[B, QS, QS]``, ``[B, QS, Q]`` (and ``[B, m]``)."""
    B, _, Q, S = push.shape[:4]
    out = (
        push[:, t].reshape(B, Q * S, Q * S),
        repl[:, t].reshape(B, Q * S, Q * S),
        pop[:, t].reshape(B, Q * S, Q),
    )
    return out if vectors is None else (*out, vectors[:, t])


PATHS = [
    "reference",
    "cpu",
    pytest.param("native", marks=needs_native),
    pytest.param("triton", marks=needs_triton),
]


def readings_on(path, push, repl, pop, behaviour, depth=None, vectors=None, bottom=None):
    """Per-step readings over (state, symbol) ``[B, T, QS]`` (the vector stack's ``[B, T, QS, m]``)
    of ``path``: the literal reference, the torch step (``"cpu"``), the C++ or the Triton run."""
    B, T, Q, S = push.shape[:4]
    D = T if depth is None else depth
    if path == "reference":
        if vectors is not None:
            _, reading = vector_nondeterministic_reference(push, repl, pop, vectors, bottom, depth, behaviour)
            return reading.flatten(2, 3)
        return normalised(nondeterministic_reference(push, repl, pop, depth, behaviour)).exp()
    place = {"device": push.device, "dtype": push.dtype}
    gamma, alpha = nondeterministic_initial(B, Q, S, D, bottom_symbol=behaviour, **place)
    zeta = None
    if vectors is not None:
        zeta, _ = vector_nondeterministic_initial(
            B, Q, S, vectors.shape[-1], D, bottom, bottom_symbol=behaviour, **place
        )
    out = []
    if path == "cpu":
        for t in range(T):
            if vectors is None:
                gamma, alpha = nondeterministic_step(gamma, alpha, *flat(push, repl, pop, t), impl="cpu")
                out.append(alpha[:, -1].exp())
            else:
                gamma, alpha, zeta, eta = vector_nondeterministic_step(
                    gamma, alpha, zeta, *flat(push, repl, pop, t, vectors), impl="cpu"
                )
                out.append(eta.exp())
        return torch.stack(out, 1)
    run = NondeterministicRun(gamma, alpha, T, states=Q, zeta=zeta, impl=path)
    for t in range(T):
        step = run.step(*flat(push, repl, pop, t, vectors))
        out.append(step.exp() if vectors is None else step[1].exp())
    return torch.stack(out, 1)


@pytest.mark.parametrize("path", PATHS)
def test_after_a_push_a_pop_never_uncovers_the_bottom_with_the_original_behaviour(path):
    """One state, symbols ⊥ (0) and a (1).  Step 1 pushes a (weight 1); step 2 pops it or
    replaces a by a (weight 1 each).  Fixed: the pop uncovers ⊥, the reading is ⊥ : a = 1 : 1.
    Original (the 2022 code): no run pops down to ⊥, the reading is a alone.  Step 3 pops a or
    pushes a on anything (weight 1 each): fixed, the run with ⊥ on top pushes, the one with a on
    top pops down to ⊥ again or pushes: ⊥ : a = 1 : 2; original, the a that sits on the bottom
    cannot be popped: a alone."""
    push, repl, pop = one_state_moves(3, 2)
    push[0, 0, 0, 0, 0, 1] = 0.0  # step 1: ⊥ -> push a
    pop[0, 1, 0, 1, 0] = 0.0  # step 2: a -> pop
    repl[0, 1, 0, 1, 0, 1] = 0.0  # step 2: a -> a
    pop[0, 2, 0, 1, 0] = 0.0  # step 3: a -> pop
    push[0, 2, 0, :, 0, 1] = 0.0  # step 3: push a on anything
    got = {b: readings_on(path, push, repl, pop, b)[0] for b in BEHAVIOURS}
    expected = {
        "fixed": torch.tensor([[0, 1], [0.5, 0.5], [1 / 3, 2 / 3]], dtype=torch.float64),
        "original": torch.tensor([[0, 1], [0, 1], [0, 1]], dtype=torch.float64),
    }
    for b in BEHAVIOURS:
        torch.testing.assert_close(got[b], expected[b], atol=1e-12, rtol=0, msg=b)


@pytest.mark.parametrize("path", PATHS)
def test_the_original_first_step_cannot_replace_the_bottom(path):
    """Step 1 replaces ⊥ by a (weight 1) or pushes b (weight 1): the 2023 code's fake push of ⊥
    lets the replace act on it (a : b = 1 : 1); the 2022 code's stack starts from α[0] alone,
    whose only step-1 runs are pushes (b alone)."""
    push, repl, pop = one_state_moves(1, 3)
    repl[0, 0, 0, 0, 0, 1] = 0.0
    push[0, 0, 0, 0, 0, 2] = 0.0
    fixed = readings_on(path, push, repl, pop, "fixed")[0, 0]
    original = readings_on(path, push, repl, pop, "original")[0, 0]
    torch.testing.assert_close(fixed, torch.tensor([0, 0.5, 0.5], dtype=torch.float64), atol=1e-12, rtol=0)
    torch.testing.assert_close(original, torch.tensor([0, 0, 1.0], dtype=torch.float64), atol=1e-12, rtol=0)


def test_push_then_pop_leaves_no_run_with_the_original_behaviour():
    """``docs/parity.md``'s case through the layer (``NondeterministicStack.update``): step 1
    pushes a on ⊥, step 2 only pops (every other transition log 0).  Fixed: ⊥ is on top again.
    Original: no run survives (the literal reference's forward weights are all exactly 0); the
    layer's reading is then that of the runs of the log-0 transitions' finite weights, exactly
    as the 2022 code's (transcribed) with the same weights: never a popped-down bottom."""
    push, repl, pop = one_state_moves(2, 2)
    push[0, 0, 0, 0, 0, 1] = 0.0  # step 1: ⊥ -> push a
    pop[0, 1, 0, 1, 0] = 0.0  # step 2: a -> pop
    ref = nondeterministic_reference(push, repl, pop, bottom_symbol="original")
    assert bool((ref[0, 1] == float("-inf")).all())  # the 2022 stack: no run survives push, pop
    assert float(nondeterministic_reference(push, repl, pop)[0, 1, 0, 0]) == 0.0  # fixed: ⊥, weight 1
    theirs = authors_stack(push, repl, pop, fixed=False)[0][0, 1].flatten()  # log 0 is −1e4 there
    readings = {}
    for b in BEHAVIOURS:
        mem = NondeterministicStack(4, states=1, symbols=2, depth=8, bottom_symbol=b, dtype=torch.float64)
        state = mem.initial_state(1, device=None, dtype=torch.float64)
        for t in range(2):
            state, _ = mem.update(state, flat(push, repl, pop, t))
        readings[b] = mem.read(state)[0]
    torch.testing.assert_close(
        readings["fixed"], torch.tensor([1.0, 0.0], dtype=torch.float64), atol=1e-12, rtol=0
    )
    torch.testing.assert_close(readings["original"], theirs.softmax(-1), **F64)


# -- every path against the reference, both behaviours -------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("vector", [False, True])
@pytest.mark.parametrize("depth", [None, 2])
@pytest.mark.parametrize("behaviour", BEHAVIOURS)
@pytest.mark.parametrize("path", ["cpu", pytest.param("native", marks=needs_native)])
def test_the_step_and_the_cpp_run_equal_the_reference(path, behaviour, depth, vector, dtype, gen):
    """The torch step and the C++ run (float64 tight, float32 loose) against the literal
    reference: readings and the gradients of every transition weight and pushed vector, both
    behaviours, the unlimited stack and the memory-limited window (depth 2)."""
    B, T, Q, S, m = 2, 5, 2, 2, 2
    push, repl, pop, vectors = random_weights(B, T, Q, S, m if vector else 0, dtype, gen)
    bottom = torch.tensor([-0.4, -0.9], dtype=dtype) if vector and behaviour == "fixed" else None
    leaves = [t.clone().requires_grad_() for t in (push, repl, pop, *([vectors] if vector else []))]
    ref_leaves = [t.detach().clone().requires_grad_() for t in leaves]
    got = readings_on(path, *leaves[:3], behaviour, depth, *leaves[3:], bottom)
    ref = readings_on("reference", *ref_leaves[:3], behaviour, depth, *ref_leaves[3:], bottom)
    tol = F64 if dtype == torch.float64 else F32
    torch.testing.assert_close(got, ref, **tol)
    w = torch.randn(got.shape, generator=gen, dtype=dtype)
    g = torch.autograd.grad((got * w).sum(), leaves, materialize_grads=True)
    g_ref = torch.autograd.grad((ref * w).sum(), ref_leaves, materialize_grads=True)
    for a, b in zip(g, g_ref, strict=True):
        torch.testing.assert_close(a, b, **tol)


@needs_triton
@pytest.mark.parametrize(
    ("vector", "depth", "dtype"), [(False, 2, torch.float64), (True, None, torch.float32)]
)
def test_the_triton_run_equals_the_reference_with_the_original_behaviour(vector, depth, dtype, gen):
    """The Triton run (under the interpreter on CPU: tiny) against the literal reference with
    ``bottom_symbol="original"``: readings and every gradient, plain and vector, window and
    unlimited."""
    B, T, Q, S, m = 2, 4, 2, 2, 2
    push, repl, pop, vectors = random_weights(B, T, Q, S, m if vector else 0, dtype, gen)
    leaves = [t.clone().requires_grad_() for t in (push, repl, pop, *([vectors] if vector else []))]
    ref_leaves = [t.detach().clone().requires_grad_() for t in leaves]
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dev_leaves = [t.detach().clone().to(device).requires_grad_() for t in leaves]
    with implementation("triton"):
        got = readings_on("triton", *dev_leaves[:3], "original", depth, *dev_leaves[3:])
    ref = readings_on("reference", *ref_leaves[:3], "original", depth, *ref_leaves[3:])
    tol = F64 if dtype == torch.float64 else F32
    torch.testing.assert_close(got.cpu(), ref, **tol)
    w = torch.randn(got.shape, generator=gen, dtype=dtype)
    g = torch.autograd.grad((got * w.to(device)).sum(), dev_leaves, materialize_grads=True)
    g_ref = torch.autograd.grad((ref * w).sum(), ref_leaves, materialize_grads=True)
    for a, b in zip(g, g_ref, strict=True):
        torch.testing.assert_close(a.cpu(), b, **tol)


LAYER_ARGS = {
    "nondeterministic": {"states": 2, "symbols": 2},
    "vector_nondeterministic": {"states": 2, "symbols": 2, "vector_size": 2},
}


@needs_native
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("memory", list(LAYER_ARGS))
def test_the_layer_with_the_original_behaviour_on_the_cpp_run_equals_its_reference_loop(memory, dtype, gen):
    """``StackRNN(memory_args={"bottom_symbol": "original"})``: the C++ run (what CPU users run)
    against the reference loop over ``step`` (the torch step): outputs, the final state and the
    gradients of the input and every parameter, rows of lengths T, 3 and 0 (padded); the
    vector RNS-RNN has no bottom vector (no parameter ``bottom``)."""
    torch.manual_seed(7)
    net = StackRNN(3, 5, memory, "lstm", depth=4, output="hidden+reading",
                   memory_args={**LAYER_ARGS[memory], "bottom_symbol": "original"}).to(dtype)  # fmt: skip
    assert "memory.bottom" not in dict(net.named_parameters())
    B, T = 3, 6
    x = torch.randn(B, T, 3, generator=gen, dtype=dtype)
    mask = torch.arange(T)[None] < torch.tensor([T, 3, 0])[:, None]
    w = torch.randn(B, T, net.output_size, generator=gen, dtype=dtype)
    results = {}
    for impl in ("native", "reference"):
        xx = x.clone().requires_grad_()
        net.zero_grad()
        if impl == "reference":
            with implementation("cpu"):
                y, final = MemoryLayer.forward(net, xx, None, mask)
        else:
            y, final = net(xx, None, mask)
        alive = [t > LOG_ZERO / 2 for t in final]
        w_state = [
            torch.randn(t.shape, generator=torch.Generator().manual_seed(9), dtype=dtype) for t in final
        ]
        loss = (y * w).sum() + sum((t * v * a).sum() for t, v, a in zip(final, w_state, alive, strict=True))
        loss.backward()
        finals = [torch.where(a, t, LOG_ZERO) for t, a in zip(final, alive, strict=True)]
        results[impl] = [t.detach() for t in (y, *finals, xx.grad, *(p.grad for p in net.parameters()))]
    tol = {"atol": 1e-11, "rtol": 0} if dtype == torch.float64 else {"atol": 2e-5, "rtol": 1e-4}
    for a, b in zip(results["native"], results["reference"], strict=True):
        torch.testing.assert_close(a, b, **tol)


@needs_native
@pytest.mark.parametrize("vector", [False, True])
def test_a_run_from_the_original_start_backward_twice(vector, gen):
    """The C++ run from the original start: a second backward pass through the same graph gives
    the first one's gradients exactly (the run's re-entrant backward)."""
    B, T, Q, S, m = 2, 4, 2, 2, 2
    push, repl, pop, vectors = random_weights(B, T, Q, S, m if vector else 0, torch.float64, gen)
    leaves = [t.clone().requires_grad_() for t in (push, repl, pop, *([vectors] if vector else []))]
    out = readings_on("native", *leaves[:3], "original", None, *leaves[3:])
    loss = (out * torch.randn(out.shape, generator=gen, dtype=torch.float64)).sum()
    first = torch.autograd.grad(loss, leaves, retain_graph=True)
    again = torch.autograd.grad(loss, leaves, retain_graph=True)
    for a, b in zip(first, again, strict=True):
        torch.testing.assert_close(a, b, atol=0, rtol=0)


# -- the default, unchanged; the vector stack's start; bad input ---------------------------------------
def test_the_fixed_behaviour_is_the_default_and_its_start_is_the_2023_codes():
    """``"fixed"`` is the default, and its start is bit for bit what it was: ``γ[−1 → 0] = α[−1] =
    α[0] = 1`` (log 0) at state 0 and the bottom symbol, everything else ``LOG_ZERO``; the
    original start lacks ``γ[−1 → 0]`` and ``α[−1]``.  A layer built without the option and one
    with ``"fixed"`` give identical outputs."""
    D, QS = 3, 4
    gamma, alpha = nondeterministic_initial(2, 2, 2, D, dtype=torch.float64)
    expected_gamma = torch.full((2, D, D, QS, QS), LOG_ZERO, dtype=torch.float64)
    expected_gamma[:, D - 1, D - 1, 0, 0] = 0.0
    expected_alpha = torch.full((2, D + 1, QS), LOG_ZERO, dtype=torch.float64)
    expected_alpha[:, D - 1 :, 0] = 0.0
    assert torch.equal(gamma, expected_gamma) and torch.equal(alpha, expected_alpha)
    g_fixed, a_fixed = nondeterministic_initial(2, 2, 2, D, dtype=torch.float64, bottom_symbol="fixed")
    assert torch.equal(g_fixed, gamma) and torch.equal(a_fixed, alpha)
    g_orig, a_orig = nondeterministic_initial(2, 2, 2, D, dtype=torch.float64, bottom_symbol="original")
    assert bool((g_orig == LOG_ZERO).all())
    expected_alpha[:, D - 1, 0] = LOG_ZERO
    assert torch.equal(a_orig, expected_alpha)
    x = torch.randn(2, 5, 3, generator=torch.Generator().manual_seed(0))
    outs = []
    for extra in ({}, {"bottom_symbol": "fixed"}):
        torch.manual_seed(0)
        net = StackRNN(3, 5, "vector_nondeterministic", "lstm", depth=4,
                       memory_args={"states": 2, "symbols": 2, "vector_size": 2, **extra})  # fmt: skip
        outs.append(net(x)[0])
    assert torch.equal(outs[0], outs[1])


def test_the_original_vector_stack_reads_zeros_first_and_has_no_bottom_vector():
    """As the 2023 code's ``OldVectorNondeterministicStack`` (whose reading before any step is
    zeros): no bottom vector, ``ζ`` and ``η`` all log 0 at the start."""
    mem = VectorNondeterministicStack(
        4, states=2, symbols=2, vector_size=3, bottom=None, bottom_symbol="original"
    )
    state = mem.initial_state(2, device=None, dtype=torch.float64)
    assert torch.equal(mem.read(state), torch.zeros(2, 12, dtype=torch.float64))
    assert bool((state.zeta == LOG_ZERO).all()) and mem.log_bottom() is None
    assert "bottom_symbol='original'" in repr(mem)
    assert [n for n, _ in mem.named_parameters()] == ["head.weight", "head.bias"]


def test_bad_bottom_symbols_are_refused_with_the_value():
    with pytest.raises(ValueError, match=r"bottom_symbol must be one of fixed, original, got '2022'"):
        NondeterministicStack(4, bottom_symbol="2022")
    with pytest.raises(ValueError, match=r"bottom_symbol must be one of fixed, original, got True"):
        StackRNN(3, 5, "nondeterministic", "lstm", memory_args={"bottom_symbol": True})
    with pytest.raises(ValueError, match=r"bottom_symbol must be one of fixed, original, got 'old'"):
        nondeterministic_initial(1, 2, 2, 3, bottom_symbol="old")
    with pytest.raises(ValueError, match=r"bottom_symbol must be one of fixed, original, got 'new'"):
        nondeterministic_reference(*random_weights(1, 1, 1, 1, 0, torch.float64, torch.Generator())[:3],
                                   bottom_symbol="new")  # fmt: skip
    with pytest.raises(ValueError, match=r"'original' has no bottom vector .*; pass bottom=None"):
        vector_nondeterministic_reference(
            *random_weights(1, 1, 1, 1, 1, torch.float64, torch.Generator()),
            torch.zeros(1),
            bottom_symbol="original",
        )
    with pytest.raises(ValueError, match=r"has no bottom vector .* got bottom='learned'; leave bottom out"):
        VectorNondeterministicStack(4, bottom="learned", bottom_symbol="original")
    with pytest.raises(ValueError, match=r"bottom must be one of learned, one, zero, got 'none'"):
        VectorNondeterministicStack(4, bottom="none")
    with pytest.raises(ValueError, match=r"has no bottom vector .*: pass bottom=None"):
        vector_nondeterministic_initial(1, 2, 2, 2, 3, torch.zeros(2), bottom_symbol="original")
    with pytest.raises(ValueError, match=r"needs the log bottom vector bottom \[m\], got None"):
        vector_nondeterministic_initial(1, 2, 2, 2, 3, None)
