"""DuSell & Chiang's nondeterministic stack as a run of Triton kernels
(``memrnn/ops/nondeterministic/triton.py``): one step against the torch step, and the layer's
whole sequence against its reference loop over ``step`` (the torch step, window masked at every
step) and the C++ run, with masks, a non-fresh initial state and every gradient.  On CPU the
kernels run under Triton's interpreter (``TRITON_INTERPRET=1``, set by ``tests/conftest.py``), so
the sizes are small; ``-m gpu`` runs the compiled kernels at DuSell & Chiang's size."""

from __future__ import annotations

import contextlib

import pytest
import torch

from memrnn.core import MemoryLayer
from memrnn.layers import StackRNN
from memrnn.ops.dispatch import implementation, interpreting, triton_available
from memrnn.ops.nondeterministic import (
    LOG_ZERO,
    NondeterministicRun,
    nondeterministic_initial,
    nondeterministic_step,
    run_impl,
    vector_nondeterministic_initial,
    vector_nondeterministic_step,
)

needs_triton = pytest.mark.skipif(
    not triton_available() or (not torch.cuda.is_available() and not interpreting()),
    reason="needs Triton (pip install triton) and a GPU or TRITON_INTERPRET=1",
)
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


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
