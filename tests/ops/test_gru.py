"""The GRU by mechanism (``memrnn.ops.gru``): its reference loop is ``nn.GRU``'s equations (Cho et
al. 2014 in torch's gate convention), and every implementation behind :func:`gru_sequence`
(``"reference"``, ``"cpu"``: torch's kernel, ``"bptt"``: the hand-written backpropagation through
time) gives the same outputs and gradients; the one switch picks among them."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from memrnn import reference_paths
from memrnn.layers import GRULayer
from memrnn.layers.gated import GRUState
from memrnn.ops import bptt
from memrnn.ops.dispatch import choose, implementation
from memrnn.ops.elman import elman_sequence
from memrnn.ops.gru import gru_implementation, gru_reference, gru_sequence
from tests.ops.layer_paths import Under, compare_layers, random_mask

F64 = torch.float64


def _weights(gen, n=3, H=4, bias=True):
    w = [torch.randn(3 * H, n, generator=gen, dtype=F64), torch.randn(3 * H, H, generator=gen, dtype=F64)]
    b = [torch.randn(3 * H, generator=gen, dtype=F64) for _ in range(2)] if bias else [None, None]
    return [t.mul(0.5).requires_grad_() if t is not None else None for t in (w[0], b[0], w[1], b[1])]


@pytest.mark.parametrize("bias", [True, False])
def test_reference_is_torchs_gru(bias, gen):
    """``gru_reference`` equals ``nn.GRU`` (one layer, batch first) on the same weights: every
    state, float64 to rounding."""
    w_ih, b_ih, w_hh, b_hh = _weights(gen, bias=bias)
    module = nn.GRU(3, 4, bias=bias, batch_first=True, dtype=F64)
    with torch.no_grad():
        module.weight_ih_l0.copy_(w_ih)
        module.weight_hh_l0.copy_(w_hh)
        if bias:
            module.bias_ih_l0.copy_(b_ih)
            module.bias_hh_l0.copy_(b_hh)
    x = torch.randn(2, 6, 3, generator=gen, dtype=F64)
    h0 = torch.randn(2, 4, generator=gen, dtype=F64)
    hs = gru_reference(x, w_ih, b_ih, w_hh, b_hh, h0)
    y, h_n = module(x, h0[None])
    assert hs.shape == (2, 7, 4) and torch.equal(hs[:, 0], h0)
    torch.testing.assert_close(hs[:, 1:], y, atol=1e-12, rtol=1e-12)
    torch.testing.assert_close(hs[:, -1], h_n[0], atol=1e-12, rtol=1e-12)


@pytest.mark.parametrize("impl", ["cpu", "bptt"])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("steps", [0, 1, 70])  # 70: two blocks of the hand-written backward
def test_every_implementation_equals_the_reference(impl, bias, steps, gen):
    """Outputs and the gradients of the input, every weight and ``h0`` (an unused leaf's as zeros),
    float64."""
    weights = _weights(gen, bias=bias)
    x = torch.randn(3, steps, 3, generator=gen, dtype=F64, requires_grad=True)
    h0 = torch.randn(3, 4, generator=gen, dtype=F64, requires_grad=True)
    w = torch.randn(3, steps + 1, 4, generator=gen, dtype=F64)
    leaves = [x, *(t for t in weights if t is not None), h0]
    out = []
    for which in ("reference", impl):
        hs = gru_sequence(x, *weights, h0, impl=which)
        grads = torch.autograd.grad((hs * w).sum(), leaves, allow_unused=True)
        out.append(
            (hs, [torch.zeros_like(t) if g is None else g for g, t in zip(grads, leaves, strict=True)])
        )
    (a, ga), (b, gb) = out
    torch.testing.assert_close(b, a, atol=1e-12, rtol=1e-12)
    for p, q in zip(gb, ga, strict=True):
        torch.testing.assert_close(p, q, atol=1e-10, rtol=1e-10)


def test_the_switch_picks_the_implementation():
    """torch's kernel (``"cpu"``) by default, the reference inside ``reference_paths()``, the
    hand-written BPTT only when asked; a forced ``"triton"``/``"native"`` runs torch's kernel,
    given explicitly it is refused; elsewhere a forced ``"bptt"`` is the op's ``"cpu"`` path and an
    explicit one is refused."""
    x = torch.zeros(2, 3, 4)
    assert gru_implementation(x) == "cpu"
    with reference_paths():
        assert gru_implementation(x) == "reference"
    for forced, got in (("bptt", "bptt"), ("reference", "reference"), ("triton", "cpu"), ("native", "cpu")):
        with implementation(forced):
            assert gru_implementation(x) == got
    with pytest.raises(ValueError, match="impl='triton': the GRU has no such implementation"):
        gru_implementation(x, "triton")
    with implementation("bptt"):
        assert choose(x) == "cpu"
    with pytest.raises(ValueError, match="impl='bptt'"):
        elman_sequence(x, torch.zeros(4, 4), torch.zeros(2, 4), "tanh", torch.tanh, impl="bptt")
    with pytest.raises(ValueError, match="both biases"):
        gru_sequence(x, torch.zeros(12, 4), torch.zeros(12), torch.zeros(12, 4), None, torch.zeros(2, 4))


def _has(t, name):
    seen, todo = set(), [t.grad_fn]
    while todo:
        n = todo.pop()
        if n is None or n in seen:
            continue
        seen.add(n)
        if name in type(n).__name__:
            return True
        todo.extend(f for f, _ in n.next_functions)
    return False


def test_gru_layer_runs_what_the_switch_picks(gen):
    """``GRULayer`` (formerly ``bptt=False``/``bptt=True``/``fused=False``): torch's kernel by
    default, :class:`GRUSequence` per layer under ``implementation("bptt")``, the reference loop
    under ``reference_paths()``; the same numbers to float64 rounding."""
    layer = GRULayer(3, 4, num_layers=2, dtype=F64)
    x = torch.randn(2, 5, 3, generator=gen, dtype=F64, requires_grad=True)
    y, _ = layer(x)
    assert not _has(y, "GRUSequence")
    with implementation("bptt"):
        y_bptt, _ = layer(x)
        assert torch.equal(layer.outputs(x), y_bptt)
    assert _has(y_bptt, "GRUSequence")
    with reference_paths():
        y_ref, _ = layer(x)
    assert not _has(y_ref, "GRUSequence")
    torch.testing.assert_close(y_bptt, y_ref, atol=1e-12, rtol=1e-12)
    torch.testing.assert_close(y, y_ref, atol=1e-12, rtol=1e-12)


@pytest.mark.parametrize(("num_layers", "bias", "block"), [(1, True, None), (2, True, 3), (2, False, 3)])
def test_gru_sequence_equals_reference(num_layers, bias, block, monkeypatch):
    """GRULayer's hand-written BPTT (GRUSequence per layer, ``implementation("bptt")``) against the
    gate-level reference: outputs, final state and gradients (input, initial state, parameters),
    padded and not, with the backward's blocks split (3 steps) and without bias."""
    if block is not None:
        monkeypatch.setattr(bptt, "BLOCK", block)
    torch.manual_seed(0)
    dtype = torch.float64
    layer = GRULayer(3, 5, num_layers=num_layers, bias=bias, dtype=dtype)
    fast, ref = Under(layer, lambda: implementation("bptt")), Under(layer)
    x = torch.randn(6, 7, 3, dtype=dtype, requires_grad=True)
    h0 = torch.randn(6, num_layers, 5, dtype=dtype, requires_grad=True)
    for mask in (None, random_mask(6, 7)):
        compare_layers(fast, ref, x, GRUState(h0), mask, dtype)


@pytest.mark.parametrize(("dtype", "tol"), [(F64, 1e-12), (torch.float32, 1e-5)], ids=["float64", "float32"])
@pytest.mark.parametrize("impl", ["cpu", "bptt"])
@pytest.mark.parametrize("bias", [True, False])
def test_members_equal_the_member_reference(bias, impl, dtype, tol, monkeypatch):
    """The member dimension (:class:`memrnn.ops.gru.cpu.GRUSequence` with members, what ``"cpu"``
    and ``"bptt"`` both run): outputs and the gradients of every argument equal
    :func:`gru_member_reference`'s, and member ``m`` equals the single call on its slices, with and
    without biases, across three backward blocks (the block shortened to 5 steps)."""
    monkeypatch.setattr(bptt, "BLOCK", 5)
    g = torch.Generator().manual_seed(0)
    M, B, T, n, H = 3, 4, 13, 5, 6
    shapes = [(M, B, T, n), (M, 3 * H, n), (M, 3 * H), (M, 3 * H, H), (M, 3 * H), (M, B, H)]
    args = [torch.randn(*s, generator=g, dtype=dtype).mul(0.5).requires_grad_() for s in shapes]
    if not bias:
        args[2] = args[4] = None
    leaves = [a for a in args if a is not None]
    w = torch.randn(M, B, T + 1, H, generator=g, dtype=dtype)
    runs = {}
    for which in ("reference", impl):
        hs = gru_sequence(*args, impl=which)
        runs[which] = (hs, *torch.autograd.grad((hs * w).sum(), leaves))
    assert _has(runs[impl][0], "GRUSequence") and runs[impl][0].shape == (M, B, T + 1, H)
    for a, b in zip(runs[impl], runs["reference"], strict=True):
        torch.testing.assert_close(a, b, atol=tol, rtol=tol)
    for m in range(M):  # the member reference is the single reference member by member
        single = [None if a is None else a.detach()[m].clone().requires_grad_() for a in args]
        hs_m = gru_reference(*single)
        assert torch.equal(hs_m, runs["reference"][0][m])
        got = torch.autograd.grad((hs_m * w[m]).sum(), [s for s in single if s is not None])
        for a, b in zip(got, runs["reference"][1:], strict=True):
            torch.testing.assert_close(a, b[m], atol=1e-15 if dtype == F64 else 1e-7, rtol=0)


@pytest.mark.parametrize("steps", [0, 1])
def test_members_at_zero_and_one_step(steps, gen):
    """The member path's edges: no step gives ``h0`` (and its gradient back), one step one GRU cell."""
    M, B, H = 2, 3, 4
    x = torch.randn(M, B, steps, 3, generator=gen, dtype=F64, requires_grad=True)
    weights = [torch.stack(ws) for ws in zip(*(_weights(gen) for _ in range(M)), strict=True)]
    weights = [t.detach().requires_grad_() for t in weights]
    h0 = torch.randn(M, B, H, generator=gen, dtype=F64, requires_grad=True)
    leaves = [x, *weights, h0]
    out = []
    for which in ("reference", "cpu"):
        hs = gru_sequence(x, *weights, h0, impl=which)
        grads = torch.autograd.grad((hs * hs.detach().cos()).sum(), leaves, allow_unused=True)
        out.append(
            (hs, [torch.zeros_like(t) if g is None else g for g, t in zip(grads, leaves, strict=True)])
        )
    (a, ga), (b, gb) = out
    assert b.shape == (M, B, steps + 1, H) and torch.equal(b[:, :, 0], h0)
    torch.testing.assert_close(b, a, atol=1e-12, rtol=1e-12)
    for p, q in zip(gb, ga, strict=True):
        torch.testing.assert_close(p, q, atol=1e-12, rtol=1e-12)


def test_members_bad_shapes_are_named():
    """With members (``w_hh [M, 3H, H]``) an argument without the member dimension is a ValueError
    naming it."""
    M, B, T, n, H = 2, 3, 4, 5, 6
    x, h0 = torch.zeros(M, B, T, n), torch.zeros(M, B, H)
    w_ih, w_hh, b = torch.zeros(M, 3 * H, n), torch.zeros(M, 3 * H, H), torch.zeros(M, 3 * H)
    with pytest.raises(ValueError, match=r"so h0 must be 3-D with 2 first, got \(3, 6\)"):
        gru_sequence(x, w_ih, b, w_hh, b, h0[0])
    with pytest.raises(ValueError, match=r"so b_ih must be 2-D with 2 first, got \(18,\)"):
        gru_sequence(x, w_ih, b[0], w_hh, b, h0)
    with pytest.raises(ValueError, match=r"so x must be 4-D with 2 first, got \(3, 4, 5\)"):
        gru_sequence(x[0], w_ih, None, w_hh, None, h0)
