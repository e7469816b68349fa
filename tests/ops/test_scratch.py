"""memrnn.ops.scratch: CPU buffers held between calls, handed out again only when no tensor uses
them, and the stack RNN's training call through them equal to the call without them, bit for bit,
with every buffer poisoned (NaN) when handed out."""

from __future__ import annotations

import pytest
import torch

from memrnn.layers import StackRNN
from memrnn.ops import scratch


@pytest.fixture
def pool(monkeypatch):
    """An empty pool that takes buffers of any size (restored afterwards)."""
    monkeypatch.setattr(scratch, "MIN_BYTES", 0)
    monkeypatch.setattr(scratch, "_held", [])
    monkeypatch.delenv("MEMRNN_SCRATCH_MIB", raising=False)
    monkeypatch.delenv("MEMRNN_SCRATCH_POISON", raising=False)
    return scratch


def _ptr(t: torch.Tensor | torch.UntypedStorage) -> int:
    return (t if isinstance(t, torch.UntypedStorage) else t.untyped_storage()).data_ptr()


def test_a_free_buffer_is_handed_out_again_and_a_used_one_is_not(pool):
    like = torch.zeros(())
    a = pool.empty(like, 4, 8)
    assert a.shape == (4, 8) and a.is_contiguous() and a.dtype == like.dtype
    p = _ptr(a)
    b = pool.empty(like, 4, 8)  # a still holds its storage
    assert _ptr(b) != p
    view = a[1:]
    del a
    assert _ptr(pool.empty(like, 4, 8)) not in (p, _ptr(b))  # a view keeps the storage in use
    del view
    assert _ptr(pool.empty(like, 4, 8)) == p
    assert pool.empty(like.double(), 4, 8).dtype == torch.float64  # another dtype: its own buffer


def test_a_buffer_saved_for_backward_is_not_handed_out_until_the_backward_is_done(pool):
    like = torch.zeros(())

    class Saves(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            buf = pool.empty(x, 16)
            buf.copy_(x)
            ctx.save_for_backward(buf)
            return x * 2

        @staticmethod
        def backward(ctx, g):
            (buf,) = ctx.saved_tensors
            return g * buf

    x = torch.randn(16, requires_grad=True)
    y = Saves.apply(x)
    busy = {_ptr(pool.empty(like, 16)) for _ in range(3)}
    saved = {_ptr(e[0]) for e in pool._held} - busy
    assert len(saved) == 1  # the saved buffer is held, and was not handed out
    y.sum().backward()
    assert torch.equal(x.grad, x.detach())
    del y
    assert _ptr(pool.empty(like, 16)) in saved | busy


def test_sizes_round_up_to_an_eighth_of_their_power_of_two():
    assert [scratch._rounded(n) for n in (1, 8, 9, 1000, 1024, 1025, 3000)] == [
        1,
        8,
        9,
        1024,
        1024,
        1152,
        3072,
    ]
    assert all(n <= scratch._rounded(n) <= n * 1.125 for n in range(1, 5000))


def test_nearby_sizes_share_a_buffer_and_the_limit_lets_go_of_the_least_recently_used(pool, monkeypatch):
    like = torch.zeros(())
    a = pool.empty(like, 1000)
    p = _ptr(a)
    del a
    assert _ptr(pool.empty(like, 1010)) == p  # both round to 1024
    monkeypatch.setenv("MEMRNN_SCRATCH_MIB", str(3 * 4096 / 2**20))  # three buffers of 1024 float32
    for n in (2000, 3000):  # new sizes: held, then free
        pool.empty(like, n)
    assert pool.held_bytes() <= 3 * 4096
    # the oldest (1024) and then the next (2048) went first; sizes, not addresses, tell them
    # apart: the allocator may hand the freed 1024's address to the 3072 buffer
    assert [e[2] for e in pool._held] == [3072]
    monkeypatch.setenv("MEMRNN_SCRATCH_MIB", "0")
    t = pool.empty(like, 100)
    assert _ptr(t) not in {_ptr(e[0]) for e in pool._held}  # off: torch's allocator
    pool.clear()
    assert pool.held_bytes() == 0


def test_without_torch_s_use_count_nothing_is_held(pool, monkeypatch):
    monkeypatch.setattr(scratch, "_use_count", None)  # a torch without the private function
    t = pool.empty(torch.zeros(()), 4, 8)
    assert t.shape == (4, 8) and pool.held_bytes() == 0


def test_small_buffers_are_torch_s_own(monkeypatch):
    monkeypatch.setattr(scratch, "_held", [])
    t = scratch.empty(torch.zeros(()), 16)
    assert scratch.held_bytes() == 0 and t.shape == (16,)


def test_poison_fills_with_nan(pool, monkeypatch):
    monkeypatch.setenv("MEMRNN_SCRATCH_POISON", "1")
    assert torch.isnan(pool.empty(torch.zeros(()), 5, 3)).all()


CASES = [
    ("superposition", "lstm", 24, {}),  # the recomputed memory: its ring, checkpoints and zh
    ("superposition", "elman", 12, {"finals": True}),
    ("stratification", "lstm", 16, {}),
    ("queue", "lstm", 9, {"finals": True}),
    ("deque", "elman", 9, {}),
    ("tape", "lstm", 8, {}),
    ("superposition", "lstm", 24, {"no_grad": True}),
    ("superposition", "lstm", 20, {"lengths": True}),  # right padding
]


@pytest.mark.parametrize("memory,controller,depth,opts", CASES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_stack_rnn_through_poisoned_buffers_equals_it_without_them(
    pool, monkeypatch, memory, controller, depth, opts, dtype
):
    """Every buffer handed out is NaN first: a loop that read one before writing it would carry
    NaN into the outputs or gradients.  The C++ loops (the default on CPU), twice in a row, so that
    the second call reuses the first's buffers."""
    torch.manual_seed(0)
    net = StackRNN(5, 7, memory=memory, width=3, depth=depth, controller=controller).to(dtype)
    x = torch.randn(4, 18, 5, dtype=dtype, requires_grad=True)
    mask = torch.arange(18) < torch.tensor([18, 11, 3, 18])[:, None] if opts.get("lengths") else None

    def run() -> list[torch.Tensor]:
        x.grad = None
        net.zero_grad()
        if opts.get("no_grad"):
            with torch.no_grad():
                return [net.outputs(x)]
        if opts.get("finals"):
            y, state = net(x, mask=mask)
            (y.sum() + sum(s.sum() for s in state if s is not None)).backward()
        else:
            net.outputs(x, mask=mask).sum().backward()
            y = None
        return [t.detach().clone() for t in (y, x.grad, *(p.grad for p in net.parameters())) if t is not None]

    monkeypatch.setenv("MEMRNN_SCRATCH_MIB", "0")
    plain = run()
    monkeypatch.setenv("MEMRNN_SCRATCH_MIB", "1024")
    monkeypatch.setenv("MEMRNN_SCRATCH_POISON", "1")
    for _ in range(2):
        got = run()
        assert len(got) == len(plain)
        for a, b in zip(got, plain, strict=True):
            assert torch.equal(a, b)
    assert pool.held_bytes() > 0  # the buffers went through the pool


def test_the_buffers_in_use_fill_the_limit_then_new_ones_are_torch_s_own(pool, monkeypatch):
    like = torch.zeros(())
    monkeypatch.setenv("MEMRNN_SCRATCH_MIB", str(2 * 4096 / 2**20))  # two buffers of 1024 float32
    kept = [pool.empty(like, 1024) for _ in range(3)]  # a caller keeps every one
    held = {_ptr(e[0]) for e in pool._held}
    assert len(held) == 2 and _ptr(kept[2]) not in held and pool.held_bytes() == 2 * 4096


@pytest.mark.parametrize("no_grad", [False, True])
def test_outputs_a_caller_keeps_are_never_written_by_the_next_call(pool, no_grad):
    """Outputs are views of held buffers (the training call's every-step ``[h ; r]``, the forward
    without history's output buffer): while the caller holds them, later calls take other buffers."""
    torch.manual_seed(0)
    net = StackRNN(5, 7, memory="superposition", width=3, depth=12)
    xs = [torch.randn(4, 18, 5) for _ in range(3)]
    with torch.set_grad_enabled(not no_grad):
        ys = [net.outputs(x) for x in xs]
        copies = [y.detach().clone() for y in ys]
        more = [net.outputs(x) for x in xs]  # the same inputs again: the same outputs, elsewhere
    assert pool.held_bytes() > 0
    for y, c, m in zip(ys, copies, more, strict=True):
        assert torch.equal(y, c) and torch.equal(m, c)
    assert len({_ptr(y) for y in ys + more}) == len(ys + more)
