"""The recomputed memory (``native.cpp``'s "Recomputed memory", issue "pay only for the memory that
can still matter"): the superposition stack's (Joulin & Mikolov 2015) training forward on the C++
loop keeps its window only every ``RECOMPUTE`` steps (and each row's final window at its length)
and the backward reruns the steps between.  Every case runs it against the stored history
(``RECOMPUTE = 0``) and asserts ``torch.equal`` on the outputs, the final states and every
gradient."""

from __future__ import annotations

import pytest
import torch

import memrnn.ops.stack_rnn.cpu as stack_cpu
from memrnn.ops.stack_rnn import stack_rnn_sequence
from tests.ops.backends import assert_unwritten, function_nodes, needs_native

pytestmark = needs_native
N, WIDTH, NX, B = 5, 3, 4, 3  # controller units, cell width, input features, rows


def _case(gen, dtype, controller, T, depth, members, lengths, stack0):
    """Arguments of a controller on a superposition stack; ``stack0``: ``"zero"``, ``"zero_grad"``
    (zeros requiring a gradient) or ``"random"`` (nothing trimmed)."""
    G = (4 if controller == "lstm" else 1) * N
    lead = (members,) if members else ()
    rnd = lambda *s: (0.5 * torch.randn(*lead, *s, generator=gen, dtype=dtype)).requires_grad_()  # noqa: E731
    args = [
        rnd(B, T, NX),
        rnd(G, NX + WIDTH),
        rnd(G),
        rnd(G, N),
        rnd(3 + WIDTH, N),
        rnd(3 + WIDTH),
        rnd(B, N),
    ]
    args.append(rnd(B, N) if controller == "lstm" else None)
    if stack0 == "random":
        mem0 = (rnd(B, depth, WIDTH),)
    else:
        mem0 = (torch.zeros(*lead, B, depth, WIDTH, dtype=dtype, requires_grad=stack0 == "zero_grad"),)
    lens = None
    if lengths:
        lens = torch.tensor([T, max(T - 3, 0), min(2, T)]).expand(*lead, B).contiguous()
    return args, mem0, lens


def _run(args, mem0, lens, controller, retain=False, finals=False):
    """Outputs (and final states) and the gradients of a random weighting of them (twice with
    ``retain``: the second backward of the same graph)."""
    h, r, *fin, _ = stack_rnn_sequence(
        *args, mem0, controller=controller, activation="tanh", memory="superposition",
        value_activation="sigmoid", lengths=lens, impl="native", finals=finals,
    )  # fmt: skip
    outs = [h, r, *(f for f in fin if f is not None)]
    assert len(outs) == (2 + len(fin) - (controller != "lstm") if finals else 2)
    gen = torch.Generator().manual_seed(7)
    loss = sum((o * torch.randn(o.shape, generator=gen, dtype=o.dtype)).sum() for o in outs)
    need = [t for t in [*args, *mem0] if t is not None and t.requires_grad]
    grads = list(torch.autograd.grad(loss, need, retain_graph=retain))
    if retain:
        grads += list(torch.autograd.grad(loss, need))
    return [o.detach() for o in outs], grads


def _assert_equal(a, b):
    for kind, x, y in (("output", a[0], b[0]), ("gradient", a[1], b[1])):
        assert len(x) == len(y)
        for i, (u, v) in enumerate(zip(x, y, strict=True)):
            assert torch.equal(u, v), f"{kind} {i}: max diff {(u - v).abs().max()}"


@pytest.mark.parametrize("finals", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("controller", ["lstm", "elman"])
@pytest.mark.parametrize(
    ("T", "depth", "every", "members", "lengths", "stack0"),
    [
        (1, 4, 3, None, None, "zero"),  # one step
        (7, 4, 3, None, "ragged", "zero"),  # blocks of 3, the last one short; depth < T
        (9, 11, 1, 2, "ragged", "zero"),  # a checkpoint every step; members
        (12, 6, 4, None, None, "zero_grad"),  # blocks that divide T; the initial stack's gradient
        (10, 5, 32, 2, "ragged", "random"),  # one block (T < RECOMPUTE); a full window
        (40, 40, 16, None, "ragged", "zero"),  # depth = T
    ],
)
def test_recomputed_memory_equals_the_stored_history(
    monkeypatch, gen, finals, dtype, controller, T, depth, every, members, lengths, stack0
):
    """Outputs, final states and the gradients of every input, weight and the initial stack: bit
    for bit."""
    case = _case(gen, dtype, controller, T, depth, members, lengths, stack0)
    monkeypatch.setattr(stack_cpu, "RECOMPUTE", 0)
    stored = _run(*case, controller, finals=finals)
    monkeypatch.setattr(stack_cpu, "RECOMPUTE", every)
    _assert_equal(stored, _run(*case, controller, finals=finals))


@pytest.mark.parametrize("finals", [False, True])
def test_recomputed_memory_saves_a_ring_and_checkpoints(monkeypatch, gen, finals):
    """What the backward keeps: every step's ``[h ; r]`` and ``ceil(T / RECOMPUTE)`` checkpoints,
    not ``T + 1`` windows (it reruns the steps into a ring of its own, so no saved tensor is
    written); and a second backward of the same graph gives the same gradients."""
    T, depth, every = 20, 20, 8
    case = _case(gen, torch.float64, "lstm", T, depth, None, "ragged", "zero")
    rows = N + (depth + 1) * WIDTH  # z's rows: h, the cells and the zero cell

    def saved_z_steps():
        shapes = []
        with torch.autograd.graph.saved_tensors_hooks(
            lambda t: shapes.append(tuple(t.shape)) or t, lambda t: t
        ):
            stack_rnn_sequence(
                *case[0], case[1], controller="lstm", activation="", memory="superposition",
                value_activation="sigmoid", lengths=case[2], impl="native", finals=finals,
            )  # fmt: skip
        return sorted(s[0] for s in shapes if len(s) == 3 and s[1:] == (rows, B))

    monkeypatch.setattr(stack_cpu, "RECOMPUTE", 0)
    assert saved_z_steps() == [T + 1]
    stored = _run(*case, "lstm", finals=finals)
    monkeypatch.setattr(stack_cpu, "RECOMPUTE", every)
    assert saved_z_steps() == [-(-T // every)]  # the checkpoints (the backward reruns into its own ring)
    got = _run(*case, "lstm", retain=True, finals=finals)
    _assert_equal(stored, (got[0], got[1][: len(got[1]) // 2]))
    _assert_equal(stored, (got[0], got[1][len(got[1]) // 2 :]))


def test_recomputed_memory_with_a_value_mlp(monkeypatch, gen):
    """A value MLP (its weights' gradients read every step's ``h``, kept apart from the ring)."""
    args, mem0, lens = _case(gen, torch.float64, "lstm", 13, 6, None, "ragged", "zero")
    args[4], args[5] = args[4][:3].detach().requires_grad_(), args[5][:3].detach().requires_grad_()
    rnd = lambda *s: (0.5 * torch.randn(*s, generator=gen, dtype=torch.float64)).requires_grad_()  # noqa: E731
    mlp = [(rnd(7, N), rnd(7)), (rnd(WIDTH, 7), rnd(WIDTH))]

    def run():
        h, r, *_ = stack_rnn_sequence(
            *args, mem0, controller="lstm", activation="", memory="superposition", value_activation="sigmoid",
            value_mlp=mlp, lengths=lens, impl="native", finals=False,
        )  # fmt: skip
        return torch.autograd.grad(h.sin().sum() + r.cos().sum(), [*args, *(t for p in mlp for t in p)])

    monkeypatch.setattr(stack_cpu, "RECOMPUTE", 0)
    stored = run()
    monkeypatch.setattr(stack_cpu, "RECOMPUTE", 4)
    for i, (a, b) in enumerate(zip(stored, run(), strict=True)):
        assert torch.equal(a, b), f"gradient {i}"


def test_recomputed_memory_with_the_overflow(monkeypatch, gen):
    """Asking for the overflow (which reads the bottom cell, so only the filled trim applies): the
    overflow, the outputs and the gradients as with the stored history (the rerun skips it)."""
    args, mem0, lens = _case(gen, torch.float64, "lstm", 23, 6, None, "ragged", "zero")

    def run():
        h, r, *_, ov = stack_rnn_sequence(
            *args, mem0, controller="lstm", activation="", memory="superposition", value_activation="sigmoid",
            overflow=True, lengths=lens, impl="native", finals=False,
        )  # fmt: skip
        return (ov, h.detach(), *torch.autograd.grad(h.sin().sum() + r.cos().sum(), args))

    monkeypatch.setattr(stack_cpu, "RECOMPUTE", 0)
    stored = run()
    assert stored[0].abs().sum() > 0  # the stack overflowed somewhere
    monkeypatch.setattr(stack_cpu, "RECOMPUTE", 4)
    for i, (a, b) in enumerate(zip(stored, run(), strict=True)):
        assert torch.equal(a, b), f"result {i}"


def test_recomputed_memory_writes_no_saved_tensor(monkeypatch, gen):
    """The backward reruns the memory's steps into a ring of its own: every tensor the forward saved
    (its storage, views included) is bit for bit the same after two backward passes (compared as
    bytes: NaN where the forward left memory unwritten compares equal to itself)."""
    monkeypatch.setattr(stack_cpu, "RECOMPUTE", 4)
    args, mem0, lens = _case(gen, torch.float64, "lstm", 13, 9, None, "ragged", "zero")
    kept = []

    def pack(t):
        kept.append((t, t.detach().clone()))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        h, r, *_ = stack_rnn_sequence(
            *args, mem0, controller="lstm", activation="", memory="superposition", value_activation="sigmoid",
            lengths=lens, impl="native", finals=False,
        )  # fmt: skip
    loss = h.sin().sum() + r.cos().sum()
    torch.autograd.grad(loss, args, retain_graph=True)
    torch.autograd.grad(loss, args)
    assert kept
    for i, (t, before) in enumerate(kept):
        assert_unwritten(t, before, f"saved tensor {i}")


@pytest.mark.parametrize("finals", [False, True])
def test_recomputed_memory_frees_the_forwards_ring(monkeypatch, gen, finals):
    """The forward's ring of ``RECOMPUTE + 1`` windows is freed when the forward returns: the
    backward reruns its steps into a ring of its own, so the graph keeps no view of the forward's
    (the memory kernel's ``Sp`` is released), and the gradients stay the stored history's."""
    T, depth = 20, 20
    case = _case(gen, torch.float64, "lstm", T, depth, None, "ragged", "zero")
    monkeypatch.setattr(stack_cpu, "RECOMPUTE", 0)
    stored = _run(*case, "lstm", finals=finals)
    monkeypatch.setattr(stack_cpu, "RECOMPUTE", 8)
    h, *_ = stack_rnn_sequence(
        *case[0], case[1], controller="lstm", activation="", memory="superposition",
        value_activation="sigmoid", lengths=case[2], impl="native", finals=finals,
    )  # fmt: skip
    nodes = [n for n in function_nodes([h.grad_fn]) if n._forward_cls is stack_cpu.StackRNNSequence]
    assert len(nodes) == 1
    kept = nodes[0].mem.Sp
    assert kept.numel() == 0 and kept.untyped_storage().nbytes() == 0
    _assert_equal(stored, _run(*case, "lstm", finals=finals))
