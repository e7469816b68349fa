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
    layer = create_layer("elman", hidden_size=11, activation="relu")
    assert isinstance(layer, ElmanRNN) and layer.hidden_size == 11 and layer.activation == "relu"
    assert layer_class("lstm") is LSTMLayer
    assert list_layers() == sorted(list_layers())
    with pytest.raises(ValueError, match=r"unknown layer 'nope'.*elman"):
        create_layer("nope")
    with pytest.raises(ValueError, match="already registered"):
        register_layer("elman", tiny={}, cls=LSTMLayer)


def test_a_layer_without_step_cannot_be_built():
    from memrnn.core import MemoryLayer

    class Incomplete(MemoryLayer):
        def initial_state(self, batch_size, *, device=None, dtype=None):
            return (torch.zeros(batch_size, 1),)

    with pytest.raises(TypeError, match="step"):
        Incomplete()
