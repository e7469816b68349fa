"""``memrnn.ops.members.per_member``, the loop every ``*_member_reference`` is, and
``memrnn.ops.lstm.sigmoids_first`` over the members' gate dimension."""

from __future__ import annotations

import pytest
import torch

from memrnn.ops.lstm import sigmoids_first
from memrnn.ops.members import member_slice, per_member


def test_per_member_slices_every_tensor_and_stacks_every_field():
    g = torch.Generator().manual_seed(0)
    a, b, w = (torch.randn(3, 2, 4, generator=g) for _ in range(3))
    lengths = torch.tensor([[1, 2], [2, 2], [0, 1]])

    def fn(x, pair, scale, *, mlp, lengths, none):
        assert none is None and scale == 2.0  # not tensors: passed as they are
        ((w1, b1),) = mlp
        return x * scale + pair[0] - pair[1] + w1 * b1, None, lengths.sum()

    got = per_member(fn, 3, a, (b, w), 2.0, mlp=((w, a),), lengths=lengths, none=None)
    assert got[1] is None
    for m in range(3):
        assert torch.equal(got[0][m], a[m] * 2.0 + b[m] - w[m] + w[m] * a[m])
        assert got[2][m] == lengths[m].sum()
    assert member_slice({"k": [a, None]}, 1)["k"][0] is not a and torch.equal(
        member_slice({"k": [a]}, 1)["k"][0], a[1]
    )


def test_per_member_needs_a_member():
    with pytest.raises(ValueError, match="at least one member, got 0"):
        per_member(lambda x: x, 0, torch.zeros(0))


def test_sigmoids_first_over_the_members_gate_dimension():
    g = torch.Generator().manual_seed(1)
    w = torch.randn(3, 4 * 5, 6, generator=g)
    b = torch.randn(3, 4 * 5, generator=g)
    for t in (w, b):
        want = torch.stack([sigmoids_first(t[m]) for m in range(3)])
        assert torch.equal(sigmoids_first(t, 1), want)
    i, f, gg, o = w[0].chunk(4)
    assert torch.equal(sigmoids_first(w[0]), torch.cat([o, i, f, gg]))
