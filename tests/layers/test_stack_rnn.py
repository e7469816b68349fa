"""StackRNN: a controller driving a memory.  The interface suite (tests/core) covers every
registered pairing (fast path = reference loop with all gradients, masks, dtypes, export); this
file checks what is particular to it: the memory it drives is exactly its paper's (the literal
references run on the actions the layer took), strict windows, long sequences across the
backward's blocks, any controller, and clear errors."""

from __future__ import annotations

import contextlib
import functools
import pickle

import pytest
import torch

from memrnn.core import MemoryLayer, reference_paths, state_leaves, state_map
from memrnn.data import ChomskyDataModule
from memrnn.layers import (
    ElmanRNN,
    GRULayer,
    JumpTape,
    LSTMLayer,
    NondeterministicStack,
    ReLUCounter,
    StackOverflowError,
    StackRNN,
    SuperpositionStack,
)
from memrnn.lit import SequenceModule
from memrnn.ops.deque import deque_reference
from memrnn.ops.nondeterministic import nondeterministic_reference, vector_nondeterministic_reference
from memrnn.ops.stratification import stratification_reference
from memrnn.ops.superposition import superposition_reference
from memrnn.ops.tape import tape_reference
from tests.conftest import assert_close_tree

MEMORIES = ["superposition", "stratification", "queue", "tape"]


def layer(memory, controller="lstm", depth=12, **kw):
    torch.manual_seed(0)
    return StackRNN(3, 6, memory, controller, width=2, depth=depth, **kw).double()


@pytest.mark.parametrize("memory", MEMORIES)
def test_the_memory_is_its_papers_structure(memory, gen):
    """With depth >= T the readings the controller saw equal the literal transcription of the
    paper run on the actions and values the layer traced."""
    net = layer(memory)
    x = torch.randn(2, 12, 3, generator=gen, dtype=torch.float64)
    tr = net.trace(x)
    if memory == "superposition":
        actions = torch.stack([tr["push"], tr["pop"], tr["noop"]], -1)
        ref, _ = superposition_reference(actions, tr["value"])
    elif memory == "tape":
        actions = torch.stack([tr["stay"], tr["left"], tr["right"]], -1)
        ref, _ = tape_reference(actions, tr["value"], cells=12)
    else:
        kind = "stack" if memory == "stratification" else "queue"
        ref, _ = stratification_reference(tr["pop"], tr["push"], tr["value"], kind)
    torch.testing.assert_close(tr["reading"], ref, atol=1e-12, rtol=0)
    assert bool((tr["overflow"] == 0).all())


@pytest.mark.parametrize("controller", ["lstm", "elman"])
def test_the_deque_is_its_papers_structure(controller, gen):
    """Grefenstette et al.'s (2015) DeQue under a controller: the traced readings (top, then
    bottom) equal the literal transcription run on the traced strengths and values; a depth-3
    window under strict mode names the step that drops content."""
    net = layer("deque", controller)
    assert net.width == 4 and net.memory.head.out_features == 4 + 2 * 2  # reads both ends
    x = torch.randn(2, 12, 3, generator=gen, dtype=torch.float64)
    tr = net.trace(x)
    v_top, v_bot = tr["value"].split(2, -1)
    r_top, r_bot, _ = deque_reference(
        tr["pop_top"], tr["pop_bot"], tr["push_top"], tr["push_bot"], v_top, v_bot
    )
    torch.testing.assert_close(tr["reading"], torch.cat([r_top, r_bot], -1), atol=1e-12, rtol=0)
    assert bool((tr["overflow"] == 0).all())
    y, _ = net(x)
    torch.testing.assert_close(y, tr["output"], atol=1e-12, rtol=0)
    small = layer("deque", controller, depth=3, strict=True)
    with torch.no_grad():  # push at both ends, never pop: the fourth step drops the oldest elements
        small.memory.head.weight[:4] = 0
        small.memory.head.bias[:4] = torch.tensor([20.0, -20.0, 20.0, -20.0])
    with pytest.raises(
        StackOverflowError, match=r"NeuralDeque of depth 3 dropped 2 .* at step 3, batch row 0"
    ):
        small(x)


@pytest.mark.parametrize("controller", ["lstm", "elman"])
def test_the_jump_tape_is_the_tape_rnns_memory(controller, gen):
    """Delétang et al.'s Tape-RNN tape with jumps by each row's input length: the traced readings
    equal the literal tape run on the traced actions and the rows' own jumps; an unset jump raises
    naming the row."""
    net = layer("tape_jump", controller, depth=7)
    x = torch.randn(2, 10, 3, generator=gen, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"JumpTape: row 0 has jump -1.0; each row needs its input length"):
        net(x)
    jumps = torch.tensor([3.0, 9.0], dtype=torch.float64)
    tr = net.trace(x, net.initial_state(2, dtype=torch.float64)._replace(jump=jumps))
    actions = torch.stack([tr[k] for k in ("stay", "left", "right", "jump_left", "jump_right")], -1)
    ref, _ = tape_reference(actions, tr["value"], cells=7, jumps=jumps)
    torch.testing.assert_close(tr["reading"], ref, atol=1e-12, rtol=0)
    fixed = StackRNN(3, 6, "tape_jump", controller, width=2, depth=7, memory_args={"jump": 4})
    assert fixed.initial_state(2).jump.tolist() == [4.0, 4.0]
    with pytest.raises(ValueError, match="jump must be a whole number of cells >= 0 or None, got -2"):
        StackRNN(3, 6, "tape_jump", controller, memory_args={"jump": -2})


def test_sequence_module_gives_the_jump_tape_each_rows_input_length():
    """With ChomskyDataModule's batches the Tape-RNN jumps by each sequence's own input length
    (``input_lengths``), not by the padded or the whole sequence's length."""
    dm = ChomskyDataModule("duplicate_string", train_size=8, val_size=4, test_per_length=1,
                           train_lengths=(2, 6), test_lengths=(41, 42), batch_size=8,
                           batch_lengths="per_sequence")  # fmt: skip
    dm.setup("fit")
    batch = next(iter(dm.train_dataloader()))
    assert len(set(batch["input_lengths"].tolist())) > 1
    torch.manual_seed(0)
    model = SequenceModule(
        functools.partial(StackRNN, memory="tape_jump", hidden_size=6, width=2, depth=5),
        dm.vocab_size, dm.num_symbols, embedding="one_hot",
    )  # fmt: skip
    out = model.heads_out(batch["input"], batch["mask"], batch["input_lengths"])["generator"]
    x = model.embedding(batch["input"])
    state = model.layer.initial_state(8, input_lengths=batch["input_lengths"])
    assert state.jump.tolist() == batch["input_lengths"].float().tolist()
    want = model.heads["generator"](model.layer(x, state, batch["mask"])[0])
    torch.testing.assert_close(out, want)
    with pytest.raises(ValueError, match="each row needs its input length"):
        model.heads_out(batch["input"], batch["mask"])
    losses = model.losses(batch, model.heads_out(batch["input"], batch["mask"], batch["input_lengths"]))
    assert torch.isfinite(losses["generator"])


@pytest.mark.parametrize("memory", [*MEMORIES, "deque", "tape_jump"])
@pytest.mark.parametrize("controller", ["lstm", "elman"])
def test_fast_path_over_long_padded_sequences_in_float32(memory, controller, gen):
    """T = 150 crosses the backward's blocks of 64 steps; float32; rows of three lengths (the jump
    tape's rows jump 3, 29 (more than its 20 cells) and 0)."""
    torch.manual_seed(1)
    net = StackRNN(4, 8, memory, controller, width=3, depth=20)
    assert net._fusable() is not None
    x = torch.randn(3, 150, 4, generator=gen)
    mask = torch.arange(150)[None] < torch.tensor([150, 97, 5])[:, None]
    w = torch.randn(3, 150, 8, generator=gen)
    state = None
    if memory == "tape_jump":
        state = net.initial_state(3)._replace(jump=torch.tensor([3.0, 29.0, 0.0]))

    def run(fn):
        xx = x.clone().requires_grad_()
        net.zero_grad()
        y, s = fn(net, xx, state, mask)
        ((y * w).sum() + sum(t.sum() for t in state_leaves(s))).backward()
        return y, s, [xx.grad, *(p.grad for p in net.parameters())]

    y1, s1, g1 = run(type(net).__call__)
    y2, s2, g2 = run(MemoryLayer.forward)
    torch.testing.assert_close(y1, y2, atol=2e-5, rtol=1e-4)
    for a, b in zip(state_leaves(s1), state_leaves(s2), strict=True):
        torch.testing.assert_close(a, b, atol=2e-5, rtol=1e-4)
    for a, b in zip(g1, g2, strict=True):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-3)


#: the fast paths, and the reference loop over ``step`` (the one switch)
PATHS = {"fast": contextlib.nullcontext, "reference": reference_paths}


@pytest.mark.parametrize("path", PATHS)
def test_strict_names_the_step_and_row_and_ignores_padding(path, gen):
    net = layer("superposition", depth=3, strict=True)
    x = torch.randn(2, 8, 3, generator=gen, dtype=torch.float64)
    with PATHS[path]():
        # depth 3: the fourth step pushes (softly) the first cell's content out
        with pytest.raises(
            StackOverflowError, match=r"SuperpositionStack of depth 3 dropped .* at step 3, batch row 0"
        ):
            net(x)
        with pytest.raises(StackOverflowError, match="at step 3, batch row 0"):
            net.trace(x)
        # rows no longer than the window never drop anything, whatever the padded steps do
        mask = torch.arange(8)[None] < torch.tensor([3, 2])[:, None]
        y, _ = net(x, mask=mask)
        assert y.shape == (2, 8, 6)
        # and a deep enough window is exact
        layer("superposition", depth=8, strict=True)(x)


def traced_pda(tr, B, T, Q, S):
    """A nondeterministic stack's traced log transition weights in the literal reference's shapes:
    ``push, repl [B, T, Q, S, Q, S]``, ``pop [B, T, Q, S, Q]``."""
    return (
        tr["push"].reshape(B, T, Q, S, Q, S),
        tr["repl"].reshape(B, T, Q, S, Q, S),
        tr["pop"].reshape(B, T, Q, S, Q),
    )


@pytest.mark.parametrize("variant", ["rns", "ns"])
def test_the_nondeterministic_stack_is_its_papers_structure(variant, gen):
    """With depth >= T the readings equal DuSell & Chiang's recurrences (the literal reference)
    run on the log transition weights the layer traced: the RNS-RNN reads the normalised α over
    (state, symbol), the NS-RNN over the top symbol with normalised transitions."""
    rns = variant == "rns"
    args = {"states": 2, "symbols": 2, "normalize_transitions": not rns, "states_in_reading": rns}
    torch.manual_seed(0)
    net = StackRNN(3, 6, "nondeterministic", depth=6, memory_args=args).double()
    assert net.width == (4 if rns else 2)
    x = torch.randn(2, 6, 3, generator=gen, dtype=torch.float64)
    tr = net.trace(x)
    B, T = 2, 6
    push, repl, pop = traced_pda(tr, B, T, 2, 2)
    if not rns:  # a probabilistic PDA: each configuration's transitions sum to 1
        total = torch.cat([tr["push"], tr["repl"], tr["pop"]], -1).exp().sum(-1)
        torch.testing.assert_close(total, torch.ones_like(total))
    alpha = nondeterministic_reference(push, repl, pop).exp()
    ref = alpha.reshape(B, T, 4) if rns else alpha.sum(2)
    torch.testing.assert_close(tr["reading"], ref / ref.sum(-1, keepdim=True), atol=1e-12, rtol=0)
    assert bool((tr["overflow"] == 0).all())


@pytest.mark.parametrize("bottom", ["learned", "one", "zero"])
def test_the_vector_nondeterministic_stack_is_its_papers_structure(bottom, gen):
    """DuSell & Chiang's (2023) vector RNS-RNN: with depth >= T the readings (``[Q, S, m]``
    flattened) equal the literal recurrences run on the traced transition weights and pushed
    vectors, from the bottom vector σ(bottom), 1 or 0; a learnt bottom vector takes a gradient."""
    torch.manual_seed(0)
    args = {"states": 2, "symbols": 2, "vector_size": 3, "bottom": bottom}
    net = StackRNN(3, 6, "vector_nondeterministic", depth=6, memory_args=args).double()
    assert net.width == 12 and net.memory.reading_size == 12
    x = torch.randn(2, 6, 3, generator=gen, dtype=torch.float64)
    tr = net.trace(x)
    B, T = 2, 6
    push, repl, pop = traced_pda(tr, B, T, 2, 2)
    assert tr["vector"].shape == (B, T, 3) and bool(((tr["vector"] > 0) & (tr["vector"] < 1)).all())
    log_bottom = net.memory.log_bottom(dtype=torch.float64)
    expected_bottom = {"learned": torch.full((3,), 0.5), "one": torch.ones(3), "zero": torch.zeros(3)}[bottom]
    torch.testing.assert_close(log_bottom.exp(), expected_bottom.double(), atol=1e-12, rtol=0)
    _, ref = vector_nondeterministic_reference(push, repl, pop, tr["vector"].log(), log_bottom)
    torch.testing.assert_close(tr["reading"], ref.reshape(B, T, 12), atol=1e-12, rtol=0)
    # before the first step the controller reads the bottom vector at (state 0, symbol 0)
    first = net.memory.read(net.memory.initial_state(1, device=None, dtype=torch.float64))
    torch.testing.assert_close(first[0, :3], expected_bottom.double(), atol=1e-12, rtol=0)
    assert bool((first[0, 3:] == 0).all())
    y, _ = net(x)
    y.sum().backward()
    if bottom == "learned":
        assert net.memory.bottom.grad is not None and bool(net.memory.bottom.grad.abs().sum() > 0)
    else:
        assert "bottom" not in dict(net.memory.named_parameters())  # a fixed bottom vector learns nothing


@pytest.mark.parametrize("memory", ["nondeterministic", "vector_nondeterministic"])
@pytest.mark.parametrize("path", PATHS)
def test_the_nondeterministic_window_is_strict_about_time(path, memory, gen):
    """Depth d keeps start times d back: step d (0-based) is the first to drop runs, whatever the
    weights; rows of at most d real steps never do."""
    torch.manual_seed(0)
    net = StackRNN(3, 6, memory, depth=3, strict=True).double()
    x = torch.randn(2, 8, 3, generator=gen, dtype=torch.float64)
    name = type(net.memory).__name__
    with PATHS[path]():
        with pytest.raises(StackOverflowError, match=rf"{name} of depth 3 .* at step 3, batch row 0"):
            net(x)
        net(x, mask=torch.arange(8)[None] < torch.tensor([3, 2])[:, None])
        tr = StackRNN(3, 6, memory, depth=3).double().trace(x)
        assert tr["overflow"][0].tolist() == [0, 0, 0, 1, 1, 1, 1, 1]
        # chunks: the step count travels in the state
        _, s = net(x[:, :2])
        with pytest.raises(StackOverflowError, match="at step 1, batch row 0"):
            net(x[:, 2:], s)


def test_the_lstm_controllers_two_steps_agree(gen):
    """The nondeterministic stack's LSTM controller steps by ``torch.lstm_cell`` on CPU and by two
    products and the cell by hand elsewhere (CUDA's fused cell refuses per-row gate biases): both
    give the same states and gradients, here on CPU in float64."""
    torch.manual_seed(0)
    net = StackRNN(3, 5, "nondeterministic", depth=4).double()
    x = torch.randn(4, 3, 3, generator=gen, dtype=torch.float64)
    reading = torch.randn(4, net.width, generator=gen, dtype=torch.float64, requires_grad=True)
    cs, _ = net.split(net.initial_state(4))
    cs = state_map(lambda t: (t + torch.rand(t.shape, generator=gen, dtype=t.dtype)).requires_grad_(), cs)
    results = []
    for fused_cell in (True, False):
        step = net._controller_steps(x, cs, fused_cell=fused_cell)
        h, new = step(1, reading, cs)
        leaves = [h, *state_leaves(new)]
        grads = torch.autograd.grad(sum((t * t.detach().cos()).sum() for t in leaves),
                                    [reading, *state_leaves(cs), *net.parameters()], allow_unused=True)  # fmt: skip
        results.append(leaves + [g for g in grads if g is not None])
    assert len(results[0]) == len(results[1]) > 4
    for a, b in zip(*results, strict=True):
        torch.testing.assert_close(a, b, atol=1e-12, rtol=1e-12)


def test_overflow_is_reported_without_strict(gen):
    net = layer("stratification", depth=2)
    tr = net.trace(torch.randn(1, 6, 3, generator=gen, dtype=torch.float64))
    assert bool((tr["overflow"][:, :2] == 0).all()) and bool((tr["overflow"][:, 2:] > 0).all())


def test_any_memory_layer_can_control(gen):
    """A ReLU counter controller (reference loop) and a memory given as an instance."""
    torch.manual_seed(0)
    ctrl = ReLUCounter(3 + 2, 6, counters=2).double()
    mem = SuperpositionStack(8, width=2, depth=5, push_activation="tanh").double()
    net = StackRNN(3, 8, mem, ctrl, output="hidden+reading")  # the counter outputs 6 + 2 units
    x = torch.randn(2, 5, 3, generator=gen, dtype=torch.float64)
    y, s = net(x)
    assert y.shape == (2, 5, 10) and type(s).__name__ == "ReLUCounterSuperpositionState"
    assert net._fusable() is None
    tr = net.trace(x)
    torch.testing.assert_close(y[..., 8:], tr["reading"])


def test_state_is_one_flat_named_tuple_that_pickles():
    net = layer("queue")
    s = net.initial_state(2)
    assert type(s).__name__ == "LSTMStratificationState"
    assert s._fields == ("h", "c", "values", "strengths", "reading")
    back = pickle.loads(pickle.dumps(s))
    assert type(back) is type(s)
    ctrl, mem = net.split(s)
    assert type(ctrl).__name__ == "LSTMState" and type(mem).__name__ == "StratificationState"


def test_step_loop_carries_the_memory(gen):
    net = layer("tape", "elman")
    x = torch.randn(2, 5, 3, generator=gen, dtype=torch.float64)
    _, s = net(x)
    st = state_map(lambda t: t, net.initial_state(2))
    for x_t in x.unbind(1):
        _, st = net.step(x_t, st)
    for a, b in zip(state_leaves(st), state_leaves(s), strict=True):
        torch.testing.assert_close(a, b, atol=1e-12, rtol=0)


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="unknown memory 'heap'"):
        StackRNN(3, 4, "heap")
    with pytest.raises(ValueError, match=r"reading has 6 units .* got width=8"):
        StackRNN(3, 4, "nondeterministic", width=8)
    with pytest.raises(
        ValueError, match=r"vector nondeterministic stack's reading has 24 units .* got width=8"
    ):
        StackRNN(3, 4, "vector_nondeterministic", width=8)
    with pytest.raises(ValueError, match="bottom must be one of learned, one, zero, got 'two'"):
        StackRNN(3, 4, "vector_nondeterministic", memory_args={"bottom": "two"})
    with pytest.raises(ValueError, match="vector_size must be a positive integer, got 0"):
        StackRNN(3, 4, "vector_nondeterministic", memory_args={"vector_size": 0})
    with pytest.raises(ValueError, match="unknown controller 'transformer'"):
        StackRNN(3, 4, controller="transformer")
    with pytest.raises(ValueError, match="input_size \\+ width = 3 \\+ 2 = 5"):
        StackRNN(3, 4, controller=ReLUCounter(3, 4), width=2)
    with pytest.raises(ValueError, match="memory reads hidden_size=5"):
        StackRNN(3, 4, SuperpositionStack(5))
    with pytest.raises(ValueError, match="output must be"):
        StackRNN(3, 4, output="reading")
    with pytest.raises(ValueError, match="depth must be a positive integer, got 0"):
        StackRNN(3, 4, depth=0)
    with pytest.raises(ValueError, match="unknown value activation 'relu'"):
        StackRNN(3, 4, memory_args={"push_activation": "relu"})
    # a misspelt or misplaced key of memory_args / controller_args names itself and what is taken
    with pytest.raises(
        ValueError, match=r"'superposition' memory has no argument 'push_act'; it takes .*push_activation"
    ):
        StackRNN(3, 4, memory_args={"push_act": "tanh"})
    with pytest.raises(ValueError, match=r"'stratification' memory: 'depth' is set by the layer itself"):
        StackRNN(3, 4, "stratification", memory_args={"depth": 8})
    with pytest.raises(
        ValueError, match=r"'nondeterministic' memory has no argument 'stats'; it takes .*states, symbols"
    ):
        StackRNN(3, 4, "nondeterministic", width=None, memory_args={"stats": 3})
    with pytest.raises(
        ValueError, match=r"'lstm' controller has no argument 'forget'; it takes num_layers, .*forget_bias"
    ):
        StackRNN(3, 4, controller_args={"forget": 1.0})
    with pytest.raises(ValueError, match=r"'elman' controller: 'hidden_size' is set by the layer itself"):
        StackRNN(3, 4, controller="elman", controller_args={"hidden_size": 9})
    with pytest.raises(ValueError, match=r"'lstm' controller: 'dtype' is set by the layer itself"):
        StackRNN(3, 4, controller_args={"dtype": torch.float64})
    with pytest.raises(ValueError, match=r"'superposition' memory: 'device' is set by the layer itself"):
        StackRNN(3, 4, memory_args={"device": "cpu"})
    assert (
        StackRNN(3, 4, controller="elman", controller_args={"activation": "relu"}).controller.activation
        == "relu"
    )


@pytest.mark.parametrize("controller", ["lstm", "elman"])
def test_a_bidirectional_controller_is_refused(controller):
    """A controller reads the memory it writes step by step: a bidirectional one cannot."""
    with pytest.raises(ValueError, match="bidirectional"):
        StackRNN(3, 4, controller=controller, controller_args={"bidirectional": True})


@pytest.mark.parametrize("controller", ["lstm", "elman"])
def test_a_stacked_controller_runs_its_own_steps(controller):
    """A two-layer controller is not the fused op's one-layer cell: the layer takes the loop over
    ``step`` (once, a stacked Elman controller crashed looking for the one-layer ``bias``)."""
    torch.manual_seed(0)
    m = StackRNN(3, 4, controller=controller, controller_args={"num_layers": 2}, width=2, depth=5)
    m = m.double()
    x = torch.randn(2, 6, 3, dtype=torch.float64)
    assert m._fusable() is None
    y, s = m(x)
    with reference_paths():
        y_ref, s_ref = m(x)
    torch.testing.assert_close(y, y_ref, rtol=0, atol=0)
    assert_close_tree(s, s_ref, atol=0)
    assert y.shape == (2, 6, 4)


#: (memory by name, memory_args, the same memory as a callable of hidden_size)
COMPOSED = {
    "superposition": ({"push_activation": "identity"}, functools.partial(SuperpositionStack, width=2, depth=5,
                                                                         push_activation="identity")),
    "tape_jump": ({"write_mlp": [4]}, functools.partial(JumpTape, width=2, depth=5, write_mlp=[4])),
    "nondeterministic": ({"states": 2, "symbols": 2},
                         functools.partial(NondeterministicStack, depth=5, states=2, symbols=2)),
}  # fmt: skip


@pytest.mark.parametrize("memory", COMPOSED)
@pytest.mark.parametrize("controller", ["lstm", "elman", "gru"])
def test_memory_and_controller_given_as_callables_build_the_named_model(memory, controller):
    """``StackRNN(memory=<callable of hidden_size>, controller=<callable of (input_size,
    hidden_size)>)`` (what LightningCLI gives for ``class_path``/``init_args``) builds the model the
    names build: the same modules, and with the same seed the same weights."""
    args, factory = COMPOSED[memory]
    width = None if memory == "nondeterministic" else 2
    cls = {"lstm": LSTMLayer, "elman": ElmanRNN, "gru": GRULayer}[controller]
    c_args = {"activation": "relu"} if controller == "elman" else {"forget_bias": 1.0}
    c_args = {} if controller == "gru" else c_args
    torch.manual_seed(3)
    named = StackRNN(3, 6, memory, controller, width=width, depth=5, memory_args=args, controller_args=c_args)
    torch.manual_seed(3)
    composed = StackRNN(3, 6, factory, functools.partial(cls, **c_args))
    assert type(composed.memory) is type(named.memory) and type(composed.controller) is cls
    assert repr(composed) == repr(named)
    a, b = named.state_dict(), composed.state_dict()
    assert list(a) == list(b)
    for k in a:
        assert torch.equal(a[k], b[k]), k
    # the classes themselves are callables of the sizes: their defaults
    torch.manual_seed(3)
    by_class = StackRNN(3, 6, SuperpositionStack, cls)
    torch.manual_seed(3)
    by_name = StackRNN(3, 6, "superposition", controller)
    assert repr(by_class) == repr(by_name)
    assert all(torch.equal(p, q) for p, q in zip(by_class.parameters(), by_name.parameters(), strict=True))


def test_composed_parts_are_checked_and_name_arguments_refused():
    """The sizes a memory or controller built from a callable must fit, and the arguments of the
    name shortcuts (width, depth, memory_args, controller_args) are refused with a callable."""
    with pytest.raises(ValueError, match="width=4 apply to a memory given by name"):
        StackRNN(3, 4, SuperpositionStack, width=4)
    with pytest.raises(ValueError, match="depth=8 apply to a memory given by name"):
        StackRNN(3, 4, functools.partial(SuperpositionStack, width=2), depth=8)
    with pytest.raises(ValueError, match=r"memory_args=\{'push_activation': 'tanh'\} apply"):
        StackRNN(3, 4, SuperpositionStack, memory_args={"push_activation": "tanh"})
    with pytest.raises(ValueError, match=r"controller_args=.* apply to a controller given by name"):
        StackRNN(3, 4, controller=LSTMLayer, controller_args={"forget_bias": 1.0})
    with pytest.raises(ValueError, match=r"callable of hidden_size returning one; .* gave LSTMLayer"):
        StackRNN(3, 4, lambda n: LSTMLayer(n, n))
    with pytest.raises(
        ValueError, match=r"callable of \(input_size, hidden_size\) returning one; .* gave Super"
    ):
        StackRNN(3, 4, controller=lambda n, h: SuperpositionStack(h))
    with pytest.raises(ValueError, match="memory must be a name, a module or a class or callable"):
        StackRNN(3, 4, 3)
    with pytest.raises(ValueError, match="the memory reads hidden_size=5"):
        StackRNN(3, 4, lambda n: SuperpositionStack(5))
    with pytest.raises(ValueError, match="output hidden_size=4; it has input_size=11, output_size=7"):
        StackRNN(3, 4, controller=lambda n, h: LSTMLayer(n, 7))
    with pytest.raises(ValueError, match="bidirectional"):
        StackRNN(3, 4, controller=functools.partial(LSTMLayer, bidirectional=True))


@pytest.mark.parametrize("fused", [True, False])
def test_fused_is_refused_naming_the_one_switch(fused):
    """``fused=`` is gone: the error names its replacements."""
    with pytest.raises(
        TypeError, match=r"StackRNN: fused= was removed: use memrnn.reference_paths\(\).*implementation"
    ):
        StackRNN(3, 4, fused=fused)
    with pytest.raises(TypeError, match="unexpected keyword argument 'fuse'"):
        StackRNN(3, 4, fuse=True)


@pytest.mark.parametrize("memory", ["superposition", "nondeterministic", "tape_jump"])
def test_the_initial_state_takes_input_lengths_where_the_memory_reads_them(memory):
    """``initial_state(B, input_lengths=…)`` puts each row's input length into a jump tape's state;
    other memories ignore it (``reads_input_lengths``)."""
    net = StackRNN(3, 4, memory, width=None if memory == "nondeterministic" else 2, depth=5)
    lengths = torch.tensor([3, 0])
    state = net.initial_state(2, input_lengths=lengths)
    assert net.reads_input_lengths == (memory == "tape_jump")
    if memory == "tape_jump":
        assert state.jump.tolist() == [3.0, 0.0] and state.jump.dtype == torch.float32
        with pytest.raises(ValueError, match=r"one length per row, shape \(2,\), got \(3,\)"):
            net.initial_state(2, input_lengths=torch.tensor([1, 2, 3]))
    else:
        assert_close_tree(state, net.initial_state(2), atol=0)


def test_callables_get_the_layers_device_and_dtype():
    """Given ``dtype`` (or ``device``), the layer passes it to the memory's and the controller's
    callables as to the named ones; without, it passes none (a plain callable of the sizes works)."""
    net = StackRNN(3, 4, SuperpositionStack, LSTMLayer, dtype=torch.float64)
    assert {p.dtype for p in net.parameters()} == {torch.float64}
    net = StackRNN(3, 4, lambda n: SuperpositionStack(n, width=2), lambda n, h: ElmanRNN(n, h))
    assert net.width == 2 and net.controller.input_size == 5
