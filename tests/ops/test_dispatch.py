"""The size heuristics of :mod:`memrnn.ops.dispatch` that choose between exact paths."""

from __future__ import annotations

import pytest
import torch

from memrnn.ops import dispatch
from memrnn.ops.buckets import TokenBuckets
from memrnn.ops.dispatch import choose, implementation
from tests.ops.backends import needs_native


def test_use_buckets_on_token_buckets():
    """``m·c`` bucket slots (``m`` symbols, ``c`` the largest bucket) against
    ``BUCKET_SLOTS_PER_ROW = 4`` per row: buckets at the boundary, the reference loop one symbol
    past it."""
    assert dispatch.BUCKET_SLOTS_PER_ROW == 4
    balanced = torch.arange(8).remainder(4).repeat(5, 1).t()  # [8, 5]: 2 rows per symbol
    assert TokenBuckets(balanced, 4).capacity == 2 and dispatch.use_buckets(TokenBuckets(balanced, 4), 8)
    same = torch.zeros(8, 5, dtype=torch.long)  # every row reads symbol 0: c = 8
    assert TokenBuckets(same, 4).capacity == 8
    assert dispatch.use_buckets(TokenBuckets(same, 4), 8)  # 4·8 = 32 = 4·8
    assert not dispatch.use_buckets(TokenBuckets(same, 5), 8)  # 5·8 = 40 > 32


def test_use_buckets_boundaries():
    """The rule itself on exact sizes: ``m·c <= 4·max(B, 1)``."""

    class Sizes:
        def __init__(self, num_symbols: int, capacity: int) -> None:
            self.num_symbols, self.capacity = num_symbols, capacity

    assert dispatch.use_buckets(Sizes(8, 4), 8)  # 32 = 4·8
    assert not dispatch.use_buckets(Sizes(11, 3), 8)  # 33 > 32
    assert dispatch.use_buckets(Sizes(4, 1), 0)  # an empty batch counts as one row: 4 = 4·1
    assert not dispatch.use_buckets(Sizes(5, 1), 0)
    assert dispatch.use_buckets(Sizes(1, 64), 16) and not dispatch.use_buckets(Sizes(1, 65), 16)


@needs_native
def test_the_dispatch_picks_native_on_cpu_and_names_what_it_cannot_do(monkeypatch):
    x32 = torch.zeros(2, 3, 4)
    assert choose(x32, native_ok=True) == "native"
    assert choose(x32.double(), native_ok=True) == "native"
    assert choose(x32) == "cpu"  # a mechanism without C++ loops
    assert choose(x32.half(), native_ok=True) == "cpu"
    with implementation("native"):
        assert choose(x32) == "cpu"  # forced, but this op has none: its Python loop
    with pytest.raises(ValueError, match="impl='native': this op has no C\\+\\+ loop"):
        choose(x32, "native")
    with pytest.raises(ValueError, match=r"CPU tensors of float32 or float64, got cpu torch\.float16"):
        choose(x32.half(), "native", native_ok=True)
    monkeypatch.setenv("MEMRNN_NATIVE", "0")
    assert choose(x32, native_ok=True) == "cpu"
    with pytest.raises(ValueError, match=r"C\+\+ loops are off here \(MEMRNN_NATIVE=0\)"):
        choose(x32, "native", native_ok=True)
