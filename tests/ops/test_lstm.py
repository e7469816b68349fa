"""The LSTM recurrence (``memrnn.ops.lstm``): the Triton kernel against the reference loop, with
identity units (the counter LSTM's).  Its CPU path is checked through the counter LSTM
(``tests/ops/test_counter.py``)."""

from __future__ import annotations

import pytest

from tests.ops.backends import SHAPES, assert_kernel_matches, needs_triton, randn


@needs_triton
@pytest.mark.parametrize(("T", "B", "N"), SHAPES)
@pytest.mark.parametrize("identity_units", [0, 2])
def test_lstm_kernel(T, B, N, identity_units):
    from memrnn.ops.lstm import lstm_sequence

    n = 3

    def make(dtype):
        return (randn(B, T, n, dtype=dtype, seed=1), randn(4 * N, n, dtype=dtype, seed=2, scale=0.5),
                randn(4 * N, dtype=dtype, seed=3), randn(4 * N, N, dtype=dtype, seed=4, scale=N**-0.5),
                randn(B, N, dtype=dtype, seed=5), randn(B, N, dtype=dtype, seed=6))  # fmt: skip

    def run(x, w_in, b, w_rec, h0, c0, impl):
        return lstm_sequence(x, w_in, b, w_rec, h0, c0, N - identity_units, impl=impl)

    assert_kernel_matches(run, make, [(B, T + 1, N), (B, T + 1, N)], atol=1e-4)
