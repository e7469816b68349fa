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
from tests.ops.backends import SHAPES, assert_kernel_matches, assert_member_kernels, needs_triton, randn
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


def _jordan_args(g, M, T, B, H, Fb, dtype):
    """``pre [M, T, B, H]``, ``U [M, H, F]``, ``E [M, F, H]``, ``r0 [M, B, F]`` requiring grad."""
    shapes = [(M, T, B, H), (M, H, Fb), (M, Fb, H), (M, B, Fb)]
    return [torch.randn(*s, generator=g, dtype=dtype).mul(0.5).requires_grad_() for s in shapes]


@pytest.mark.parametrize(
    ("dtype", "tol"), [(torch.float64, 1e-12), (torch.float32, 1e-5)], ids=["float64", "float32"]
)
@pytest.mark.parametrize(("activation", "output_activation"), JORDAN_CASES)
def test_jordan_members_equal_the_member_reference(activation, output_activation, dtype, tol, monkeypatch):
    """The member dimension (:class:`memrnn.ops.jordan.cpu.JordanSequence` with members): ``hs``,
    ``rs`` and the gradients of every argument equal :func:`jordan_member_reference`'s for every
    output activation (softmax, identity, elementwise with and without kept pre-activations),
    across three backward blocks (the block shortened to 5 steps); member ``m`` of the member
    reference is the single reference on its slices."""
    from memrnn.ops.jordan import jordan_reference, jordan_sequence

    monkeypatch.setattr(bptt, "BLOCK", 5)
    g = torch.Generator().manual_seed(0)
    M, T, B, H, Fb = 3, 13, 4, 6, 5
    args = _jordan_args(g, M, T, B, H, Fb, dtype)
    w_h = torch.randn(M, T, B, H, generator=g, dtype=dtype)
    w_r = torch.randn(M, T + 1, B, Fb, generator=g, dtype=dtype)
    fns = (ACTIVATIONS[activation], ACTIVATIONS[output_activation])
    runs = {}
    for which in ("reference", "cpu"):
        hs, rs = jordan_sequence(*args, activation, output_activation, fns, impl=which)
        runs[which] = (hs, rs, *torch.autograd.grad((hs * w_h).sum() + (rs * w_r).sum(), args))
    assert runs["cpu"][0].shape == (M, T, B, H) and runs["cpu"][1].shape == (M, T + 1, B, Fb)
    for a, b in zip(runs["cpu"], runs["reference"], strict=True):
        torch.testing.assert_close(a, b, atol=tol, rtol=tol)
    for m in range(M):
        single = [a.detach()[m].clone() for a in args]
        hs_m, rs_m = jordan_reference(*single, *fns)
        assert torch.equal(hs_m, runs["reference"][0][m]) and torch.equal(rs_m, runs["reference"][1][m])


@pytest.mark.parametrize("steps", [0, 1])
def test_jordan_members_at_zero_and_one_step(steps):
    """The edges: no step gives ``r0`` (and its gradient back), one step one cell; only ``rs`` used
    (no gradient on ``hs``)."""
    from memrnn.ops.jordan import jordan_sequence

    g = torch.Generator().manual_seed(1)
    M, B, H, Fb = 2, 3, 4, 3
    args = _jordan_args(g, M, steps, B, H, Fb, torch.float64)
    fns = (torch.tanh, ACTIVATIONS["softmax"])
    out = []
    for which in ("reference", "cpu"):
        _, rs = jordan_sequence(*args, "tanh", "softmax", fns, impl=which)
        grads = torch.autograd.grad((rs * rs.detach().cos()).sum(), args, allow_unused=True)
        out.append((rs, [torch.zeros_like(t) if d is None else d for d, t in zip(grads, args, strict=True)]))
    (a, ga), (b, gb) = out
    assert b.shape == (M, steps + 1, B, Fb) and torch.equal(b[:, 0], args[3])
    for p, q in zip([b, *gb], [a, *ga], strict=True):
        torch.testing.assert_close(p, q, atol=1e-12, rtol=1e-12)


def test_jordan_members_bad_shapes_are_named():
    """With members (``weight_fb [M, H, F]``) an argument without the member dimension is a
    ValueError naming it."""
    from memrnn.ops.jordan import jordan_sequence

    pre, u, e, r0 = (a.detach() for a in _jordan_args(torch.Generator(), 2, 4, 3, 5, 2, torch.float64))
    fns = (torch.tanh, torch.tanh)
    with pytest.raises(ValueError, match=r"so r0 must be 3-D with 2 first, got \(3, 2\)"):
        jordan_sequence(pre, u, e, r0[0], "tanh", "tanh", fns)
    with pytest.raises(ValueError, match=r"so pre must be 4-D with 2 first, got \(4, 3, 5\)"):
        jordan_sequence(pre[0], u, e, r0, "tanh", "tanh", fns)


@needs_triton
def test_jordan_members_on_the_kernels(monkeypatch):
    """The Triton kernels with members (issue 67): one launch per direction for all members (17
    rows: two tiles, the second partial), equal to the float64 member reference and to each
    member's single launch (:func:`tests.ops.backends.assert_member_kernels`)."""
    import memrnn.ops.jordan.triton as kernels
    from memrnn.ops.jordan import jordan_sequence

    M, T, B, H, Fb = 2, 3, 17, 4, 3

    def make(dtype):
        return [randn(M, T, B, H, dtype=dtype, seed=1), randn(M, H, Fb, dtype=dtype, seed=2, scale=0.4),
                randn(M, Fb, H, dtype=dtype, seed=3, scale=H**-0.5), randn(M, B, Fb, dtype=dtype, seed=4)]  # fmt: skip

    def run(args, impl):
        fns = (ACTIVATIONS["tanh"], ACTIVATIONS["softmax"])
        return jordan_sequence(*args, "tanh", "softmax", fns, impl=impl)

    assert_member_kernels(monkeypatch, kernels, ["_jordan_fwd", "_jordan_bwd"], run, make, M, B, atol=1e-5)
