"""The stack RNN's Triton forward without history (``memrnn.ops.stack_rnn.triton``: ``_stack_fwd``'s
``NO_HISTORY``): when nothing can ask for a gradient (``torch.no_grad``, ``torch.inference_mode``, or
no argument requiring one) the kernel keeps the state in a ring of ``RING + 1`` steps, and gives the
training launch's outputs, final states and overflow bit for bit (under Triton's interpreter here,
``TRITON_INTERPRET=1``, at tiny sizes)."""

from __future__ import annotations

import pytest
import torch

from memrnn.ops.dispatch import interpreting, triton_available
from memrnn.ops.stack_rnn import stack_rnn_sequence
from memrnn.ops.stack_rnn.specs import TRITON_MEMORIES
from memrnn.ops.stack_rnn.specs import spec as memory_spec
from tests.ops.backends import DEVICE, needs_triton
from tests.ops.race_check import detect_races, poisoned_empties, reversed_programs

needs_interpreter = pytest.mark.skipif(
    not triton_available() or not interpreting(), reason="needs Triton's interpreter (TRITON_INTERPRET=1)"
)


def _case(memory, controller, gen, *, T=11, B=4, D=3, lengths=(11, 7, 0, 4), dtype=torch.float32):
    """Arguments of ``stack_rnn_sequence`` (n 3, N 8, m 2; lengths T, 7, 0, 4 by default), every
    float tensor but the jumps requiring a gradient."""
    s = memory_spec(memory)
    n, N, m = 3, 8, 2
    units, k = s.reads * m, s.n_actions
    G = 4 * N if controller == "lstm" else N

    def r(*shape):
        return (0.5 * torch.randn(*shape, generator=gen)).to(DEVICE, dtype).requires_grad_()

    def u(*shape):
        return torch.rand(*shape, generator=gen).to(DEVICE, dtype).requires_grad_()

    if memory in ("superposition", "tape"):
        mem0 = (r(B, D, m),)
    elif memory == "tape_jump":
        mem0 = (torch.tensor([1.0, 2.0, 0.0, 4.0] * B, device=DEVICE)[:B], r(B, D, m))
    elif memory == "deque":
        mem0 = (r(B, 2 * D, m), u(B, 2 * D), r(B, 2 * m))
    else:
        mem0 = (r(B, D, m), u(B, D), r(B, m))
    args = (r(B, T, n), r(G, n + units), r(G), r(G, N), r(k + units, N), r(k + units), r(B, N))
    args = (*args, r(B, N) if controller == "lstm" else None, mem0)
    kwargs = dict(controller=controller, activation="tanh", memory=memory, value_activation=s.value_activation,
                  lengths=None if lengths is None else torch.tensor(lengths, device=DEVICE), impl="triton")  # fmt: skip
    return args, kwargs


def _detached(args):
    d = lambda t: None if t is None else t.detach()  # noqa: E731
    return (*(d(a) for a in args[:-1]), tuple(d(f) for f in args[-1]))


def _spy(monkeypatch):
    """The ``NO_HISTORY`` flag of every launch of ``_stack_fwd``, and its arguments."""
    from memrnn.ops.stack_rnn import triton as kernels

    launches = []
    real = kernels._launch

    def launch(kernel, programs, args, preload, warps, members=1):
        if kernel is kernels._stack_fwd:
            launches.append(args)
        return real(kernel, programs, args, preload, warps, members)

    monkeypatch.setattr(kernels, "_launch", launch)
    return launches


def _assert_equal(got, want):
    assert len(got) == len(want)
    for i, (a, b) in enumerate(zip(got, want, strict=True)):
        assert (a is None) == (b is None), i
        if a is not None:
            assert a.shape == b.shape and a.dtype == b.dtype, i
            assert torch.equal(a, b.detach()), f"result {i} differs"
            assert a.grad_fn is None, i


@needs_triton
@pytest.mark.parametrize("controller", ["lstm", "elman"])
@pytest.mark.parametrize("memory", TRITON_MEMORIES)
def test_no_history_launch_equals_the_training_launch(memory, controller, monkeypatch):
    """Every memory of the Triton path x both controllers, float32, B 4, N 8, m 2, depth 3, T 11
    (the ring rewound every 2 steps, more often than the window of 3 slides by), rows of lengths
    11, 7, 0 and 4 (right padding): under ``no_grad`` the outputs, each row's final state and the
    overflow equal the training launch's (``torch.equal``: the same ops in the same order)."""
    launches = _spy(monkeypatch)
    args, kwargs = _case(memory, controller, torch.Generator().manual_seed(69))
    want = stack_rnn_sequence(*args, **kwargs)
    assert want[0].grad_fn is not None
    with torch.no_grad():
        got = stack_rnn_sequence(*args, **kwargs)
    assert [a[-1] for a in launches] == [False, True]  # the training launch, then one without history
    _assert_equal(got, want)


@needs_triton
@pytest.mark.parametrize("memory", ["stratification", "deque"])
def test_no_history_rewinds_a_window_of_several_chunks(memory, monkeypatch):
    """Depth 130 (the sliding values' window in two chunks of 128 slots, the ring's 2 steps
    overlapping it: the rewind moves each chunk whole, in the order that reads a slot before it is
    overwritten), T 5: bit for bit the training launch."""
    launches = _spy(monkeypatch)
    args, kwargs = _case(memory, "elman", torch.Generator().manual_seed(4), T=5, D=130, lengths=(5, 3, 0, 4))
    want = stack_rnn_sequence(*args, **kwargs)
    with torch.no_grad():
        got = stack_rnn_sequence(*args, **kwargs)
    assert [a[-1] for a in launches] == [False, True]
    _assert_equal(got, want)


@needs_interpreter
@pytest.mark.parametrize("memory", TRITON_MEMORIES)
def test_no_history_launch_does_not_race(memory):
    """Three tiles of batch rows (B 35), T 5, an LSTM controller, lengths 0..5: the launch without
    history neither races (``tests.ops.race_check``: no address stored by two programs, none
    read back without a barrier) nor depends on its programs' order or on fresh memory's contents
    (programs last to first, fresh memory NaN: the same results bit for bit)."""
    gen = torch.Generator().manual_seed(8)
    lengths = tuple(torch.randint(0, 6, (35,), generator=gen).tolist())
    args, kwargs = _case(memory, "lstm", gen, T=5, B=35, lengths=lengths)
    args = _detached(args)
    with detect_races() as report:
        first = stack_rnn_sequence(*args, **kwargs)
    assert not report, dict(report)
    with reversed_programs(), poisoned_empties():
        second = stack_rnn_sequence(*args, **kwargs)
    _assert_equal(second, first)


@needs_triton
@pytest.mark.parametrize("memory", TRITON_MEMORIES)
def test_no_history_one_step_and_none(memory, monkeypatch):
    """T 1 (a ring of one step, rewound after every step) with rows of lengths 1 and 0, and T 0
    (no launch: every row's final state its initial one): bit for bit the training forward."""
    launches = _spy(monkeypatch)
    for T, lengths in ((1, (1, 0, 1, 0)), (0, None)):
        args, kwargs = _case(memory, "lstm", torch.Generator().manual_seed(7), T=T, lengths=lengths)
        want = stack_rnn_sequence(*args, **kwargs)
        with torch.no_grad():
            got = stack_rnn_sequence(*args, **kwargs)
        _assert_equal(got, want)
    assert [a[-1] for a in launches] == [False, True]  # T 0 launches nothing


@needs_triton
def test_no_history_launch_in_bfloat16(monkeypatch):
    """bfloat16 storage (float32 arithmetic), the superposition stack and an LSTM controller, T 5:
    the launch without history copies the state in its storage dtype, so its results equal the
    training launch's bit for bit too."""
    launches = _spy(monkeypatch)
    gen = torch.Generator().manual_seed(6)
    args, kwargs = _case("superposition", "lstm", gen, T=5, lengths=(5, 3, 0, 4), dtype=torch.bfloat16)
    want = stack_rnn_sequence(*args, **kwargs)
    with torch.no_grad():
        got = stack_rnn_sequence(*args, **kwargs)
    assert [a[-1] for a in launches] == [False, True] and got[0].dtype == torch.bfloat16
    _assert_equal(got, want)


@needs_triton
def test_no_history_under_inference_mode_and_without_grad_arguments(monkeypatch):
    """``inference_mode`` and arguments none of which requires a gradient also launch without
    history (the test of ``memrnn.ops.stack_rnn.opaque.hand_written``), with the same results;
    without ``lengths`` every row ends at T."""
    launches = _spy(monkeypatch)
    args, kwargs = _case("stratification", "lstm", torch.Generator().manual_seed(3), T=5, lengths=None)
    want = stack_rnn_sequence(*args, **kwargs)
    with torch.inference_mode():
        got = stack_rnn_sequence(*args, **kwargs)
    _assert_equal(got, want)
    _assert_equal(stack_rnn_sequence(*_detached(args), **kwargs), want)
    assert [a[-1] for a in launches] == [False, True, True]


@needs_triton
def test_no_history_launch_keeps_a_ring_of_steps(monkeypatch):
    """The launch without history allocates O(1) steps: ``zs``, ``cs`` and ``s`` hold ``RING + 1``
    steps, the head ``RING``, the DeQue's sliding values ``2(RING + D)``, none of which grows with
    T (T 3 and 11 allocate the same bytes besides the outputs); the gates are not stored."""
    from memrnn.ops.stack_rnn.triton import RING

    launches = _spy(monkeypatch)
    held = []
    for T in (3, 11):
        args, kwargs = _case("deque", "lstm", torch.Generator().manual_seed(5), T=T, lengths=(T, 2, 0, 1))
        with torch.no_grad():
            stack_rnn_sequence(*args, **kwargs)
        pre, _, _, _, zs, cs, gates, hd, s, p, ovf, _, _, out = launches[-1][:14]
        assert zs.shape[0] == cs.shape[0] == s.shape[0] == RING + 1 and hd.shape[0] == RING
        assert p.shape[0] == 2 * (RING + 3) and gates is pre
        assert out.shape[0] == ovf.shape[0] == T  # the outputs
        held.append(sum(t.numel() for t in (zs, cs, hd, s, p)))
    assert held[0] == held[1]


@needs_triton
def test_no_history_refuses_lengths_outside_the_sequence():
    """A length above T or below 0 would leave its row's final state unset: a ValueError naming it."""
    args, kwargs = _case("superposition", "elman", torch.Generator().manual_seed(1))
    for bad in (12, -1):
        kwargs["lengths"] = torch.tensor([11, bad, 0, 4], device=DEVICE)
        with torch.no_grad(), pytest.raises(ValueError, match=f"got a length of {bad}"):
            stack_rnn_sequence(*args, **kwargs)
