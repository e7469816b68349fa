"""The memory-limited nondeterministic stack's window as DuSell & Chiang name it: their
``window_size = D`` (the memory-limited RNS-RNN, 2022; ``--window-size`` of their scripts) is
memrnn's ``depth = D − 1``, and ``NondeterministicStack(window_size=D)`` (``StackRNN``'s
``memory_args={"window_size": D}``) builds it.

Their convention, read from their code (``LimitedNondeterministicStack.update`` in
``src/stack_rnn_models/limited_nondeterministic_stack.py``, and ``nsrnn/models/
limited_nondeterministic_stack.py`` at tag ``iclr2022``): step ``j`` computes the inner weights
``γ[i → j]`` of the ``D`` start times ``j − D ≤ i ≤ j − 1`` only (``next_gamma_column`` returns
``D`` of them: the pop term over ``D − 2``, the replace term over ``D − 1``, the push), and
``α[j]`` sums ``α[i] γ[i → j]`` over the same ``D``.  A run whose top element was pushed at
step ``i + 1`` therefore survives step ``j`` iff ``i ≥ j − D``.  The hand-worked runs below are
that bound, on runs whose weights can be added up by hand."""

from __future__ import annotations

import pytest
import torch

from memrnn.layers import NondeterministicStack, StackRNN, VectorNondeterministicStack
from memrnn.ops.nondeterministic import (
    DEFAULT_DEPTH,
    LOG_ZERO,
    nondeterministic_reference,
    vector_nondeterministic_reference,
    window_depth,
)

F64 = torch.float64


def readings(mem: NondeterministicStack, push, repl, pop) -> torch.Tensor:
    """The memory's readings ``[B, T, Q·S]`` after each step of the log weights ``push, repl
    [B, T, QS, QS]`` and ``pop [B, T, QS, Q]`` (its :meth:`update` with the weights given, no
    controller)."""
    B, T = push.shape[:2]
    state = mem.initial_state(B, device=None, dtype=push.dtype)
    out = []
    for t in range(T):
        state, _ = mem.update(state, (push[:, t], repl[:, t], pop[:, t]))
        out.append(mem.read(state))
    return torch.stack(out, 1)


def one_state_pda(S: int, steps: list[dict]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Log weights ``[1, T, S, S]``, ``[1, T, S, S]``, ``[1, T, S, 1]`` of a PDA with one state
    whose step ``t`` has the weights of ``steps[t]``: ``"push": {(x, y): w}`` (``x → xy``),
    ``"repl": {(x, y): w}`` (``x → y``), ``"pop": {x: w}``; every other transition weighs 0."""
    T = len(steps)
    push = torch.full((1, T, S, S), LOG_ZERO, dtype=F64)
    repl = torch.full((1, T, S, S), LOG_ZERO, dtype=F64)
    pop = torch.full((1, T, S, 1), LOG_ZERO, dtype=F64)
    for t, step in enumerate(steps):
        for (x, y), w in step.get("push", {}).items():
            push[0, t, x, y] = float(torch.tensor(w, dtype=F64).log())
        for (x, y), w in step.get("repl", {}).items():
            repl[0, t, x, y] = float(torch.tensor(w, dtype=F64).log())
        for x, w in step.get("pop", {}).items():
            pop[0, t, x, 0] = float(torch.tensor(w, dtype=F64).log())
    return push, repl, pop


A, B, C = 0, 1, 2  # stack symbols: a (the bottom), b, c


@pytest.mark.parametrize("bottom_symbol", ["fixed", "original"])
def test_a_window_of_two_cannot_pop_and_three_can(bottom_symbol):
    """Push b, push b, then replace b → a (weight 1) or pop (weight 1).  The replace run's top
    was pushed at step 2 (start time 1, ``j − i = 2``); the pop run uncovers the b pushed at step
    1 (start time 0, ``j − i = 3``).  Their ``window_size = 2`` keeps start times 1 and 2 at step
    3, the replace run alone: the reading is a.  ``window_size = 3`` keeps start time 0 too: a and
    b, 1 : 1.  (At ``D = 2`` their pop term ranges over ``D − 2 = 0`` start times: no pop ever
    counts.)  No run from the bottom's start time −1 has weight here, so both bottoms agree."""
    push, repl, pop = one_state_pda(
        2,
        [
            {"push": {(A, B): 1, (B, B): 1}},
            {"push": {(A, B): 1, (B, B): 1}},
            {"repl": {(B, A): 1}, "pop": {B: 1}},
        ],
    )
    kw = {"states": 1, "symbols": 2, "bottom_symbol": bottom_symbol, "dtype": F64}
    mem = {D: NondeterministicStack(4, window_size=D, **kw) for D in (2, 3)}
    # steps 1, 2: b on top (one run); step 3: a alone, or a and b alike
    expected = {2: [[0.0, 1.0], [0.0, 1.0], [1.0, 0.0]], 3: [[0.0, 1.0], [0.0, 1.0], [0.5, 0.5]]}
    for D in (2, 3):
        assert mem[D].depth == D - 1 and mem[D].window_size == D
        got = readings(mem[D], push, repl, pop)[0]
        torch.testing.assert_close(got, torch.tensor(expected[D], dtype=F64), atol=1e-12, rtol=0)
    # at D = 2 the pop weights are not read at all: any other value gives the same readings
    other = readings(mem[2], push, repl, torch.zeros_like(pop))[0]
    torch.testing.assert_close(other, torch.tensor(expected[2], dtype=F64), atol=1e-12, rtol=0)


@pytest.mark.parametrize("D", [2, 3, 4, 5])
@pytest.mark.parametrize("bottom_symbol", ["fixed", "original"])
def test_a_window_of_D_keeps_a_top_pushed_D_minus_1_steps_before_and_no_older(D, bottom_symbol):
    """Push b at step 1, then replace b → b at every step (the old run: its top pushed at step 1,
    start time 0); at step ``n`` also push c onto b (the young run, start time ``n − 1``), each
    weight 1.  Their window of ``D`` start times keeps the old run at step ``n`` iff ``0 ≥ n − D``:
    at ``n = D`` the reading is b and c, 1 : 1; at ``n = D + 1`` the young run alone, c."""
    for n, last in ((D, [0.0, 0.5, 0.5]), (D + 1, [0.0, 0.0, 1.0])):
        steps = [{"push": {(A, B): 1}}] + [{"repl": {(B, B): 1}} for _ in range(n - 1)]
        steps[-1] = {"repl": {(B, B): 1}, "push": {(B, C): 1}}
        push, repl, pop = one_state_pda(3, steps)
        mem = NondeterministicStack(
            4, states=1, symbols=3, window_size=D, bottom_symbol=bottom_symbol, dtype=F64
        )
        got = readings(mem, push, repl, pop)[0]
        torch.testing.assert_close(
            got[:-1], torch.tensor([[0.0, 1.0, 0.0]] * (n - 1), dtype=F64), atol=1e-12, rtol=0
        )
        torch.testing.assert_close(got[-1], torch.tensor(last, dtype=F64), atol=1e-12, rtol=0)


@pytest.mark.parametrize("D", [2, 3, 4])
@pytest.mark.parametrize("bottom_symbol", ["fixed", "original"])
def test_window_size_equals_their_bound_on_random_weights(D, bottom_symbol):
    """Random weights of 2 states × 2 symbols over 7 steps (longer than every window): the memory
    built with ``window_size=D`` reads what the literal recurrences read with their bound
    ``i ≥ j − D`` (:func:`nondeterministic_reference`'s ``window_size``), not ``i ≥ j − D − 1``."""
    gen = torch.Generator().manual_seed(D)
    Bt, T, Q, S = 2, 7, 2, 2
    push = torch.randn(Bt, T, Q, S, Q, S, generator=gen, dtype=F64)
    repl = torch.randn(Bt, T, Q, S, Q, S, generator=gen, dtype=F64)
    pop = torch.randn(Bt, T, Q, S, Q, generator=gen, dtype=F64)
    mem = NondeterministicStack(4, states=Q, symbols=S, window_size=D, bottom_symbol=bottom_symbol, dtype=F64)
    qs = Q * S
    got = readings(mem, push.reshape(Bt, T, qs, qs), repl.reshape(Bt, T, qs, qs), pop.reshape(Bt, T, qs, Q))
    ref = nondeterministic_reference(push, repl, pop, window_size=D, bottom_symbol=bottom_symbol)
    torch.testing.assert_close(got, ref.reshape(Bt, T, -1).softmax(-1), atol=1e-12, rtol=0)
    wider = nondeterministic_reference(push, repl, pop, window_size=D + 1, bottom_symbol=bottom_symbol)
    assert not torch.allclose(got, wider.reshape(Bt, T, -1).softmax(-1), atol=1e-6)


@pytest.mark.parametrize("D", [2, 4])
@pytest.mark.parametrize("bottom_symbol", ["fixed", "original"])
def test_the_vector_stacks_window_size_equals_their_bound(D, bottom_symbol):
    """The vector stack (their ``LimitedVectorNondeterministicStack``, the same ``window_size``)
    built with ``window_size=D`` reads the expected top vectors of the literal recurrences with
    their bound ``i ≥ j − D``; its bottom vector, where it has one, ``σ(0) = 1/2``."""
    gen = torch.Generator().manual_seed(10 + D)
    Bt, T, Q, S, m = 2, 6, 2, 2, 3
    push = torch.randn(Bt, T, Q, S, Q, S, generator=gen, dtype=F64)
    repl = torch.randn(Bt, T, Q, S, Q, S, generator=gen, dtype=F64)
    pop = torch.randn(Bt, T, Q, S, Q, generator=gen, dtype=F64)
    vectors = torch.nn.functional.logsigmoid(torch.randn(Bt, T, m, generator=gen, dtype=F64))
    kw = {"bottom": None} if bottom_symbol == "original" else {}
    mem = VectorNondeterministicStack(
        4, states=Q, symbols=S, vector_size=m, window_size=D, bottom_symbol=bottom_symbol, dtype=F64, **kw
    )
    qs = Q * S
    state = mem.initial_state(Bt, device=None, dtype=F64)
    got = []
    for t in range(T):
        actions = (
            push[:, t].reshape(Bt, qs, qs),
            repl[:, t].reshape(Bt, qs, qs),
            pop[:, t].reshape(Bt, qs, Q),
        )
        state, _ = mem.update(state, (*actions, vectors[:, t]))
        got.append(mem.read(state))
    bottom = mem.log_bottom(dtype=F64)
    _, ref = vector_nondeterministic_reference(
        push, repl, pop, vectors, bottom, window_size=D, bottom_symbol=bottom_symbol
    )
    torch.testing.assert_close(torch.stack(got, 1), ref.reshape(Bt, T, -1), atol=1e-12, rtol=0)


@pytest.mark.parametrize(
    ("memory", "args"),
    [
        ("nondeterministic", {"states": 2, "symbols": 2}),
        ("vector_nondeterministic", {"states": 2, "symbols": 2, "vector_size": 2}),
    ],
)
def test_stack_rnn_with_window_size_is_the_layer_with_depth_one_less(memory, args):
    """``memory_args={"window_size": D}`` builds the same layer as ``depth = D − 1``: the same
    parameters, the same outputs and final state bit for bit over more steps than the window."""
    torch.manual_seed(0)
    ours = StackRNN(3, 5, memory, "lstm", depth=3, memory_args=args).double()
    theirs = StackRNN(3, 5, memory, "lstm", memory_args={**args, "window_size": 4}).double()
    theirs.load_state_dict(ours.state_dict())
    assert theirs.memory.depth == 3 and theirs.memory.window_size == 4
    x = torch.randn(2, 7, 3, generator=torch.Generator().manual_seed(1), dtype=F64)
    (y1, s1), (y2, s2) = ours(x), theirs(x)
    assert torch.equal(y1, y2)
    assert all(torch.equal(a, b) for a, b in zip(s1, s2, strict=True))
    # a matching depth beside it is accepted; the default depth leaves the window to window_size
    both = StackRNN(3, 5, memory, "lstm", depth=3, memory_args={**args, "window_size": 4})
    assert both.memory.depth == 3
    assert StackRNN(3, 5, memory, "lstm", memory_args=args).memory.depth == DEFAULT_DEPTH


def test_depth_and_window_size_that_disagree_or_a_window_below_two_are_refused():
    with pytest.raises(ValueError, match=r"depth=5 and window_size=5 disagree.*window_size=5 is depth=4"):
        NondeterministicStack(4, depth=5, window_size=5)
    with pytest.raises(ValueError, match=r"depth=10 and window_size=35 disagree"):
        StackRNN(3, 5, "nondeterministic", depth=10, memory_args={"window_size": 35})
    with pytest.raises(ValueError, match=r"depth=2 and window_size=2 disagree"):
        VectorNondeterministicStack(4, depth=2, window_size=2)
    with pytest.raises(ValueError, match=r"window_size=1 .* keeps only each step's push"):
        StackRNN(3, 5, "nondeterministic", memory_args={"window_size": 1})
    for bad in (0, -3, 2.5, True, "4"):
        with pytest.raises(ValueError, match="window_size"):
            window_depth(window_size=bad)
    with pytest.raises(ValueError, match="no argument 'window_size'"):
        StackRNN(3, 5, "superposition", memory_args={"window_size": 4})
    assert window_depth() == DEFAULT_DEPTH and window_depth(7) == 7 and window_depth(window_size=35) == 34
