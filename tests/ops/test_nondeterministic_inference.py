"""DuSell & Chiang's nondeterministic stacks (the RNS-RNN and its memory-limited variant, 2022; the
vector RNS-RNN, 2023) without history (``memrnn.ops.nondeterministic``: ``NondeterministicRun``'s
``history=False``, ``native_step.cpp``'s rings): when nothing can ask for a gradient
(``torch.no_grad``, ``torch.inference_mode``, or nothing requiring one) the C++ run keeps only the
last ``depth`` columns of its store, gives the training forward's outputs and final states bit for
bit, and takes memory flat in T."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from memrnn.core import MemoryLayer
from memrnn.layers import StackRNN
from memrnn.ops.dispatch import implementation
from memrnn.ops.nondeterministic import NondeterministicRun, nondeterministic_initial
from tests.ops.backends import needs_native

pytestmark = needs_native

MEMORIES = {
    "nondeterministic": {"states": 2, "symbols": 3},
    "vector_nondeterministic": {"states": 2, "symbols": 2, "vector_size": 2},
}


def _spy_runs(monkeypatch) -> list[tuple[bool, int, int]]:
    """Each run made from now on, as ``(ring, store's column slots, run's steps)``."""
    runs = []
    real = NondeterministicRun.__init__

    def spy(self, *args, **kwargs):
        real(self, *args, **kwargs)
        runs.append((self.arrays.ring, self.arrays.store.shape[0], self.steps))

    monkeypatch.setattr(NondeterministicRun, "__init__", spy)
    return runs


def _assert_equal(got, want) -> None:
    y, state = got
    assert torch.equal(y, want[0].detach()) and y.grad_fn is None
    assert len(state) == len(want[1])
    for i, (a, b) in enumerate(zip(state, want[1], strict=True)):
        assert a.shape == b.shape and a.dtype == b.dtype, i
        assert torch.equal(a, b.detach()), f"final state {i} differs"


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
@pytest.mark.parametrize(
    ("depth", "bottom_symbol"), [(1, "fixed"), (3, "fixed"), (4, "original"), (14, "fixed")]
)
@pytest.mark.parametrize("memory", list(MEMORIES))
def test_no_history_forward_equals_the_training_forward(memory, depth, bottom_symbol, dtype, monkeypatch):
    """The layer from a state two steps in (its window holds runs) over T = 11 with rows of lengths
    11, 5, 0 and 8: under ``no_grad``, ``inference_mode`` and with no parameter, input or state
    requiring a gradient, the outputs (hidden states and readings) and every final state equal the
    training forward's (``torch.equal``).  Windows shallower than T (the memory-limited stack, the
    rings wrapping round several times, each row's window copied out at its length) and deeper
    (depth 14: every column is kept all the same); both bottom-symbol behaviours.  The runs
    without history have rings of ``depth`` columns, the training run every column."""
    gen = torch.Generator().manual_seed(69)
    torch.manual_seed(69)
    args = {**MEMORIES[memory], "bottom_symbol": bottom_symbol}
    net = StackRNN(3, 5, memory, "lstm", depth=depth, output="hidden+reading", memory_args=args).to(dtype)
    B, T = 4, 11
    with torch.no_grad():
        _, state = MemoryLayer.forward(net, torch.randn(B, 2, 3, generator=gen, dtype=dtype))
    x = torch.randn(B, T, 3, generator=gen, dtype=dtype)
    mask = torch.arange(T)[None] < torch.tensor([T, 5, 0, 8])[:, None]
    runs = _spy_runs(monkeypatch)
    with implementation("native"):
        want = net(x, state, mask)
        assert want[0].grad_fn is not None
        with torch.no_grad():
            got = [net(x, state, mask)]
        with torch.inference_mode():
            got.append(net(x, state, mask))
        net.requires_grad_(False)
        got.append(net(x, state, mask))
    for g in got:
        _assert_equal(g, want)
    (train, *inference) = runs
    assert not train[0] and train[1] >= T  # every column
    assert inference == [(True, min(depth, train[1]), T)] * 3  # the rings: depth columns


@pytest.mark.parametrize("memory", list(MEMORIES))
def test_no_history_forward_without_lengths_and_at_one_step(memory):
    """No mask, at T = 1 (no slot reused), T = 2 and T = 23 (the rings of 3 columns round seven
    times), from the fresh state: bit for bit the training forward."""
    gen = torch.Generator().manual_seed(70)
    torch.manual_seed(70)
    net = StackRNN(3, 4, memory, "lstm", depth=3, output="hidden+reading", memory_args=MEMORIES[memory])
    for T in (1, 2, 23):
        x = torch.randn(3, T, 3, generator=gen)
        with implementation("native"):
            want = net(x)
            with torch.no_grad():
                got = net(x)
        _assert_equal(got, want)


def _weights(B, QS, Q, gen, dtype=torch.float64):
    return [torch.randn(B, QS, n, generator=gen, dtype=dtype) for n in (QS, QS, Q)]


def test_a_run_without_history_equals_one_with_history_and_says_what_it_cannot_do():
    """A ``NondeterministicRun`` made with ``history=False`` (gradients on) against one made with
    ``history=True``: every reading and the final windows bit for bit (rows of lengths 9, 2, 0, 6
    at depth 3); its final windows only once it has taken the longest row's steps; a step whose
    weights require a gradient is refused (nothing could go back through it); lengths outside
    0..steps are refused with the length; it holds the same bytes at 9 steps as at 90."""
    gen = torch.Generator().manual_seed(71)
    B, Q, S, D, T = 4, 2, 2, 3, 9
    QS = Q * S
    gamma, alpha = nondeterministic_initial(B, Q, S, D, dtype=torch.float64)
    lengths = torch.tensor([T, 2, 0, 6])
    steps = [_weights(B, QS, Q, gen) for _ in range(T)]
    kept = NondeterministicRun(gamma, alpha, T, states=Q, lengths=lengths, history=True)
    ring = NondeterministicRun(gamma, alpha, T, states=Q, lengths=lengths, history=False)
    assert not kept.arrays.ring and ring.arrays.ring
    for t, w in enumerate(steps):
        assert torch.equal(ring.step(*w), kept.step(*w))
        if t == 5:
            with pytest.raises(RuntimeError, match="longest row's 9 steps, not after 6"):
                ring.final()
    for a, b in zip(ring.final(), kept.final(), strict=True):
        assert torch.equal(a, b)
    fresh = NondeterministicRun(gamma, alpha, T, states=Q, history=False)
    w = [t.clone().requires_grad_() for t in steps[0]]
    with pytest.raises(RuntimeError, match="step 0's weights require a gradient: make the run with history="):
        fresh.step(*w)
    for bad in (T + 1, -1):
        bad_lengths = torch.tensor([T, bad, 0, 1])
        with pytest.raises(ValueError, match=f"lengths must lie in 0..{T} .*got a length of {bad}"):
            NondeterministicRun(gamma, alpha, T, states=Q, lengths=bad_lengths, history=False)
    short = NondeterministicRun(gamma, alpha, 9, states=Q, history=False)
    long = NondeterministicRun(gamma, alpha, 90, states=Q, history=False)
    assert short.nbytes() == long.nbytes()
    assert NondeterministicRun(gamma, alpha, 90, states=Q, history=True).nbytes() > 10 * long.nbytes()


def test_the_sequence_keeps_history_when_only_the_state_requires_a_gradient(monkeypatch):
    """With gradients on and frozen parameters and input, a starting state that requires a gradient
    still gets a run with history, and its gradient is the one with trainable parameters'."""
    gen = torch.Generator().manual_seed(72)
    torch.manual_seed(72)
    net = StackRNN(3, 4, "nondeterministic", "lstm", depth=2, memory_args=MEMORIES["nondeterministic"])
    net = net.double()
    with torch.no_grad():
        _, state = MemoryLayer.forward(net, torch.randn(2, 2, 3, generator=gen, dtype=torch.float64))
    x = torch.randn(2, 5, 3, generator=gen, dtype=torch.float64)
    grads = []
    runs = _spy_runs(monkeypatch)
    for frozen in (False, True):
        net.requires_grad_(not frozen)
        gamma = state.gamma.clone().requires_grad_()
        with implementation("native"):
            y, _ = net(x, state._replace(gamma=gamma))
        (g,) = torch.autograd.grad(y.square().sum(), gamma)
        grads.append(g)
    assert [r[0] for r in runs] == [False, False]
    assert torch.equal(grads[0], grads[1])


_PEAK = """
import re, sys, torch
from memrnn.layers import StackRNN
from memrnn.ops.dispatch import implementation
B, n, N, D = 16, 8, 8, 16
def status(field):  # KiB
    return int(re.search(field + r":\\s+(\\d+)", open("/proc/self/status").read()).group(1))
torch.manual_seed(0)
g = torch.Generator().manual_seed(0)
def forward(net, T, grad):  # the peak memory it took, less its outputs
    x = torch.randn(B, T, n, generator=g)
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # the peak resident set size starts again from the current one
    before = status("VmRSS")
    with torch.set_grad_enabled(grad), implementation("native"):
        y, _ = net(x)
    return (status("VmHWM") - before) * 1024 - y.numel() * 4
for memory, grad in (a.split(":") for a in sys.argv[1:]):
    args = {"states": 2, "symbols": 3, **({"vector_size": 2} if memory.startswith("vector") else {})}
    net = StackRNN(n, N, memory, "lstm", depth=D, memory_args=args)
    forward(net, 2 if grad == "1" else 160, grad == "1")  # warm-up: the path's code loaded, the heap grown
    # the least of two measurements: what else the process maps meanwhile only adds to a peak
    print(min(forward(net, 160, grad == "1") - forward(net, 32, grad == "1") for _ in range(2)))
"""


def test_no_history_forward_memory_is_flat_in_T():
    """Peak memory of the layer's forward against T, at window ``depth = 16`` (B 16, hidden 8,
    Q 2, S 3; the vector stack with m = 2).

    Method (``tests/ops/test_stack_rnn_inference.py``'s): a fresh Python process (``_PEAK``,
    glibc's malloc told to map blocks of 64 KiB and more on their own, so that a freed buffer
    leaves the resident set) runs each forward after resetting the peak resident set size to the
    current one (``/proc/self/clear_refs``); the peak (``VmHWM``) less the resident set before,
    less the outputs' bytes, is what the forward held besides its outputs (the least of two
    measurements: the full test run's load once added a 64 KiB block to one).  A step's column of the
    store alone is 36 KiB (4.5 MiB from T = 32 to 160; the vector stack's, with its m channels,
    three times that): without gradients the forward grows by less than a fifth of those columns
    from T = 32 to 160 (the input's projection, 2 KiB a step, the outputs' own bookkeeping and the
    heap's growth in 64-128 KiB blocks: measured alone, 0.27 MiB for the stack and from −1.6 to
    1.07 MiB for the vector stack, whose columns take 13.5 MiB; 1.46 MiB in a full test run), and
    by less than 5% of the training forward's growth, which grows by more than the store's columns."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "OMP_NUM_THREADS": "1"}
    env["MALLOC_MMAP_THRESHOLD_"] = "65536"
    runs = [f"{memory}:{grad}" for memory in MEMORIES for grad in (0, 1)]
    out = subprocess.run([sys.executable, "-c", _PEAK, *runs], env=env, capture_output=True, text=True,
                         check=True).stdout.split()  # fmt: skip
    for i, memory in enumerate(MEMORIES):
        infer, train = int(out[2 * i]), int(out[2 * i + 1])
        channels = 1 + (2 if memory.startswith("vector") else 0)
        columns = (160 - 32) * 16 * channels * 6 * 6 * 16 * 4  # the store's columns from T = 32 to 160
        assert infer < 0.2 * columns and infer < 0.05 * train, (memory, infer, train, columns)
        assert train > columns, (memory, infer, train, columns)


def test_a_run_keeps_history_by_the_grad_mode_unless_told():
    """``history=None`` (the default): with history where gradients are on, without (the rings)
    under ``no_grad``; ``history=`` given overrides either."""
    gamma, alpha = nondeterministic_initial(1, 1, 1, 2, dtype=torch.float64)
    assert NondeterministicRun(gamma, alpha, 3, states=1).arrays.keep
    assert NondeterministicRun(gamma, alpha, 3, states=1, history=False).arrays.ring
    with torch.no_grad():
        assert NondeterministicRun(gamma, alpha, 3, states=1).arrays.ring
        assert NondeterministicRun(gamma, alpha, 3, states=1, history=True).arrays.keep
