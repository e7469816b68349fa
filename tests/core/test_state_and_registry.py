import warnings
from typing import NamedTuple

import pytest
import torch

from memrnn.core import (
    create_layer,
    layer_class,
    list_layers,
    register_layer,
    state_batch_size,
    state_detach,
    state_index,
    state_stack,
    state_where,
)
from memrnn.layers import ElmanRNN, LSTMLayer


class Pair(NamedTuple):
    a: torch.Tensor
    b: torch.Tensor


def test_state_where_selects_rows_and_keeps_type():
    new = Pair(torch.ones(3, 2), torch.ones(3, 2, 4))
    old = Pair(torch.zeros(3, 2), torch.zeros(3, 2, 4))
    out = state_where(torch.tensor([True, False, True]), new, old)
    assert isinstance(out, Pair)
    assert out.a[:, 0].tolist() == [1, 0, 1]
    assert out.b[1].abs().sum() == 0 and out.b[2].sum() == 8


def test_state_index_stack_detach_and_batch_size():
    s = Pair(torch.arange(6.0).view(3, 2).requires_grad_(), torch.zeros(3, 5))
    assert state_index(s, 1).a.tolist() == [[2.0, 3.0]]
    assert state_index(s, torch.tensor([2, 0])).a[:, 0].tolist() == [4.0, 0.0]
    assert not state_detach(s).a.requires_grad
    st = state_stack([s, s, s], 1)
    assert st.a.shape == (3, 3, 2) and st.b.shape == (3, 3, 5)
    assert state_batch_size(s) == 3
    with pytest.raises(ValueError, match="batch size"):
        state_batch_size(Pair(torch.zeros(3), torch.zeros(4)))


def test_registry_creates_with_overrides_and_names_unknown_layers():
    with pytest.warns(
        UserWarning, match=r"tiny test values input_size=3 \(ElmanRNN has no default for input_size\)"
    ):
        layer = create_layer("elman", hidden_size=11, activation="relu")
    assert isinstance(layer, ElmanRNN) and layer.hidden_size == 11 and layer.activation == "relu"
    assert layer_class("lstm") is LSTMLayer
    assert list_layers() == sorted(list_layers())
    with pytest.raises(ValueError, match=r"unknown layer 'nope'.*elman"):
        create_layer("nope")
    with pytest.raises(
        ValueError,
        match=r"create_layer\('lstm', ...\): LSTMLayer has no argument 'hiden_size'; it takes input_size, hidden_size",
    ):
        create_layer("lstm", hiden_size=16)
    with pytest.raises(ValueError, match="already registered"):
        register_layer("elman", tiny={}, cls=LSTMLayer)


def _warnings_of(name, **overrides):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        layer = create_layer(name, **overrides)
    return layer, [str(w.message) for w in caught if issubclass(w.category, UserWarning)]


def test_create_layer_says_which_tiny_test_values_the_overrides_left_in_place():
    """Overrides on the tiny set used to give depth 4 / width 2 stacks and 3 input features
    without a word (the newcomer's ``create_layer("superposition_lstm", input_size=16,
    hidden_size=64)``): they are still used, and said, with the class's defaults."""
    layer, said = _warnings_of("superposition_lstm", input_size=16, hidden_size=64)
    assert layer.memory.depth == 4 and layer.width == 2  # the tiny values, still
    assert said == [
        "create_layer('superposition_lstm', ...) used the registry's tiny test values depth=4, width=2 "
        "(StackRNN's defaults: depth=32, width=None); pass them to choose, or build StackRNN directly"
    ]
    _, said = _warnings_of("nnpda", input_size=16, num_states=4, stack_symbols=3)
    assert len(said) == 1 and "depth=4 (NNPDA's defaults: depth=32)" in said[0]
    layer, said = _warnings_of("lstm", hidden_size=16)
    assert layer.input_size == 3
    assert len(said) == 1 and "input_size=3 (LSTMLayer has no default for input_size)" in said[0]
    _, said = _warnings_of("nondeterministic_lstm", input_size=8, hidden_size=16)
    assert len(said) == 1 and "memory_args={'states': 2, 'symbols': 2}" in said[0] and "depth=32" in said[0]
    _, said = _warnings_of("hewitt_lstm", k=4, m=3)
    assert len(said) == 1 and "beta=2.0 (HewittLSTM's defaults: beta=20.0)" in said[0]


def test_create_layer_is_silent_for_the_tiny_layer_and_for_complete_overrides():
    for name in ("superposition_lstm", "queue_elman", "nnpda", "lstm_2layer"):
        assert _warnings_of(name)[1] == []  # the tiny layer, as the interface suite builds it
        assert _warnings_of(name, dtype=torch.float64)[1] == []  # dtype/device choose no size
    assert _warnings_of("gru", input_size=8, hidden_size=32)[1] == []  # the README's example
    sizes = {"input_size": 8, "hidden_size": 16, "depth": 32, "width": None}
    assert _warnings_of("superposition_lstm", **sizes)[1] == []
    # the variant's own choices (memory, controller) are its name, not test sizes
    assert _warnings_of("queue_elman", **sizes)[1] == []
    assert _warnings_of("superposition_lstm_reading", **sizes)[1] == []


def test_a_layer_without_step_cannot_be_built():
    from memrnn.core import MemoryLayer

    class Incomplete(MemoryLayer):
        def initial_state(self, batch_size, *, device=None, dtype=None):
            return (torch.zeros(batch_size, 1),)

    with pytest.raises(TypeError, match="step"):
        Incomplete()
