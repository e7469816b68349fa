"""Every hand-written backward is re-entrant (docs/design.md, "One implementation switch"): a
second backward through the same graph (``retain_graph=True``) gives the first one's gradients
exactly and changes nothing the first one returned, nor the forward's outputs or saved tensors.

Held for every registered layer under every implementation that runs on CPU (``"cpu"``, the
Python loops; ``"native"``, the C++ loops; the layer's default), for the Triton kernels (under
Triton's interpreter without a GPU, at tiny sizes), and by ``gradcheck`` on the Python paths;
:func:`test_every_hand_written_function_is_covered` fails when a new ``torch.autograd.Function``
in ``memrnn`` has no case here."""

from __future__ import annotations

import contextlib
import importlib
import inspect
import pkgutil

import pytest
import torch

import memrnn.ops
from memrnn.core import create_layer, layer_class, list_layers, state_leaves, state_map
from memrnn.layers.stack_rnn import StackRNN
from memrnn.members import MemberLayer
from memrnn.ops.dispatch import implementation, interpreting, native_available, triton_available
from memrnn.ops.nondeterministic import (
    NondeterministicRun,
    nondeterministic_initial,
    vector_nondeterministic_initial,
)
from tests.ops.backends import assert_unwritten, function_nodes

STACK_MEMORIES = ("superposition", "stratification", "queue", "deque", "tape", "tape_jump")
BASE_LAYERS = list_layers()
# as tests/core/test_interface.py: layers with an indexed one-hot input path run again on one-hot
# inputs ("<name>+one_hot"), which their fused forwards take through token buckets
LAYERS = BASE_LAYERS + [
    f"{n}+one_hot" for n in BASE_LAYERS if "one_hot_input" in inspect.signature(layer_class(n)).parameters
]
#: layers with a member path, run as two members (``"<name>+members"``: :class:`memrnn.members.MemberLayer`)
MEMBER_LAYERS = [
    f"{n}+members"
    for n in (
        "lstm",
        "elman",
        "gru_2layer",
        "second_order",
        "nnpda",
        "reservoir_crj",
        "counter_lstm_tanh",
        "relu_counter_relu",
        "jordan",
        "superposition_elman",
        "stratification_lstm",
    )
] + [f"{n}+members_one_hot" for n in ("second_order", "nnpda")]
CPU_IMPLS = ("default", "cpu", "native")
#: the GRUs, whose hand-written BPTT is an implementation of its own (``"bptt"``)
GRU_LAYERS = [n for n in BASE_LAYERS if layer_class(n).__name__ == "GRULayer"]
needs_triton = pytest.mark.skipif(
    not triton_available() or (not torch.cuda.is_available() and not interpreting()),
    reason="needs Triton and a GPU or TRITON_INTERPRET=1",
)
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def _forced(impl: str):
    return contextlib.nullcontext() if impl == "default" else implementation(impl)


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


def _memrnn_nodes(roots) -> list:
    """The autograd nodes of memrnn's hand-written Functions in the graph behind ``roots``."""
    return [n for n in function_nodes(roots) if n._forward_cls.__module__.startswith("memrnn.")]


def _function_names(nodes) -> set[str]:
    return {f"{n._forward_cls.__module__}.{n._forward_cls.__qualname__}" for n in nodes}


def _saved(nodes) -> list[torch.Tensor]:
    """Copies of every tensor the nodes saved for their backward."""
    return [t.clone() for n in nodes for t in n.saved_tensors if t is not None]


def _make(name: str, dtype: torch.dtype = torch.float64, device: str = "cpu"):
    """Layer ``name`` (``"<name>+one_hot"``: on one-hot inputs), seeded, with inputs ``x [3, 5, n]``
    (requiring grad unless one-hot), a right-padding mask (lengths 5, 3, 1) and a random initial
    state whose floating fields require grad."""
    base, _, kind = name.partition("+")
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1)
    if kind.startswith("members"):  # two members: inputs [2, 3, 5, n], the state [2, 3, ...]
        layer = MemberLayer.build(lambda: create_layer(base), seeds=[0, 1]).to(device, dtype)
        lead: tuple[int, ...] = (2,)
    else:
        layer, lead = create_layer(base).to(device, dtype), ()
    if kind.endswith("one_hot"):
        ids = torch.randint(0, layer.input_size, (*lead, 3, 5), generator=gen)
        x = torch.nn.functional.one_hot(ids, layer.input_size).to(device, dtype)
    else:
        x = torch.randn(*lead, 3, 5, layer.input_size, generator=gen, dtype=dtype).to(device).requires_grad_()
    s0 = state_map(
        lambda t: (
            t.detach() + 0.3 * torch.randn(t.shape, generator=gen, dtype=t.dtype).to(device)
            if t.is_floating_point()
            else t
        ),
        layer.initial_state(3, dtype=dtype, device=device),
    )
    for t in state_leaves(s0):
        t.requires_grad_(t.is_floating_point())
    mask = (torch.arange(5)[None] < torch.tensor([5, 3, 1])[:, None]).to(device)
    return layer, x, s0, mask


def _check_layer_backward_twice(name: str, impl: str, dtype: torch.dtype, device: str = "cpu") -> set[str]:
    """Two ``autograd.grad`` over the inputs, the initial state's leaves and the parameters are
    bitwise equal, the first is unchanged by the second, and the outputs, final state and saved
    tensors are unchanged by both; returns the hand-written Functions in the graph."""
    layer, x, s0, mask = _make(name, dtype, device)
    with _forced(impl):
        y, s = layer(x, s0, mask=mask)
    outs = [y, *(t for t in state_leaves(s) if t.is_floating_point())]
    gen = torch.Generator().manual_seed(2)
    loss = sum((o * torch.randn(o.shape, generator=gen, dtype=dtype).to(device)).sum() for o in outs)
    nodes = _memrnn_nodes([loss.grad_fn])
    outs_before, saved_before = [o.detach().clone() for o in outs], _saved(nodes)
    leaves = [t for t in state_leaves(s0) if t.requires_grad]
    inputs = [t for t in (x, *leaves, *layer.parameters()) if t.requires_grad]
    assert inputs and loss.requires_grad
    _assert_same(*_two_backwards(loss, inputs))
    for a, b in zip(outs, outs_before, strict=True):
        torch.testing.assert_close(a.detach(), b, rtol=0, atol=0, msg="a backward changed an output")
    for i, (a, b) in enumerate(zip(_saved(nodes), saved_before, strict=True)):
        assert_unwritten(a, b, f"saved tensor {i}")
    return _function_names(nodes)


@pytest.mark.parametrize("impl", CPU_IMPLS)
@pytest.mark.parametrize("name", LAYERS)
def test_layer_backward_twice_gives_the_same_gradients(name, impl):
    """Every registered layer, float64, padded, from a random state, under each CPU path."""
    _needs_native(impl)
    _check_layer_backward_twice(name, impl, torch.float64)


@pytest.mark.parametrize("impl", ("default", "cpu"))
@pytest.mark.parametrize("name", MEMBER_LAYERS)
def test_member_paths_backward_twice_give_the_same_gradients(name, impl):
    """The member paths' hand-written Functions (:mod:`memrnn.members`), float64, padded."""
    _check_layer_backward_twice(name, impl, torch.float64)


def _check_tokens_and_heads_backward_twice() -> set[str]:
    """Two members of the LSTM from token ids (:meth:`MemberLayer.outputs_from_tokens`: the fused
    cell reading its projection by id, :class:`memrnn.ops.lstm.cpu.FusedLSTMTokens`) under a
    :class:`memrnn.members.MemberLinear` head (its CPU Function), float64, padded: as
    :func:`_check_layer_backward_twice`, over the table, the layer's and the head's parameters;
    returns the hand-written Functions in the graph."""
    from memrnn.members import MemberLinear

    _needs_native("native")
    layer, _, _, mask = _make("lstm+members")
    gen = torch.Generator().manual_seed(3)
    table = torch.randn(2, 6, layer.input_size, generator=gen, dtype=torch.float64, requires_grad=True)
    ids = torch.randint(0, 6, (3, 5), generator=gen)
    head = MemberLinear(torch.randn(2, 4, layer.output_size, generator=gen, dtype=torch.float64),
                        torch.randn(2, 4, generator=gen, dtype=torch.float64))  # fmt: skip
    y = head(layer.outputs_from_tokens(ids, table, mask=mask))
    loss = (y * torch.randn(y.shape, generator=gen, dtype=torch.float64)).sum()
    nodes = _memrnn_nodes([loss.grad_fn])
    y_before, saved_before = y.detach().clone(), _saved(nodes)
    _assert_same(*_two_backwards(loss, [table, *layer.parameters(), *head.parameters()]))
    torch.testing.assert_close(y.detach(), y_before, rtol=0, atol=0, msg="a backward changed an output")
    for i, (a, b) in enumerate(zip(_saved(nodes), saved_before, strict=True)):
        assert_unwritten(a, b, f"saved tensor {i}")
    return _function_names(nodes)


def test_the_members_token_path_and_heads_backward_twice_give_the_same_gradients():
    """The LSTM members' path from token ids and the members' heads (float64, padded)."""
    assert _check_tokens_and_heads_backward_twice() == {
        "memrnn.ops.lstm.cpu.FusedLSTMTokens",
        "memrnn.members.modules._NarrowAffine",
    }


@pytest.mark.parametrize("name", GRU_LAYERS)
def test_the_grus_hand_written_bptt_backward_twice_gives_the_same_gradients(name):
    """The GRU's hand-written BPTT (``implementation("bptt")``; the default runs torch's kernel)."""
    _check_layer_backward_twice(name, "bptt", torch.float64)


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


@pytest.mark.parametrize("name", LAYERS)
def test_gradcheck_on_the_python_paths(name):
    """``gradcheck`` (float64; it also runs each backward twice: "Backward is not reentrant") of
    every layer under ``implementation("cpu")``, the hand-written Python loops where a layer has
    them, over the inputs, the initial state and the parameters, on a padded batch.  The full
    Jacobian where the differentiable inputs are few, else gradcheck's fast mode (a random
    projection of it); ``tests/core/test_interface.py`` checks the layers' default paths."""
    layer, x, s0, mask = _make(name)
    x, mask = x[:2, :3].detach().requires_grad_(x.requires_grad), mask[:2, :3]
    s0 = state_map(lambda t: t[:2].detach().requires_grad_(t.requires_grad), s0)
    leaves = state_leaves(s0)
    params = dict(layer.named_parameters())
    trained = [k for k, p in params.items() if p.requires_grad]

    def f(x, *args):
        state, weights = args[: len(leaves)], dict(zip(trained, args[len(leaves) :], strict=True))
        with implementation("cpu"):
            y, s = torch.func.functional_call(
                layer, weights, (x, type(s0)(*state)), {"mask": mask}, strict=False
            )
        return (y, *(t for t in state_leaves(s) if t.is_floating_point()))

    args = (x, *leaves, *(params[k].detach().clone().requires_grad_() for k in trained))
    size = sum(t.numel() for t in args if t.requires_grad)
    assert torch.autograd.gradcheck(f, args, eps=1e-6, atol=1e-6, fast_mode=size > 200)


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
    to its own (3e4 off on gradients of 1e-2).  The store is now one per pass, told
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


# -- the Triton kernels -------------------------------------------------------------------------------
def _stack_case(memory: str) -> tuple:
    """A tiny Elman-controlled stack RNN (the Triton stack kernels' memory families)."""

    def build():
        torch.manual_seed(0)
        args = {"jump": 2} if memory == "tape_jump" else {}
        layer = StackRNN(2, 3, memory=memory, controller="elman", width=2, depth=3, memory_args=args)
        layer = layer.to(DEVICE, torch.float32)
        gen = torch.Generator().manual_seed(1)
        x = torch.randn(2, 3, 2, generator=gen).to(DEVICE).requires_grad_()
        s0 = state_map(
            lambda t: (
                (t + 0.3 * torch.randn(t.shape, generator=gen).to(DEVICE)).requires_grad_()
                if t.is_floating_point()
                else t
            ),
            layer.initial_state(2),
        )
        mask = (torch.arange(3)[None] < torch.tensor([3, 2])[:, None]).to(DEVICE)
        with implementation("triton"):
            y, s = layer(x, s0, mask=mask)
        floats = [t for t in state_leaves(s) if t.is_floating_point()]
        loss = y.pow(2).sum() + sum(t.pow(2).sum() for t in floats)
        leaves = [t for t in state_leaves(s0) if t.requires_grad]
        return loss, [x, *leaves, *layer.parameters()]

    return build


#: a case for every Triton Function: ``(the Function, a registered layer or a builder of
#: (loss, leaves))``; the stack kernels' memory families each have one
TRITON_CASES = {
    "elman": ("memrnn.ops.elman.triton.ElmanTriton", "elman"),
    "lstm": ("memrnn.ops.lstm.triton.LSTMTriton", "counter_lstm_tanh"),
    "jordan": ("memrnn.ops.jordan.triton.JordanTriton", "jordan"),
    "counter": ("memrnn.ops.counter.triton.CounterTriton", "relu_counter"),
    "second_order": ("memrnn.ops.second_order_rnn.triton.SecondOrderTriton", "second_order+one_hot"),
    "nnpda": ("memrnn.ops.nnpda.triton.NNPDATriton", "nnpda+one_hot"),
    **{
        f"stack_{m}": ("memrnn.ops.stack_rnn.triton.StackRNNTriton", _stack_case(m))
        for m in ("superposition", "tape_jump", "stratification", "deque")
    },
}


@needs_triton
@pytest.mark.parametrize("case", sorted(TRITON_CASES))
def test_triton_backward_twice_gives_the_same_gradients(case):
    """Each Triton Function (float32; under the interpreter without a GPU): two passes equal,
    the first unchanged, the outputs and saved tensors unchanged."""
    function, how = TRITON_CASES[case]
    if isinstance(how, str):
        found = _check_layer_backward_twice(how, "triton", torch.float32, DEVICE)
    else:
        loss, leaves = how()
        nodes = _memrnn_nodes([loss.grad_fn])
        found, saved = _function_names(nodes), _saved(nodes)
        _assert_same(*_two_backwards(loss, leaves))
        for a, b in zip(_saved(nodes), saved, strict=True):
            torch.testing.assert_close(a, b, rtol=0, atol=0, msg="a backward wrote into a saved tensor")
    assert function in found, f"{case}: {function} did not run (ran: {sorted(found)})"


# -- coverage -----------------------------------------------------------------------------------------
def _hand_written_functions() -> set[str]:
    """Every ``torch.autograd.Function`` defined in memrnn (every module of ``memrnn.ops`` imported;
    the Triton ones where Triton is)."""
    for info in pkgutil.walk_packages(memrnn.ops.__path__, "memrnn.ops."):
        if info.name.endswith(".triton") and not triton_available():
            continue
        importlib.import_module(info.name)
    found, todo = set(), [torch.autograd.Function]
    while todo:
        cls = todo.pop()
        for sub in cls.__subclasses__():
            todo.append(sub)
            if sub.__module__.startswith("memrnn."):
                found.add(f"{sub.__module__}.{sub.__qualname__}")
    return found


def test_every_hand_written_function_is_covered():
    """The layers under ``"cpu"`` and ``"native"`` (and the GRUs under ``"bptt"``) run every
    hand-written Function but the Triton ones, and :data:`TRITON_CASES` names every Triton one: a
    new Function without a layer or a case here fails this test."""
    _needs_native("native")
    functions = _hand_written_functions()
    triton_functions = {f for f in functions if f.rsplit(".", 2)[-2] == "triton"}
    seen = set()
    for name in LAYERS + MEMBER_LAYERS:
        for impl in ("cpu", "native", *(("bptt",) if name in GRU_LAYERS else ())):
            layer, x, s0, mask = _make(name)
            with implementation(impl):
                y, s = layer(x, s0, mask=mask)
            roots = [t.grad_fn for t in (y, *state_leaves(s)) if t.grad_fn is not None]
            seen |= _function_names(_memrnn_nodes(roots))
    seen |= _check_tokens_and_heads_backward_twice()
    assert functions - triton_functions <= seen, (
        f"no layer runs {sorted(functions - triton_functions - seen)}"
    )
    if triton_available():
        named = {function for function, _ in TRITON_CASES.values()}
        assert triton_functions <= named, f"no Triton case for {sorted(triton_functions - named)}"
