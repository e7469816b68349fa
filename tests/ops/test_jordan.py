"""The Jordan recurrence (``memrnn.ops.jordan``) on every path: the CPU sequence against the
reference step loop (outputs, final state, every gradient, padding, what the backward keeps), and
the Triton kernel against the reference."""

from __future__ import annotations

import pytest
import torch

from benchmarks.run import SavedBytes
from memrnn.core.activations import ACTIVATIONS
from memrnn.layers import JordanRNN
from memrnn.layers.elman import JordanState
from memrnn.ops import bptt
from tests.ops.backends import SHAPES, assert_kernel_matches, needs_triton, randn
from tests.ops.layer_paths import Under, compare_layers, random_mask

JORDAN_CASES = [("tanh", "softmax"), ("tanh", "identity"), ("relu", "tanh"), ("heaviside", "sigmoid"),
                 ("sigmoid", "relu"), ("saturated_linear", "saturated_linear")]  # fmt: skip


@pytest.mark.parametrize(
    ("dtype", "block"), [(torch.float64, None), (torch.float32, None), (torch.float64, 3)]
)
@pytest.mark.parametrize(("activation", "output_activation"), JORDAN_CASES)
def test_jordan_sequence_equals_reference(activation, output_activation, dtype, block, monkeypatch):
    """JordanSequence against the reference step loop: outputs, final state and gradients for
    the input, ``r_0`` and every parameter, with and without right padding."""
    if block is not None:
        monkeypatch.setattr(bptt, "BLOCK", block)
    torch.manual_seed(0)
    kw = {"activation": activation, "output_activation": output_activation, "dtype": dtype}
    fast = JordanRNN(3, 5, 4, **kw)
    ref = Under(fast)
    x = torch.randn(6, 7, 3, dtype=dtype, requires_grad=True)
    r0 = torch.rand(6, 4, dtype=dtype, requires_grad=True)
    for mask in (None, random_mask(6, 7)):
        compare_layers(fast, ref, x, JordanState(r0), mask, dtype)
    y, s = fast(x[:, :0], JordanState(r0))
    assert y.shape == (6, 0, 5) and torch.equal(s.r, r0)


@pytest.mark.parametrize(("activation", "output_activation", "buffers"), [
    ("tanh", "sigmoid", 2),  # hs and rs: both derivatives are read from them
    ("relu", "relu", 2),
    ("tanh", "saturated_linear", 3),  # and σ_o's pre-activations h Eᵀ
    ("heaviside", "softmax", 3),  # σ's pre-activations besides hs and rs
    ("saturated_linear", "saturated_linear", 4),
])  # fmt: skip
def test_jordan_sequence_keeps_only_what_its_backward_reads(activation, output_activation, buffers):
    """What JordanSequence keeps for the backward: ``hs [T, B, H]`` and ``rs [T+1, B, F]``, and the
    pre-activations of σ and σ_o only where their derivatives are not functions of the outputs
    (``bptt.from_output``: tanh, sigmoid, relu, identity).  H = F here, so each buffer is T·B·H."""
    T, B, H = 30, 4, 5
    net = JordanRNN(3, H, H, activation=activation, output_activation=output_activation, dtype=torch.float64)
    x = torch.randn(B, T, 3, dtype=torch.float64, requires_grad=True)
    with SavedBytes() as saved:
        net(x)
    sequences = [n for n in saved.storages.values() if n >= T * B * H * 8]
    assert len(sequences) == buffers, sorted(saved.storages.values())


@needs_triton
@pytest.mark.parametrize(("T", "B", "H"), SHAPES)
@pytest.mark.parametrize("out", ["softmax", "identity", "sigmoid"])
def test_jordan_kernel(T, B, H, out):
    from memrnn.ops.jordan import jordan_sequence

    Fb = 7

    def make(dtype):
        return (randn(T, B, H, dtype=dtype, seed=1), randn(H, Fb, dtype=dtype, seed=2, scale=0.4),
                randn(Fb, H, dtype=dtype, seed=3, scale=H**-0.5), randn(B, Fb, dtype=dtype, seed=4))  # fmt: skip

    def run(pre, u, e, r0, impl):
        return jordan_sequence(pre, u, e, r0, "tanh", out, (ACTIVATIONS["tanh"], ACTIVATIONS[out]), impl=impl)

    assert_kernel_matches(run, make, [(T, B, H), (T + 1, B, Fb)], atol=1e-4)
