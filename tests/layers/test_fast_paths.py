"""Fast paths equal the reference loops: outputs, final states and every gradient (parameters,
initial state, learned sensitivity), with right padding, in float64 (to rounding) and float32."""

from __future__ import annotations

import contextlib

import pytest
import torch
import torch.nn.functional as F

from benchmarks.run import SavedBytes
from memrnn import reference_paths
from memrnn.core.activations import ACTIVATIONS
from memrnn.layers import NNPDA, CounterLSTM, GRULayer, JordanRNN, ReLUCounter, SecondOrderRNN
from memrnn.layers.elman import JordanState
from memrnn.layers.gated import GRUState
from memrnn.layers.nnpda import NNPDAState
from memrnn.layers.second_order import SecondOrderState
from memrnn.ops import bptt
from memrnn.ops.buckets import TokenBuckets
from memrnn.ops.dispatch import implementation
from memrnn.ops.elman import elman_sequence

TOL = {torch.float64: 1e-10, torch.float32: 2e-4}


def _loss(y, state):
    w = torch.linspace(-1, 1, y.shape[-1], dtype=y.dtype)
    return (y * w).sum() + sum((v**2).sum() for v in state)


class Under(torch.nn.Module):
    """``layer`` (the same module, so the same weights) run inside ``context()``: by default
    :func:`memrnn.reference_paths`, the reference every fast path is compared with."""

    def __init__(self, layer, context=reference_paths):
        super().__init__()
        self.layer, self.context = layer, context

    def forward(self, *args):
        with self.context():
            return self.layer(*args)


def _compare(fast, ref, x, state, mask, dtype):
    """``fast`` and ``ref`` (same weights) agree on outputs, final states and the gradients of
    the input (when it requires grad), every initial-state leaf and every parameter."""
    out = []
    inputs = [x] if x.requires_grad else []
    for model in (fast, ref):
        y, s = model(x, state, mask)
        grads = torch.autograd.grad(_loss(y, s), [*inputs, *state, *model.parameters()])
        out.append((y, s, grads))
    (y1, s1, g1), (y2, s2, g2) = out
    tol = TOL[dtype]
    torch.testing.assert_close(y1, y2, atol=tol, rtol=tol)
    for a, b in zip(s1, s2, strict=True):
        torch.testing.assert_close(a, b, atol=tol, rtol=tol)
    for a, b in zip(g1, g2, strict=True):
        torch.testing.assert_close(a, b, atol=tol * 10, rtol=tol * 10)


def _mask(B, T, seed=0):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(0, T + 1, (B,), generator=g)
    lengths[0] = T
    return torch.arange(T)[None] < lengths[:, None]


def test_buckets_contract_and_weight_grad():
    g = torch.Generator().manual_seed(1)
    B, T, m, d_in, d_out = 9, 5, 4, 3, 2
    ids = torch.randint(0, m, (B, T), generator=g)
    ids[:, 2] = 1  # one symbol at every row: a full bucket
    w = torch.randn(m, d_in, d_out, generator=g, dtype=torch.float64)
    v = torch.randn(B, T, d_in, generator=g, dtype=torch.float64)
    gr = torch.randn(B, T, d_out, generator=g, dtype=torch.float64)
    bk = TokenBuckets(ids, m)
    assert bk.capacity == B
    for t in range(T):
        expect = torch.stack([v[b, t] @ w[ids[b, t]] for b in range(B)])
        torch.testing.assert_close(bk.contract(t, v[:, t], w), expect)
    dw = torch.zeros_like(w)
    for b in range(B):
        for t in range(T):
            dw[ids[b, t]] += torch.outer(v[b, t], gr[b, t])
    torch.testing.assert_close(bk.weight_grad(v, gr), dw)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("learn", [False, True])
def test_second_order_fused_equals_reference(dtype, learn):
    torch.manual_seed(0)
    B, T, m, n = 16, 9, 5, 7
    fast = SecondOrderRNN(m, n, sensitivity=2.0, learn_sensitivity=learn, dtype=dtype)
    ref = Under(fast)
    ids = torch.randint(0, m, (B, T))
    x = F.one_hot(ids, m).to(dtype)
    s0 = SecondOrderState(torch.rand(B, n, dtype=dtype, requires_grad=True))
    _compare(fast, ref, x, s0, _mask(B, T), dtype)
    _compare(fast, ref, x, s0, None, dtype)


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
    _compare(fast, ref, x, state, _mask(B, T), dtype)
    _compare(fast, ref, x, state, None, dtype)


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
            out, state = layer(x, mask=_mask(8, 6))
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


COUNTER_CASES = [
    (CounterLSTM, {"cell_activation": "identity"}),
    (CounterLSTM, {"cell_activation": "tanh"}),
    *((ReLUCounter, {"activation": a}) for a in ("tanh", "sigmoid", "relu", "heaviside", "saturated_linear")),
]


@pytest.mark.parametrize(
    ("dtype", "block"), [(torch.float64, None), (torch.float32, None), (torch.float64, 3)]
)
@pytest.mark.parametrize(("cls", "kwargs"), COUNTER_CASES)
def test_counter_sequences_equal_reference(cls, kwargs, dtype, block, monkeypatch):
    """LSTMSequence / CounterRNNSequence against the reference step loop: outputs, final states
    and gradients for the input, every initial state leaf and every parameter, with and without
    right padding; ``block = 3``: the backward's local derivatives in 3 blocks of 3, 3 and 1
    steps."""
    if block is not None:
        monkeypatch.setattr(bptt, "BLOCK", block)
    torch.manual_seed(0)
    fast = cls(3, 5, counters=2, dtype=dtype, **kwargs)
    ref = Under(fast)
    x = torch.randn(6, 7, 3, dtype=dtype, requires_grad=True)
    st = fast.initial_state(6, dtype=dtype)
    st = type(st)(*(torch.randn_like(v).abs().requires_grad_() for v in st))
    for mask in (None, _mask(6, 7)):
        _compare(fast, ref, x, st, mask, dtype)


@pytest.mark.parametrize(("cls", "kwargs"), COUNTER_CASES[::2])
def test_counter_sequences_partial_graphs(cls, kwargs):
    """Only the outputs used, only the final state used, an input without gradient, T = 0, and
    the reference loop (inside ``reference_paths()``) give what the reference gives."""
    torch.manual_seed(1)
    dtype = torch.float64
    fast = cls(4, 3, counters=1, dtype=dtype, **kwargs)
    ref = Under(fast)
    x = torch.randn(5, 6, 4, dtype=dtype)
    for pick in (lambda y, s: y.sum(), lambda y, s: sum(v.sum() for v in s)):
        grads = [torch.autograd.grad(pick(*m(x)), list(m.parameters())) for m in (fast, ref)]
        for a, b in zip(*grads, strict=True):
            torch.testing.assert_close(a, b)
    y, s = fast(x[:, :0])
    assert y.shape == (5, 0, fast.output_size)
    for a, b in zip(s, fast.initial_state(5, dtype=dtype), strict=True):
        torch.testing.assert_close(a, b)


JORDAN_CASES = [("tanh", "softmax"), ("tanh", "identity"), ("relu", "tanh"), ("heaviside", "sigmoid"),
                 ("sigmoid", "relu"), ("saturated_linear", "saturated_linear")]  # fmt: skip


@pytest.mark.parametrize(
    ("dtype", "block"), [(torch.float64, None), (torch.float32, None), (torch.float64, 3)]
)
@pytest.mark.parametrize(("activation", "output_activation"), JORDAN_CASES)
def test_jordan_sequence_equals_reference(activation, output_activation, dtype, block, monkeypatch):
    """JordanSequence against the reference step loop: outputs, final state and gradients for
    the input, ``r_0`` and every parameter, with and without right padding."""
    if block is not None:
        monkeypatch.setattr(bptt, "BLOCK", block)
    torch.manual_seed(0)
    kw = {"activation": activation, "output_activation": output_activation, "dtype": dtype}
    fast = JordanRNN(3, 5, 4, **kw)
    ref = Under(fast)
    x = torch.randn(6, 7, 3, dtype=dtype, requires_grad=True)
    r0 = torch.rand(6, 4, dtype=dtype, requires_grad=True)
    for mask in (None, _mask(6, 7)):
        _compare(fast, ref, x, JordanState(r0), mask, dtype)
    y, s = fast(x[:, :0], JordanState(r0))
    assert y.shape == (6, 0, 5) and torch.equal(s.r, r0)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_fused_paths_on_cuda_match_cpu():
    torch.manual_seed(0)
    x = F.one_hot(torch.randint(0, 3, (8, 6)), 3).float()
    layers = (
        NNPDA(3, 4, 2, depth=8),
        SecondOrderRNN(3, 4),
        CounterLSTM(3, 4, 2),
        ReLUCounter(3, 4, 2),
        JordanRNN(3, 4, 5),
    )
    for layer in layers:
        y_cpu, _ = layer(x)
        (g_cpu,) = torch.autograd.grad(y_cpu.square().sum(), next(layer.parameters()))
        y_gpu, _ = layer.cuda()(x.cuda())
        (g_gpu,) = torch.autograd.grad(y_gpu.square().sum(), next(layer.parameters()))
        torch.testing.assert_close(y_gpu.cpu(), y_cpu, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(g_gpu.cpu(), g_cpu, atol=1e-4, rtol=1e-4)


def _fast_layers():
    x = F.one_hot(torch.randint(0, 3, (4, 5)), 3).double()
    f64 = {"dtype": torch.float64}
    layers = (
        SecondOrderRNN(3, 4, **f64),
        NNPDA(3, 4, 2, depth=6, **f64),
        CounterLSTM(3, 4, 2, **f64),
        ReLUCounter(3, 4, 2, **f64),
        JordanRNN(3, 4, 5, **f64),
        GRULayer(3, 4, num_layers=2, **f64),
    )
    return [(layer, x) for layer in layers]


@pytest.mark.parametrize("case", range(6))
def test_double_backward_raises_on_fast_paths_and_works_under_reference_paths(case):
    """The hand-written backward passes are first order (``once_differentiable``): a gradient
    penalty through them raises torch's clear error, and :func:`memrnn.reference_paths` (the
    reference loop under autograd) is the documented way to get second derivatives (for the GRU,
    its hand-written BPTT ``implementation("bptt")`` against the reference)."""
    torch.manual_seed(0)
    layer, x = _fast_layers()[case]
    fast = Under(layer, lambda: implementation("bptt")) if isinstance(layer, GRULayer) else layer
    for model, ok in ((fast, False), (Under(layer), True)):
        params = [p for p in model.parameters() if p.requires_grad]
        grads = torch.autograd.grad(model(x)[0].square().sum(), params, create_graph=True)
        penalty = sum(g.square().sum() for g in grads)
        if ok:
            penalty.backward()
            assert all(p.grad is not None for p in params)
        else:
            with pytest.raises(RuntimeError, match="differentiate twice"):
                penalty.backward()


@pytest.mark.parametrize(("num_layers", "bias", "block"), [(1, True, None), (2, True, 3), (2, False, 3)])
def test_gru_sequence_equals_reference(num_layers, bias, block, monkeypatch):
    """GRULayer's hand-written BPTT (GRUSequence per layer, ``implementation("bptt")``) against the
    gate-level reference: outputs, final state and gradients (input, initial state, parameters),
    padded and not, with the backward's blocks split (3 steps) and without bias."""
    if block is not None:
        monkeypatch.setattr(bptt, "BLOCK", block)
    torch.manual_seed(0)
    dtype = torch.float64
    layer = GRULayer(3, 5, num_layers=num_layers, bias=bias, dtype=dtype)
    fast, ref = Under(layer, lambda: implementation("bptt")), Under(layer)
    x = torch.randn(6, 7, 3, dtype=dtype, requires_grad=True)
    h0 = torch.randn(6, num_layers, 5, dtype=dtype, requires_grad=True)
    for mask in (None, _mask(6, 7)):
        _compare(fast, ref, x, GRUState(h0), mask, dtype)


@pytest.mark.parametrize("leak", [1.0, 0.3])
@pytest.mark.parametrize("name", ["tanh", "sigmoid", "identity", "relu", "saturated_linear"])
def test_elman_sequence_equals_reference_and_keeps_only_what_its_backward_reads(name, leak):
    """The Elman CPU sequence against its reference loop (outputs and the gradients of the
    projected inputs, the recurrent weights and h0, float64), and what it keeps for the backward:
    ``hs`` alone where the activation's derivative is a function of its output (tanh, sigmoid and
    relu without a leak, identity), ``hs`` and the pre-activations otherwise."""
    g = torch.Generator().manual_seed(3)
    B, T, H = 3, 70, 4  # 70 steps: two blocks of the backward
    pre = torch.randn(B, T, H, generator=g, dtype=torch.float64, requires_grad=True)
    w = (0.6 * torch.randn(H, H, generator=g, dtype=torch.float64)).requires_grad_()
    h0 = torch.randn(B, H, generator=g, dtype=torch.float64, requires_grad=True)
    fn = ACTIVATIONS[name]
    out = {}
    for impl in ("cpu", "reference"):
        with SavedBytes() as saved:
            hs = elman_sequence(pre, w, h0, name, fn, leak, impl=impl)
        wts = torch.linspace(-1, 1, H, dtype=torch.float64)
        out[impl] = (hs, torch.autograd.grad((hs * wts).sum(), [pre, w, h0]), saved.bytes)
    torch.testing.assert_close(out["cpu"][0], out["reference"][0], atol=1e-12, rtol=0)
    for a, b in zip(out["cpu"][1], out["reference"][1], strict=True):
        torch.testing.assert_close(a, b, atol=1e-11, rtol=1e-12)  # identity: values up to ~1e4
    seq = B * T * H * 8  # bytes of one [T, B, H] float64 buffer
    from_output = name == "identity" or (leak == 1.0 and name in ("tanh", "sigmoid", "relu"))
    kept = out["cpu"][2] - H * H * 8  # less the recurrent weights
    assert kept == (seq + B * H * 8 if from_output else 2 * seq + B * H * 8), (kept, seq)
    if name == "identity":  # a frozen linear reservoir (no ∂U) keeps nothing but U
        with SavedBytes() as saved:
            hs = elman_sequence(pre, w.detach(), h0, name, fn, leak, impl="cpu")
        assert saved.bytes == H * H * 8
        (gp, gh) = torch.autograd.grad((hs * wts).sum(), [pre, h0])
        torch.testing.assert_close(gp, out["reference"][1][0], atol=1e-11, rtol=1e-12)
        torch.testing.assert_close(gh, out["reference"][1][2], atol=1e-11, rtol=1e-12)


@pytest.mark.parametrize(("activation", "output_activation", "buffers"), [
    ("tanh", "sigmoid", 2),  # hs and rs: both derivatives are read from them
    ("relu", "relu", 2),
    ("tanh", "saturated_linear", 3),  # and σ_o's pre-activations h Eᵀ
    ("heaviside", "softmax", 3),  # σ's pre-activations besides hs and rs
    ("saturated_linear", "saturated_linear", 4),
])  # fmt: skip
def test_jordan_sequence_keeps_only_what_its_backward_reads(activation, output_activation, buffers):
    """What JordanSequence keeps for the backward: ``hs [T, B, H]`` and ``rs [T+1, B, F]``, and the
    pre-activations of σ and σ_o only where their derivatives are not functions of the outputs
    (``bptt.from_output``: tanh, sigmoid, relu, identity).  H = F here, so each buffer is T·B·H."""
    T, B, H = 30, 4, 5
    net = JordanRNN(3, H, H, activation=activation, output_activation=output_activation, dtype=torch.float64)
    x = torch.randn(B, T, 3, dtype=torch.float64, requires_grad=True)
    with SavedBytes() as saved:
        net(x)
    sequences = [n for n in saved.storages.values() if n >= T * B * H * 8]
    assert len(sequences) == buffers, sorted(saved.storages.values())


def test_counter_sequence_keeps_the_moves_not_the_pre_activations_where_it_can():
    """With tanh, sigmoid or relu the ReLU counter's backward reads σ' from its states and relu'
    from its moves (``bptt.from_output``), so it keeps the moves ``[T, B, 2k]`` instead of the
    pre-activations ``[T, B, H + 2k]``: H units per step and row fewer than with heaviside."""
    T, B, H, k = 30, 4, 5, 3
    kept = {}
    for activation in ("tanh", "sigmoid", "relu", "heaviside", "saturated_linear"):
        net = ReLUCounter(3, H, counters=k, activation=activation, dtype=torch.float64)
        x = torch.randn(B, T, 3, dtype=torch.float64, requires_grad=True)
        with SavedBytes() as saved:
            net(x)
        kept[activation] = saved.bytes
    assert kept["tanh"] == kept["sigmoid"] == kept["relu"]
    assert kept["heaviside"] == kept["saturated_linear"] == kept["tanh"] + T * B * H * 8, kept
