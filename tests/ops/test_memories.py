"""The differentiable memories' batched steps against their literal references: Joulin &
Mikolov's (2015) superposition stack, Grefenstette et al.'s (2015) stratification stack, neural
queue and DeQue, and the tape of Delétang et al.'s (2023) Tape-RNN; hand-worked examples, every
reading and gradient, and what a bounded window drops."""

from __future__ import annotations

import pytest
import torch

from memrnn.ops.deque import deque_reference, deque_step
from memrnn.ops.stratification import stratification_reference, stratification_step
from memrnn.ops.superposition import superposition_reference, superposition_step
from memrnn.ops.tape import tape_jump_step, tape_reference, tape_step


def run_superposition(actions, pushed, depth):
    B, T, m = pushed.shape
    stack = pushed.new_zeros(B, depth, m)
    readings, overflow = [], []
    for t in range(T):
        stack, lost = superposition_step(stack, actions[:, t], pushed[:, t])
        readings.append(stack[:, 0])
        overflow.append(lost)
    return torch.stack(readings, 1), stack, torch.stack(overflow, 1)


def run_stratification(pops, pushes, values, capacity, kind):
    B, T, m = values.shape
    V, s = values.new_zeros(B, capacity, m), values.new_zeros(B, capacity)
    readings, overflow = [], []
    for t in range(T):
        V, s, r, lost = stratification_step(V, s, pops[:, t], pushes[:, t], values[:, t], kind)
        readings.append(r)
        overflow.append(lost)
    return torch.stack(readings, 1), s, torch.stack(overflow, 1)


def test_superposition_by_hand():
    """Push [1, 0], push [0, 1], pop (the [2, 2] offered is not pushed): [1, 0] on top again;
    then half a push of [4, 0] and half a no-op: 0.5·[4, 0] + 0.5·[1, 0] on top."""
    v = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [2.0, 2.0], [4.0, 0.0]]], dtype=torch.float64)
    a = torch.tensor([[[1.0, 0, 0], [1.0, 0, 0], [0, 1.0, 0], [0.5, 0, 0.5]]], dtype=torch.float64)
    r, stack, _ = run_superposition(a, v, depth=4)
    assert r[0].tolist() == [[1.0, 0.0], [0.0, 1.0], [1.0, 0.0], [2.5, 0.0]]
    # below the top: 0.5·(v1 pushed down) + 0.5·(empty) = [0.5, 0]
    assert stack[0, 1].tolist() == [0.5, 0.0]
    ref, cells = superposition_reference(a, v)
    assert torch.equal(ref, r) and len(cells[0]) == 4


def test_stratification_by_hand():
    """Grefenstette et al.'s (2015) worked example (their figure 1): r3 = 0.9·v3 + 0.1·v1."""
    v = torch.eye(3, dtype=torch.float64)[None]
    u = torch.tensor([[0.0, 0.1, 0.9]], dtype=torch.float64)
    d = torch.tensor([[0.8, 0.5, 0.9]], dtype=torch.float64)
    r, s, _ = run_stratification(u, d, v, capacity=3, kind="stack")
    torch.testing.assert_close(
        r[0], torch.tensor([[0.8, 0, 0], [0.5, 0.5, 0], [0.1, 0, 0.9]], dtype=torch.float64)
    )
    torch.testing.assert_close(s[0], torch.tensor([0.9, 0.0, 0.3], dtype=torch.float64))  # newest first
    ref_r, ref_s = stratification_reference(u, d, v)
    torch.testing.assert_close(ref_r, r)
    torch.testing.assert_close(ref_s.flip(-1), s)
    # the queue reads and pops from the front: v1 first
    rq, _, _ = run_stratification(u, d, v, capacity=3, kind="queue")
    torch.testing.assert_close(rq[0, 1], torch.tensor([0.7, 0.3, 0], dtype=torch.float64))


def _inputs(B, T, m, dtype, gen):
    actions = torch.randn(B, T, 3, generator=gen, dtype=dtype).softmax(-1).requires_grad_()
    pushed = torch.randn(B, T, m, generator=gen, dtype=dtype).requires_grad_()
    return actions, pushed


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_superposition_step_equals_the_reference_with_gradients(dtype):
    gen = torch.Generator().manual_seed(0)
    actions, pushed = _inputs(3, 9, 4, dtype, gen)
    w = torch.randn(3, 9, 4, generator=gen, dtype=dtype)
    fast, stack, overflow = run_superposition(actions, pushed, depth=9)
    ref, cells = superposition_reference(actions, pushed)
    tol = {"atol": 1e-12, "rtol": 0} if dtype == torch.float64 else {"atol": 1e-6, "rtol": 1e-5}
    torch.testing.assert_close(fast, ref, **tol)
    torch.testing.assert_close(stack, torch.stack([torch.stack(c) for c in cells]), **tol)
    assert bool((overflow == 0).all())  # depth = T: nothing leaves the window
    g_fast = torch.autograd.grad((fast * w).sum(), (actions, pushed))
    g_ref = torch.autograd.grad((ref * w).sum(), (actions, pushed))
    for a, b in zip(g_fast, g_ref, strict=True):
        torch.testing.assert_close(a, b, **tol)


def test_superposition_window_reports_what_it_drops():
    gen = torch.Generator().manual_seed(1)
    actions, pushed = _inputs(2, 12, 3, torch.float64, gen)
    fast, _, overflow = run_superposition(actions, pushed, depth=4)
    ref, _ = superposition_reference(actions, pushed)
    assert bool((overflow[:, :4] == 0).all()) and bool((overflow[:, 4:] > 0).all())
    # content needs depth steps down and back up to reach the top: the first 2·depth readings agree
    torch.testing.assert_close(fast[:, :8], ref[:, :8], atol=1e-12, rtol=0)
    assert not torch.allclose(fast, ref, atol=1e-12)
    # hard pushes and pops that stay within 4 cells drop nothing and agree everywhere
    seq = [0, 0, 0, 1, 0, 1, 1, 2, 0, 1, 1, 1]  # push push push pop push pop pop no-op push pop pop pop
    hard = torch.nn.functional.one_hot(torch.tensor([seq, seq]), 3).double()
    fast, _, overflow = run_superposition(hard, pushed.detach(), depth=4)
    assert bool((overflow == 0).all())
    torch.testing.assert_close(fast, superposition_reference(hard, pushed.detach())[0], atol=0, rtol=0)


@pytest.mark.parametrize("kind", ["stack", "queue"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_stratification_step_equals_the_reference_with_gradients(kind, dtype):
    gen = torch.Generator().manual_seed(2)
    B, T, m = 3, 8, 4
    pops = torch.rand(B, T, generator=gen, dtype=dtype).requires_grad_()
    pushes = torch.rand(B, T, generator=gen, dtype=dtype).requires_grad_()
    values = torch.randn(B, T, m, generator=gen, dtype=dtype).requires_grad_()
    w = torch.randn(B, T, m, generator=gen, dtype=dtype)
    fast, s, overflow = run_stratification(pops, pushes, values, capacity=T, kind=kind)
    ref, ref_s = stratification_reference(pops, pushes, values, kind)
    tol = {"atol": 1e-12, "rtol": 0} if dtype == torch.float64 else {"atol": 1e-6, "rtol": 1e-5}
    torch.testing.assert_close(fast, ref, **tol)
    torch.testing.assert_close(s, ref_s.flip(-1), **tol)
    assert bool((overflow == 0).all())
    inputs = (pops, pushes, values)
    for a, b in zip(
        torch.autograd.grad((fast * w).sum(), inputs),
        torch.autograd.grad((ref * w).sum(), inputs),
        strict=True,
    ):
        torch.testing.assert_close(a, b, **tol)


def test_stratification_window_drops_only_spent_elements_silently():
    """A stack whose old elements were popped to strength 0 loses nothing when they leave a
    small window; one that still holds strength there reports it."""
    B, T, m = 1, 10, 2
    values = torch.randn(B, T, m, dtype=torch.float64)
    pushes = torch.ones(B, T, dtype=torch.float64)
    pops = torch.ones(B, T, dtype=torch.float64)  # every step pops the previous element entirely
    fast, _, overflow = run_stratification(pops, pushes, values, capacity=2, kind="stack")
    assert bool((overflow == 0).all())
    torch.testing.assert_close(fast, stratification_reference(pops, pushes, values)[0], atol=1e-12, rtol=0)
    _, _, overflow = run_stratification(torch.zeros_like(pops), pushes, values, capacity=2, kind="stack")
    assert overflow[0, 2:].tolist() == [1.0] * 8


def test_reference_rejects_an_unknown_kind():
    with pytest.raises(ValueError, match="kind must be 'stack' or 'queue', got 'deque'"):
        stratification_reference(torch.zeros(1, 1), torch.zeros(1, 1), torch.zeros(1, 1, 1), "deque")  # type: ignore[arg-type]


def run_tape(actions, written, cells):
    B, T, m = written.shape
    tape = written.new_zeros(B, cells, m)
    readings = []
    for t in range(T):
        tape = tape_step(tape, actions[:, t], written[:, t])
        readings.append(tape[:, 0])
    return torch.stack(readings, 1), tape


def test_tape_by_hand():
    """Three cells, head on cell 0; "right" rolls the contents one cell on (new[i] = W[i−1]),
    "left" one cell back (new[i] = W[i+1]), after the write W:

    write a, right: [0, a, 0];  write b, right: [0, b, a];  write c, left: [b, a, c] (reads b);
    write 0, left: [a, c, 0] (reads a: the tape is a circle)."""
    a, b, c = torch.eye(3, dtype=torch.float64)
    zero = torch.zeros(3, dtype=torch.float64)
    w = torch.stack([a, b, c, zero])[None]
    _, left, right = torch.eye(3, dtype=torch.float64)
    acts = torch.stack([right, right, left, left])[None]
    r, tape = run_tape(acts, w, cells=3)
    assert r[0].tolist() == [zero.tolist(), zero.tolist(), b.tolist(), a.tolist()]
    assert tape[0].tolist() == [a.tolist(), c.tolist(), zero.tolist()]
    ref_r, ref_tape = tape_reference(acts, w, cells=3)
    assert torch.equal(ref_r, r) and torch.equal(ref_tape, tape)
    # write a, b, c moving right each time: [a, c, b], the head is back on a
    r3, _ = run_tape(torch.stack([right] * 3)[None], torch.stack([a, b, c])[None], cells=3)
    assert r3[0, 2].tolist() == a.tolist()


@pytest.mark.parametrize("cells", [1, 2, 5])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_tape_step_equals_the_reference_with_gradients(cells, dtype):
    gen = torch.Generator().manual_seed(3)
    actions, written = _inputs(3, 7, 2, dtype, gen)
    w = torch.randn(3, 7, 2, generator=gen, dtype=dtype)
    fast, tape = run_tape(actions, written, cells)
    ref, ref_tape = tape_reference(actions, written, cells)
    tol = {"atol": 1e-12, "rtol": 0} if dtype == torch.float64 else {"atol": 1e-6, "rtol": 1e-5}
    torch.testing.assert_close(fast, ref, **tol)
    torch.testing.assert_close(tape, ref_tape, **tol)
    for x, y in zip(
        torch.autograd.grad((fast * w).sum(), (actions, written)),
        torch.autograd.grad((ref * w).sum(), (actions, written)),
        strict=True,
    ):
        torch.testing.assert_close(x, y, **tol)


def run_deque(pops, pushes, v_top, v_bot, capacity):
    """``pops``, ``pushes`` ``[B, T, 2]`` (top, bottom)."""
    B, T, m = v_top.shape
    V, s = v_top.new_zeros(B, 2 * capacity, m), v_top.new_zeros(B, 2 * capacity)
    tops, bots, overflow = [], [], []
    for t in range(T):
        V, s, r_top, r_bot, lost = deque_step(V, s, pops[:, t], pushes[:, t], v_top[:, t], v_bot[:, t])
        tops.append(r_top)
        bots.append(r_bot)
        overflow.append(lost)
    return torch.stack(tops, 1), torch.stack(bots, 1), s, torch.stack(overflow, 1)


def test_deque_by_hand():
    """Two steps worked by hand (Grefenstette et al. 2015, section 3.3: pop the top, then the
    bottom, then push both ends).  Step 1 pushes e1 (0.8) on top and e2 (0.5) below; step 2 pops
    0.9 from the top (all of e1, 0.1 of e2) and 0.3 from the bottom (e2: 0.4 -> 0.1), then pushes
    e3 (0.2) on top and e4 (0) below."""
    e = torch.eye(4, dtype=torch.float64)
    v_top, v_bot = torch.stack([e[0], e[2]])[None], torch.stack([e[1], e[3]])[None]
    pops = torch.tensor([[[0.0, 0.0], [0.9, 0.3]]], dtype=torch.float64)
    pushes = torch.tensor([[[0.8, 0.5], [0.2, 0.0]]], dtype=torch.float64)
    r_top, r_bot, s, _ = run_deque(pops, pushes, v_top, v_bot, capacity=2)
    f64 = {"dtype": torch.float64}
    torch.testing.assert_close(r_top[0, 0], torch.tensor([0.8, 0.2, 0, 0], **f64))
    torch.testing.assert_close(r_bot[0, 0], torch.tensor([0.5, 0.5, 0, 0], **f64))
    torch.testing.assert_close(r_top[0, 1], torch.tensor([0, 0.1, 0.2, 0], **f64))
    torch.testing.assert_close(r_bot[0, 1], torch.tensor([0, 0.1, 0.2, 0], **f64))
    torch.testing.assert_close(s[0], torch.tensor([0.0, 0.1, 0.0, 0.2], **f64))  # e4, e2 | e1, e3
    ref_top, ref_bot, ref_s = deque_reference(
        pops[..., 0], pops[..., 1], pushes[..., 0], pushes[..., 1], v_top, v_bot
    )
    torch.testing.assert_close(ref_top, r_top)
    torch.testing.assert_close(ref_bot, r_bot)
    torch.testing.assert_close(ref_s, s)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_deque_step_equals_the_reference_with_gradients(dtype):
    gen = torch.Generator().manual_seed(5)
    B, T, m = 3, 7, 4
    pops = torch.rand(B, T, 2, generator=gen, dtype=dtype).requires_grad_()
    pushes = torch.rand(B, T, 2, generator=gen, dtype=dtype).requires_grad_()
    v_top = torch.randn(B, T, m, generator=gen, dtype=dtype).requires_grad_()
    v_bot = torch.randn(B, T, m, generator=gen, dtype=dtype).requires_grad_()
    w_top, w_bot = torch.randn(2, B, T, m, generator=gen, dtype=dtype)
    r_top, r_bot, s, overflow = run_deque(pops, pushes, v_top, v_bot, capacity=T)
    ref_top, ref_bot, ref_s = deque_reference(
        pops[..., 0], pops[..., 1], pushes[..., 0], pushes[..., 1], v_top, v_bot
    )
    tol = {"atol": 1e-12, "rtol": 0} if dtype == torch.float64 else {"atol": 1e-6, "rtol": 1e-5}
    torch.testing.assert_close(r_top, ref_top, **tol)
    torch.testing.assert_close(r_bot, ref_bot, **tol)
    torch.testing.assert_close(s, ref_s, **tol)  # with capacity T the window is the paper's 2T slots
    assert bool((overflow == 0).all())
    inputs = (pops, pushes, v_top, v_bot)
    fast = (r_top * w_top + r_bot * w_bot).sum()
    ref = (ref_top * w_top + ref_bot * w_bot).sum()
    for a, b in zip(torch.autograd.grad(fast, inputs), torch.autograd.grad(ref, inputs), strict=True):
        torch.testing.assert_close(a, b, **tol)


def test_deque_with_one_end_idle_is_the_stack_or_the_queue():
    """Pushing and popping only at the top makes the DeQue a stratification stack read at the top;
    pushing at the top and popping at the bottom makes it the neural queue read at the bottom."""
    gen = torch.Generator().manual_seed(6)
    B, T, m = 2, 9, 3
    u, d = torch.rand(2, B, T, generator=gen, dtype=torch.float64)
    v = torch.randn(B, T, m, generator=gen, dtype=torch.float64)
    zero = torch.zeros_like(u)
    r_top, _, _, _ = run_deque(
        torch.stack([u, zero], -1), torch.stack([d, zero], -1), v, torch.zeros_like(v), T
    )
    torch.testing.assert_close(r_top, run_stratification(u, d, v, T, "stack")[0], atol=1e-12, rtol=0)
    _, r_bot, _, _ = run_deque(
        torch.stack([zero, u], -1), torch.stack([d, zero], -1), v, torch.zeros_like(v), T
    )
    torch.testing.assert_close(r_bot, run_stratification(u, d, v, T, "queue")[0], atol=1e-12, rtol=0)


def test_deque_window_reports_what_it_drops():
    """Elements popped to strength 0 leave a small window silently; live ones are reported, one per
    end per step once both halves are full."""
    B, T, m = 1, 8, 2
    v = torch.randn(B, T, m, dtype=torch.float64)
    ones, zeros = torch.ones(B, T, 2, dtype=torch.float64), torch.zeros(B, T, 2, dtype=torch.float64)
    pops = torch.stack([torch.ones(B, T), torch.ones(B, T)], -1).double()  # both ends popped empty each step
    r_top, r_bot, _, overflow = run_deque(pops, ones, v, v, capacity=2)
    assert bool((overflow == 0).all())
    ref_top, ref_bot, _ = deque_reference(pops[..., 0], pops[..., 1], ones[..., 0], ones[..., 1], v, v)
    torch.testing.assert_close(r_top, ref_top, atol=1e-12, rtol=0)
    torch.testing.assert_close(r_bot, ref_bot, atol=1e-12, rtol=0)
    _, _, _, overflow = run_deque(zeros, ones, v, v, capacity=2)
    assert overflow[0].tolist() == [0.0, 0.0] + [2.0] * 6


def run_jump_tape(actions, written, cells, jumps):
    B, T, m = written.shape
    tape = written.new_zeros(B, cells, m)
    readings = []
    for t in range(T):
        tape = tape_jump_step(tape, actions[:, t], written[:, t], jumps)
        readings.append(tape[:, 0])
    return torch.stack(readings, 1), tape


def test_jump_tape_by_hand():
    """Five cells, input length 2 (Delétang et al.'s jumps, c'_i = W_{i+L} left, W_{i−L} right):
    write a and jump left: a moves to cell 3 and the head reads cell 2 (0); write b and jump right:
    the head is back over a (cell 3 of the previous tape) and reads it."""
    a, b = torch.eye(2, dtype=torch.float64)
    zero = torch.zeros(2, dtype=torch.float64)
    jl, jr = torch.eye(5, dtype=torch.float64)[3], torch.eye(5, dtype=torch.float64)[4]
    r, tape = run_jump_tape(torch.stack([jl, jr])[None], torch.stack([a, b])[None], 5, torch.tensor([2]))
    assert r[0].tolist() == [zero.tolist(), a.tolist()]
    assert tape[0, 2].tolist() == b.tolist()  # b was written two cells to the right of a
    ref_r, ref_tape = tape_reference(
        torch.stack([jl, jr])[None], torch.stack([a, b])[None], 5, torch.tensor([2])
    )
    assert torch.equal(ref_r, r) and torch.equal(ref_tape, tape)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_jump_tape_step_equals_the_reference_with_gradients(dtype):
    """Rows with jumps 0, 3 and 11 (more than the 5 cells: the tape is a circle)."""
    gen = torch.Generator().manual_seed(4)
    actions = torch.randn(3, 7, 5, generator=gen, dtype=dtype).softmax(-1).requires_grad_()
    written = torch.randn(3, 7, 2, generator=gen, dtype=dtype).requires_grad_()
    jumps = torch.tensor([0, 3, 11])
    w = torch.randn(3, 7, 2, generator=gen, dtype=dtype)
    fast, tape = run_jump_tape(actions, written, 5, jumps.to(dtype))
    ref, ref_tape = tape_reference(actions, written, 5, jumps)
    tol = {"atol": 1e-12, "rtol": 0} if dtype == torch.float64 else {"atol": 1e-6, "rtol": 1e-5}
    torch.testing.assert_close(fast, ref, **tol)
    torch.testing.assert_close(tape, ref_tape, **tol)
    for x, y in zip(
        torch.autograd.grad((fast * w).sum(), (actions, written)),
        torch.autograd.grad((ref * w).sum(), (actions, written)),
        strict=True,
    ):
        torch.testing.assert_close(x, y, **tol)
    # with both jumps at 0 the jump tape is the three-move tape
    three = actions.detach()[..., :3].softmax(-1)
    five = torch.cat([three, torch.zeros_like(three[..., :2])], -1)
    torch.testing.assert_close(
        run_jump_tape(five, written.detach(), 5, jumps)[0], run_tape(three, written.detach(), 5)[0]
    )


# -- the fused paths' reference: stack_rnn_sequence(impl="reference") ----------------------------
def _sequence_case(memory: str, controller: str, gen: torch.Generator, mlp: bool = False):
    """Random float64 arguments of ``stack_rnn_sequence`` (B 3, T 5, N 4, m 2, depth 3; row lengths
    5, 2, 0), every tensor a leaf that wants its gradient (but the jump tape's jumps)."""
    from memrnn.ops.stack_rnn.specs import spec as memory_spec

    s = memory_spec(memory)
    B, T, n, N, m, D = 3, 5, 3, 4, 2, 3
    units = s.reads * m
    G = 4 * N if controller == "lstm" else N
    r = lambda *shape: (0.5 * torch.randn(*shape, generator=gen, dtype=torch.float64)).requires_grad_()  # noqa: E731
    k = s.n_actions
    if memory in ("superposition", "tape"):
        mem0 = (r(B, D, m),)
    elif memory == "tape_jump":
        mem0 = (torch.tensor([1.0, 2.0, 0.0], dtype=torch.float64), r(B, D, m))
    elif memory == "deque":
        mem0 = (
            r(B, 2 * D, m),
            torch.rand(B, 2 * D, generator=gen, dtype=torch.float64).requires_grad_(),
            r(B, 2 * m),
        )
    else:
        mem0 = (r(B, D, m), torch.rand(B, D, generator=gen, dtype=torch.float64).requires_grad_(), r(B, m))
    head = (r(k, N), r(k)) if mlp else (r(k + units, N), r(k + units))
    args = (
        r(B, T, n),
        r(G, n + units),
        r(G),
        r(G, N),
        *head,
        r(B, N),
        r(B, N) if controller == "lstm" else None,
        mem0,
    )
    kwargs = dict(controller=controller, activation="tanh", memory=memory, value_activation=s.value_activation,
                  lengths=torch.tensor([5, 2, 0]), overflow=True)  # fmt: skip
    if mlp:
        kwargs["value_mlp"] = ((r(5, N), r(5)), (r(units, 5), r(units)))
    return args, kwargs


def _leaves(args, kwargs):
    flat = [*args[:-1], *args[-1], *(t for layer in kwargs.get("value_mlp", ()) for t in layer)]
    return [t for t in flat if t is not None and t.requires_grad]


MEMORIES = ("superposition", "stratification", "queue", "tape", "tape_jump", "deque")


@pytest.mark.parametrize("controller", ["lstm", "elman"])
@pytest.mark.parametrize("memory", MEMORIES)
def test_reference_sequence_equals_the_cpu_path_with_gradients(memory, controller):
    """``impl="reference"`` (the memories' torch steps under autograd) and ``impl="cpu"`` (the
    hand-written BPTT) agree to 1e-12 in float64: outputs, final states, overflow and every
    gradient, with rows of different lengths (one of length 0)."""
    from memrnn.ops.stack_rnn import stack_rnn_sequence

    gen = torch.Generator().manual_seed(66)
    args, kwargs = _sequence_case(memory, controller, gen, mlp=memory == "tape")
    leaves = _leaves(args, kwargs)
    results = {}
    for impl in ("reference", "cpu"):
        out = [o for o in stack_rnn_sequence(*args, **kwargs, impl=impl) if o is not None]
        loss = sum((o * torch.linspace(-1, 1, o.numel(), dtype=o.dtype).view(o.shape)).sum()
                   for o in out if o.is_floating_point() and o.requires_grad)  # fmt: skip
        results[impl] = (out, torch.autograd.grad(loss, leaves, allow_unused=True))
    (out_ref, g_ref), (out_cpu, g_cpu) = results["reference"], results["cpu"]
    assert len(out_ref) == len(out_cpu)
    for a, b in zip(out_ref, out_cpu, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12)
    for a, b in zip(g_ref, g_cpu, strict=True):
        if a is None or b is None:
            assert (a is None and b is None) or (a if b is None else b).abs().max() == 0
            continue
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12)


def test_impl_reference_runs_the_reference_and_cpu_does_not(monkeypatch):
    """``stack_rnn_sequence(impl="reference")`` and ``implementation("reference")`` call
    :func:`memrnn.ops.stack_rnn.reference.stack_rnn_reference`; ``impl="cpu"`` does not."""
    from memrnn.ops.dispatch import implementation
    from memrnn.ops.stack_rnn import reference, stack_rnn_sequence

    calls = []
    real = reference.stack_rnn_reference
    monkeypatch.setattr(reference, "stack_rnn_reference", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    args, kwargs = _sequence_case("stratification", "elman", torch.Generator().manual_seed(0))
    stack_rnn_sequence(*args, **kwargs, impl="cpu")
    assert calls == []
    stack_rnn_sequence(*args, **kwargs, impl="reference")
    assert calls == [1]
    with implementation("reference"):
        stack_rnn_sequence(*args, **kwargs)
    assert calls == [1, 1]
