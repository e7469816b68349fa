"""The LSTM recurrence (``memrnn.ops.lstm``): the Triton kernel against the reference loop, with
identity units (the counter LSTM's).  Its CPU path is checked through the counter LSTM
(``tests/ops/test_counter.py``)."""

from __future__ import annotations

import pytest
import torch

from memrnn.ops.lstm.cpu import LSTMSequence
from tests.ops.backends import (
    SHAPES,
    assert_kernel_matches,
    assert_member_kernels,
    needs_native,
    needs_triton,
    randn,
)


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


@pytest.mark.parametrize("tanh_units", [6, 4])
def test_members_cpu_path_equals_the_reference_per_member(tanh_units):
    """The member dimension (:class:`memrnn.ops.lstm.cpu.LSTMSequence` with members): outputs and
    every gradient equal the single reference on each member's slices, float64, 1e-12."""
    from memrnn.ops.lstm import lstm_reference, lstm_sequence

    g = torch.Generator().manual_seed(0)
    M, B, T, n, N = 3, 4, 13, 5, 6
    shapes = [(M, B, T, n), (M, 4 * N, n), (M, 4 * N), (M, 4 * N, N), (M, B, N), (M, B, N)]
    args = [torch.randn(*s, generator=g, dtype=torch.float64, requires_grad=True) for s in shapes]
    hs, cs = lstm_sequence(*args, tanh_units, impl="cpu")
    wh, wc = (
        torch.randn(hs.shape, generator=g, dtype=torch.float64),
        torch.randn(cs.shape, generator=g, dtype=torch.float64),
    )
    grads = torch.autograd.grad((hs * wh).sum() + (cs * wc).sum(), args)
    for m in range(M):
        single = [a.detach()[m].clone().requires_grad_() for a in args]
        h, c = lstm_reference(*single, tanh_units)
        torch.testing.assert_close(h, hs[m], atol=1e-12, rtol=0)
        torch.testing.assert_close(c, cs[m], atol=1e-12, rtol=0)
        for a, b in zip(
            torch.autograd.grad((h * wh[m]).sum() + (c * wc[m]).sum(), single), grads, strict=True
        ):
            torch.testing.assert_close(a, b[m], atol=1e-12, rtol=0)
    with pytest.raises(ValueError, match=r"so h0 must be 3-D with 3 first, got \(4, 6\)"):
        lstm_sequence(args[0], args[1], args[2], args[3], args[4][0], args[5], tanh_units)


@needs_triton
def test_members_kernel_is_one_launch_equal_to_the_reference_and_to_each_single_run(monkeypatch):
    """The Triton kernels with members (issue 67): one launch per direction for all members, a grid
    of row tiles × members (17 rows: two tiles, the second partial); outputs and every gradient
    equal the float64 member reference (float32 storage, 1e-5), and member ``m`` equals the single
    kernel on its ``[m]`` slices (one model: the same kernels with ``M = 1``)."""
    import memrnn.ops.lstm.triton as kernels
    from memrnn.ops.lstm import lstm_sequence

    M, B, T, n, N, tanh_units = 2, 17, 2, 4, 5, 3  # units 3, 4: the counter cells
    shapes = [(M, B, T, n), (M, 4 * N, n), (M, 4 * N), (M, 4 * N, N), (M, B, N), (M, B, N)]

    def make(dtype):
        return [randn(*shape, dtype=dtype, seed=i) for i, shape in enumerate(shapes)]

    def run(args, impl):
        return lstm_sequence(*args, tanh_units, impl=impl)

    assert_member_kernels(monkeypatch, kernels, ["_lstm_fwd", "_lstm_bwd"], run, make, M, B, atol=1e-5)


@needs_native
@pytest.mark.parametrize("members", [None, 3])
@pytest.mark.parametrize(("tanh_units", "outputs"), [(6, "hs"), (4, "both")])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_native_loops_equal_the_python_loops_bitwise(members, tanh_units, outputs, dtype):
    """:class:`memrnn.ops.lstm.cpu.LSTMSequence`'s C++ time loops (``impl="native"``, the default on
    CPU) make the Python loops' calls: outputs and every gradient equal bit for bit, single and
    with members, over more than one backward block (T > :data:`memrnn.ops.bptt.BLOCK`), with
    gradients into ``hs`` alone or into ``hs`` and ``cs``.  With members in float32 and float64
    ``"native"`` is the fused cell instead (its own sigmoid, tanh and sums: not bit for bit, so
    checked to a tolerance by the next test); here it is :class:`LSTMSequence`'s C++ loop, called
    directly."""
    from memrnn.ops.bptt import BLOCK
    from memrnn.ops.dispatch import choose
    from memrnn.ops.lstm import lstm_sequence

    g = torch.Generator().manual_seed(1)
    B, T, n, N = 4, BLOCK + 7, 5, 6
    lead = () if members is None else (members,)
    shapes = [(B, T, n), (4 * N, n), (4 * N,), (4 * N, N), (B, N), (B, N)]
    args = [(torch.randn(*lead, *s, generator=g, dtype=dtype) * 0.5).requires_grad_() for s in shapes]
    weights = [torch.randn(*lead, B, T + 1, N, generator=g, dtype=dtype) for _ in range(2)]
    assert choose(args[0], None, native_ok=True) == "native"  # the default on CPU

    def run(impl):
        if members is None:
            hs, cs = lstm_sequence(*args, tanh_units, impl=impl)
        else:  # LSTMSequence itself: the member path's "native" is the fused cell in float32/64
            hs, cs = LSTMSequence.apply(*args, tanh_units, impl == "native")
        loss = (hs * weights[0]).sum() + ((cs * weights[1]).sum() if outputs == "both" else 0)
        return (hs, cs, *torch.autograd.grad(loss, args))

    for a, b in zip(run("native"), run("cpu"), strict=True):
        assert torch.equal(a, b)


@needs_native
@pytest.mark.parametrize(("tanh_units", "outputs"), [(6, "hs"), (4, "both"), (0, "cs")])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_fused_member_cell_equals_the_python_loop_to_rounding(monkeypatch, tanh_units, outputs, dtype):
    """The member path's default on CPU (``impl="native"``, float32 and float64) is the fused C++
    cell (:class:`memrnn.ops.lstm.cpu.FusedLSTMSequence`).  Its sigmoid, tanh and summation order
    are its own, not ATen's, so it is not the Python loop bit for bit: float64, outputs and every
    gradient within 1e-12 of the ``"cpu"`` loop's; float32, within 1e-5 of the float64 loop's (as the
    float32 ``"cpu"`` loop is: its own distance from them reaches 4e-5 on the largest gradients).
    Over T > BLOCK steps, with counter cells, gradients into ``hs``, ``cs`` or both, and x
    without a gradient."""
    from memrnn.ops.bptt import BLOCK
    from memrnn.ops.lstm import cpu, lstm_sequence

    calls = []
    monkeypatch.setattr(cpu.FusedLSTMSequence, "apply", _counting(cpu.FusedLSTMSequence.apply, calls))
    g = torch.Generator().manual_seed(2)
    M, B, T, n, N = 3, 5, BLOCK + 7, 4, 6
    shapes = [(M, B, T, n), (M, 4 * N, n), (M, 4 * N), (M, 4 * N, N), (M, B, N), (M, B, N)]
    base = [torch.randn(*s, generator=g, dtype=torch.float64) * 0.5 for s in shapes]
    weights = [torch.randn(M, B, T + 1, N, generator=g, dtype=torch.float64) for _ in range(2)]

    def run(impl, dt):
        args = [a.to(dt, copy=True).requires_grad_(i != 0 or outputs != "cs") for i, a in enumerate(base)]
        hs, cs = lstm_sequence(*args, tanh_units, impl=impl)
        loss = (hs * weights[0].to(dt)).sum() if outputs != "cs" else 0
        loss = loss + ((cs * weights[1].to(dt)).sum() if outputs != "hs" else 0)
        wrt = [a for a in args if a.requires_grad]
        return [t.double() for t in (hs, cs, *torch.autograd.grad(loss, wrt))]

    got = run(None, dtype)  # the default
    assert len(calls) == 1
    exact = run("cpu", torch.float64)
    if dtype == torch.float64:
        for a, b in zip(got, exact, strict=True):
            torch.testing.assert_close(a, b, atol=1e-12, rtol=1e-12)
    else:
        for a, b in zip(got, exact, strict=True):
            torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    assert len(calls) == 1


def _counting(fn, calls):
    def wrapped(*args):
        calls.append(1)
        return fn(*args)

    return wrapped


@needs_native
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_fused_member_cell_gives_the_same_bits_on_any_number_of_threads(dtype):
    """The fused cell shares the members out among torch's threads (each member's whole sequence on
    one): outputs and every gradient are bit for bit the same on 1, 2 and 3 threads, with more or
    fewer members than threads, a batch that is not a whole vector (padded) and counter cells."""
    from memrnn.ops.lstm import lstm_sequence

    g = torch.Generator().manual_seed(5)
    M, B, T, n, N = 5, 3, 9, 4, 6
    shapes = [(M, B, T, n), (M, 4 * N, n), (M, 4 * N), (M, 4 * N, N), (M, B, N), (M, B, N)]
    base = [torch.randn(*s, generator=g, dtype=dtype) * 0.5 for s in shapes]
    weights = [torch.randn(M, B, T + 1, N, generator=g, dtype=dtype) for _ in range(2)]

    def run(threads):
        saved = torch.get_num_threads()
        torch.set_num_threads(threads)
        try:
            args = [a.clone().requires_grad_() for a in base]
            hs, cs = lstm_sequence(*args, 4, impl="native")
            loss = (hs * weights[0]).sum() + (cs * weights[1]).sum()
            return [hs, cs, *torch.autograd.grad(loss, args)]
        finally:
            torch.set_num_threads(saved)

    one = run(1)
    for threads in (2, 3):
        for a, b in zip(run(threads), one, strict=True):
            assert torch.equal(a, b)


@needs_native
@pytest.mark.parametrize("per_member", [False, True])
@pytest.mark.parametrize(
    ("tanh_units", "dtype"), [(6, torch.float64), (4, torch.float64), (6, torch.float32)]
)
def test_lstm_from_token_ids_equals_the_lookup_then_the_cell(per_member, tanh_units, dtype):
    """:func:`memrnn.ops.lstm.lstm_sequence_tokens` (the fused cell reading each position's input
    projection from ``table w_inᵀ + b`` by its id, and adding its gate gradient into that row)
    against the embedding lookup followed by the reference loop: outputs and the gradients of
    the table, ``w_in``, ``b``, ``w_rec``, ``h0`` and ``c0`` within 1e-12 in float64 and 1e-5 in
    float32, ids shared by the members or each member's own, repeated ids (V 5 < B·T), counter
    cells; one fused call, and an unknown id named."""
    from memrnn.ops.lstm import cpu, lstm_sequence_tokens

    g = torch.Generator().manual_seed(4)
    M, B, T, V, n, N = 3, 4, 11, 5, 4, 6
    shapes = [(M, V, n), (M, 4 * N, n), (M, 4 * N), (M, 4 * N, N), (M, B, N), (M, B, N)]
    base = [torch.randn(*s, generator=g, dtype=torch.float64) * 0.5 for s in shapes]
    ids = torch.randint(0, V, (M, B, T) if per_member else (B, T), generator=g)
    weights = [torch.randn(M, B, T + 1, N, generator=g, dtype=torch.float64) for _ in range(2)]

    def run(impl, dt):
        args = [a.to(dt, copy=True).requires_grad_() for a in base]
        hs, cs = lstm_sequence_tokens(ids, *args, tanh_units, impl=impl)
        loss = (hs * weights[0].to(dt)).sum() + (cs * weights[1].to(dt)).sum()
        return [t.double() for t in (hs, cs, *torch.autograd.grad(loss, args))]

    calls = []
    real = cpu.FusedLSTMTokens.apply
    cpu.FusedLSTMTokens.apply = _counting(real, calls)
    try:
        got = run(None, dtype)
    finally:
        cpu.FusedLSTMTokens.apply = real
    assert len(calls) == 1
    want = run("reference", torch.float64)
    tol = 1e-12 if dtype == torch.float64 else 1e-5
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, atol=tol, rtol=tol)
    bad = ids.clone()
    bad.view(-1)[3] = V
    with pytest.raises(ValueError, match=rf"token id {V} is outside the vocabulary \[0, {V}\)"):
        lstm_sequence_tokens(bad, *base, tanh_units)
