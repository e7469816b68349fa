"""The nnPDA's one entry point (:func:`memrnn.ops.nnpda.nnpda_sequence`): the CPU Function and the
Triton kernels (under ``TRITON_INTERPRET=1`` on CPU, compiled on a GPU) equal the reference loop
in every state, ``p+`` and every gradient (weights, a learned sensitivity, the initial state), for
every action, T = 0 and 1, one row and several, windows of several cells, float32 and bfloat16
storage; the reference loop itself equals the paper's worked values; and the layer's fused path
(``NNPDA``) equals its reference loop, ``strict`` mode and a learned sensitivity included."""

from __future__ import annotations

import contextlib

import pytest
import torch
import torch.nn.functional as F

from memrnn import reference_paths
from memrnn.layers import NNPDA
from memrnn.layers.nnpda import NNPDAState
from memrnn.ops.dispatch import interpreting, triton_available
from memrnn.ops.nnpda import nnpda_reference, nnpda_sequence
from memrnn.ops.stack import h_sigmoid
from tests.ops.backends import assert_member_kernels
from tests.ops.layer_paths import Under, compare_layers, random_mask

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
needs_triton = pytest.mark.skipif(
    not triton_available() or (not torch.cuda.is_available() and not interpreting()),
    reason="needs Triton (pip install triton) and a GPU or TRITON_INTERPRET=1",
)


def make_inputs(dtype, *, n=3, m1=4, m2=2, D=5, B=3, T=4, learn_h=True, seed=0, device=DEVICE):
    g = torch.Generator().manual_seed(seed)
    O, L = n + 2 + m2, m2 + 1

    def r(*shape, lo=0.0, hi=1.0):
        t = torch.rand(*shape, generator=g, dtype=torch.float64) * (hi - lo) + lo
        return t.to(device, dtype, copy=True).requires_grad_()

    weight = r(O, n, m1, L, lo=-0.3, hi=0.9)
    h = torch.tensor(4.0, dtype=dtype, device=device).requires_grad_(learn_h)
    # a window whose top has a tie (two equal components) in row 0: the max's split
    stack0 = torch.rand(B, D, m2, generator=g, dtype=torch.float64)
    stack0[0, 0] = 0.7
    stack0 = stack0.to(device, dtype, copy=True).requires_grad_()
    ids = torch.randint(0, m1, (B, T), generator=g).to(device)
    return weight, h, r(B, n), stack0, r(B, m2), ids


def run(impl, inputs, action, weights):
    """States, ``p+`` and the gradients of ``Σ weights · (Q, K, tail)`` for every input that
    requires grad."""
    Q, K, tail, push = nnpda_sequence(*inputs, action, impl=impl)
    loss = sum((o.double() * w).sum() for o, w in zip((Q, K, tail), weights, strict=True))
    need = [t for t in inputs if t.requires_grad]
    grads = torch.autograd.grad(loss, need, allow_unused=True) if need else ()
    return (Q, K, tail, push), [
        torch.zeros_like(t) if g is None else g for g, t in zip(grads, need, strict=True)
    ]


def compare(impl, action, dtype=torch.float32, atol=2e-5, device=DEVICE, **shape):
    """``impl`` in ``dtype`` against the reference in float64.  The tolerance of each result is
    ``atol`` or four times the float32 reference loop's own error on it, whichever is larger (with
    the unbounded ``identity`` actions a step multiplies rounding errors by up to ``H·|p|``)."""
    gen = torch.Generator().manual_seed(7)
    shape["device"] = device
    outs, _ = run("reference", make_inputs(torch.float64, **shape), "sigmoid", [0, 0, 0])
    weights = [torch.randn(o.shape, generator=gen, dtype=torch.float64).to(device) for o in outs[:3]]
    ref, ref_g = run("reference", make_inputs(torch.float64, **shape), action, weights)
    got, got_g = run(impl, make_inputs(dtype, **shape), action, weights)
    if dtype == torch.float32:
        own, own_g = run("reference", make_inputs(dtype, **shape), action, weights)
    else:
        own, own_g = ref, ref_g

    def tolerance(a, b):
        if b.numel() == 0:
            return atol
        a, b = a.detach().double(), b.detach()
        return max(atol * max(1.0, float(b.abs().max())), 4 * float((a - b).abs().max()))

    for name, a, b, c in zip(("Q", "K", "tail", "p+"), got, ref, own, strict=True):
        assert a.dtype == dtype, name
        tol = tolerance(c, b)
        torch.testing.assert_close(a.double(), b, atol=tol, rtol=0, msg=lambda m, n=name: f"{n}: {m}")
    assert len(got_g) == len(ref_g)
    for i, (a, b, c) in enumerate(zip(got_g, ref_g, own_g, strict=True)):
        tol = 10 * tolerance(c, b)
        torch.testing.assert_close(a.double(), b, atol=tol, rtol=0, msg=lambda m, i=i: f"gradient {i}: {m}")


SHAPES = [
    {"T": 1, "B": 1},
    {"T": 0, "B": 3},
    {"T": 6, "B": 3, "n": 5, "m1": 3, "m2": 3, "D": 9},
    {"T": 5, "B": 2, "D": 1},
]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("action", ["identity", "sigmoid", "clamp"])
@pytest.mark.parametrize("learn_h", [False, True])
def test_cpu_function_equals_reference(shape, action, learn_h):
    compare("cpu", action, dtype=torch.float64, atol=1e-10, device="cpu", learn_h=learn_h, **shape)


@needs_triton
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("action", ["identity", "sigmoid", "clamp"])
@pytest.mark.parametrize("learn_h", [False, True])
def test_triton_kernels_equal_reference(shape, action, learn_h):
    compare("triton", action, learn_h=learn_h, **shape)


@needs_triton
def test_triton_kernels_bfloat16_storage():
    compare("triton", "sigmoid", dtype=torch.bfloat16, atol=4e-2, T=4, B=2)


@needs_triton
def test_triton_kernels_large_blocks():
    """More outputs and ``Q ⊗ R`` entries than one tile holds (``BLOCK_O`` 32, ``BLOCK_C`` 128)."""
    compare("triton", "identity", T=3, B=2, n=40, m1=2, m2=3, D=4)


def test_reference_is_definition_3_6_by_hand():
    """One step worked by hand: ``Q^1_i = h_H(Σ W Q I R − 1/2)``, the push/pop/C contractions,
    the stack cells ``h_H(p+ K_{i−1} + p− K_{i+1} + (1 − p+ − p−) K_i − 1/2)`` with ``C`` above
    the top and the tail below the window."""
    n, m1, m2, D = 2, 2, 1, 2
    O, L = n + 2 + m2, m2 + 1
    W = torch.zeros(O, n, m1, L, dtype=torch.float64)
    # state 0, symbol 1, reading "empty" (l = 1): Q_1 on, push 1, pop 0, C = 1
    W[1, 0, 1, 1] = 1.0
    W[n, 0, 1, 1] = 1.0
    W[n + 2, 0, 1, 1] = 1.0
    H = torch.tensor(10.0, dtype=torch.float64)
    q0 = torch.tensor([[1.0, 0.0]], dtype=torch.float64)
    stack0 = torch.zeros(1, D, m2, dtype=torch.float64)
    tail0 = torch.zeros(1, m2, dtype=torch.float64)
    Q, K, tail, push = nnpda_reference(W, H, q0, stack0, tail0, torch.tensor([[1]]), "identity")
    h = lambda x: float(h_sigmoid(torch.tensor(x, dtype=torch.float64), H))  # noqa: E731
    assert Q[0, 1].tolist() == pytest.approx([h(-0.5), h(0.5)])
    # p+ = 1, p− = 0: cell 0 = h(C − 1/2), cell 1 = h(K_0 − 1/2), tail = h(tail − 1/2)
    assert K[0, 1, :, 0].tolist() == pytest.approx([h(0.5), h(-0.5)])
    assert tail[0, 1].tolist() == pytest.approx([h(-0.5)])
    assert push.tolist() == [[1.0]]


def test_unknown_action_is_named():
    with pytest.raises(ValueError, match="unknown action 'relu'"):
        nnpda_sequence(*make_inputs(torch.float64), "relu")


# -- the layer: its fused path against the reference loop ------------------------------------------
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("action", ["identity", "sigmoid", "clamp"])
@pytest.mark.parametrize("output", ["state_and_reading", "state"])
def test_nnpda_fused_equals_reference(dtype, action, output):
    torch.manual_seed(0)
    B, T, m1, n, m2, D = 24, 8, 3, 4, 2, 5
    kw = {"depth": D, "sensitivity": 3.0, "action": action, "output": output, "dtype": dtype}
    fast = NNPDA(m1, n, m2, **kw)
    with torch.no_grad():
        for p in fast.parameters():
            p.uniform_(-0.3, 0.8)  # actions across the clamp's kinks and the sigmoid's range
    ref = Under(fast)
    x = F.one_hot(torch.randint(0, m1, (B, T)), m1).to(dtype)
    cells = torch.rand(B, D, m2, dtype=dtype) * (torch.rand(B, D, 1) > 0.4)  # exact zeros: ties
    state = NNPDAState(
        torch.rand(B, n, dtype=dtype).requires_grad_(),
        cells.requires_grad_(),
        torch.zeros(B, m2, dtype=dtype, requires_grad=True),
    )
    compare_layers(fast, ref, x, state, random_mask(B, T), dtype)
    compare_layers(fast, ref, x, state, None, dtype)


def test_nnpda_fused_path_covers_strict_and_a_learned_sensitivity():
    """Fused for one-hot input, also with ``strict`` (overflow checked at the end, raising at the
    same step and row as the reference loop) and a learned ``H`` (its gradient equal to the
    reference loop's in float64)."""
    from memrnn.layers import StackOverflowError

    torch.manual_seed(0)
    x = F.one_hot(torch.randint(0, 3, (8, 6)), 3).double()
    fast = NNPDA(3, 4, 2, depth=8, dtype=torch.float64)
    y, _ = fast(x)
    assert any("NNPDASequence" in type(n).__name__ for n in _graph_nodes(y))
    strict = NNPDA(3, 4, 2, depth=8, strict=True, dtype=torch.float64)
    strict.load_state_dict(fast.state_dict())
    ys = strict(x)[0]
    torch.testing.assert_close(ys, y)
    assert any("NNPDASequence" in type(n).__name__ for n in _graph_nodes(ys))
    # a window of 2 cells overflows: both paths name the same step and row
    tiny = NNPDA(3, 4, 2, depth=2, strict=True, dtype=torch.float64)
    with torch.no_grad():
        tiny.weight_push.fill_(1.0)
        tiny.weight_c.fill_(1.0)
    dense = NNPDA(3, 4, 2, depth=2, strict=True, one_hot_input=False, dtype=torch.float64)
    dense.load_state_dict(tiny.state_dict())  # the step-by-step loop of forward, flags per step
    messages = []
    for layer in (tiny, dense):
        with pytest.raises(StackOverflowError) as e:
            layer(x)
        messages.append(str(e.value))
    assert messages[0] == messages[1] and "step t=" in messages[0]
    learned = {}
    for fast in (True, False):
        torch.manual_seed(1)
        layer = NNPDA(3, 4, 2, depth=8, learn_sensitivity=True, action="sigmoid", dtype=torch.float64)
        with contextlib.nullcontext() if fast else reference_paths():
            out, state = layer(x, mask=random_mask(8, 6))
        (out.square().sum() + state.stack.sum()).backward()
        learned[fast] = (out.detach(), layer.sensitivity.grad.clone(), layer.weight_q.grad.clone())
        if fast:
            assert any("NNPDASequence" in type(n).__name__ for n in _graph_nodes(out))
    for a, b in zip(learned[True], learned[False], strict=True):
        torch.testing.assert_close(a, b, atol=1e-12, rtol=0)


def _graph_nodes(t):
    seen, todo = [], [t.grad_fn]
    while todo:
        n = todo.pop()
        if n is None or n in seen:
            continue
        seen.append(n)
        todo.extend(f for f, _ in n.next_functions)
    return seen


@pytest.mark.parametrize(
    ("dtype", "atol"), [(torch.float64, 1e-10), (torch.float32, 2e-5)], ids=["float64", "float32"]
)
@pytest.mark.parametrize("action", ["identity", "sigmoid", "clamp"])
@pytest.mark.parametrize("learn_h", [False, True])
def test_members_equal_the_member_reference(learn_h, action, dtype, atol):
    """The member dimension (:class:`memrnn.ops.nnpda.cpu.NNPDASequence` with members: every
    member's rows and weight slices in one bucketed product per step, ``H`` per member): every
    state, ``p+`` and the gradients of every argument equal
    :func:`memrnn.ops.nnpda.reference.nnpda_member_reference`'s (a tie in a stack top included),
    and member ``μ`` of the member reference is the single reference on its slices."""
    from memrnn.ops.nnpda.reference import nnpda_member_reference

    M = 3
    shape = {"n": 3, "m1": 4, "m2": 2, "D": 5, "B": 4, "T": 7, "device": "cpu"}
    per = [make_inputs(torch.float64, seed=m, learn_h=learn_h, **shape) for m in range(M)]
    weight, _, q0, stack0, tail0, ids = (torch.stack([p[i].detach() for p in per]) for i in range(6))
    h = torch.tensor([4.0, 2.5, 6.0], dtype=torch.float64)
    inputs = [
        t.to(dtype, copy=True).requires_grad_(t.is_floating_point()) for t in (weight, h, q0, stack0, tail0)
    ]
    inputs[1].requires_grad_(learn_h)
    gen = torch.Generator().manual_seed(1)
    runs = {}
    for impl in ("reference", "cpu"):
        outs = nnpda_sequence(*inputs, ids, action, impl=impl)
        if impl == "reference":
            proj = [torch.randn(o.shape, generator=gen, dtype=dtype) for o in outs[:3]]
        loss = sum((o * p).sum() for o, p in zip(outs[:3], proj, strict=True))
        runs[impl] = (*outs, *torch.autograd.grad(loss, [t for t in inputs if t.requires_grad]))
    assert type(runs["cpu"][0].grad_fn).__name__ == "NNPDASequenceBackward"
    assert runs["cpu"][3].shape == (M, 4, 7) and not runs["cpu"][3].requires_grad
    for i, (a, b) in enumerate(zip(runs["cpu"], runs["reference"], strict=True)):
        tol = atol * max(1.0, float(b.detach().abs().max()))
        torch.testing.assert_close(a, b, atol=tol, rtol=0, msg=lambda m, i=i: f"result {i}: {m}")
    ref = nnpda_member_reference(*inputs, ids, action)
    for mu in range(M):
        single = nnpda_reference(*(t[mu] for t in inputs), ids[mu], action)
        assert all(torch.equal(a, b[mu]) for a, b in zip(single, ref, strict=True))


def test_members_bad_shapes_are_named():
    """With members (``weight [M, O, n, m1, L]``) an argument without the member dimension is a
    ValueError naming it."""
    M, B, T, n, m1, m2, D = 2, 3, 4, 3, 4, 2, 5
    w, h = torch.zeros(M, n + 2 + m2, n, m1, m2 + 1), torch.ones(M)
    q0, stack0, tail0 = torch.zeros(M, B, n), torch.zeros(M, B, D, m2), torch.zeros(M, B, m2)
    ids = torch.zeros(M, B, T, dtype=torch.long)
    with pytest.raises(ValueError, match=r"so stack0 must be 4-D with 2 first, got \(3, 5, 2\)"):
        nnpda_sequence(w, h, q0, stack0[0], tail0, ids)
    with pytest.raises(ValueError, match=r"so sensitivity must be 1-D with 2 first, got \(\)"):
        nnpda_sequence(w, h[0], q0, stack0, tail0, ids)
    with pytest.raises(ValueError, match=r"so ids must be 3-D with 2 first, got \(3, 4\)"):
        nnpda_sequence(w, h, q0, stack0, tail0, ids[0])


@needs_triton
@pytest.mark.parametrize(("action", "learn_h"), [("identity", True), ("sigmoid", False), ("clamp", True)])
def test_members_kernel_is_one_launch_per_direction(action, learn_h, monkeypatch):
    """The Triton kernels with members (issue 67): one launch per direction for all members (a grid
    of rows × members, each member its own ids, weights and sensitivity): every state, ``p+`` and
    the gradients equal the float64 member reference and each member's single launch
    (:func:`tests.ops.backends.assert_member_kernels`); an id outside the vocabulary is named (it
    would read the next member's weights)."""
    import memrnn.ops.nnpda.triton as kernels

    M, B = 2, 3
    shape = {"n": 3, "m1": 3, "m2": 2, "D": 3, "B": B, "T": 3, "device": DEVICE}
    per = [make_inputs(torch.float64, seed=m, **shape) for m in range(M)]
    ids = torch.stack([p[5] for p in per])

    def make(dtype):
        weight, q0, stack0, tail0 = (
            torch.stack([p[i].detach() for p in per]).to(dtype) for i in (0, 2, 3, 4)
        )
        h = torch.tensor([4.0, 2.5], device=DEVICE, dtype=dtype)
        return [weight.requires_grad_(), h.requires_grad_(learn_h), q0.requires_grad_(), stack0.requires_grad_(),
                tail0.requires_grad_(), ids]  # fmt: skip

    def run(args, impl):
        return nnpda_sequence(*args, action, impl=impl)

    assert_member_kernels(
        monkeypatch, kernels, ["_nnpda_fwd", "_nnpda_bwd"], run, make, M, B, 1e-4, per_row=True
    )
    weight, h, q0, stack0, tail0, _ = make(torch.float32)
    with pytest.raises(ValueError, match=r"token id 3 is outside the vocabulary \[0, 3\)"):
        nnpda_sequence(weight, h, q0, stack0, tail0, ids.clamp(max=2) + 1, action, impl="triton")
