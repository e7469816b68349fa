"""The stack RNN's memories (superposition, stratification, queue, tape, jump tape, DeQue) share
their driver (``memrnn.ops.stack_rnn``), so each path of theirs is checked by one harness here,
called by each memory's own file (``tests/ops/test_<memory>.py``) with its memory: the reference
sequence (the memories' torch steps under autograd) against the hand-written CPU path, the C++
loops against the Python loops and the layer's reference loop, and the Triton kernels against the
reference loop; and the step helpers more than one memory's file runs."""

from __future__ import annotations

import pytest
import torch

from memrnn.core import MemoryLayer, reference_paths, state_leaves, state_map
from memrnn.layers import StackRNN
from memrnn.ops.dispatch import implementation
from memrnn.ops.stack_rnn import stack_rnn_sequence
from memrnn.ops.stratification import stratification_reference, stratification_step
from tests.ops.backends import DEVICE

# -- the torch steps -------------------------------------------------------------------------------


def run_stratification(pops, pushes, values, capacity, kind):
    B, T, m = values.shape
    V, s = values.new_zeros(B, capacity, m), values.new_zeros(B, capacity)
    readings, overflow = [], []
    for t in range(T):
        V, s, r, lost = stratification_step(V, s, pops[:, t], pushes[:, t], values[:, t], kind)
        readings.append(r)
        overflow.append(lost)
    return torch.stack(readings, 1), s, torch.stack(overflow, 1)


def step_inputs(B, T, m, dtype, gen):
    actions = torch.randn(B, T, 3, generator=gen, dtype=dtype).softmax(-1).requires_grad_()
    pushed = torch.randn(B, T, m, generator=gen, dtype=dtype).requires_grad_()
    return actions, pushed


def check_stratification_step_equals_the_reference_with_gradients(kind, dtype):
    gen = torch.Generator().manual_seed(2)
    B, T, m = 3, 8, 4
    pops = torch.rand(B, T, generator=gen, dtype=dtype).requires_grad_()
    pushes = torch.rand(B, T, generator=gen, dtype=dtype).requires_grad_()
    values = torch.randn(B, T, m, generator=gen, dtype=dtype).requires_grad_()
    w = torch.randn(B, T, m, generator=gen, dtype=dtype)
    fast, s, overflow = run_stratification(pops, pushes, values, capacity=T, kind=kind)
    ref, ref_s = stratification_reference(pops, pushes, values, kind)
    tol = {"atol": 1e-12, "rtol": 0} if dtype == torch.float64 else {"atol": 1e-6, "rtol": 1e-5}
    torch.testing.assert_close(fast, ref, **tol)
    torch.testing.assert_close(s, ref_s.flip(-1), **tol)
    assert bool((overflow == 0).all())
    inputs = (pops, pushes, values)
    for a, b in zip(
        torch.autograd.grad((fast * w).sum(), inputs),
        torch.autograd.grad((ref * w).sum(), inputs),
        strict=True,
    ):
        torch.testing.assert_close(a, b, **tol)


# -- the fused paths' reference: stack_rnn_sequence(impl="reference") ----------------------------
def sequence_case(memory: str, controller: str, gen: torch.Generator, mlp: bool = False):
    """Random float64 arguments of ``stack_rnn_sequence`` (B 3, T 5, N 4, m 2, depth 3; row lengths
    5, 2, 0), every tensor a leaf that wants its gradient (but the jump tape's jumps)."""
    from memrnn.ops.stack_rnn.specs import spec as memory_spec

    s = memory_spec(memory)
    B, T, n, N, m, D = 3, 5, 3, 4, 2, 3
    units = s.reads * m
    G = 4 * N if controller == "lstm" else N
    r = lambda *shape: (0.5 * torch.randn(*shape, generator=gen, dtype=torch.float64)).requires_grad_()  # noqa: E731
    k = s.n_actions
    if memory in ("superposition", "tape"):
        mem0 = (r(B, D, m),)
    elif memory == "tape_jump":
        mem0 = (torch.tensor([1.0, 2.0, 0.0], dtype=torch.float64), r(B, D, m))
    elif memory == "deque":
        mem0 = (
            r(B, 2 * D, m),
            torch.rand(B, 2 * D, generator=gen, dtype=torch.float64).requires_grad_(),
            r(B, 2 * m),
        )
    else:
        mem0 = (r(B, D, m), torch.rand(B, D, generator=gen, dtype=torch.float64).requires_grad_(), r(B, m))
    head = (r(k, N), r(k)) if mlp else (r(k + units, N), r(k + units))
    args = (
        r(B, T, n),
        r(G, n + units),
        r(G),
        r(G, N),
        *head,
        r(B, N),
        r(B, N) if controller == "lstm" else None,
        mem0,
    )
    kwargs = dict(controller=controller, activation="tanh", memory=memory, value_activation=s.value_activation,
                  lengths=torch.tensor([5, 2, 0]), overflow=True)  # fmt: skip
    if mlp:
        kwargs["value_mlp"] = ((r(5, N), r(5)), (r(units, 5), r(units)))
    return args, kwargs


def _leaves(args, kwargs):
    flat = [*args[:-1], *args[-1], *(t for layer in kwargs.get("value_mlp", ()) for t in layer)]
    return [t for t in flat if t is not None and t.requires_grad]


def check_reference_sequence_equals_the_cpu_path_with_gradients(memory, controller):
    """``impl="reference"`` (the memories' torch steps under autograd) and ``impl="cpu"`` (the
    hand-written BPTT) agree to 1e-12 in float64: outputs, final states, overflow and every
    gradient, with rows of different lengths (one of length 0)."""
    from memrnn.ops.stack_rnn import stack_rnn_sequence

    gen = torch.Generator().manual_seed(66)
    args, kwargs = sequence_case(memory, controller, gen, mlp=memory == "tape")
    leaves = _leaves(args, kwargs)
    results = {}
    for impl in ("reference", "cpu"):
        out = [o for o in stack_rnn_sequence(*args, **kwargs, impl=impl) if o is not None]
        loss = sum((o * torch.linspace(-1, 1, o.numel(), dtype=o.dtype).view(o.shape)).sum()
                   for o in out if o.is_floating_point() and o.requires_grad)  # fmt: skip
        results[impl] = (out, torch.autograd.grad(loss, leaves, allow_unused=True))
    (out_ref, g_ref), (out_cpu, g_cpu) = results["reference"], results["cpu"]
    assert len(out_ref) == len(out_cpu)
    for a, b in zip(out_ref, out_cpu, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12)
    for a, b in zip(g_ref, g_cpu, strict=True):
        if a is None or b is None:
            assert (a is None and b is None) or (a if b is None else b).abs().max() == 0
            continue
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12)


# -- the C++ loops ---------------------------------------------------------------------------------
# (controller, controller activation, memory options): every code path of native.cpp
NATIVE_CASES = [
    ("lstm", None, {}),
    ("elman", "tanh", {}),
    ("elman", "sigmoid", {}),
    ("elman", "relu", {}),
]


def make_layer(memory, controller, activation, dtype, depth=5, **kw):
    torch.manual_seed(3)
    if activation is not None:
        kw["controller_args"] = {"activation": activation}
    return StackRNN(4, 7, memory, controller, width=3, depth=depth, **kw).to(dtype)


def _jumps(net, B, dtype):
    """The jump tape needs each row's input length: an initial state with jumps 0, 1, 2 … (some
    beyond the tape), None for every other memory."""
    if net.memory.kind != "tape_jump":
        return None
    jumps = (torch.arange(B, dtype=dtype) * 3) % (net.memory.depth + 4)
    return net.initial_state(B, dtype=dtype)._replace(jump=jumps)


def _run(net, x, state, mask, w, impl):
    """Outputs, final state leaves and all gradients (input, parameters, initial state)."""
    if state is None:
        state = _jumps(net, x.shape[0], x.dtype)
    xx = x.clone().requires_grad_()
    st = None if state is None else type(state)(*(t.clone().requires_grad_() for t in state))
    net.zero_grad()
    if impl == "reference":
        y, s = MemoryLayer.forward(net, xx, st, mask)
    else:
        with implementation(impl):
            y, s = net(xx, st, mask)
    loss = (y * w).sum() + sum((t * t).sum() for t in state_leaves(s))
    loss.backward()
    grads = [xx.grad, *(p.grad for p in net.parameters())]
    if st is not None:
        grads += [t.grad for t in st]
    return [y, *state_leaves(s)], grads


def assert_native_equals_cpu(net, x, state, mask, w, **tol):
    """The C++ loops and the Python loops give the same outputs, final state and gradients."""
    out_n, g_n = _run(net, x, state, mask, w, "native")
    out_c, g_c = _run(net, x, state, mask, w, "cpu")
    for a, b in zip([*out_n, *g_n], [*out_c, *g_c], strict=True):
        torch.testing.assert_close(a, b, **tol)


def check_native_loops_equal_python_loops_and_reference(memory, controller, activation, opts, dtype, gen):
    net = make_layer(memory, controller, activation, dtype, **opts)
    B, T = 3, 13
    x = torch.randn(B, T, 4, generator=gen, dtype=dtype)
    mask = torch.arange(T)[None] < torch.tensor([T, 6, 0])[:, None]
    w = torch.randn(B, T, net.output_size, generator=gen, dtype=dtype)
    state = type(net.initial_state(B, dtype=dtype))(
        *(
            torch.randn(t.shape, generator=gen, dtype=dtype).abs() * 0.3
            for t in net.initial_state(B, dtype=dtype)
        )
    )  # a non-zero initial state: its gradient flows through the whole sequence
    if memory == "tape_jump":
        state = state._replace(jump=_jumps(net, B, dtype).jump)
    tol = {"atol": 1e-11, "rtol": 0} if dtype == torch.float64 else {"atol": 1e-5, "rtol": 1e-4}
    out_n, g_n = _run(net, x, state, mask, w, "native")
    for other in ("cpu", "reference"):
        out_o, g_o = _run(net, x, state, mask, w, other)
        for a, b in zip(out_n, out_o, strict=True):
            torch.testing.assert_close(a, b, **tol)
        for a, b in zip(g_n, g_o, strict=True):
            torch.testing.assert_close(a, b, **tol)


def check_value_activations_and_the_overflow(memory, gen):
    """Each value activation the memories accept, and the overflow a small window reports."""
    for value in ("sigmoid", "tanh", "identity"):
        key = {
            "superposition": "push_activation",
            "tape": "write_activation",
            "tape_jump": "write_activation",
        }.get(memory, "value_activation")
        net = make_layer(memory, "lstm", None, torch.float64, depth=2, memory_args={key: value})
        x = torch.randn(2, 9, 4, generator=gen, dtype=torch.float64)
        w = torch.randn(2, 9, net.output_size, generator=gen, dtype=torch.float64)
        assert_native_equals_cpu(net, x, None, None, w, atol=1e-12, rtol=0)
        ov_n, ov_c = (_overflow(net, x, impl) for impl in ("native", "cpu"))
        if memory in ("superposition", "stratification"):  # a window of 2 overflows in 9 steps
            assert float(ov_n.abs().sum()) > 0
        torch.testing.assert_close(ov_n, ov_c, atol=1e-12, rtol=0)


def _overflow(net, x, impl):
    """What each step drops out of the layer's window ``[B, T]`` (the strict mode's input)."""
    w_in, b, w_rec = net._fused_weights("lstm")
    s = _jumps(net, x.shape[0], x.dtype) or net.initial_state(x.shape[0], dtype=x.dtype)
    *_, overflow = stack_rnn_sequence(
        x, w_in, b, w_rec, net.memory.head.weight, net.memory.head.bias, s.h[:, 0], s.c[:, 0],
        tuple(net.split(s)[1]), controller="lstm", activation="tanh", memory=net.memory.kind,
        value_activation=net.memory.value_activation, overflow=True, impl=impl,
    )  # fmt: skip
    return overflow.detach()


# -- the Triton kernels ----------------------------------------------------------------------------
#: each memory's value-activation argument
VALUE_ARG = {
    "superposition": "push_activation",
    "stratification": "value_activation",
    "queue": "value_activation",
    "tape": "write_activation",
    "tape_jump": "write_activation",
    "deque": "value_activation",
}


#: the kernels' (Elman activation, value activation, depth) cases
KERNEL_CASES = [("tanh", "sigmoid", 4), ("relu", "identity", 3), ("sigmoid", "tanh", 17)]


def check_stack_rnn_kernels_equal_the_reference(memory, controller, activation, push_activation, depth):
    """The stack RNN's two kernels (:mod:`memrnn.ops.stack_rnn.triton`) against the layer's
    reference loop, for every memory: every value activation, Elman activations, a window shorter
    than the sequence (content pushed out of it), a memory of several chunks of cells (depth 17 ×
    width 9 > BLOCK_F; for the stratification memories, chunks of 16 elements), padding, gradients
    of the final states and of every weight; the overflow the kernel reports equals the
    reference's."""
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


def check_stack_rnn_kernels_in_bfloat16_and_strict_mode(memory):
    """bfloat16 storage (float32 accumulation) stays near the float32 reference; ``strict`` on the
    kernels raises the reference's error, naming the same step and row (the tape is circular:
    nothing overflows, so strict mode never raises)."""
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


def check_stack_rnn_kernels_with_and_without_preloaded_weights(memory, controller, hidden, monkeypatch):
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
