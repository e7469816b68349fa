"""``learned_initial_state`` of LSTMLayer, GRULayer and ElmanRNN (rau's ``learned_hidden_state``,
which FLaRe's RNN and LSTM use: Butoi et al. 2025), LSTMLayer's ``extra_bias=False`` (rau's one bias
per gate), and ``output_at`` (the output at a state, the first output of rau's
``include_first=True``) of those layers and of StackRNN.

The layers here are not in the registry (its names are the compile table of
``docs/guide/compile-export.md``), so this file runs the interface contract's core on them: the
fast paths equal the reference loop with the gradients of ``h0_input``, a padded batch equals each
row alone, ``outputs`` equals ``forward``, the state dict round trip."""

from __future__ import annotations

import copy
import functools

import pytest
import torch

from memrnn.core import MemoryLayer, reference_paths, state_leaves, state_map
from memrnn.layers import ElmanRNN, GRULayer, JordanRNN, LSTMLayer, StackRNN
from memrnn.ops.dispatch import implementation
from tests.conftest import assert_close_tree
from tests.layers.under import under

F64 = {"dtype": torch.float64}
LEARNED = {"learned_initial_state": True}
FACTORIES = {
    "lstm_2layer": functools.partial(LSTMLayer, 3, 4, num_layers=2, **LEARNED, **F64),
    "lstm_reference": functools.partial(under(LSTMLayer, reference_paths), 3, 5, **LEARNED, **F64),
    # FLaRe's LSTM: rau's LSTM(learned_hidden_state=True), one bias per gate
    "lstm_flare": functools.partial(LSTMLayer, 3, 4, num_layers=2, extra_bias=False, **LEARNED, **F64),
    "lstm_bidirectional": functools.partial(LSTMLayer, 3, 4, bidirectional=True, **LEARNED, **F64),
    "gru": functools.partial(GRULayer, 3, 5, **LEARNED, **F64),
    "gru_bptt_2layer": functools.partial(
        under(GRULayer, lambda: implementation("bptt")), 3, 4, num_layers=2, **LEARNED, **F64
    ),
    "elman": functools.partial(ElmanRNN, 3, 5, **LEARNED, **F64),
    "elman_relu_2layer": functools.partial(ElmanRNN, 3, 4, activation="relu", num_layers=2, **LEARNED, **F64),
    "superposition_lstm": functools.partial(
        StackRNN, 3, 5, width=2, depth=4, controller_args=LEARNED, output="hidden+reading", **F64
    ),
    "superposition_flare_lstm": functools.partial(
        StackRNN, 3, 5, width=2, depth=4, controller_args={**LEARNED, "extra_bias": False}, **F64
    ),
    "stratification_elman": functools.partial(
        StackRNN,
        3,
        5,
        memory="stratification",
        controller="elman",
        width=2,
        depth=4,
        controller_args=LEARNED,
        **F64,
    ),
}


def make(name: str, seed: int = 0) -> MemoryLayer:
    """The layer with a non-zero learned ``h0_input`` (it starts at 0, where it changes nothing)."""
    torch.manual_seed(seed)
    layer = FACTORIES[name]()
    owner = layer.controller if isinstance(layer, StackRNN) else layer
    with torch.no_grad():
        owner.h0_input.normal_()
    return layer


def h0_input(layer: MemoryLayer) -> torch.Tensor:
    return (layer.controller if isinstance(layer, StackRNN) else layer).h0_input


@pytest.mark.parametrize(
    ("cls", "kwargs", "activation"),
    [
        (LSTMLayer, {"num_layers": 2}, torch.tanh),
        (GRULayer, {"num_layers": 2}, torch.tanh),
        (ElmanRNN, {"num_layers": 2}, torch.tanh),
        (ElmanRNN, {"num_layers": 2, "activation": "relu"}, torch.relu),
        (ElmanRNN, {}, torch.tanh),
    ],
)
def test_the_initial_state_is_raus_learned_hidden_state(cls, kwargs, activation, gen):
    """rau's ``_initial_tensors`` (``models/rnn/lstm.py``, ``simple_rnn.py`` at the commit FLaRe pins):
    ``h = act(initial_hidden_state_inputs)[:, None, :].repeat(1, B, 1)`` in torch's ``[layers, B,
    hidden]`` layout, the activation tanh for the LSTM (and memrnn's GRU) and the RNN's own
    nonlinearity for the simple RNN; the LSTM's ``c`` zeros.  The parameter starts at 0."""
    layer = cls(3, 4, learned_initial_state=True, **kwargs)
    assert "h0_input" in dict(layer.named_parameters())
    assert (layer.h0_input == 0).all() and layer.h0_input.shape == (kwargs.get("num_layers", 1), 4)
    with torch.no_grad():
        layer.h0_input.copy_(torch.randn(layer.h0_input.shape, generator=gen))
    theirs = activation(layer.h0_input)[:, None, :].repeat(1, 5, 1)  # [layers, B, hidden]
    ours = layer.to_torch_state(layer.initial_state(5))
    if cls is LSTMLayer:
        torch.testing.assert_close(ours[0], theirs, atol=0, rtol=0)
        assert (ours[1] == 0).all()  # rau: "The initial memory cell is always zeros"
    else:
        torch.testing.assert_close(ours, theirs, atol=0, rtol=0)
    # the default state of forward is that state, and it matters
    x = torch.randn(5, 6, 3, generator=gen)
    y, _ = layer(x)
    torch.testing.assert_close(y, layer(x, layer.initial_state(5))[0], atol=0, rtol=0)
    zero = state_map(torch.zeros_like, layer.initial_state(5))
    assert not torch.allclose(y, layer(x, zero)[0])
    # reset_parameters puts it back to 0: the zero state, as rau's constructor
    layer.reset_parameters()
    assert (layer.h0_input == 0).all() and all((t == 0).all() for t in layer.initial_state(2))


def test_the_default_is_the_zero_state_with_no_parameter():
    for layer in (LSTMLayer(3, 4), GRULayer(3, 4), ElmanRNN(3, 4)):
        assert layer.h0_input is None and "h0_input" not in dict(layer.named_parameters())
        assert all((t == 0).all() for t in layer.initial_state(2))


@pytest.mark.parametrize("name", sorted(FACTORIES))
def test_fast_path_equals_reference_loop_with_the_learned_states_gradient(name, gen):
    """Default state (the learned one): ``forward`` equals the loop over ``step``, outputs, final
    state and every gradient, ``h0_input``'s included (it gets one)."""
    layer = make(name)
    x = torch.randn(3, 6, 3, generator=gen, dtype=torch.float64)
    mask = torch.arange(6)[None] < torch.tensor([6, 3, 1])[:, None]
    w = torch.randn(3, 6, layer.output_size, generator=gen, dtype=torch.float64)

    def run(fn):
        layer.zero_grad()
        y, s = fn(layer, x, None, mask=mask)
        ((y * w).sum() + sum((t**2).sum() for t in state_leaves(s))).backward()
        return y, s, [p.grad for p in layer.parameters()]

    y1, s1, g1 = run(type(layer).__call__)
    y2, s2, g2 = run(MemoryLayer.forward)
    torch.testing.assert_close(y1, y2, atol=1e-10, rtol=1e-10)
    assert_close_tree(s1, s2, atol=1e-10, rtol=1e-10, what="final state")
    for a, b in zip(g1, g2, strict=True):
        torch.testing.assert_close(a, b, atol=1e-10, rtol=1e-10)
    assert h0_input(layer).grad.abs().sum() > 0


@pytest.mark.parametrize("name", sorted(FACTORIES))
def test_padded_batch_equals_each_row_alone_and_outputs_equal_forward(name, gen):
    layer = make(name)
    lengths = [7, 4, 0, 1]
    x = torch.randn(4, 7, 3, generator=gen, dtype=torch.float64)
    mask = torch.arange(7)[None] < torch.tensor(lengths)[:, None]
    y, s = layer(x, mask=mask)
    torch.testing.assert_close(layer.outputs(x, mask=mask), y, atol=1e-12, rtol=0)
    for b, n in enumerate(lengths):
        yb, sb = layer(x[b : b + 1, :n])
        torch.testing.assert_close(y[b : b + 1, :n], yb, atol=1e-10, rtol=0)
        assert (y[b, n:] == 0).all()
        assert_close_tree(state_map(lambda t, b=b: t[b : b + 1], s), sb, atol=1e-10, what=f"row {b}")


@pytest.mark.parametrize("name", sorted(FACTORIES))
def test_state_dict_round_trip(name, gen):
    layer = make(name)
    key = "controller.h0_input" if isinstance(layer, StackRNN) else "h0_input"
    assert key in layer.state_dict()
    other = make(name, seed=99)
    assert not torch.equal(h0_input(other), h0_input(layer))
    other.load_state_dict(copy.deepcopy(layer.state_dict()))
    x = torch.randn(2, 5, 3, generator=gen, dtype=torch.float64)
    torch.testing.assert_close(other(x)[0], layer(x)[0], atol=0, rtol=0)


@pytest.mark.parametrize("name", sorted(set(FACTORIES) - {"lstm_bidirectional"}))
def test_output_at_a_state_is_what_step_returned_there(name, gen):
    """``output_at(initial_state)`` is the output before any input (rau's first output with
    ``include_first=True``); at any later state, the output of the step that reached it."""
    layer = make(name)
    s0 = layer.initial_state(3)
    first = layer.output_at(s0)
    assert first.shape == (3, layer.output_size)
    owner = layer.controller if isinstance(layer, StackRNN) else layer
    h0 = owner.output_at(owner.initial_state(3))
    act = torch.relu if getattr(owner, "activation", "tanh") == "relu" else torch.tanh
    torch.testing.assert_close(h0, act(owner.h0_input[-1]).expand(3, -1), atol=0, rtol=0)  # h_0's top layer
    torch.testing.assert_close(first[:, : h0.shape[1]], h0, atol=0, rtol=0)
    if isinstance(layer, StackRNN) and layer.output == "hidden+reading":  # the empty stack's reading
        torch.testing.assert_close(first[:, h0.shape[1] :], layer.memory.read(layer.split(s0)[1]))
    x = torch.randn(3, 4, 3, generator=gen, dtype=torch.float64)
    st = s0
    for x_t in x.unbind(1):
        y_t, st = layer.step(x_t, st)
        torch.testing.assert_close(layer.output_at(st), y_t, atol=0, rtol=0)


def test_output_at_is_refused_where_there_is_none():
    with pytest.raises(ValueError, match=r"LSTMLayer\(bidirectional=True\) cannot give an output at a state"):
        LSTMLayer(3, 4, bidirectional=True).output_at(LSTMLayer(3, 4, bidirectional=True).initial_state(2))
    with pytest.raises(ValueError, match=r"ElmanRNN\(bidirectional=True\) cannot give an output at a state"):
        layer = ElmanRNN(3, 4, bidirectional=True)
        layer.output_at(layer.initial_state(2))
    stack = StackRNN(3, 4, width=2, depth=3, controller=JordanRNN(5, 4, feedback_size=2))
    with pytest.raises(ValueError, match=r"StackRNN's controller JordanRNN has no output_at\(state\)"):
        stack.output_at(stack.initial_state(2))


@pytest.mark.parametrize("cls", [LSTMLayer, GRULayer, ElmanRNN])
def test_a_flag_that_is_not_a_bool_is_named(cls):
    with pytest.raises(ValueError, match=r"learned_initial_state must be True or False, got 'yes'"):
        cls(3, 4, learned_initial_state="yes")


def test_one_bias_per_gate_is_raus_lstm(gen):
    """``extra_bias=False`` (rau's ``use_extra_bias=False``, ``remove_extra_bias_parameters``): no
    ``bias_hh`` parameter (a constant zero, not saved), the layer computes ``nn.LSTM`` with
    ``bias_hh = 0``, and FLaRe's parameter count (``get_architecture_args.py``: ``4h(2h + 1)`` per
    layer of ``h`` inputs, plus ``h`` for the learned initial state) holds."""
    h, layers = 6, 3
    layer = LSTMLayer(h, h, num_layers=layers, learned_initial_state=True, extra_bias=False)
    names = [n for n, _ in layer.named_parameters()]
    assert not [n for n in names if "bias_hh" in n] and not [k for k in layer.state_dict() if "bias_hh" in k]
    assert sum(p.numel() for p in layer.parameters()) == layers * 4 * h * (2 * h + 1) + layers * h
    layer = layer.double()  # the constant follows the layer's dtype
    torch_lstm = torch.nn.LSTM(h, h, num_layers=layers, batch_first=True, dtype=torch.float64)
    with torch.no_grad():
        for name, p in torch_lstm.named_parameters():
            p.copy_(getattr(layer.rnn, name))  # bias_hh: 0
    assert all((getattr(torch_lstm, f"bias_hh_l{k}") == 0).all() for k in range(layers))
    x = torch.randn(2, 5, h, generator=gen, dtype=torch.float64)
    zero = LSTMLayer(h, h, num_layers=layers, extra_bias=False, dtype=torch.float64)
    zero.load_state_dict({k: v for k, v in layer.state_dict().items() if k != "h0_input"})
    torch.testing.assert_close(zero(x)[0], torch_lstm(x)[0], atol=1e-12, rtol=0)
    zero.reset_parameters()
    assert all((getattr(zero.rnn, f"bias_hh_l{k}") == 0).all() for k in range(layers))
    with_forget = LSTMLayer(3, 4, forget_bias=1.0, extra_bias=False)
    assert (with_forget.rnn.bias_ih_l0[4:8] >= 0.5).all()  # the offset goes on the one bias
    with pytest.raises(
        ValueError, match="extra_bias=False drops the second of the two biases, so it needs bias=True"
    ):
        LSTMLayer(3, 4, bias=False, extra_bias=False)
    with pytest.raises(ValueError, match="extra_bias must be True or False, got 0"):
        LSTMLayer(3, 4, extra_bias=0)
