"""The stack RNN's shared driver (``memrnn.ops.stack_rnn``), what it does for every memory: the
Triton kernels' weight preloading rule and its fallback, the C++ loops over long sequences, and
``impl="reference"`` running the reference, and the member dimension for every memory.  Each memory's own paths are in
``tests/ops/test_<memory>.py`` (the harnesses of ``tests/ops/memory_paths.py``)."""

from __future__ import annotations

import pytest
import torch

from memrnn.ops import bptt
from memrnn.ops.dispatch import native_available
from memrnn.ops.stack_rnn import _NATIVE_MEMORIES, SPECS, stack_rnn_sequence
from memrnn.ops.stack_rnn.specs import TRITON_MEMORIES
from tests.ops.backends import DEVICE, needs_native, needs_triton
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
    assert calls == [((3, 1), ("a", 1, True), 4), ((3, 1), ("a", 1, False), 4)]
    calls.clear()
    kernels._launch(Kernel(refuse=False), 2, ("b",), True, 8)
    kernels._launch(Kernel(refuse=True), 2, ("c",), False, 8, 5)  # 5 members: the grid's second axis
    assert calls == [((2, 1), ("b", True), 8), ((2, 5), ("c", False), 8)]


@needs_native
def test_long_sequences_in_float32(gen):
    """T = 300 with rows of three lengths: no drift between the two loops."""
    for memory in _NATIVE_MEMORIES:
        net = make_layer(memory, "lstm", None, torch.float32, depth=20)
        x = torch.randn(4, 300, 4, generator=gen)
        mask = torch.arange(300)[None] < torch.tensor([300, 211, 17, 1])[:, None]
        w = torch.randn(4, 300, net.output_size, generator=gen)
        assert_native_equals_cpu(net, x, None, mask, w, atol=1e-4, rtol=1e-4)


@needs_native
@pytest.mark.parametrize("controller", ["lstm", "elman"])
@pytest.mark.parametrize("inputs", [16, 17], ids=["in-step", "blocks"])
def test_the_input_projection_in_the_step_and_in_blocks(inputs, controller, gen):
    """The C++ loop projects up to 16 inputs inside each step and more as products over blocks of
    steps (native.cpp's kStepInputs): on both sides of that bound, T = 75 (blocks of 8, 16, 32 and
    19 steps), every memory's outputs, final state and gradients equal the Python loop's."""
    from memrnn.layers import StackRNN

    for memory in _NATIVE_MEMORIES:
        torch.manual_seed(5)
        net = StackRNN(inputs, 7, memory, controller, width=3, depth=5).double()
        x = torch.randn(3, 75, inputs, generator=gen, dtype=torch.float64)
        mask = torch.arange(75)[None] < torch.tensor([75, 40, 0])[:, None]
        w = torch.randn(3, 75, net.output_size, generator=gen, dtype=torch.float64)
        state = (
            net.initial_state(
                3, dtype=torch.float64, input_lengths=torch.full((3,), 9.0, dtype=torch.float64)
            )
            if memory == "tape_jump"
            else None
        )
        assert_native_equals_cpu(net, x, state, mask, w, atol=1e-11, rtol=0)


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


def _member_case(memory: str, controller: str, dtype: torch.dtype, M: int = 3, mlp: bool | None = None):
    """M members' arguments of ``stack_rnn_sequence``: member ``m`` :func:`sequence_case`'s (its own
    draw; lengths and the jump tape's jumps rolled by ``m``, so that the members' rows differ),
    stacked into ``[M, ...]`` leaves of ``dtype``; the tapes with a value MLP unless ``mlp`` says."""
    gen = torch.Generator().manual_seed(7)
    mlp = memory.startswith("tape") if mlp is None else mlp
    cases = [sequence_case(memory, controller, gen, mlp=mlp) for _ in range(M)]
    cast = lambda ts: torch.stack([t.detach() for t in ts]).to(dtype)  # noqa: E731
    (args0, kwargs0) = cases[0]
    args = []
    for i, a in enumerate(args0[:-1]):
        args.append(None if a is None else cast([c[0][i] for c in cases]).requires_grad_())
    mem0 = []
    for i, f in enumerate(args0[-1]):
        t = cast([c[0][-1][i].roll(m) if not f.requires_grad else c[0][-1][i] for m, c in enumerate(cases)])
        mem0.append(t.requires_grad_(f.requires_grad))
    kwargs = dict(kwargs0)
    kwargs["lengths"] = torch.stack([kwargs0["lengths"].roll(m) for m in range(M)])
    if "value_mlp" in kwargs0:
        kwargs["value_mlp"] = tuple(
            tuple(cast([c[1]["value_mlp"][j][i] for c in cases]).requires_grad_() for i in range(2))
            for j in range(len(kwargs0["value_mlp"]))
        )
    return (*args, tuple(mem0)), kwargs


def _member_leaves(args, kwargs):
    flat = [*args[:-1], *args[-1], *(t for layer in kwargs.get("value_mlp") or () for t in layer)]
    return [t for t in flat if t is not None and t.requires_grad]


@pytest.mark.parametrize(
    ("dtype", "tol"), [(torch.float64, 1e-12), (torch.float32, 1e-5)], ids=["f64", "f32"]
)
@pytest.mark.parametrize("impl", ["cpu", "native"])
@pytest.mark.parametrize("controller", ["lstm", "elman"])
@pytest.mark.parametrize("memory", list(SPECS))
def test_members_equal_the_member_reference(memory, controller, impl, dtype, tol, monkeypatch):
    """The member dimension (:class:`memrnn.ops.stack_rnn.cpu.StackRNNSequence` with members, the
    Python loops and the C++ ones): every output (the overflow included) and the gradient of every
    argument equal :func:`stack_rnn_member_reference`'s, with rows of different lengths per member
    (one of length 0), across two backward blocks of the Python loop (the block cut to 3 steps);
    the tapes with a write MLP, the jump tape with each member's own jumps."""
    if impl == "native" and not native_available():
        pytest.skip("memrnn's C++ loops did not build here")
    monkeypatch.setattr(bptt, "BLOCK", 3)
    args, kwargs = _member_case(memory, controller, dtype)
    leaves = _member_leaves(args, kwargs)
    runs = {}
    for which in ("reference", impl):
        out = [o for o in stack_rnn_sequence(*args, **kwargs, impl=which) if o is not None]
        w = torch.Generator().manual_seed(3)
        loss = sum(
            (o * torch.randn(o.shape, generator=w, dtype=dtype)).sum() for o in out if o.is_floating_point()
        )
        runs[which] = (out, torch.autograd.grad(loss, leaves))
    (out_ref, g_ref), (out_got, g_got) = runs["reference"], runs[impl]
    assert out_got[0].grad_fn.name().startswith("StackRNNSequence")
    M, B, T = args[0].shape[:3]
    assert out_got[0].shape == (M, B, T, args[3].shape[-1]) and out_got[-1].shape == (M, B, T)
    for a, b in zip([*out_got, *g_got], [*out_ref, *g_ref], strict=True):
        torch.testing.assert_close(a, b, atol=tol, rtol=tol)


def test_the_member_reference_is_the_reference_member_by_member():
    """:func:`stack_rnn_member_reference`: member ``m``'s results are the single reference's on its
    ``[m]`` slices, bit for bit (the stratification stack: three state fields)."""
    from memrnn.ops.stack_rnn.reference import stack_rnn_member_reference, stack_rnn_reference

    args, kwargs = _member_case("stratification", "lstm", torch.float64)
    lengths = kwargs.pop("lengths")
    got = stack_rnn_member_reference(*args, lengths=lengths, **kwargs)
    for m in range(3):
        single = [None if a is None else a[m] for a in args[:-1]]
        want = stack_rnn_reference(*single, tuple(f[m] for f in args[-1]), lengths=lengths[m], **kwargs)
        for a, b in zip(got, want, strict=True):
            assert (a is None) == (b is None)
            assert a is None or torch.equal(a[m], b)


def test_members_bad_shapes_are_named():
    """With members (``w_rec [M, G, N]``) an argument without the member dimension, or with other
    rows than ``x``, is a ValueError naming it."""
    args, kwargs = _member_case("superposition", "elman", torch.float64, M=2)
    x, w_in, b, w_rec, w_head, b_head, h0, c0, mem0 = args
    with pytest.raises(ValueError, match=r"so h0 must be 3-D with 2 first, got \(3, 4\)"):
        stack_rnn_sequence(x, w_in, b, w_rec, w_head, b_head, h0[0], c0, mem0, **kwargs)
    with pytest.raises(ValueError, match=r"so w_head must be 3-D with 2 first"):
        stack_rnn_sequence(x, w_in, b, w_rec, w_head[0], b_head, h0, c0, mem0, **kwargs)
    with pytest.raises(ValueError, match=r"memory0\[0\] has 2 rows per member; x has 3"):
        stack_rnn_sequence(x, w_in, b, w_rec, w_head, b_head, h0, c0, (mem0[0][:, :2],), **kwargs)


def _moved(tree, dtype, device, rows: int | None = None):
    """``tree``'s tensors (arguments, kwargs, at any depth) as fresh leaves of ``dtype`` (floats) on
    ``device``, wanting a gradient where they did; ``rows``: each ``[M, B, ...]`` tensor's rows
    repeated up to ``rows`` (a float one with a little noise, so that the copies differ)."""
    g = torch.Generator().manual_seed(11)
    if isinstance(tree, torch.Tensor):
        t = tree.detach()
        if rows is not None and t.dim() >= 2 and t.shape[1] == 3:  # the rows of sequence_case
            t = t.repeat(1, -(-rows // 3), *[1] * (t.dim() - 2))[:, :rows]
            if t.is_floating_point() and tree.requires_grad:
                t = t + 0.01 * torch.randn(t.shape, generator=g, dtype=t.dtype)
        t = t.to(device, dtype if t.is_floating_point() else t.dtype)
        return t.requires_grad_(tree.requires_grad)
    if isinstance(tree, (tuple, list)):
        return type(tree)(_moved(t, dtype, device, rows) for t in tree)
    if isinstance(tree, dict):
        return {k: _moved(v, dtype, device, rows) for k, v in tree.items()}
    return tree


def _run_with_grads(args, kwargs, impl, weights):
    out = list(stack_rnn_sequence(*args, **kwargs, impl=impl))
    loss = sum(
        (o.double() * w).sum() for o, w in zip(out, weights, strict=True) if o is not None and w is not None
    )
    return out, list(torch.autograd.grad(loss, _member_leaves(args, kwargs)))


#: (memory, controller, rows) of the member kernels' test: every memory and controller on one tile
#: of rows; two tiles (17 rows, the second partial) for the memories with the most buffers (values,
#: scratch, jumps)
_MEMBER_KERNEL_CASES = [(m, c, 3) for m in sorted(TRITON_MEMORIES) for c in ("lstm", "elman")] + [
    (m, c, 17) for m in ("stratification", "deque", "tape_jump") for c in ("lstm", "elman")
]


@needs_triton
@pytest.mark.parametrize(("memory", "controller", "rows"), _MEMBER_KERNEL_CASES)
def test_members_on_the_kernels(memory, controller, rows, monkeypatch):
    """The Triton kernels with members (issue 67): one launch per direction for all members (a grid
    of row tiles × members; 17 rows: two tiles, the second partial); outputs, final states, the
    overflow and every gradient equal the float64 member reference (float32 storage, 2e-4, the
    single kernels' tolerance); member ``m`` equals the single kernels on its ``[m]`` slices to 1e-6,
    forward and gradients (the input projection is one ``baddbmm`` for all members against one
    ``linear``: the same bits on the machine that wrote this, not on CI's, whose BLAS rounds the two
    differently); the forward without history (``no_grad``) equals the training launch's bit for bit."""
    import memrnn.ops.stack_rnn.triton as kernels

    launches = []
    real = kernels._launch

    def launch(kernel, programs, args, preload, warps, members=1):
        fwd = kernel is kernels._stack_fwd
        launches.append((fwd, programs, members, args[-1] if fwd else None))  # _stack_fwd's NO_HISTORY last
        return real(kernel, programs, args, preload, warps, members)

    monkeypatch.setattr(kernels, "_launch", launch)
    args64, kwargs64 = _moved(
        _member_case(memory, controller, torch.float64, mlp=False), torch.float64, DEVICE, rows
    )
    args, kwargs = _moved((args64, kwargs64), torch.float32, DEVICE)
    M, B = args[0].shape[:2]
    g = torch.Generator().manual_seed(3)
    probe = stack_rnn_sequence(*args64, **kwargs64, impl="reference")
    weights = [
        None
        if o is None or not o.is_floating_point()
        else torch.randn(o.shape, generator=g, dtype=torch.float64).to(DEVICE)
        for o in probe
    ]
    out_ref, g_ref = _run_with_grads(args64, kwargs64, "reference", weights)
    launches.clear()
    out, grads = _run_with_grads(args, kwargs, "triton", weights)
    tiles = -(-B // kernels.BLOCK_B)
    assert launches == [(True, tiles, M, False), (False, tiles, M, None)]
    for a, b in zip([*out, *grads], [*out_ref, *g_ref], strict=True):
        assert (a is None) == (b is None)
        if a is not None:
            assert a.shape == b.shape
            torch.testing.assert_close(a.double(), b, atol=2e-4, rtol=2e-4)
    for m in range(M):
        one = lambda t, m=m: t.detach()[m].clone().requires_grad_(t.requires_grad)  # noqa: E731
        single_args = [None if a is None else one(a) for a in args[:-1]] + [tuple(one(f) for f in args[-1])]
        single_kwargs = {**kwargs, "lengths": kwargs["lengths"][m]}
        w_m = [None if w is None else w[m] for w in weights]
        out_m = list(stack_rnn_sequence(*single_args, **single_kwargs, impl="triton"))
        loss = sum(
            (o.double() * w).sum() for o, w in zip(out_m, w_m, strict=True) if o is not None and w is not None
        )
        leaves = [t for t in (*single_args[:-1], *single_args[-1]) if t is not None and t.requires_grad]
        for a, b in zip(out_m, out, strict=True):
            assert (a is None) == (b is None)
            if a is not None:
                torch.testing.assert_close(a, b[m], atol=1e-6, rtol=1e-6)
        for a, b in zip(torch.autograd.grad(loss, leaves), grads, strict=True):
            torch.testing.assert_close(a, b[m], atol=1e-6, rtol=1e-6)
    launches.clear()
    with torch.no_grad():
        fwd_only = stack_rnn_sequence(*args, **kwargs, impl="triton")
    assert launches == [(True, tiles, M, True)]
    for a, b in zip(fwd_only, out, strict=True):
        assert (a is None) == (b is None) and (a is None or torch.equal(a, b))


def _torch_exports_blas() -> bool:
    """Whether libtorch_cpu exports ``sgemm_`` and ``dgemm_`` (the x86-64 Linux wheels' MKL)."""
    import ctypes
    from pathlib import Path

    lib = Path(torch.__file__).parent / "lib" / "libtorch_cpu.so"
    if not lib.exists():
        return False
    handle = ctypes.CDLL(str(lib))
    return all(hasattr(handle, name) for name in ("sgemm_", "dgemm_"))


@needs_native
@pytest.mark.parametrize("members", [0, 3])
def test_the_loops_per_step_products_call_blas_directly_where_torch_exports_it(members):
    """The C++ loops' per-step, per-member products go to torch's own BLAS without ATen's
    ``addmm_``/``mm`` where libtorch_cpu exports ``sgemm_`` (``gemm_as_addmm``; the same bits,
    which ``tests/ops/test_bitwise_fixture.py`` holds); elsewhere through ATen, one call per
    member and step.  Counted with the profiler on a superposition stack RNN's forward+backward."""
    from torch.profiler import ProfilerActivity, profile

    from memrnn.layers import StackRNN
    from memrnn.members import MemberLayer

    T = 12
    make = lambda: StackRNN(4, 6, memory="superposition", width=2, depth=4)  # noqa: E731
    layer = make() if not members else MemberLayer.build(make, seeds=range(members))
    x = torch.randn(*([members] if members else []), 3, T, 4, requires_grad=True)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        layer.outputs(x).square().sum().backward()
    calls = sum(e.count for e in prof.key_averages() if e.key in ("aten::addmm_", "aten::mm", "aten::mm_out"))
    per_step = T * max(members, 1)  # at least one product per member and step, each way
    if _torch_exports_blas():
        assert calls < per_step, calls
    else:
        assert calls >= per_step, calls
