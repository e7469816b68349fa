"""The counter recurrences (``memrnn.ops.counter``: the counter LSTM and Weiss et al.'s (2018) ReLU
counter) on every path: the CPU sequences against the reference step loop (outputs, final states,
every gradient, padding, partial graphs, what the backward keeps), and the Triton kernel against
the reference."""

from __future__ import annotations

import pytest
import torch

from benchmarks.run import SavedBytes
from memrnn.core.activations import ACTIVATIONS
from memrnn.layers import CounterLSTM, ReLUCounter
from memrnn.ops import bptt
from tests.ops.backends import SHAPES, assert_kernel_matches, needs_triton, randn
from tests.ops.layer_paths import Under, compare_layers, random_mask

COUNTER_CASES = [
    (CounterLSTM, {"cell_activation": "identity"}),
    (CounterLSTM, {"cell_activation": "tanh"}),
    *((ReLUCounter, {"activation": a}) for a in ("tanh", "sigmoid", "relu", "heaviside", "saturated_linear")),
]


@pytest.mark.parametrize(
    ("dtype", "block"), [(torch.float64, None), (torch.float32, None), (torch.float64, 3)]
)
@pytest.mark.parametrize(("cls", "kwargs"), COUNTER_CASES)
def test_counter_sequences_equal_reference(cls, kwargs, dtype, block, monkeypatch):
    """LSTMSequence / CounterRNNSequence against the reference step loop: outputs, final states
    and gradients for the input, every initial state leaf and every parameter, with and without
    right padding; ``block = 3``: the backward's local derivatives in 3 blocks of 3, 3 and 1
    steps."""
    if block is not None:
        monkeypatch.setattr(bptt, "BLOCK", block)
    torch.manual_seed(0)
    fast = cls(3, 5, counters=2, dtype=dtype, **kwargs)
    ref = Under(fast)
    x = torch.randn(6, 7, 3, dtype=dtype, requires_grad=True)
    st = fast.initial_state(6, dtype=dtype)
    st = type(st)(*(torch.randn_like(v).abs().requires_grad_() for v in st))
    for mask in (None, random_mask(6, 7)):
        compare_layers(fast, ref, x, st, mask, dtype)


@pytest.mark.parametrize(("cls", "kwargs"), COUNTER_CASES[::2])
def test_counter_sequences_partial_graphs(cls, kwargs):
    """Only the outputs used, only the final state used, an input without gradient, T = 0, and
    the reference loop (inside ``reference_paths()``) give what the reference gives."""
    torch.manual_seed(1)
    dtype = torch.float64
    fast = cls(4, 3, counters=1, dtype=dtype, **kwargs)
    ref = Under(fast)
    x = torch.randn(5, 6, 4, dtype=dtype)
    for pick in (lambda y, s: y.sum(), lambda y, s: sum(v.sum() for v in s)):
        grads = [torch.autograd.grad(pick(*m(x)), list(m.parameters())) for m in (fast, ref)]
        for a, b in zip(*grads, strict=True):
            torch.testing.assert_close(a, b)
    y, s = fast(x[:, :0])
    assert y.shape == (5, 0, fast.output_size)
    for a, b in zip(s, fast.initial_state(5, dtype=dtype), strict=True):
        torch.testing.assert_close(a, b)


def test_counter_sequence_keeps_the_moves_not_the_pre_activations_where_it_can():
    """With tanh, sigmoid or relu the ReLU counter's backward reads σ' from its states and relu'
    from its moves (``bptt.from_output``), so it keeps the moves ``[T, B, 2k]`` instead of the
    pre-activations ``[T, B, H + 2k]``: H units per step and row fewer than with heaviside."""
    T, B, H, k = 30, 4, 5, 3
    kept = {}
    for activation in ("tanh", "sigmoid", "relu", "heaviside", "saturated_linear"):
        net = ReLUCounter(3, H, counters=k, activation=activation, dtype=torch.float64)
        x = torch.randn(B, T, 3, dtype=torch.float64, requires_grad=True)
        with SavedBytes() as saved:
            net(x)
        kept[activation] = saved.bytes
    assert kept["tanh"] == kept["sigmoid"] == kept["relu"]
    assert kept["heaviside"] == kept["saturated_linear"] == kept["tanh"] + T * B * H * 8, kept


@needs_triton
@pytest.mark.parametrize(("T", "B", "H"), SHAPES)
@pytest.mark.parametrize("activation", ["tanh", "relu"])
def test_counter_kernel(T, B, H, activation):
    from memrnn.ops.counter import counter_sequence

    k, n = 3, 4
    G, N = H + 2 * k, H + k

    def make(dtype):
        return (randn(B, T, n, dtype=dtype, seed=1), randn(G, n, dtype=dtype, seed=2, scale=0.5),
                randn(G, dtype=dtype, seed=3), randn(G, N, dtype=dtype, seed=4, scale=N**-0.5),
                randn(B, N, dtype=dtype, seed=5))  # fmt: skip

    def run(x, w_in, b, w_rec, r0, impl):
        return counter_sequence(x, w_in, b, w_rec, r0, H, activation, ACTIVATIONS[activation], impl=impl)

    assert_kernel_matches(run, make, [(B, T + 1, N), (B, T, 2 * k)], atol=1e-4)
