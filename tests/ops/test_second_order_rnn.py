"""The second-order RNN (``memrnn.ops.second_order_rnn``, Giles et al. 1992) on every path: the
fused CPU sequence against the reference loop (a fixed and a learned sensitivity, padding), and
the Triton kernel against the reference."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from memrnn.layers import SecondOrderRNN
from memrnn.layers.second_order import SecondOrderState
from tests.ops.backends import DEVICE, SHAPES, assert_kernel_matches, needs_triton, randn
from tests.ops.layer_paths import Under, compare_layers, random_mask


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("learn", [False, True])
def test_second_order_fused_equals_reference(dtype, learn):
    torch.manual_seed(0)
    B, T, m, n = 16, 9, 5, 7
    fast = SecondOrderRNN(m, n, sensitivity=2.0, learn_sensitivity=learn, dtype=dtype)
    ref = Under(fast)
    ids = torch.randint(0, m, (B, T))
    x = F.one_hot(ids, m).to(dtype)
    s0 = SecondOrderState(torch.rand(B, n, dtype=dtype, requires_grad=True))
    compare_layers(fast, ref, x, s0, random_mask(B, T), dtype)
    compare_layers(fast, ref, x, s0, None, dtype)


@needs_triton
@pytest.mark.parametrize(("T", "B", "N"), SHAPES)
@pytest.mark.parametrize("learn", [False, True])
def test_second_order_kernel(T, B, N, learn):
    from memrnn.ops.second_order_rnn import second_order_sequence

    M = 4
    ids = torch.randint(0, M, (B, T), generator=torch.Generator().manual_seed(9)).to(DEVICE)

    def make(dtype):
        h = torch.tensor(2.0, dtype=dtype, device=DEVICE, requires_grad=learn)
        return (randn(N, N, M, dtype=dtype, seed=2, scale=N**-0.5), randn(N, dtype=dtype, seed=3), h,
                torch.rand(B, N, generator=torch.Generator().manual_seed(4), dtype=torch.float64).to(DEVICE, dtype).requires_grad_())  # fmt: skip

    def run(w, b, h, s0, impl):
        return second_order_sequence(w, b, h, s0, ids, impl=impl)

    assert_kernel_matches(run, make, [(B, T + 1, N)], atol=1e-4)
