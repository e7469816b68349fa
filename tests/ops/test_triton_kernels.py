"""Every Triton kernel equals its mechanism's reference loop: outputs, every gradient (initial
states included), T = 0 and 1, batches that are not a multiple of the tile, states of several
blocks, float32 and bfloat16 storage.  On CPU the kernels run under Triton's interpreter
(``TRITON_INTERPRET=1``, set by ``tests/conftest.py`` when there is no GPU); on a GPU the same
tests run the compiled kernels (``-m gpu`` adds the layer-level CUDA checks)."""

from __future__ import annotations

import platform

import pytest
import torch
import torch.nn.functional as F

from memrnn.core import create_layer, list_layers, state_leaves, state_map
from memrnn.ops.dispatch import implementation, interpreting, triton_available

needs_triton = pytest.mark.skipif(
    not triton_available() or (not torch.cuda.is_available() and not interpreting()),
    reason="needs Triton (pip install triton) and a GPU or TRITON_INTERPRET=1",
)
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
# (T, B, size): one step and none, a partial tile, and several blocks of units with two tiles
SHAPES = [(1, 3, 5), (0, 3, 5), (5, 19, 70)]


def test_the_kernel_tests_run_where_the_dev_setup_installs_triton():
    """On Linux x86-64 (CI's machines) the dev extra installs Triton and ``tests/conftest.py``
    sets ``TRITON_INTERPRET=1`` without a GPU, so the kernels' tests must run there, not skip."""
    if platform.system() != "Linux" or platform.machine() != "x86_64":
        pytest.skip("the dev extra installs Triton on Linux x86-64 only")
    assert triton_available(), "Triton is missing from the test environment (pyproject's dev extra)"
    assert torch.cuda.is_available() or interpreting()


def grads_of(fn, inputs, weights):
    """``fn(*inputs)`` (a tensor or a tuple) and the gradients of ``Σ out·weight`` for every input
    that requires grad."""
    out = fn(*inputs)
    outs = out if isinstance(out, tuple) else (out,)
    loss = sum((o.float() * w).sum() for o, w in zip(outs, weights, strict=True))
    need = [t for t in inputs if isinstance(t, torch.Tensor) and t.requires_grad]
    grads = torch.autograd.grad(loss, need, allow_unused=True) if need and loss.requires_grad else []
    return outs, grads


def assert_kernel_matches(fn, make_inputs, out_shapes, atol, dtype=torch.float32):
    gen = torch.Generator().manual_seed(0)
    weights = [torch.randn(s, generator=gen).to(DEVICE) for s in out_shapes]
    ref_out, ref_grads = grads_of(lambda *a: fn(*a, impl="reference"), make_inputs(torch.float64), weights)
    out, gr = grads_of(lambda *a: fn(*a, impl="triton"), make_inputs(dtype), weights)
    for a, b in zip(out, ref_out, strict=True):
        assert a.dtype == dtype
        torch.testing.assert_close(a.double(), b, atol=atol, rtol=atol)
    for a, b in zip(gr, ref_grads, strict=True):
        if b is None:
            assert a is None or a.numel() == 0 or float(a.abs().max()) == 0
        else:
            torch.testing.assert_close(a.double(), b, atol=atol * 10, rtol=atol * 10)


def randn(*shape, dtype, seed, scale=1.0, grad=True):
    g = torch.Generator().manual_seed(seed)
    return (
        (torch.randn(*shape, generator=g, dtype=torch.float64) * scale).to(DEVICE, dtype).requires_grad_(grad)
    )


LAYERS_WITH_KERNELS = [
    n
    for n in list_layers()
    if n.startswith(
        (
            "elman",
            "hewitt_srnn",
            "reservoir",
            "jordan",
            "relu_counter",
            "counter_lstm",
            "second_order",
            "nnpda",
            "superposition_lstm",
            "superposition_elman",
            "stratification_lstm",
            "stratification_elman",
            "queue_lstm",
            "queue_elman",
            "tape_lstm",
            "tape_elman",
            "deque_lstm",
            "deque_elman",
        )
    )
]


@needs_triton
@pytest.mark.parametrize("name", LAYERS_WITH_KERNELS)
def test_layers_on_their_kernels_equal_the_reference(name):
    """Each layer with a kernel, run with every op forced to Triton, equals the same layer on its
    reference loop: padded outputs, final states and every gradient."""
    from memrnn.core import reference_paths

    torch.manual_seed(0)
    layer = create_layer(name).to(DEVICE)
    B, T = 19, 6
    if name.startswith(("second_order", "nnpda")):
        x = F.one_hot(torch.randint(0, layer.input_size, (B, T)), layer.input_size).float().to(DEVICE)
    else:
        x = torch.randn(B, T, layer.input_size, device=DEVICE, requires_grad=True)
    mask = (torch.arange(T)[None] < torch.randint(0, T + 1, (B,))[:, None]).to(DEVICE)
    s0 = state_map(lambda t: (t + 0.1).requires_grad_(), layer.initial_state(B))
    results = []
    for context in (implementation("triton"), reference_paths()):
        layer.zero_grad()
        with context:
            y, s = layer(x, s0, mask)
        loss = y.square().sum() + sum(t.sum() for t in state_leaves(s))
        grads = torch.autograd.grad(
            loss, [t for t in (x, *state_leaves(s0), *layer.parameters()) if t.requires_grad]
        )
        results.append((y, *state_leaves(s), *grads))
    for a, b in zip(*results, strict=True):
        torch.testing.assert_close(a, b, atol=2e-4, rtol=2e-4)


#: each memory's value-activation argument
VALUE_ARG = {
    "superposition": "push_activation",
    "stratification": "value_activation",
    "queue": "value_activation",
    "tape": "write_activation",
    "tape_jump": "write_activation",
    "deque": "value_activation",
}


@needs_triton
@pytest.mark.parametrize("memory", ["superposition", "stratification", "queue", "tape", "tape_jump", "deque"])
@pytest.mark.parametrize("controller", ["lstm", "elman"])
@pytest.mark.parametrize(
    ("activation", "push_activation", "depth"),
    [("tanh", "sigmoid", 4), ("relu", "identity", 3), ("sigmoid", "tanh", 17)],
)
def test_stack_rnn_kernels_equal_the_reference(memory, controller, activation, push_activation, depth):
    """The stack RNN's two kernels (:mod:`memrnn.ops.stack_rnn.triton`) against the layer's
    reference loop, for every memory: every value activation, Elman activations, a window shorter
    than the sequence (content pushed out of it), a memory of several chunks of cells (depth 17 ×
    width 9 > BLOCK_F; for the stratification memories, chunks of 16 elements), padding, gradients
    of the final states and of every weight; the overflow the kernel reports equals the
    reference's."""
    from memrnn.core import reference_paths
    from memrnn.layers import StackRNN

    torch.manual_seed(1)
    width = 9 if depth == 17 else 3
    args = {"activation": activation} if controller == "elman" else {}
    layer = StackRNN(
        4, 6, memory, controller, width=width, depth=depth, output="hidden+reading",
        memory_args={VALUE_ARG[memory]: push_activation, **({"jump": 0} if memory == "tape_jump" else {})},
        controller_args=args,
    ).to(DEVICE)  # fmt: skip
    B, T = 19, 7
    x = torch.randn(B, T, 4, device=DEVICE, requires_grad=True)
    mask = (
        torch.arange(T)[None] < torch.tensor([T, 0, 3, *torch.randint(0, T + 1, (B - 3,)).tolist()])[:, None]
    ).to(DEVICE)
    s0 = state_map(lambda t: (t + 0.1 * torch.randn_like(t)).requires_grad_(), layer.initial_state(B))
    if memory in ("stratification", "queue", "deque"):  # strengths in [0, 1], some of them full
        g = torch.Generator().manual_seed(3)
        strengths = torch.rand(B, depth * (2 if memory == "deque" else 1), generator=g).to(DEVICE)
        strengths[:, ::3] = 1.0
        s0 = s0._replace(strengths=strengths.requires_grad_())
    if memory == "tape_jump":  # each row its own jump, some past the tape's end (Delétang et al.'s Tape-RNN)
        s0 = s0._replace(jump=torch.arange(B, dtype=torch.float32, device=DEVICE).requires_grad_())
    results = []
    for context in (implementation("triton"), reference_paths()):
        with context:
            y, s = layer(x, s0, mask)
        loss = (y * torch.linspace(-1, 1, y.shape[-1], device=DEVICE)).square().sum()
        loss = loss + sum((t * t.detach().sin()).sum() for t in state_leaves(s))
        grads = torch.autograd.grad(
            loss, [t for t in (x, *state_leaves(s0), *layer.parameters()) if t.requires_grad]
        )
        results.append((y, *state_leaves(s), *grads))
    # under the interpreter the kernels equal the loop to 1e-6.  On an H100 and an H200 they once
    # differed from the loop's CUDA ops by up to 1.6e-4 of each tensor's largest value: Triton 3.6
    # had compiled the head product to a TF32 dot (benchmarks/results/stack-rnn-h200.md), since an
    # explicit IEEE product; 2e-5 of the largest value is ~50x torch's own float32 error here.
    for a, b in zip(*results, strict=True):
        if DEVICE == "cuda":
            assert float((a - b).abs().max()) <= 2e-5 * float(b.abs().max()) + 1e-6
        else:
            torch.testing.assert_close(a, b, atol=2e-4, rtol=2e-4)
    # the overflow the kernel reports, against the reference loop's trace
    from memrnn.ops.stack_rnn import stack_rnn_sequence

    w_in, b, w_rec = layer._fused_weights(controller)
    cs, ms = layer.split(s0)
    lstm = controller == "lstm"
    with torch.no_grad():
        *_, overflow = stack_rnn_sequence(
            x, w_in, b, w_rec, layer.memory.head.weight, layer.memory.head.bias,
            cs.h[:, 0] if lstm else cs.h, cs.c[:, 0] if lstm else None, tuple(ms),
            controller=controller, activation=activation, memory=memory,
            value_activation=push_activation, lengths=mask.sum(1), overflow=True, impl="triton",
        )  # fmt: skip
        with reference_paths():
            expected = layer.trace(x, s0, mask)["overflow"] * mask
    tol = 1e-4 if DEVICE == "cuda" else 1e-5
    torch.testing.assert_close(overflow * mask, expected, atol=tol, rtol=tol)
    if memory not in ("tape", "tape_jump"):  # content in the last cell (the tapes are circular)
        assert bool((expected > 0).any())


@needs_triton
@pytest.mark.parametrize("memory", ["superposition", "stratification", "queue", "tape", "deque"])
def test_stack_rnn_kernels_in_bfloat16_and_strict_mode(memory):
    """bfloat16 storage (float32 accumulation) stays near the float32 reference; ``strict`` on the
    kernels raises the reference's error, naming the same step and row (the tape is circular:
    nothing overflows, so strict mode never raises)."""
    from memrnn.core import reference_paths
    from memrnn.layers import StackRNN
    from memrnn.layers.nnpda import StackOverflowError

    torch.manual_seed(2)
    # a queue pops its oldest element, a DeQue pushes at both ends: windows of 1 overflow
    depth = 1 if memory in ("queue", "deque") else 2
    layer = StackRNN(4, 8, memory, "lstm", width=3, depth=depth, strict=True).to(DEVICE)
    x = torch.randn(5, 6, 4, device=DEVICE)
    if memory == "tape":
        for context in (implementation("triton"), reference_paths()):
            with context:
                layer(x)
    else:
        messages = []
        for context in (implementation("triton"), reference_paths()):
            with context, pytest.raises(StackOverflowError, match=r"at step \d+, batch row \d+") as err:
                layer(x)
            messages.append(str(err.value))
        assert messages[0] == messages[1]
    layer.strict = False
    with reference_paths():
        ref, _ = layer(x)
    with implementation("triton"):
        y, _ = layer.to(torch.bfloat16)(x.to(torch.bfloat16))
    assert y.dtype == torch.bfloat16
    torch.testing.assert_close(y.float(), ref, atol=3e-2, rtol=3e-2)


@needs_triton
@pytest.mark.parametrize(
    ("memory", "controller", "hidden"),
    [(m, c, 7) for m in ("superposition", "stratification", "deque") for c in ("lstm", "elman")]
    + [("superposition", "elman", 70)],  # two blocks of units, both preloaded
)
def test_stack_rnn_kernels_with_and_without_preloaded_weights(memory, controller, hidden, monkeypatch):
    """The weight tiles loaded once before the time loop (``PRELOAD``, what every layer small
    enough gets) and at every step (what a larger one gets, and a GPU whose shared memory cannot
    hold them) give the same outputs and gradients: the same products in the same order."""
    from memrnn.layers import StackRNN
    from memrnn.ops.stack_rnn import triton as kernels

    torch.manual_seed(4)
    layer = StackRNN(5, hidden, memory, controller, width=3, depth=5).to(DEVICE)
    x = torch.randn(18, 6, 5, device=DEVICE, requires_grad=True)
    mask = (torch.arange(6)[None] < torch.randint(0, 7, (18,))[:, None]).to(DEVICE)
    heads = kernels.N_ACTIONS[kernels.MEMORY_CODES[memory]] + 3  # the actions, then the width's values
    assert kernels._preload(controller == "lstm", hidden, hidden + 3, heads)
    results = []
    for limit in (kernels.PRELOAD_BYTES, 0):
        monkeypatch.setattr(kernels, "PRELOAD_BYTES", limit)
        with implementation("triton"):
            y, s = layer(x, None, mask)
        loss = (y * y.detach().cos()).sum() + sum(t.square().sum() for t in state_leaves(s))
        results.append((y, *state_leaves(s), *torch.autograd.grad(loss, [x, *layer.parameters()])))
    for a, b in zip(*results, strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-6)


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
