"""The tapes' ``write_mlp``: Delétang et al.'s (2023) Tape-RNN writes into its tape through an MLP
of the controller's output (``mlp_layers_size=(64, 64)``: Linear → ReLU → Linear → ReLU →
Linear), its actions through their own linear head.  The option is validated and shown; the
reference step computes it; the fused CPU paths (Python and C++, hand-written BPTT) equal that
reference in outputs, final states and every gradient; the backward is re-entrant and passes
gradcheck; ``write_mlp=()`` is the layer as it was (same parameters, same numbers)."""

from __future__ import annotations

import io

import pytest
import torch

from memrnn.core import reference_paths, state_leaves
from memrnn.layers import StackRNN
from memrnn.layers.memories import JumpTape, Tape
from memrnn.ops.dispatch import implementation, native_available
from memrnn.ops.stack_rnn import stack_rnn_sequence

TAPES = ("tape", "tape_jump")


def net(memory="tape_jump", controller="lstm", write_mlp=(8, 8), dtype=torch.float64, seed=0, **kw):
    torch.manual_seed(seed)
    args = {"write_mlp": write_mlp} if write_mlp is not None else {}
    return StackRNN(3, 6, memory, controller, width=2, depth=7, memory_args=args, dtype=dtype, **kw)


def start(layer, B, gen, dtype=torch.float64):
    """A random initial state (the jump tape's rows jump 3, 9 and 0 cells) whose float leaves
    require gradients."""
    s = layer.initial_state(B, dtype=dtype)
    s = type(s)(*(t + 0.3 * torch.randn(t.shape, generator=gen, dtype=dtype) for t in s))
    if "jump" in s._fields:
        s = s._replace(jump=torch.tensor([3.0, 9.0, 0.0], dtype=dtype)[:B])
    return type(s)(*(t.requires_grad_(name != "jump") for name, t in zip(s._fields, s, strict=True)))


def run(layer, x, state, mask, weights, impl):
    """Outputs, final state and the gradients of a random loss over both: ``x``, the initial
    state's leaves, then every parameter; ``impl="reference"``: the loop over ``step``."""
    x = x.clone().requires_grad_()
    state = type(state)(*(t.detach().clone().requires_grad_(t.requires_grad) for t in state))
    with reference_paths() if impl == "reference" else implementation(impl):
        y, final = layer(x, state, mask)
    loss = (y * weights[0]).sum() + sum(
        (t * w).sum() for t, w in zip(state_leaves(final), weights[1:], strict=True)
    )
    inputs = [x, *(t for t in state if t.requires_grad), *layer.parameters()]
    return y, final, torch.autograd.grad(loss, inputs)


def close(a, b, tol):
    for i, (u, v) in enumerate(zip(a, b, strict=True)):
        torch.testing.assert_close(u, v, atol=tol, rtol=tol, msg=lambda m, i=i: f"tensor {i}: {m}")


def test_write_mlp_is_validated():
    for bad, shown in [(64, "64"), ("64", "'64'"), (None, "None"), ({64: 1}, r"\{64: 1\}")]:
        with pytest.raises(ValueError, match=rf"write_mlp must be a list or tuple .* got {shown}"):
            Tape(6, write_mlp=bad)
    for bad, shown in [
        ((64, 0), "0"),
        ([64, -3], "-3"),
        ((True,), "True"),
        ((64.0,), "64.0"),
        (("8",), "'8'"),
    ]:
        with pytest.raises(
            ValueError, match=rf"write_mlp's hidden layer sizes must be positive integers, got {shown}"
        ):
            JumpTape(6, write_mlp=bad)
    with pytest.raises(ValueError, match=r"write_mlp's hidden layer sizes .* got 0 in \[64, 0\]"):
        StackRNN(3, 6, "tape", memory_args={"write_mlp": [64, 0]})
    with pytest.raises(ValueError, match="write_mlp"):  # the other memories have no write MLP
        StackRNN(3, 6, "superposition", memory_args={"write_mlp": [64]})


def test_write_mlp_layers_and_repr():
    """The authors' layout: the actions' own linear head, then Linear(N, 64) → ReLU → Linear(64,
    64) → ReLU → Linear(64, width); a YAML list becomes a tuple; the repr shows it."""
    tape = JumpTape(6, width=8, depth=40, write_mlp=[64, 64], jump=2)
    assert tape.write_mlp == (64, 64)
    shapes = {k: tuple(v.shape) for k, v in tape.state_dict().items()}
    assert shapes == {
        "head.weight": (5, 6), "head.bias": (5,),
        "value_mlp.0.weight": (64, 6), "value_mlp.0.bias": (64,),
        "value_mlp.1.weight": (64, 64), "value_mlp.1.bias": (64,),
        "value_mlp.2.weight": (8, 64), "value_mlp.2.bias": (8,),
    }  # fmt: skip
    assert "write_mlp=(64, 64), jump=2" in repr(tape)
    plain = Tape(6, width=8)
    assert plain.write_mlp == () and plain.value_mlp is None and "write_mlp=()" in repr(plain)
    assert {k: tuple(v.shape) for k, v in plain.state_dict().items()} == {
        "head.weight": (11, 6),
        "head.bias": (11,),
    }


def test_the_reference_step_writes_the_mlps_output(gen):
    """The traced written value is W_3 relu(W_2 relu(W_1 h + b_1) + b_2) + b_3 of the controller's
    output (write_activation identity), the actions a softmax of the head alone."""
    layer = net("tape", "elman")
    x = torch.randn(2, 5, 3, generator=gen, dtype=torch.float64)
    tr = layer.trace(x)
    h = tr["output"]
    l0, l1, l2 = layer.memory.value_mlp
    want = l2(torch.relu(l1(torch.relu(l0(h)))))
    torch.testing.assert_close(tr["value"], want, atol=1e-14, rtol=0)
    actions = torch.softmax(layer.memory.head(h), -1)
    torch.testing.assert_close(torch.stack([tr[a] for a in ("stay", "left", "right")], -1), actions)


def test_reset_parameters_redraws_as_construction():
    a = net()
    torch.manual_seed(7)
    a.memory.reset_parameters()
    torch.manual_seed(7)
    b = JumpTape(6, width=2, depth=7, write_mlp=(8, 8), dtype=torch.float64)
    for (name, p), q in zip(a.memory.named_parameters(), b.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=0, atol=0, msg=name)


@pytest.mark.parametrize("impl", ["cpu", "native"])
@pytest.mark.parametrize("controller", ["lstm", "elman"])
@pytest.mark.parametrize("memory", TAPES)
@pytest.mark.parametrize("masked", [False, True], ids=["full", "padded"])
def test_fused_paths_equal_the_reference_loop(memory, controller, impl, masked, gen):
    """float64: outputs, final states and the gradients of the inputs, the initial state and every
    parameter (the MLP's included) equal the step loop's to 1e-12; right-padded rows of lengths
    9, 4 and 0."""
    if impl == "native" and not native_available():
        pytest.skip("memrnn's C++ loops did not build here")
    layer = net(memory, controller)
    B, T = 3, 9
    x = torch.randn(B, T, 3, generator=gen, dtype=torch.float64)
    mask = torch.arange(T)[None] < torch.tensor([9, 4, 0])[:, None] if masked else None
    s0 = start(layer, B, gen)
    y, final = layer(x, s0, mask)
    weights = [torch.randn(t.shape, generator=gen, dtype=torch.float64) for t in (y, *state_leaves(final))]
    y1, f1, g1 = run(layer, x, s0, mask, weights, impl)
    y2, f2, g2 = run(layer, x, s0, mask, weights, "reference")
    close([y1, *state_leaves(f1)], [y2, *state_leaves(f2)], 1e-12)
    close(g1, g2, 1e-12)
    assert all(bool((g != 0).any()) for g in g1[-6:])  # the MLP's gradients are not trivially 0


@pytest.mark.parametrize("impl", ["cpu", "native"])
@pytest.mark.parametrize("controller", ["lstm", "elman"])
def test_float32_over_the_backwards_blocks(controller, impl, gen):
    """float32 and T = 70 (past the Python backward's block of 64 steps and the C++ loops'
    8/16/32-step blocks): the fused paths match the loop to float32 rounding."""
    if impl == "native" and not native_available():
        pytest.skip("memrnn's C++ loops did not build here")
    layer = net(controller=controller, dtype=torch.float32)
    B, T = 3, 70
    x = torch.randn(B, T, 3, generator=gen)
    mask = torch.arange(T)[None] < torch.tensor([70, 33, 5])[:, None]
    s0 = start(layer, B, gen, torch.float32)
    y, final = layer(x, s0, mask)
    weights = [torch.randn(t.shape, generator=gen) for t in (y, *state_leaves(final))]
    y1, f1, g1 = run(layer, x, s0, mask, weights, impl)
    y2, f2, g2 = run(layer, x, s0, mask, weights, "reference")
    assert y1.dtype == torch.float32
    close([y1, *state_leaves(f1)], [y2, *state_leaves(f2)], 1e-5)
    close(g1, g2, 1e-4)


@pytest.mark.parametrize("impl", ["cpu", "native"])
@pytest.mark.parametrize("memory", TAPES)
def test_a_second_backward_equals_the_first(memory, impl, gen):
    if impl == "native" and not native_available():
        pytest.skip("memrnn's C++ loops did not build here")
    layer = net(memory)
    x = torch.randn(3, 8, 3, generator=gen, dtype=torch.float64, requires_grad=True)
    s0 = start(layer, 3, gen)
    with implementation(impl):
        y, final = layer(x, s0, torch.arange(8)[None] < torch.tensor([8, 5, 2])[:, None])
    loss = y.pow(2).sum() + sum(t.pow(2).sum() for t in state_leaves(final))
    inputs = [x, *(t for t in s0 if t.requires_grad), *layer.parameters()]
    first = torch.autograd.grad(loss, inputs, retain_graph=True)
    kept = [g.clone() for g in first]
    again = torch.autograd.grad(loss, inputs, retain_graph=True)
    close(first, kept, 0)  # the first result is untouched
    close(again, kept, 0)  # the second equals it


@pytest.mark.parametrize("memory", TAPES)
def test_gradcheck_of_the_python_path(memory, gen):
    """torch.autograd.gradcheck on a tiny float64 case of the Python path: the inputs, the
    initial tape and the memory's parameters (head and MLP), over padded rows."""
    layer = net(memory, "elman", write_mlp=(3,))
    names = [f"memory.{n}" for n, _ in layer.memory.named_parameters()]
    x = torch.randn(2, 4, 3, generator=gen, dtype=torch.float64, requires_grad=True)
    s0 = start(layer, 2, gen)
    mask = torch.tensor([[True] * 4, [True, True, False, False]])

    def f(x, tape, *params):
        with implementation("cpu"):
            y, final = torch.func.functional_call(
                layer, dict(zip(names, params, strict=True)), (x, s0._replace(tape=tape), mask)
            )
        return y, final.tape

    params = [p.detach().clone().requires_grad_() for p in layer.memory.parameters()]
    assert torch.autograd.gradcheck(f, (x, s0.tape.detach().clone().requires_grad_(), *params))


def test_write_mlp_empty_is_the_layer_as_it_was(gen):
    """``write_mlp=()`` (or ``[]``) builds the same parameters, with the same names and values,
    as a tape without the option, and computes the same numbers bit for bit."""
    plain = net("tape_jump", write_mlp=None)
    empty = net("tape_jump", write_mlp=[])
    assert plain.state_dict().keys() == empty.state_dict().keys()
    assert [k for k in plain.state_dict() if k.startswith("memory.")] == [
        "memory.head.weight",
        "memory.head.bias",
    ]
    for k, v in plain.state_dict().items():
        torch.testing.assert_close(empty.state_dict()[k], v, rtol=0, atol=0)
    x = torch.randn(3, 6, 3, generator=gen, dtype=torch.float64)
    s0 = start(plain, 3, gen)
    for impl in ["cpu", "native"] if native_available() else ["cpu"]:
        with implementation(impl):
            close(state_leaves(plain(x, s0)), state_leaves(empty(x, s0)), 0)


def test_state_dict_round_trip(gen):
    layer = net("tape", write_mlp=(5, 4))
    other = net("tape", write_mlp=(5, 4), seed=1)
    buf = io.BytesIO()
    torch.save(layer.state_dict(), buf)
    buf.seek(0)
    other.load_state_dict(torch.load(buf))
    x = torch.randn(2, 5, 3, generator=gen, dtype=torch.float64)
    close(state_leaves(layer(x)), state_leaves(other(x)), 0)
    with pytest.raises(RuntimeError, match="value_mlp"):  # a plain tape's checkpoint does not fit
        net("tape", write_mlp=None).load_state_dict(layer.state_dict())


def test_triton_forced_runs_the_python_path(gen):
    """The Triton kernels have no write MLP: under ``implementation("triton")`` (and with
    ``impl="triton"``) a call with one runs the hand-written Python path (here on CPU, where the
    kernels could not run at all) and equals the reference."""
    layer = net("tape")
    x = torch.randn(2, 5, 3, generator=gen, dtype=torch.float64)
    with implementation("triton"):
        y, _ = layer(x)
    with reference_paths():
        want, _ = layer(x)
    torch.testing.assert_close(y, want, atol=1e-12, rtol=0)
    s = layer.initial_state(2, dtype=torch.float64)
    w_in, b, w_rec = layer._fused_weights("lstm")
    mem = layer.memory
    args = (x, w_in, b, w_rec, mem.head.weight, mem.head.bias, s.h[:, 0], s.c[:, 0], (s.tape,))
    opts = {"controller": "lstm", "activation": "", "memory": "tape", "value_activation": "identity"}
    hs, *_ = stack_rnn_sequence(*args, **opts, value_mlp=mem.value_layers(), impl="triton")
    torch.testing.assert_close(hs, y, atol=1e-12, rtol=0)


def test_stack_rnn_sequence_checks_the_value_mlp(gen):
    layer = net("tape")
    x = torch.randn(2, 5, 3, generator=gen, dtype=torch.float64)
    s = layer.initial_state(2, dtype=torch.float64)
    w_in, b, w_rec = layer._fused_weights("lstm")
    mem = layer.memory
    opts = {"controller": "lstm", "activation": "", "memory": "tape", "value_activation": "identity"}

    def call(w_head, value_mlp):
        return stack_rnn_sequence(
            x,
            w_in,
            b,
            w_rec,
            w_head,
            mem.head.bias,
            s.h[:, 0],
            s.c[:, 0],
            (s.tape,),
            **opts,
            value_mlp=value_mlp,
        )

    layers = mem.value_layers()
    with pytest.raises(
        ValueError, match=r"w_head holds the 'tape' memory's 3 action rows only; got w_head of shape \(5, 6\)"
    ):
        call(torch.zeros(5, 6, dtype=torch.float64), layers)
    with pytest.raises(
        ValueError, match=r"value_mlp layer 1: expected a weight \[H, 8\] and a bias \[H\], got \(8, 6\)"
    ):
        call(mem.head.weight, (layers[0], layers[0]))
    with pytest.raises(ValueError, match=r"last layer gives 8 units; the 'tape' memory's value has 2"):
        call(mem.head.weight, layers[:2])
    with pytest.raises(ValueError, match="non-empty sequence of \\(weight, bias\\) pairs"):
        call(mem.head.weight, ())
