"""The Elman recurrence (``memrnn.ops.elman``) on every path: the CPU sequence against its reference
loop (and what it keeps for the backward), and the Triton kernel against the reference (every
activation, a leak, float32 and bfloat16 storage).  The Elman layer is in
``tests/layers/test_elman.py``."""

from __future__ import annotations

import pytest
import torch

from benchmarks.run import SavedBytes
from memrnn.core.activations import ACTIVATIONS
from memrnn.ops.elman import elman_sequence
from tests.ops.backends import SHAPES, assert_kernel_matches, assert_member_kernels, needs_triton, randn


@pytest.mark.parametrize("leak", [1.0, 0.3])
@pytest.mark.parametrize("name", ["tanh", "sigmoid", "identity", "relu", "saturated_linear"])
def test_elman_sequence_equals_reference_and_keeps_only_what_its_backward_reads(name, leak):
    """The Elman CPU sequence against its reference loop (outputs and the gradients of the
    projected inputs, the recurrent weights and h0, float64), and what it keeps for the backward:
    ``hs`` alone where the activation's derivative is a function of its output (tanh, sigmoid and
    relu without a leak, identity), ``hs`` and the pre-activations otherwise."""
    g = torch.Generator().manual_seed(3)
    B, T, H = 3, 70, 4  # 70 steps: two blocks of the backward
    pre = torch.randn(B, T, H, generator=g, dtype=torch.float64, requires_grad=True)
    w = (0.6 * torch.randn(H, H, generator=g, dtype=torch.float64)).requires_grad_()
    h0 = torch.randn(B, H, generator=g, dtype=torch.float64, requires_grad=True)
    fn = ACTIVATIONS[name]
    out = {}
    for impl in ("cpu", "reference"):
        with SavedBytes() as saved:
            hs = elman_sequence(pre, w, h0, name, fn, leak, impl=impl)
        wts = torch.linspace(-1, 1, H, dtype=torch.float64)
        out[impl] = (hs, torch.autograd.grad((hs * wts).sum(), [pre, w, h0]), saved.bytes)
    torch.testing.assert_close(out["cpu"][0], out["reference"][0], atol=1e-12, rtol=0)
    for a, b in zip(out["cpu"][1], out["reference"][1], strict=True):
        torch.testing.assert_close(a, b, atol=1e-11, rtol=1e-12)  # identity: values up to ~1e4
    seq = B * T * H * 8  # bytes of one [T, B, H] float64 buffer
    from_output = name == "identity" or (leak == 1.0 and name in ("tanh", "sigmoid", "relu"))
    kept = out["cpu"][2] - H * H * 8  # less the recurrent weights
    assert kept == (seq + B * H * 8 if from_output else 2 * seq + B * H * 8), (kept, seq)
    if name == "identity":  # a frozen linear reservoir (no ∂U) keeps nothing but U
        with SavedBytes() as saved:
            hs = elman_sequence(pre, w.detach(), h0, name, fn, leak, impl="cpu")
        assert saved.bytes == H * H * 8
        (gp, gh) = torch.autograd.grad((hs * wts).sum(), [pre, h0])
        torch.testing.assert_close(gp, out["reference"][1][0], atol=1e-11, rtol=1e-12)
        torch.testing.assert_close(gh, out["reference"][1][2], atol=1e-11, rtol=1e-12)


@pytest.mark.parametrize(("T", "B", "H"), SHAPES)
@pytest.mark.parametrize(
    "activation", ["tanh", "sigmoid", "relu", "heaviside", "saturated_linear", "identity"]
)
@needs_triton
@pytest.mark.parametrize("leak", [1.0, 0.3])
def test_elman_kernel(T, B, H, activation, leak):
    from memrnn.core.activations import ACTIVATIONS
    from memrnn.ops.elman import elman_sequence

    fn = ACTIVATIONS.get(activation, lambda z: z)

    def make(dtype):
        return (randn(B, T, H, dtype=dtype, seed=1), randn(H, H, dtype=dtype, seed=2, scale=H**-0.5),
                randn(B, H, dtype=dtype, seed=3))  # fmt: skip

    def run(pre, w, h0, impl):
        return elman_sequence(pre, w, h0, activation, fn, leak, impl=impl)

    assert_kernel_matches(run, make, [(B, T + 1, H)], atol=1e-4)


@needs_triton
def test_elman_kernel_in_bfloat16():
    from memrnn.ops.elman import elman_sequence

    def make(dtype):
        return randn(19, 5, 20, dtype=dtype, seed=1), randn(20, 20, dtype=dtype, seed=2, scale=0.2), randn(19, 20, dtype=dtype, seed=3)  # fmt: skip

    def run(pre, w, h0, impl):
        return elman_sequence(pre, w, h0, "tanh", torch.tanh, impl=impl)

    assert_kernel_matches(run, make, [(19, 6, 20)], atol=3e-2, dtype=torch.bfloat16)


@pytest.mark.parametrize("leak", [1.0, 0.3])
@pytest.mark.parametrize("name", ["tanh", "relu", "sigmoid", "identity"])
def test_members_cpu_path_equals_the_reference_per_member(name, leak):
    """The member dimension (:class:`memrnn.ops.elman.cpu.ElmanSequence` with members): outputs and
    every gradient equal the single reference on each member's slices, float64."""
    from memrnn.core.activations import ACTIVATIONS
    from memrnn.ops.elman import elman_reference, elman_sequence

    g = torch.Generator().manual_seed(0)
    M, B, T, H = 3, 4, 11, 5
    pre, w, h0 = (torch.randn(*s, generator=g, dtype=torch.float64, requires_grad=True)
                  for s in [(M, B, T, H), (M, H, H), (M, B, H)])  # fmt: skip
    fn = ACTIVATIONS[name]
    hs = elman_sequence(pre, w, h0, name, fn, leak, impl="cpu")
    proj = torch.randn(hs.shape, generator=g, dtype=torch.float64)
    grads = torch.autograd.grad((hs * proj).sum(), [pre, w, h0])
    for m in range(M):
        single = [t.detach()[m].clone().requires_grad_() for t in (pre, w, h0)]
        ref = elman_reference(*single, fn, leak)
        torch.testing.assert_close(ref, hs[m], atol=1e-12, rtol=1e-12)
        for a, b in zip(torch.autograd.grad((ref * proj[m]).sum(), single), grads, strict=True):
            torch.testing.assert_close(a, b[m], atol=1e-11, rtol=1e-11)
    with pytest.raises(ValueError, match=r"so pre must be 4-D with 3 first, got \(4, 11, 5\)"):
        elman_sequence(pre[0], w, h0, name, fn, leak)


@needs_triton
@pytest.mark.parametrize("leak", [1.0, 0.3])
def test_members_kernel_is_one_launch_equal_to_the_reference_and_to_each_single_run(leak, monkeypatch):
    """The Triton kernels with members (issue 67): one launch per direction for all members, a grid
    of row tiles × members (17 rows: two tiles, the second partial); outputs and every gradient
    equal the float64 member reference (float32 storage, 1e-5), and member ``m`` equals the single
    kernel on its ``[m]`` slices (one model: the same kernels with ``M = 1``)."""
    import memrnn.ops.elman.triton as kernels

    M, B, T, H = 2, 17, 3, 5

    def make(dtype):
        return [randn(M, B, T, H, dtype=dtype, seed=1), randn(M, H, H, dtype=dtype, seed=2, scale=H**-0.5),
                randn(M, B, H, dtype=dtype, seed=3)]  # fmt: skip

    def run(args, impl):
        return (elman_sequence(*args, "tanh", torch.tanh, leak, impl=impl),)

    assert_member_kernels(monkeypatch, kernels, ["_elman_fwd", "_elman_bwd"], run, make, M, B, atol=1e-5)
