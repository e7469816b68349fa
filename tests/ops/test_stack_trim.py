"""Trimmed windows (issue "pay only for the memory that can still matter"): the superposition
stack (Joulin & Mikolov 2015) computes only the cells that can be non-zero (from an all-zero
initial stack) and, without the final state (``finals=False``), only those that can still reach
the top before the end (rau, DuSell's library, trims to ``min(t, T − t)`` the same way); the
stratification stack and the neural queue (Grefenstette et al. 2015) only the slots that can hold
strength, and the DeQue (the same paper) the cells at each end that can.  Every case here runs
the trimmed window against the full one (the kernel's ``_live`` patched to None) and asserts
``torch.equal`` on outputs, final states and every gradient, on the C++ loop (``impl="native"``)
and the Python one (``impl="cpu"``)."""

from __future__ import annotations

import pytest
import torch

from memrnn.layers import StackRNN
from memrnn.ops.deque.cpu import DequeKernel
from memrnn.ops.stack_rnn import stack_rnn_sequence
from memrnn.ops.stratification.cpu import StratificationKernel
from memrnn.ops.superposition.cpu import SuperpositionKernel
from tests.ops.backends import needs_native

IMPLS = ["cpu", pytest.param("native", marks=needs_native)]
N, M_WIDTH, NX = 5, 3, 4  # controller units, cell width, input features


KERNELS = {
    "superposition": SuperpositionKernel,
    "stratification": StratificationKernel,
    "queue": StratificationKernel,
    "deque": DequeKernel,
}


def _case(gen, dtype, T, depth, members, lengths, stack0, memory="superposition"):
    """The arguments of an LSTM controller on a superposition stack (or ``memory``), ``B = 3``
    rows; ``stack0``: ``"zero"`` (no gradient wanted), ``"zero_grad"`` (zeros requiring a
    gradient), ``"random"`` or ``"values"`` (a strength memory's: zero strengths, random values
    and reading, no gradient wanted)."""
    B, G = 3, 4 * N
    reads = 2 if memory == "deque" else 1  # the DeQue reads (and pushes) at both ends
    K = {"superposition": 3, "deque": 4}.get(memory, 2) + reads * M_WIDTH
    lead = (members,) if members else ()
    rnd = lambda *s: (0.5 * torch.randn(*lead, *s, generator=gen, dtype=dtype)).requires_grad_()  # noqa: E731
    args = [
        rnd(B, T, NX),  # x
        rnd(G, NX + reads * M_WIDTH),  # w_in
        rnd(G),
        rnd(G, N),
        rnd(K, N),  # w_head
        rnd(K),
        rnd(B, N),  # h0
        rnd(B, N),  # c0
    ]
    cells = depth * reads  # the DeQue's 2·depth cells, bottom first
    shapes = (
        [(B, depth, M_WIDTH)]
        if memory == "superposition"
        else [(B, cells, M_WIDTH), (B, cells), (B, reads * M_WIDTH)]
    )
    if stack0 == "random":
        mem0 = tuple(rnd(*sh).sigmoid() if i == 1 else rnd(*sh) for i, sh in enumerate(shapes))
    elif stack0 == "values":
        mem0 = tuple(
            torch.zeros(*lead, *sh, dtype=dtype) if i == 1 else rnd(*sh).detach()
            for i, sh in enumerate(shapes)
        )
    else:
        mem0 = tuple(
            torch.zeros(*lead, *sh, dtype=dtype, requires_grad=stack0 == "zero_grad") for sh in shapes
        )
    lens = None
    if lengths:
        lens = torch.tensor([T, T - 3, 2]) if lengths == "ragged" else torch.tensor([T - 2, T - 4, 1])
        lens = lens.expand(*lead, B).contiguous()
    return args, mem0, lens


def _run(args, memory0, lens, impl, finals, loss_on_finals=None, memory="superposition"):
    """Outputs (and finals) and the gradients of a random weighting of them (of the finals too
    unless ``loss_on_finals`` is False) with respect to every input that requires one."""
    out = stack_rnn_sequence(
        *args, memory0, controller="lstm", activation="", memory=memory,
        value_activation="sigmoid" if memory == "superposition" else "tanh", lengths=lens, impl=impl,
        finals=finals,
    )  # fmt: skip
    h, r, *fin, _ = out
    gen = torch.Generator().manual_seed(7)
    outs = [h, r] + ([f for f in fin if f is not None] if loss_on_finals is not False else [])
    loss = sum((o * torch.randn(o.shape, generator=gen, dtype=o.dtype)).sum() for o in outs)
    inputs = [*args, *memory0]
    need = [t for t in inputs if t.requires_grad and t.is_leaf]
    grads = torch.autograd.grad(loss, need)
    return [o.detach() for o in outs], list(grads)


def _full_and_trimmed(monkeypatch, *case, impl, finals, memory="superposition"):
    """The same call with the full window and with the trimmed one; the trimmed one's ``live``."""
    seen = []
    kernel = KERNELS[memory]
    real = kernel._live

    def spy(self, *a):
        out = real(self, *a)
        seen.append(out)
        return out

    with monkeypatch.context() as mp:
        mp.setattr(kernel, "_live", lambda self, *a: None)
        full = _run(*case, impl, finals, memory=memory)
    with monkeypatch.context() as mp:
        mp.setattr(kernel, "_live", spy)
        trimmed = _run(*case, impl, finals, memory=memory)
    return full, trimmed, seen


def _assert_equal(full, trimmed):
    for kind, a, b in (("output", full[0], trimmed[0]), ("gradient", full[1], trimmed[1])):
        assert len(a) == len(b)
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert torch.equal(x, y), f"{kind} {i}: max diff {(x - y).abs().max()}"


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("finals", [False, True])
@pytest.mark.parametrize(
    ("depth", "members", "lengths", "stack0"),
    [
        (11, 0, None, "zero"),  # depth > T: every cell trimmed only by the steps
        (4, 0, "ragged", "zero"),  # depth < T: the window's own bound too
        (6, 2, "ragged", "zero"),  # members
        (11, 0, "short", "zero_grad"),  # the initial stack's gradient wanted; max(lengths) < T
        (6, 2, "short", "zero_grad"),
    ],
)
def test_trimmed_window_equals_the_full_one(
    monkeypatch, gen, impl, dtype, finals, depth, members, lengths, stack0
):
    """Outputs, final states (``finals=True``) and the gradients of every input, weight and the
    initial stack: bit for bit."""
    case = _case(gen, dtype, 9, depth, members, lengths, stack0)
    full, trimmed, seen = _full_and_trimmed(monkeypatch, *case, impl=impl, finals=finals)
    assert seen and seen[0] is not None  # the window was trimmed
    _assert_equal(full, trimmed)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("memory", ["stratification", "queue"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("finals", [False, True])
@pytest.mark.parametrize(
    ("depth", "members", "lengths", "stack0"),
    [(11, 0, None, "zero"), (4, 2, "ragged", "zero"), (6, 0, "short", "zero_grad")],
)
def test_stratification_trimmed_window_equals_the_full_one(
    monkeypatch, gen, impl, memory, dtype, finals, depth, members, lengths, stack0
):
    """The stratification stack and the queue from empty: the slots that can hold strength only
    (the forward; the stack's backward too without finals and the initial state's gradient),
    bit for bit."""
    case = _case(gen, dtype, 9, depth, members, lengths, stack0, memory)
    full, trimmed, seen = _full_and_trimmed(monkeypatch, *case, impl=impl, finals=finals, memory=memory)
    assert seen and seen[0] is not None
    backward = memory == "stratification" and not finals and stack0 == "zero"
    assert bool((seen[0][1] < depth).any()) == backward  # the backward trimmed exactly then
    _assert_equal(full, trimmed)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("finals", [False, True])
@pytest.mark.parametrize(
    ("depth", "members", "lengths", "stack0"),
    [
        (11, 0, None, "zero"),  # depth > T: only the steps bound the ends
        (4, 2, "ragged", "zero"),  # depth < T: the ends meet; members
        (6, 0, "short", "zero_grad"),  # the initial state's gradient: the backward runs whole
        (5, 0, "ragged", "values"),  # nonzero initial values: the backward runs whole
    ],
)
def test_deque_trimmed_window_equals_the_full_one(
    monkeypatch, gen, impl, dtype, finals, depth, members, lengths, stack0
):
    """The DeQue (Grefenstette et al. 2015) from empty strengths: the ``min(t, D)`` cells at each end
    only (the forward; the backward too unless the initial state's gradient is wanted or its
    values are not zero; the final state's gradient may be), bit for bit."""
    case = _case(gen, dtype, 9, depth, members, lengths, stack0, "deque")
    full, trimmed, seen = _full_and_trimmed(monkeypatch, *case, impl=impl, finals=finals, memory="deque")
    t = torch.arange(10)
    assert seen and seen[0] is not None and torch.equal(seen[0][0], t.clamp(max=depth))
    backward = stack0 == "zero"
    assert torch.equal(seen[0][1], t.clamp(max=depth) if backward else torch.full_like(t, depth))
    _assert_equal(full, trimmed)


def _tied_deque_case(dtype):
    """A DeQue whose bottom push and pop are both ``σ(0) = ½`` at every step (their head rows 0):
    the bottom pop then takes exactly what the bottom half holds, a tie at the empty middle
    (``DequeKernel._live``, (c)) at each step the top pop leaves the bottom alone."""
    args, mem0, lens = _case(torch.Generator().manual_seed(4), dtype, 9, 6, 0, "ragged", "zero", "deque")
    with torch.no_grad():
        args[4][2:4] = 0  # w_head's push_bot, pop_bot rows (the layer's action order)
        args[5][2:4] = 0
    return args, mem0, lens


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_deque_tie_at_the_middle_runs_the_backward_whole(monkeypatch, impl, dtype):
    """A pop that ties exactly at the empty middle lets the middle's gradient into the pop's (the
    full window's subgradient at ``max(·, 0)``): the forward finds the tie and the backward runs
    whole (``live``'s row 1 back to ``D``), so the trimmed window still equals the full one; on the
    Python loop, without the tie check it would not."""
    case = _tied_deque_case(dtype)
    full, trimmed, seen = _full_and_trimmed(monkeypatch, *case, impl=impl, finals=False, memory="deque")
    assert seen[0] is not None and bool((seen[0][0] < 6).any()) and bool((seen[0][1] == 6).all())
    _assert_equal(full, trimmed)
    if impl == "cpu":
        monkeypatch.setattr(
            DequeKernel, "_middle_tie", staticmethod(lambda u, *a: torch.zeros_like(u, dtype=bool))
        )
        unchecked = _run(*case, impl, False, memory="deque")
        assert any(not torch.equal(a, b) for a, b in zip(full[1], unchecked[1], strict=True))


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("memory", ["stratification", "queue", "deque"])
def test_stratification_nonzero_strengths_are_not_trimmed(impl, memory, gen):
    """Initial strengths that are not all zero: no trim, and the reference's answer."""
    args, mem0, lens = _case(gen, torch.float64, 9, 4, 0, "ragged", "random", memory)
    seen = []
    kernel = KERNELS[memory]
    real = kernel._live
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(kernel, "_live", lambda self, *a: seen.append(real(self, *a)) or seen[-1])
        got = _run(args, mem0, lens, impl, False, memory=memory)
    assert seen == [None]
    ref = _run(args, mem0, lens, "reference", True, loss_on_finals=False, memory=memory)
    for a, b in zip([*ref[0][:2], *ref[1]], [*got[0], *got[1]], strict=True):
        torch.testing.assert_close(a, b, atol=1e-12, rtol=1e-12)


@pytest.mark.parametrize("impl", IMPLS)
def test_the_trim_counts(impl, gen):
    """From a zero stack without the final state: step ``s`` computes ``min(s+1, D, T−s)`` cells
    (rau's ``min(t, T − t)``); with the final state only the filled ones; with the initial stack's
    gradient the backward keeps the filled cells' gradient; a nonzero stack trims only by the steps
    left; with it and the final state nothing is trimmed."""
    T, D = 9, 6
    t = torch.arange(T + 1)
    live = {}
    real = SuperpositionKernel._live

    def spy(self, *a):
        live["v"] = out = real(self, *a)
        return out

    def run(stack0, finals):
        args, mem0, lens = _case(gen, torch.float64, T, D, 0, None, stack0)
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(SuperpositionKernel, "_live", spy)
            _run(args, mem0, lens, impl, finals)
        return live["v"]

    C = torch.minimum(torch.minimum(t, T - t + 1), torch.tensor(D))
    C[0] = D
    got = run("zero", False)
    assert torch.equal(got[0], C) and torch.equal(
        got[1], torch.minimum(torch.minimum(t, T - t + 1), torch.tensor(D))
    )
    got = run("zero", True)
    filled = t.clamp(max=D)
    assert torch.equal(got[0][1:], filled[1:]) and torch.equal(got[1], filled)
    got = run("zero_grad", False)
    assert torch.equal(got[1], (T - t + 1).clamp(max=D))
    got = run("random", False)
    assert torch.equal(got[0][1:], (T - t + 1).clamp(max=D)[1:])
    assert run("random", True) is None


@pytest.mark.parametrize("impl", IMPLS)
def test_nonzero_initial_stack_gives_the_references_answer(impl, gen):
    """A nonzero initial stack turns the filled trim off: outputs, final state and gradients equal
    the reference loop's (autograd over the torch steps) to rounding, with and without finals."""
    args, mem0, lens = _case(gen, torch.float64, 9, 4, 0, "ragged", "random")
    for finals in (True, False):
        ref = _run(args, mem0, lens, "reference", True, loss_on_finals=finals)
        got = _run(args, mem0, lens, impl, finals)
        for a, b in zip(ref[0], got[0], strict=True):
            torch.testing.assert_close(a, b, atol=1e-12, rtol=1e-12)
        for a, b in zip(ref[1], got[1], strict=True):
            torch.testing.assert_close(a, b, atol=1e-12, rtol=1e-12)


@pytest.mark.parametrize("impl", IMPLS)
def test_without_finals_the_op_returns_none_and_the_same_outputs(impl, gen):
    """``finals=False``: the finals are None and the outputs those of ``finals=True``, padding
    included."""
    args, mem0, lens = _case(gen, torch.float64, 9, 5, 0, "short", "zero")
    opts = dict(
        controller="lstm", activation="", memory="superposition", value_activation="sigmoid", impl=impl
    )
    full = stack_rnn_sequence(*args, mem0, lengths=lens, **opts)
    part = stack_rnn_sequence(*args, mem0, lengths=lens, finals=False, **opts)
    assert len(part) == len(full) and all(f is None for f in part[2:-1])
    for a, b in zip(full[:2], part[:2], strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize("memory", ["superposition", "stratification", "deque"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_stack_rnn_outputs_equals_forward_with_gradients(memory, dtype):
    """``StackRNN.outputs`` (``finals=False``: the trimmed window) equals ``forward(...)[0]``, its
    gradients included, bit for bit."""
    torch.manual_seed(0)
    layer = StackRNN(3, 6, memory=memory, width=2, depth=8, dtype=dtype)
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(4, 10, 3, generator=gen, dtype=dtype, requires_grad=True)
    mask = torch.arange(10)[None] < torch.tensor([10, 7, 3, 9])[:, None]
    w = torch.randn(4, 10, layer.output_size, generator=gen, dtype=dtype)
    params = [x, *layer.parameters()]
    y1 = layer(x, mask=mask)[0]
    g1 = torch.autograd.grad((y1 * w).sum(), params)
    y2 = layer.outputs(x, mask=mask)
    g2 = torch.autograd.grad((y2 * w).sum(), params)
    assert torch.equal(y1, y2)
    for a, b in zip(g1, g2, strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize("memory", ["stratification", "queue"])
@pytest.mark.parametrize("finals", [False, True])
def test_stratification_python_trim_rounds_as_the_full_window(monkeypatch, memory, finals):
    """The Python loop sums the reading (and the pops' gradient) over all D slots, the trimmed ones
    as zeros: torch's sum over few columns groups its rows, and fewer rows would round differently
    (these seeds did, by up to 6e-8 in float32)."""
    for seed in (8, 13, 14, 15, 16, 29):
        case = _case(torch.Generator().manual_seed(seed), torch.float32, 9, 11, 0, None, "zero", memory)
        full, trimmed, seen = _full_and_trimmed(monkeypatch, *case, impl="cpu", finals=finals, memory=memory)
        assert seen and seen[0] is not None
        _assert_equal(full, trimmed)
