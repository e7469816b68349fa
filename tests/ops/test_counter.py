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
from tests.ops.backends import SHAPES, assert_kernel_matches, assert_member_kernels, needs_triton, randn
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


def _counter_args(g, M, B, T, n, H, k, dtype):
    """``x, w_in, b, w_rec, r0`` of a ReLU counter with members, requiring grad."""
    G, N = H + 2 * k, H + k
    shapes = [(M, B, T, n), (M, G, n), (M, G), (M, G, N), (M, B, N)]
    return [torch.randn(*s, generator=g, dtype=dtype).mul(0.5).requires_grad_() for s in shapes]


@pytest.mark.parametrize(
    ("dtype", "tol"), [(torch.float64, 1e-12), (torch.float32, 1e-5)], ids=["float64", "float32"]
)
@pytest.mark.parametrize("activation", ["tanh", "heaviside"])
def test_counter_members_equal_the_member_reference(activation, dtype, tol, monkeypatch):
    """The member dimension (:class:`memrnn.ops.counter.cpu.CounterRNNSequence` with members):
    states, moves and the gradients of every argument equal :func:`counter_member_reference`'s,
    with σ' read from the outputs (tanh) and from the kept pre-activations (heaviside), across three
    backward blocks (the block shortened to 5 steps); member ``m`` of the member reference is the
    single reference on its slices."""
    from memrnn.ops.counter import counter_reference, counter_sequence

    monkeypatch.setattr(bptt, "BLOCK", 5)
    g = torch.Generator().manual_seed(0)
    M, B, T, n, H, k = 3, 4, 13, 5, 6, 2
    args = _counter_args(g, M, B, T, n, H, k, dtype)
    w_r = torch.randn(M, B, T + 1, H + k, generator=g, dtype=dtype)
    w_m = torch.randn(M, B, T, 2 * k, generator=g, dtype=dtype)
    fn = ACTIVATIONS[activation]
    runs = {}
    for which in ("reference", "cpu"):
        rs, moves = counter_sequence(*args, H, activation, fn, impl=which)
        runs[which] = (rs, moves, *torch.autograd.grad((rs * w_r).sum() + (moves * w_m).sum(), args))
    assert runs["cpu"][0].shape == (M, B, T + 1, H + k) and runs["cpu"][1].shape == (M, B, T, 2 * k)
    for a, b in zip(runs["cpu"], runs["reference"], strict=True):  # the counters grow: tol of the largest
        torch.testing.assert_close(a, b, atol=tol * max(1.0, float(b.detach().abs().max())), rtol=tol)
    for m in range(M):
        single = [a.detach()[m].clone().requires_grad_() for a in args]
        rs_m, moves_m = counter_reference(*single, H, fn)
        assert torch.equal(rs_m, runs["reference"][0][m]) and torch.equal(moves_m, runs["reference"][1][m])


@pytest.mark.parametrize("steps", [0, 1])
def test_counter_members_at_zero_and_one_step(steps):
    """The edges: no step gives ``r0`` (and its gradient back), one step one cell; only the
    states used (no gradient on the moves)."""
    from memrnn.ops.counter import counter_sequence

    g = torch.Generator().manual_seed(1)
    M, B, n, H, k = 2, 3, 3, 4, 2
    args = _counter_args(g, M, B, steps, n, H, k, torch.float64)
    out = []
    for which in ("reference", "cpu"):
        rs, _ = counter_sequence(*args, H, "tanh", torch.tanh, impl=which)
        grads = torch.autograd.grad((rs * rs.detach().cos()).sum(), args, allow_unused=True)
        out.append((rs, [torch.zeros_like(t) if d is None else d for d, t in zip(grads, args, strict=True)]))
    (a, ga), (b, gb) = out
    assert b.shape == (M, B, steps + 1, H + k) and torch.equal(b[:, :, 0], args[4])
    for p, q in zip([b, *gb], [a, *ga], strict=True):
        torch.testing.assert_close(p, q, atol=1e-12, rtol=1e-12)


def test_counter_members_bad_shapes_are_named():
    """With members (``w_rec [M, H + 2k, H + k]``) an argument without the member dimension is a
    ValueError naming it."""
    from memrnn.ops.counter import counter_sequence

    x, w_in, b, w_rec, r0 = (
        a.detach() for a in _counter_args(torch.Generator(), 2, 3, 4, 3, 4, 1, torch.float64)
    )
    with pytest.raises(ValueError, match=r"so r0 must be 3-D with 2 first, got \(3, 5\)"):
        counter_sequence(x, w_in, b, w_rec, r0[0], 4, "tanh", torch.tanh)
    with pytest.raises(ValueError, match=r"so x must be 4-D with 2 first, got \(3, 4, 3\)"):
        counter_sequence(x[0], w_in, b, w_rec, r0, 4, "tanh", torch.tanh)


@needs_triton
def test_counter_members_on_the_kernel(monkeypatch):
    """The Triton kernels with members (issue 67): one launch per direction for all members (17
    rows: two tiles, the second partial): states, moves and every gradient equal the float64
    member reference and each member's single launch (:func:`tests.ops.backends.assert_member_kernels`)."""
    import memrnn.ops.counter.triton as kernels
    from memrnn.ops.counter import counter_sequence

    M, B, T, n, H, k = 2, 17, 3, 3, 4, 2
    G, N = H + 2 * k, H + k

    def make(dtype):
        return [randn(M, B, T, n, dtype=dtype, seed=1), randn(M, G, n, dtype=dtype, seed=2, scale=0.5),
                randn(M, G, dtype=dtype, seed=3), randn(M, G, N, dtype=dtype, seed=4, scale=N**-0.5),
                randn(M, B, N, dtype=dtype, seed=5)]  # fmt: skip

    def run(args, impl):
        return counter_sequence(*args, H, "tanh", torch.tanh, impl=impl)

    assert_member_kernels(monkeypatch, kernels, ["_counter_fwd", "_counter_bwd"], run, make, M, B, atol=1e-5)
