"""The stack RNN's fused forward without history (``memrnn.ops.stack_rnn``: :class:`NoHistory`,
``_Ring``): when nothing can ask for a gradient (``torch.no_grad``, ``torch.inference_mode``, or no
argument requiring one) the Python and C++ loops keep only the steps the next step needs, and give
the training forward's results bit for bit."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from memrnn.ops.dispatch import native_available
from memrnn.ops.stack_rnn import SPECS, cpu, stack_rnn_sequence
from memrnn.ops.stack_rnn.specs import spec as memory_spec


def _case(memory, controller, dtype, gen, *, T=11, mlp=False, M=0, n=3):
    """Arguments of ``stack_rnn_sequence`` (B 4, n inputs, N 5, m 2, depth 3; lengths T, 7, 0, 4,
    each member's rolled by its index), every float tensor but the jumps requiring a gradient.  The
    C++ loop projects up to 16 inputs in the step and more in blocks of steps (native.cpp's
    kStepInputs): n = 3 and n = 17 take the two."""
    s = memory_spec(memory)
    B, N, m, D = 4, 5, 2, 3
    units, k = s.reads * m, s.n_actions
    G = 4 * N if controller == "lstm" else N
    lead = (M,) if M else ()
    r = lambda *shape: (0.5 * torch.randn(*lead, *shape, generator=gen, dtype=dtype)).requires_grad_()  # noqa: E731
    u = lambda *shape: torch.rand(*lead, *shape, generator=gen, dtype=dtype).requires_grad_()  # noqa: E731
    if memory in ("superposition", "tape"):
        mem0 = (r(B, D, m),)
    elif memory == "tape_jump":
        mem0 = (torch.tensor([1.0, 2.0, 0.0, 4.0], dtype=dtype).expand(*lead, B).contiguous(), r(B, D, m))
    elif memory == "deque":
        mem0 = (r(B, 2 * D, m), u(B, 2 * D), r(B, 2 * m))
    else:
        mem0 = (r(B, D, m), u(B, D), r(B, m))
    head = (r(k, N), r(k)) if mlp else (r(k + units, N), r(k + units))
    args = (
        r(B, T, n),
        r(G, n + units),
        r(G),
        r(G, N),
        *head,
        r(B, N),
        r(B, N) if controller == "lstm" else None,
    )
    lengths = torch.tensor([T, 7, 0, 4])
    if M:
        lengths = torch.stack([lengths.roll(i) for i in range(M)])
    kwargs = dict(controller=controller, activation="tanh", memory=memory, value_activation=s.value_activation,
                  lengths=lengths, overflow=True)  # fmt: skip
    if mlp:
        kwargs["value_mlp"] = ((r(5, N), r(5)), (r(units, 5), r(units)))
    return (*args, mem0), kwargs


def _detached(args, kwargs):
    """The same arguments, none requiring a gradient."""
    d = lambda t: None if t is None else t.detach()  # noqa: E731
    args = (*(d(a) for a in args[:-1]), tuple(d(f) for f in args[-1]))
    kwargs = dict(kwargs)
    if "value_mlp" in kwargs:
        kwargs["value_mlp"] = tuple(tuple(d(t) for t in layer) for layer in kwargs["value_mlp"])
    return args, kwargs


def _check_bit_for_bit(args, kwargs, impl, monkeypatch):
    """Under ``no_grad``, ``inference_mode`` and with no argument requiring a gradient, the results
    (outputs, final states, overflow) equal the training forward's (``torch.equal``), and each of the
    three ran without history (``_Ring`` built once per call)."""
    rings = []
    real = cpu._Ring.__init__
    monkeypatch.setattr(cpu._Ring, "__init__", lambda self, *a: rings.append(1) or real(self, *a))
    want = stack_rnn_sequence(*args, **kwargs, impl=impl)
    assert want[0].grad_fn is not None and rings == []  # the training forward
    with torch.no_grad():
        got = [stack_rnn_sequence(*args, **kwargs, impl=impl)]
    with torch.inference_mode():
        got.append(stack_rnn_sequence(*args, **kwargs, impl=impl))
    got.append(stack_rnn_sequence(*_detached(args, kwargs)[0], **_detached(args, kwargs)[1], impl=impl))
    assert rings == [1, 1, 1]
    for results in got:
        assert len(results) == len(want)
        for i, (a, b) in enumerate(zip(results, want, strict=True)):
            assert (a is None) == (b is None), i
            if a is not None:
                assert a.shape == b.shape and a.dtype == b.dtype, i
                assert torch.equal(a, b.detach()), f"result {i} differs"
                assert a.grad_fn is None


IMPLS = [
    "cpu",
    pytest.param("native", marks=pytest.mark.skipif(not native_available(), reason="no C++ build")),
]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("controller", ["lstm", "elman"])
@pytest.mark.parametrize("memory", list(SPECS))
def test_no_history_forward_equals_the_training_forward(memory, controller, impl, dtype, monkeypatch):
    """Every memory x controller, Python and C++ loops, float64 and float32, rows of lengths T, 7, 0
    and 4 (right padding) at T = 11 (the ring rewound every RING = 2 steps; the Python loop's
    projection cut to blocks of 3 steps): bit for bit the training forward; the tapes with a value
    MLP."""
    monkeypatch.setattr(cpu, "_PROJECT", 3)
    gen = torch.Generator().manual_seed(69)
    args, kwargs = _case(memory, controller, dtype, gen, mlp=memory.startswith("tape"))
    _check_bit_for_bit(args, kwargs, impl, monkeypatch)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("n", [3, 17], ids=["in-step", "blocks"])
@pytest.mark.parametrize("memory", list(SPECS))
def test_no_history_forward_with_members(memory, impl, n, monkeypatch):
    """Members (``[M, B, ...]``, M 2, each member's lengths its own), an LSTM controller, float64,
    the input projected in the step and in blocks: bit for bit the training forward."""
    gen = torch.Generator().manual_seed(70)
    args, kwargs = _case(memory, "lstm", torch.float64, gen, M=2, mlp=memory == "tape", n=n)
    _check_bit_for_bit(args, kwargs, impl, monkeypatch)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("n", [3, 17], ids=["in-step", "blocks"])
def test_no_history_forward_long_and_without_lengths(impl, n, monkeypatch):
    """T = 75 (with 17 inputs the C++ loop's projection blocks of 8, 16, 32 and 19 steps through its
    two-block ring; with 3 its projection in the step; the Python loop's default blocks), no
    lengths, and T = 0 and 1: bit for bit."""
    gen = torch.Generator().manual_seed(71)
    for memory in SPECS:
        for T in (75, 1, 0):
            args, kwargs = _case(memory, "lstm", torch.float32, gen, T=T, n=n)
            kwargs["lengths"] = None
            _check_bit_for_bit(args, kwargs, impl, monkeypatch)
            monkeypatch.undo()


@pytest.mark.parametrize("impl", IMPLS)
def test_no_history_forward_refuses_lengths_outside_the_sequence(impl):
    """A length above T or below 0 would leave its row's final state unset: a ValueError naming it."""
    args, kwargs = _detached(
        *_case("superposition", "elman", torch.float64, torch.Generator().manual_seed(1))
    )
    for bad in (12, -1):
        kwargs["lengths"] = torch.tensor([11, bad, 0, 4])
        with pytest.raises(ValueError, match=f"got a length of {bad}"):
            stack_rnn_sequence(*args, **kwargs, impl=impl)


_PEAK = """
import re, sys, torch
import memrnn.ops.stack_rnn.cpu as stack_cpu
from memrnn.ops.stack_rnn import stack_rnn_sequence
stack_cpu.RECOMPUTE = 0  # the training forward stores its history (the control)
B, n, N, m, D = 16, 8, 16, 8, 256
g = torch.Generator().manual_seed(0)
def status(field):  # KiB
    return int(re.search(field + r":\\s+(\\d+)", open("/proc/self/status").read()).group(1))
def forward(T, impl, grad):  # the peak memory it took, less its outputs
    r = lambda *s: (0.3 * torch.randn(*s, generator=g)).requires_grad_(grad)
    args = (r(B, T, n), r(4 * N, n + m), r(4 * N), r(4 * N, N), r(3 + m, N), r(3 + m), r(B, N), r(B, N))
    kw = dict(controller="lstm", activation="tanh", memory="superposition", value_activation="tanh", impl=impl)
    mem0 = (r(B, D, m),)
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # the peak resident set size starts again from the current one
    before = status("VmRSS")
    out = stack_rnn_sequence(*args, mem0, **kw)
    return (status("VmHWM") - before) * 1024 - (out[0].numel() + out[1].numel()) * 4
for impl, grad in (a.split(":") for a in sys.argv[1:]):
    forward(2, impl, grad == "1")  # warm-up: the path's code loaded
    print(forward(256, impl, grad == "1") - forward(64, impl, grad == "1"))
"""


def test_no_history_forward_memory_is_flat_in_T():
    """Peak memory of a forward without history, against T.

    Method: a fresh Python process (``_PEAK``, glibc's malloc told to map blocks of 64 KiB and more
    on their own, so that a freed buffer leaves the resident set) runs each forward after
    resetting the peak resident set size to the current one (Linux's ``/proc/self/clear_refs``);
    the peak (``VmHWM``) less the resident set before (``VmRSS``), less the outputs' bytes (``h
    [B, T, N]``, ``r [B, T, m]``), is what the forward held besides its outputs.  The
    superposition stack at depth 256, B 16, N 16, m 8 (its state 128 KiB; a step of history 130
    KiB, 24 MiB from T = 64 to 256): from T = 64 to 256 that grows by less than 2 MiB and less
    than 10% of the training forward's growth (arguments requiring gradients), which grows by
    more than half its history's (stored: ``RECOMPUTE = 0``; the recomputed memory's is
    ``tests/ops/test_stack_rnn_recompute.py``'s).  The Python loop, and the C++ loop where it is
    built."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "OMP_NUM_THREADS": "1"}
    env["MALLOC_MMAP_THRESHOLD_"] = "65536"
    # what a forward holds, not what memrnn.ops.scratch keeps mapped between calls on purpose (it
    # would hold the first run's buffers resident for the next)
    env["MEMRNN_SCRATCH_MIB"] = "0"
    impls = ["cpu", *(["native"] if native_available() else [])]
    runs = [f"{impl}:{grad}" for impl in impls for grad in (0, 1)]
    out = subprocess.run([sys.executable, "-c", _PEAK, *runs], env=env, capture_output=True, text=True,
                         check=True).stdout.split()  # fmt: skip
    history = (256 - 64) * (16 + 257 * 8) * 16 * 4  # z's steps from T = 64 to 256, bytes
    for i, impl in enumerate(impls):
        infer, train = int(out[2 * i]), int(out[2 * i + 1])
        assert infer < 2 * 2**20 and infer < 0.1 * train, (impl, infer, train, history)
        assert train > 0.5 * history, (impl, infer, train, history)


@pytest.mark.parametrize("impl", ["native", "cpu"])
@pytest.mark.parametrize("memory", ["superposition", "stratification", "queue"])
def test_outputs_without_history_equal_the_trimmed_training_outputs(memory, impl):
    """``StackRNN.outputs`` (``finals=False``: the trimmed windows, ``tests/ops/test_stack_trim.py``)
    under ``no_grad`` (the no-history ring: the superposition stack trims there too, its live ranges
    read at each slot's step) equals its training call bit for bit, from the zero initial state
    that lets the trims apply; so does ``forward`` with its final state (the ring then runs the
    whole window)."""
    from memrnn.layers import StackRNN
    from memrnn.ops.dispatch import implementation

    if impl == "native" and not native_available():
        pytest.skip("no C++ compiler: the C++ loops are not built")
    torch.manual_seed(0)
    layer = StackRNN(3, 5, memory, "lstm", width=2, depth=6).double()
    x = torch.randn(4, 9, 3, dtype=torch.float64)
    mask = torch.arange(9) < torch.tensor([9, 5, 1, 7])[:, None]
    with implementation(impl):
        _check_trimmed_ring(layer, x, mask, memory)


def _check_trimmed_ring(layer, x, mask, memory):
    from memrnn.ops.stack_rnn.specs import KERNELS

    want = layer.outputs(x, mask=mask)
    assert want.grad_fn is not None
    kernels = []
    real = KERNELS[memory].__init__

    def spy(self, *args, **kwargs):
        real(self, *args, **kwargs)
        kernels.append(self)

    with torch.no_grad(), pytest.MonkeyPatch.context() as mp:
        mp.setattr(KERNELS[memory], "__init__", spy)
        got = layer.outputs(x, mask=mask)
    assert torch.equal(got, want.detach())
    # the ring's kernel (built for its slots, not T steps) trims the superposition stack only
    ring = [k for k in kernels if getattr(k, "T", None) not in (None, 0, x.shape[1])]
    assert ring and all((k.live is not None) == (memory == "superposition") for k in ring)
    # forward (finals wanted: the ring runs its whole window) from the same zero state
    want_y, want_state = layer(x, mask=mask)
    with torch.no_grad():
        got_y, got_state = layer(x, mask=mask)
    assert torch.equal(got_y, want_y.detach())
    for g, w in zip(got_state, want_state, strict=True):
        assert torch.equal(g, w.detach())
