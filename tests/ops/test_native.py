"""The stack RNN's C++ time loops (``memrnn/ops/stack_rnn/native.cpp``) against its Python loops
and the layer's reference loop over ``step``: outputs, every final state field, the overflow, and
every gradient (input, parameters, initial state), with right padding (rows of length T, a
middle length and 0), in float64 to rounding and in float32; then the dispatch's rules."""

from __future__ import annotations

import contextlib

import pytest
import torch

from memrnn.core import MemoryLayer, reference_paths, state_leaves
from memrnn.layers import StackRNN
from memrnn.ops import native
from memrnn.ops.dispatch import choose, implementation

pytestmark = pytest.mark.skipif(not native.native_available(), reason="no C++ compiler here")


def _jumps(net, B, dtype):
    """The jump tape needs each row's input length: an initial state with jumps 0, 1, 2 … (some
    beyond the tape), None for every other memory."""
    if net.memory.kind != "tape_jump":
        return None
    jumps = (torch.arange(B, dtype=dtype) * 3) % (net.memory.depth + 4)
    return net.initial_state(B, dtype=dtype)._replace(jump=jumps)


def _run(net, x, state, mask, w, impl):
    """Outputs, final state leaves and all gradients (input, parameters, initial state)."""
    if state is None:
        state = _jumps(net, x.shape[0], x.dtype)
    xx = x.clone().requires_grad_()
    st = None if state is None else type(state)(*(t.clone().requires_grad_() for t in state))
    net.zero_grad()
    if impl == "reference":
        y, s = MemoryLayer.forward(net, xx, st, mask)
    else:
        with implementation(impl):
            y, s = net(xx, st, mask)
    loss = (y * w).sum() + sum((t * t).sum() for t in state_leaves(s))
    loss.backward()
    grads = [xx.grad, *(p.grad for p in net.parameters())]
    if st is not None:
        grads += [t.grad for t in st]
    return [y, *state_leaves(s)], grads


def _assert_native_equals_cpu(net, x, state, mask, w, **tol):
    """The C++ loops and the Python loops give the same outputs, final state and gradients."""
    out_n, g_n = _run(net, x, state, mask, w, "native")
    out_c, g_c = _run(net, x, state, mask, w, "cpu")
    for a, b in zip([*out_n, *g_n], [*out_c, *g_c], strict=True):
        torch.testing.assert_close(a, b, **tol)


def test_the_dispatch_picks_native_on_cpu_and_names_what_it_cannot_do(monkeypatch):
    x32 = torch.zeros(2, 3, 4)
    assert choose(x32, native_ok=True) == "native"
    assert choose(x32.double(), native_ok=True) == "native"
    assert choose(x32) == "cpu"  # a mechanism without C++ loops
    assert choose(x32.half(), native_ok=True) == "cpu"
    with implementation("native"):
        assert choose(x32) == "cpu"  # forced, but this op has none: its Python loop
    with pytest.raises(ValueError, match="impl='native': this op has no C\\+\\+ loop"):
        choose(x32, "native")
    with pytest.raises(ValueError, match=r"CPU tensors of float32 or float64, got cpu torch\.float16"):
        choose(x32.half(), "native", native_ok=True)
    monkeypatch.setenv("MEMRNN_NATIVE", "0")
    assert choose(x32, native_ok=True) == "cpu"
    with pytest.raises(ValueError, match=r"C\+\+ loops are off here \(MEMRNN_NATIVE=0\)"):
        choose(x32, "native", native_ok=True)


def test_a_failed_build_warns_once_and_falls_back(monkeypatch):
    """No compiler: one RuntimeWarning naming the cause, then the Python loops."""
    from torch.utils import cpp_extension

    def broken(*args, **kwargs):
        raise RuntimeError("Ninja is required to load C++ extensions")

    monkeypatch.setattr(cpp_extension, "load", broken)
    native._build.cache_clear()
    try:
        with pytest.warns(RuntimeWarning, match="could not build its C\\+\\+ loops .*Ninja is required"):
            assert native.load() is None
        assert choose(torch.zeros(2, 3, 4), native_ok=True) == "cpu"
    finally:
        native._build.cache_clear()
    monkeypatch.undo()
    assert native.native_available()


@pytest.mark.parametrize(
    ("flags", "expected"),
    [("fpu sse2 avx avx2 fma avx512f avx512bw", "Xeon, AVX-512"), ("fpu sse2 avx avx2 fma", "Xeon, AVX2"),
     ("fp asimd", "Xeon, NEON"), ("fpu sse2", "Xeon, no vector extension read")],
)  # fmt: skip
def test_the_cpu_description_names_the_widest_vector_extension(monkeypatch, flags, expected):
    """What the benchmarks print beside CPU timings: the C++ loops' speed depends on it."""
    monkeypatch.setattr(native, "_cpuinfo", lambda: ("Xeon", flags))
    assert native.cpu_description() == expected
    monkeypatch.undo()
    name, _ = native._cpuinfo()
    assert native.cpu_description().count(", ") >= 1 and (
        not name or native.cpu_description().startswith(name)
    )


def test_the_build_flags_let_the_selects_vectorise():
    """Every flag set tried keeps ``-fno-trapping-math``: without it GCC leaves the nondeterministic
    stack's log-sum-exp loops scalar on CPUs without AVX-512 (2-4.5x slower,
    ``benchmarks/results/nondeterministic-cpu-2core.md``)."""
    assert native._flags() and all("-fno-trapping-math" in f and "-O3" in f for f in native._flags())


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


def test_nondeterministic_layer_runs_native_on_cpu(gen):
    """The RNS-RNN layer: outputs and gradients with the C++ step equal those with the torch step."""
    torch.manual_seed(0)
    net = StackRNN(
        3, 6, "nondeterministic", "lstm", depth=4, memory_args={"states": 2, "symbols": 2}
    ).double()
    x = torch.randn(2, 9, 3, generator=gen, dtype=torch.float64)
    w = torch.randn(2, 9, net.output_size, generator=gen, dtype=torch.float64)
    _assert_native_equals_cpu(net, x, None, None, w, atol=1e-11, rtol=0)


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


def test_nondeterministic_layer_compiles(gen):
    """Under ``torch.compile`` the nondeterministic step is traced as torch operations (the C++
    op has no fake kernel), and gives the eager numbers."""
    torch.manual_seed(0)
    net = StackRNN(3, 6, "nondeterministic", "lstm", depth=3, memory_args={"states": 2, "symbols": 2})
    x = torch.randn(2, 5, 3, generator=gen)
    compiled = torch.compile(net, backend="eager")
    torch.testing.assert_close(compiled(x)[0], net(x)[0])


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
