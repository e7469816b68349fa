"""The stack RNN's shared driver (``memrnn.ops.stack_rnn``), what it does for every memory: the
Triton kernels' weight preloading rule and its fallback, the C++ loops over long sequences, and
``impl="reference"`` running the reference.  Each memory's own paths are in
``tests/ops/test_<memory>.py`` (the harnesses of ``tests/ops/memory_paths.py``)."""

from __future__ import annotations

import pytest
import torch

from memrnn.ops.stack_rnn import _NATIVE_MEMORIES
from tests.ops.backends import needs_native
from tests.ops.memory_paths import assert_native_equals_cpu, make_layer, sequence_case


def test_stack_rnn_preload_rule_and_its_fallback():
    """The weights are preloaded while their padded float32 tiles fit ``PRELOAD_BYTES`` (64 LSTM
    units and width 8: 84 KiB; 128: not; Elman 128 units: 88 KiB; 256: not), and a launch that the GPU refuses for its shared
    memory (Triton's ``OutOfResources``) runs again without them."""
    pytest.importorskip("triton")
    from triton.runtime.errors import OutOfResources

    from memrnn.ops.stack_rnn import triton as kernels

    assert kernels._preload(True, 64, 72, 11) and kernels._preload(False, 128, 136, 11)
    assert not kernels._preload(True, 128, 136, 11) and not kernels._preload(False, 256, 264, 11)

    calls = []

    class Kernel:  # stands for a JIT kernel: kernel[grid](*args, PRELOAD, num_warps=...)
        def __init__(self, refuse: bool) -> None:
            self.refuse = refuse

        def __getitem__(self, grid):
            def launch(*args, num_warps):
                calls.append((grid, args, num_warps))
                if args[-1] and self.refuse:
                    raise OutOfResources(139264, 101376, "shared memory")

            return launch

    kernels._launch(Kernel(refuse=True), 3, ("a", 1), True, 4)
    assert calls == [((3,), ("a", 1, True), 4), ((3,), ("a", 1, False), 4)]
    calls.clear()
    kernels._launch(Kernel(refuse=False), 2, ("b",), True, 8)
    kernels._launch(Kernel(refuse=True), 2, ("c",), False, 8)
    assert calls == [((2,), ("b", True), 8), ((2,), ("c", False), 8)]


@needs_native
def test_long_sequences_in_float32(gen):
    """T = 300 with rows of three lengths: no drift between the two loops."""
    for memory in _NATIVE_MEMORIES:
        net = make_layer(memory, "lstm", None, torch.float32, depth=20)
        x = torch.randn(4, 300, 4, generator=gen)
        mask = torch.arange(300)[None] < torch.tensor([300, 211, 17, 1])[:, None]
        w = torch.randn(4, 300, net.output_size, generator=gen)
        assert_native_equals_cpu(net, x, None, mask, w, atol=1e-4, rtol=1e-4)


def test_impl_reference_runs_the_reference_and_cpu_does_not(monkeypatch):
    """``stack_rnn_sequence(impl="reference")`` and ``implementation("reference")`` call
    :func:`memrnn.ops.stack_rnn.reference.stack_rnn_reference`; ``impl="cpu"`` does not."""
    from memrnn.ops.dispatch import implementation
    from memrnn.ops.stack_rnn import reference, stack_rnn_sequence

    calls = []
    real = reference.stack_rnn_reference
    monkeypatch.setattr(reference, "stack_rnn_reference", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    args, kwargs = sequence_case("stratification", "elman", torch.Generator().manual_seed(0))
    stack_rnn_sequence(*args, **kwargs, impl="cpu")
    assert calls == []
    stack_rnn_sequence(*args, **kwargs, impl="reference")
    assert calls == [1]
    with implementation("reference"):
        stack_rnn_sequence(*args, **kwargs)
    assert calls == [1, 1]
