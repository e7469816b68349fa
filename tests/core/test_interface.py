"""The MemoryLayer contract (docs/design.md "Tests" 1–3), run over every registered layer."""

import copy
import inspect

import pytest
import torch

from memrnn.core import MemoryLayer, create_layer, layer_class, list_layers, state_leaves, state_map
from tests.conftest import assert_close_tree

BASE_LAYERS = list_layers()
# layers with an indexed one-hot input path run the suite a second time on one-hot inputs
# ("<name>+one_hot"): the fast forward then takes the indexed path, the reference loop the dense one
LAYERS = BASE_LAYERS + [
    f"{n}+one_hot" for n in BASE_LAYERS if "one_hot_input" in inspect.signature(layer_class(n)).parameters
]
TOL = {torch.float32: 1e-5, torch.float64: 1e-10}


def make(name, dtype=torch.float64, seed=0):
    base, _, kind = name.partition("+")
    torch.manual_seed(seed)
    layer = create_layer(base).to(dtype)
    layer.test_one_hot = kind == "one_hot"
    return layer


def inputs(layer, gen, batch=3, steps=7, dtype=torch.float64):
    """Random inputs; one-hot rows for layers built with ``one_hot_input=True``."""
    if getattr(layer, "test_one_hot", False):
        ids = torch.randint(0, layer.input_size, (batch, steps), generator=gen)
        return torch.nn.functional.one_hot(ids, layer.input_size).to(dtype)
    return torch.randn(batch, steps, layer.input_size, generator=gen, dtype=dtype)


def differentiable_inputs(layer):
    """One-hot inputs are ids: no gradient flows to them, and gradcheck may not perturb them."""
    return not getattr(layer, "test_one_hot", False)


def random_state(layer, batch, gen, dtype=torch.float64):
    """A non-trivial initial state: zeros plus noise of the same structure (detached: a learnt
    initial content, the vector stack's bottom vector, is not what these tests differentiate)."""
    return state_map(
        lambda t: t.detach() + 0.3 * torch.randn(t.shape, generator=gen, dtype=t.dtype),
        layer.initial_state(batch, dtype=dtype),
    )


def test_registry_has_the_foundation_layers():
    for name in ("elman", "jordan", "lstm", "gru"):
        assert name in LAYERS
    assert len(LAYERS) >= 4


@pytest.mark.parametrize("name", LAYERS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_shapes_dtypes_and_batch_first_state(name, dtype, gen):
    layer = make(name, dtype)
    x = inputs(layer, gen, dtype=dtype)
    y, s = layer(x)
    assert y.shape == (3, 7, layer.output_size) and y.dtype == dtype
    assert torch.isfinite(y).all()
    for t in state_leaves(s):
        assert t.shape[0] == 3 and t.dtype == dtype and torch.isfinite(t).all()
    s0 = layer.initial_state(5, dtype=dtype)
    assert all(t.shape[0] == 5 for t in state_leaves(s0))
    # initial_state follows the parameters' dtype when none is given
    assert all(t.dtype == dtype for t in state_leaves(layer.initial_state(2)))


@pytest.mark.parametrize("name", LAYERS)
def test_zero_and_one_steps(name, gen):
    layer = make(name)
    x = inputs(layer, gen)
    s0 = random_state(layer, 3, gen)
    y0, s = layer(x[:, :0], s0)
    assert y0.shape == (3, 0, layer.output_size)
    assert_close_tree(s, s0, atol=0, what="T=0 keeps the state")
    y1, s1 = layer(x[:, :1], s0)
    ys, ss = layer.step(x[:, 0], s0)
    torch.testing.assert_close(y1[:, 0], ys, atol=1e-12, rtol=0)
    assert_close_tree(s1, ss, atol=1e-12, what="T=1")


@pytest.mark.parametrize("name", LAYERS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_step_loop_equals_forward(name, dtype, gen):
    layer = make(name, dtype)
    x = inputs(layer, gen, dtype=dtype)
    s0 = random_state(layer, 3, gen, dtype)
    y, s = layer(x, s0)
    st, ys = s0, []
    for x_t in x.unbind(1):
        y_t, st = layer.step(x_t, st)
        ys.append(y_t)
    torch.testing.assert_close(torch.stack(ys, 1), y, atol=TOL[dtype], rtol=TOL[dtype])
    assert_close_tree(st, s, atol=TOL[dtype], rtol=TOL[dtype], what="final state")


@pytest.mark.parametrize("name", LAYERS)
def test_chunked_equals_whole(name, gen):
    layer = make(name)
    x = inputs(layer, gen, steps=9)
    y, s = layer(x)
    ya, sa = layer(x[:, :4])
    yb, sb = layer(x[:, 4:], sa)
    torch.testing.assert_close(torch.cat([ya, yb], 1), y, atol=1e-10, rtol=0)
    assert_close_tree(sb, s, atol=1e-10, what="chunked state")


@pytest.mark.parametrize("name", LAYERS)
def test_padded_batch_equals_each_row_alone(name, gen):
    layer = make(name)
    lengths = [7, 4, 0, 1]
    x = inputs(layer, gen, batch=4)
    s0 = random_state(layer, 4, gen)
    mask = torch.arange(7)[None] < torch.tensor(lengths)[:, None]
    y, s = layer(x, s0, mask=mask)
    for b, n in enumerate(lengths):
        s0_b = state_map(lambda t, b=b: t[b : b + 1], s0)
        yb, sb = layer(x[b : b + 1, :n], s0_b)
        torch.testing.assert_close(y[b : b + 1, :n], yb, atol=1e-10, rtol=0)
        assert (y[b, n:] == 0).all(), f"row {b}: outputs past its end must be exactly zero"
        assert_close_tree(state_map(lambda t, b=b: t[b : b + 1], s), sb, atol=1e-10, what=f"row {b} state")


@pytest.mark.parametrize("name", LAYERS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_fast_path_equals_reference_loop_with_gradients(name, dtype, gen):
    """Whatever ``forward`` a layer has, it must equal the base class's loop over ``step``:
    outputs, final states and the gradients of inputs, initial state and parameters."""
    layer = make(name, dtype)
    lengths = torch.tensor([6, 3, 1])
    x = inputs(layer, gen, steps=6, dtype=dtype)
    mask = torch.arange(6)[None] < lengths[:, None]
    s0 = random_state(layer, 3, gen, dtype)
    w = torch.randn(3, 6, layer.output_size, generator=gen, dtype=dtype)

    def run(fn):
        xx = x.clone().requires_grad_(differentiable_inputs(layer))
        ss = state_map(lambda t: t.clone().requires_grad_(), s0)
        layer.zero_grad()
        y, s = fn(layer, xx, ss, mask=mask)
        loss = (y * w).sum() + sum((t**2).sum() for t in state_leaves(s))
        loss.backward()
        grads = [xx.grad, *[t.grad for t in state_leaves(ss)], *[p.grad for p in layer.parameters()]]
        return y, s, grads

    y1, s1, g1 = run(type(layer).__call__)
    y2, s2, g2 = run(MemoryLayer.forward)
    tol = TOL[dtype]
    torch.testing.assert_close(y1, y2, atol=tol, rtol=tol)
    assert_close_tree(s1, s2, atol=tol, rtol=tol, what="final state")
    for i, (a, b) in enumerate(zip(g1, g2, strict=True)):
        assert (a is None) == (b is None), f"gradient {i} present in one path only"
        if a is not None:
            torch.testing.assert_close(a, b, atol=tol, rtol=tol, msg=lambda m, i=i: f"gradient {i}: {m}")


@pytest.mark.parametrize("name", LAYERS)
def test_gradients_reach_every_parameter(name, gen):
    layer = make(name).train()
    x = inputs(layer, gen)
    frozen = not any(p.requires_grad for p in layer.parameters())  # reservoirs: buffers only
    if frozen:
        x.requires_grad_(True)  # then the gradient must reach the inputs
    y, s = layer(x)
    (y.pow(2).sum() + sum(t.pow(2).sum() for t in state_leaves(s))).backward()
    missing = [n for n, p in layer.named_parameters() if p.requires_grad and p.grad is None]
    assert not missing
    assert all(torch.isfinite(p.grad).all() for p in layer.parameters())
    if frozen:
        assert x.grad is not None and torch.isfinite(x.grad).all() and x.grad.abs().sum() > 0


@pytest.mark.parametrize("name", LAYERS)
def test_gradcheck(name, gen):
    layer = make(name)
    x = inputs(layer, gen, batch=2, steps=3).requires_grad_(differentiable_inputs(layer))
    s0 = state_map(lambda t: t.requires_grad_(), random_state(layer, 2, gen))

    def f(x, *leaves):
        state = type(s0)(*leaves)
        y, s = layer(x, state)
        return (y, *state_leaves(s))

    if differentiable_inputs(layer):
        assert torch.autograd.gradcheck(f, (x, *state_leaves(s0)), eps=1e-6, atol=1e-6)
    else:
        assert torch.autograd.gradcheck(lambda *leaves: f(x, *leaves), state_leaves(s0), eps=1e-6, atol=1e-6)


@pytest.mark.parametrize("name", LAYERS)
def test_state_dict_round_trip(name, gen):
    layer = make(name)
    x = inputs(layer, gen)
    other = make(name, seed=99)
    other.load_state_dict(copy.deepcopy(layer.state_dict()))
    torch.testing.assert_close(other(x)[0], layer(x)[0], atol=0, rtol=0)


@pytest.mark.parametrize("name", LAYERS)
def test_outputs_equal_forward_with_gradients(name, gen):
    """``outputs`` (no final state; LSTM/GRU skip packing) equals ``forward(...)[0]`` on a padded
    batch, and so do the gradients of the inputs, the initial state and every parameter."""
    layer = make(name)
    x = inputs(layer, gen)
    mask = torch.arange(7)[None] < torch.tensor([7, 4, 1])[:, None]
    s0 = random_state(layer, 3, gen)
    weight = torch.randn(3, 7, layer.output_size, generator=gen, dtype=torch.float64)
    results = []
    for fn in (lambda *a: layer(*a)[0], layer.outputs):
        xi = x.clone().requires_grad_(differentiable_inputs(layer))
        si = state_map(lambda t: t.clone().requires_grad_(), s0)
        layer.zero_grad()
        y = fn(xi, si, mask)
        (y * weight).sum().backward()
        grads = [xi.grad, *(t.grad for t in state_leaves(si)), *(p.grad for p in layer.parameters())]
        results.append((y, grads))
    (y_f, g_f), (y_o, g_o) = results
    torch.testing.assert_close(y_o, y_f, atol=1e-10, rtol=0)
    for a, b in zip(g_o, g_f, strict=True):
        if a is None or b is None:
            assert (a is None and b is None) or float((a if a is not None else b).abs().max()) == 0
        else:
            torch.testing.assert_close(a, b, atol=1e-10, rtol=0)


@pytest.mark.parametrize("name", LAYERS)
def test_trace_matches_forward(name, gen):
    layer = make(name)
    x = inputs(layer, gen)
    mask = torch.arange(7)[None] < torch.tensor([7, 5, 2])[:, None]
    tr = layer.trace(x, mask=mask)
    y, s = layer(x, mask=mask)
    torch.testing.assert_close(tr["output"], y, atol=1e-10, rtol=0)
    state_keys = [k for k in tr if k.startswith("state.")]
    assert state_keys, "trace must report the state after each step"
    for k, v in tr.items():
        assert v.shape[:2] == (3, 7), f"trace[{k!r}] is not [B, T, ...]"
    # the last traced state of each row is its final state
    last = torch.tensor([6, 4, 1])
    for key, leaf in zip(state_keys, state_leaves(s), strict=True):
        torch.testing.assert_close(tr[key][torch.arange(3), last], leaf, atol=1e-10, rtol=0)


@pytest.mark.parametrize("name", LAYERS)
def test_bad_inputs_raise_clear_errors(name, gen):
    layer = make(name)
    x = inputs(layer, gen)
    with pytest.raises(ValueError, match=f"input_size={layer.input_size}"):
        layer(torch.randn(3, 7, layer.input_size + 1, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"\[batch, time"):
        layer(x[0])
    with pytest.raises(ValueError, match="bool"):
        layer(x, mask=torch.ones(3, 7))
    holes = torch.ones(3, 7, dtype=torch.bool)
    holes[1, 2] = False
    with pytest.raises(ValueError, match="row 1"):
        layer(x, mask=holes)
    with pytest.raises(ValueError, match="batch size 2"):
        layer(x, layer.initial_state(2))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("name", LAYERS)
def test_cuda_matches_cpu(name, gen):
    layer = make(name, torch.float32)
    x = inputs(layer, gen, dtype=torch.float32)
    mask = torch.arange(7)[None] < torch.tensor([7, 3, 1])[:, None]
    y, s = layer(x, mask=mask)
    cu = copy.deepcopy(layer).cuda()
    yc, sc = cu(x.cuda(), mask=mask.cuda())
    assert all(t.is_cuda for t in state_leaves(sc))
    # the stack RNN's kernels were 1.1e-4 to 2.7e-4 from the CPU path on an H200 while Triton 3.6
    # made their head product a TF32 dot (benchmarks/results/stack-rnn-h200.md); an IEEE one since
    atol = 1e-5
    torch.testing.assert_close(yc.cpu(), y, atol=atol, rtol=1e-4)
    assert_close_tree(state_map(lambda t: t.cpu(), sc), s, atol=atol, rtol=1e-4)


def _on(layer, device, x, mask, s0, w):
    """``layer``'s outputs, final state and the gradients (inputs, initial state, parameters) of
    a fixed loss on ``device``, each run from fresh leaves (a gradient never reaching one: None)."""
    net = copy.deepcopy(layer).to(device)
    xx = x.to(device, copy=True).requires_grad_(differentiable_inputs(layer))
    ss = state_map(lambda t: t.to(device, copy=True).requires_grad_(t.is_floating_point()), s0)
    y, s = net(xx, ss, mask=mask.to(device))
    floats = [t for t in state_leaves(s) if t.is_floating_point()]
    ((y * w.to(device)).sum() + sum((t * t).sum() for t in floats)).backward()
    grads = [xx.grad, *(t.grad for t in state_leaves(ss)), *(p.grad for p in net.parameters())]
    return [t if t is None else t.detach().cpu() for t in (y, *state_leaves(s), *grads)]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("name", LAYERS)
def test_cuda_gradients_match_cpu_in_float64(name, gen):
    """On CUDA (every layer's default path there: its Triton kernels where it has them) the
    outputs, final state and every gradient equal CPU's in float64, padding and a non-fresh
    initial state included: a logic error in a backward shows here, apart from float32 rounding."""
    layer = make(name, torch.float64)
    x = inputs(layer, gen, dtype=torch.float64)
    mask = torch.arange(7)[None] < torch.tensor([7, 3, 1])[:, None]
    s0 = random_state(layer, 3, gen)
    w = torch.randn(3, 7, layer.output_size, generator=gen, dtype=torch.float64)
    for i, (a, b) in enumerate(
        zip(_on(layer, "cuda", x, mask, s0, w), _on(layer, "cpu", x, mask, s0, w), strict=True)
    ):
        assert (a is None) == (b is None), f"result {i} arrives on one device only"
        if a is not None:
            torch.testing.assert_close(a, b, atol=1e-9, rtol=1e-7, msg=lambda m, i=i: f"result {i}: {m}")
