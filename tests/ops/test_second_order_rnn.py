"""The second-order RNN (``memrnn.ops.second_order_rnn``, Giles et al. 1992) on every path: the
fused CPU sequence against the reference loop (a fixed and a learned sensitivity, padding), and
the Triton kernel against the reference."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from memrnn.layers import SecondOrderRNN
from memrnn.layers.second_order import SecondOrderState
from tests.ops.backends import (
    DEVICE,
    SHAPES,
    assert_kernel_matches,
    assert_member_kernels,
    needs_triton,
    randn,
)
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


@pytest.mark.parametrize(
    ("dtype", "tol"), [(torch.float64, 1e-12), (torch.float32, 1e-5)], ids=["float64", "float32"]
)
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("learn", [False, True])
def test_members_equal_the_member_reference(learn, bias, dtype, tol):
    """The member dimension (:class:`memrnn.ops.second_order_rnn.cpu.SecondOrderSequence` with
    members: every member's rows and weight slices in one bucketed product per step): states and
    the gradients of every argument equal :func:`second_order_member_reference`'s, each member
    with its own ``H`` and ids, and member ``μ`` of the member reference is the single reference
    on its slices."""
    from memrnn.ops.second_order_rnn import (
        second_order_member_reference,
        second_order_reference,
        second_order_sequence,
    )

    g = torch.Generator().manual_seed(0)
    M, B, T, n, m = 3, 6, 9, 5, 4
    w = torch.randn(M, n, n, m, generator=g, dtype=dtype).requires_grad_()
    b = torch.randn(M, n, generator=g, dtype=dtype).requires_grad_() if bias else None
    h = torch.tensor([1.0, 2.0, 0.5], dtype=dtype, requires_grad=learn)
    s0 = torch.rand(M, B, n, generator=g, dtype=dtype).requires_grad_()
    ids = torch.randint(0, m, (M, B, T), generator=g)
    leaves = [t for t in (w, b, h, s0) if t is not None and t.requires_grad]
    proj = torch.randn(M, B, T + 1, n, generator=g, dtype=dtype)
    runs = {}
    for impl in ("reference", "cpu"):
        states = second_order_sequence(w, b, h, s0, ids, impl=impl)
        runs[impl] = (states, *torch.autograd.grad((states * proj).sum(), leaves))
    assert type(runs["cpu"][0].grad_fn).__name__ == "SecondOrderSequenceBackward"
    assert runs["cpu"][0].shape == (M, B, T + 1, n)
    for a, c in zip(runs["cpu"], runs["reference"], strict=True):
        torch.testing.assert_close(a, c, atol=tol, rtol=tol)
    ref = second_order_member_reference(w, b, h, s0, ids)
    for mu in range(M):
        single = second_order_reference(w[mu], None if b is None else b[mu], h[mu], s0[mu], ids[mu])
        assert torch.equal(single, ref[mu])


def test_members_bad_shapes_are_named():
    """With members (``weight [M, n, n, m]``) an argument without the member dimension is a
    ValueError naming it."""
    from memrnn.ops.second_order_rnn import second_order_sequence

    M, B, T, n, m = 2, 3, 4, 5, 3
    w, b, h = torch.zeros(M, n, n, m), torch.zeros(M, n), torch.ones(M)
    s0, ids = torch.zeros(M, B, n), torch.zeros(M, B, T, dtype=torch.long)
    with pytest.raises(ValueError, match=r"so s0 must be 3-D with 2 first, got \(3, 5\)"):
        second_order_sequence(w, b, h, s0[0], ids)
    with pytest.raises(ValueError, match=r"so sensitivity must be 1-D with 2 first, got \(\)"):
        second_order_sequence(w, b, h[0], s0, ids)
    with pytest.raises(ValueError, match=r"so ids must be 3-D with 2 first, got \(3, 4\)"):
        second_order_sequence(w, None, h, s0, ids[0])
    with pytest.raises(ValueError, match=r"token id 3 is outside the vocabulary \[0, 3\)"):
        second_order_sequence(w, None, h, s0, ids + 3, impl="cpu")  # it would read member 1's weights


@needs_triton
@pytest.mark.parametrize("bias", [True, False])
def test_members_kernel_is_one_launch_per_direction(bias, monkeypatch):
    """The Triton kernels with members (issue 67): one launch per direction for all members (17
    rows: two tiles, the second partial), each member its own symbols, bias and sensitivity:
    states and every gradient equal the float64 member reference and each member's single launch
    (:func:`tests.ops.backends.assert_member_kernels`); a symbol outside the vocabulary is named
    (on the kernels it would add to the next member's weight gradient)."""
    import memrnn.ops.second_order_rnn.triton as kernels
    from memrnn.ops.second_order_rnn import second_order_sequence

    M, B, T, N, V = 2, 17, 4, 5, 4
    ids = torch.randint(0, V, (M, B, T), generator=torch.Generator().manual_seed(9)).to(DEVICE)

    def make(dtype):
        return [
            randn(M, N, N, V, dtype=dtype, seed=2, scale=N**-0.5),
            *([randn(M, N, dtype=dtype, seed=3)] if bias else []),
            torch.tensor([2.0, 1.0], device=DEVICE, dtype=dtype, requires_grad=True),
            randn(M, B, N, dtype=dtype, seed=4),
            ids,
        ]

    def run(args, impl):
        w, *b, h, s0, i = args
        return (second_order_sequence(w, b[0] if b else None, h, s0, i, impl=impl),)

    assert_member_kernels(monkeypatch, kernels, ["_so_fwd", "_so_bwd"], run, make, M, B, atol=1e-5)
    w, *b, h, s0, _ = make(torch.float32)
    with pytest.raises(ValueError, match=r"token id 4 is outside the vocabulary \[0, 4\)"):
        second_order_sequence(w, b[0] if b else None, h, s0, ids + 1, impl="triton")
