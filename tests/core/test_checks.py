"""States checked like inputs, one dtype policy, autocast: over every registered layer
(memrnn.core.checks)."""

import pytest
import torch
import torch.nn.functional as F

from memrnn.core import create_layer, list_layers, state_leaves, state_map
from memrnn.layers import NNPDA, ElmanRNN, LSTMLayer, Reservoir
from tests.conftest import assert_close_tree

LAYERS = list_layers()
ONE_HOT = ("second_order", "nnpda")  # their fused paths read one-hot inputs


def make(name, dtype=torch.float32):
    torch.manual_seed(0)
    return create_layer(name).to(dtype)


def inputs(layer, gen, name, batch=3, steps=6, dtype=torch.float32):
    if name.startswith(ONE_HOT):
        ids = torch.randint(0, layer.input_size, (batch, steps), generator=gen)
        return F.one_hot(ids, layer.input_size).to(dtype)
    return torch.randn(batch, steps, layer.input_size, generator=gen, dtype=dtype)


def other_state(name, batch):
    """The state of a layer of another type (an LSTM's, or an Elman's for the LSTMs)."""
    other = "elman" if isinstance(create_layer(name), LSTMLayer) else "lstm"
    return create_layer(other).initial_state(batch)


@pytest.mark.parametrize("name", LAYERS)
def test_state_of_another_layer_type_is_refused_naming_the_expected_layout(name, gen):
    layer = make(name)
    x = inputs(layer, gen, name)
    expected = type(layer.initial_state(1)).__name__
    with pytest.raises(ValueError, match=rf"expects a state {expected}\(.*another layer"):
        layer(x, other_state(name, 3))
    with pytest.raises(ValueError, match=rf"expects a state {expected}\("):
        layer.step(x[:, 0], other_state(name, 3))


@pytest.mark.parametrize("name", LAYERS)
def test_state_fields_of_the_wrong_size_dtype_or_batch_are_refused(name, gen):
    layer = make(name)
    x = inputs(layer, gen, name)
    s = layer.initial_state(3)
    field = s._fields[-1]
    bigger = s._replace(**{field: torch.zeros(3, *[d + 1 for d in getattr(s, field).shape[1:]])})
    with pytest.raises(ValueError, match=rf"field '{field}' has shape \[3, "):
        layer(x, bigger)
    with pytest.raises(
        ValueError,
        match=rf"field '{s._fields[0]}' has dtype torch.float64 but the layer computes in torch.float32",
    ):
        layer(x, state_map(lambda t: t.double(), s))
    with pytest.raises(ValueError, match="state has batch size 2 but the inputs have batch size 3"):
        layer.step(x[:, 0], layer.initial_state(2))
    with pytest.raises(ValueError, match="bare tensor"):
        layer(x, state_leaves(s)[0])


@pytest.mark.parametrize("name", LAYERS)
def test_a_mask_given_as_the_state_is_named_as_a_mask(name, gen):
    """``layer(x, mask)`` took the mask for the state and advised wrapping it as ``(h,)``."""
    layer = make(name)
    x = inputs(layer, gen, name, steps=7)  # no tiny state is [B, 7]
    mask = torch.ones(3, 7, dtype=torch.bool)
    said = r"second argument is the state; got a bare tensor of shape \[3, 7\] \(torch.bool\), which looks like a mask"
    with pytest.raises(
        ValueError, match=said + r" \[B, T\]: pass it as mask=\.\.\. \(\w+\.forward\(x, state=None"
    ):
        layer(x, mask)
    with pytest.raises(ValueError, match=r"looks like a mask \[B, T\]: pass it as mask="):
        layer(x, mask.float())  # a float mask of the inputs' [B, T]
    with pytest.raises(ValueError, match=r"looks like a mask \[B\]: step\(x_t, state\) takes no mask"):
        layer.step(x[:, 0], mask[:, 0])


def test_a_bare_tensor_for_a_state_of_several_fields_asks_for_all_of_them():
    x = torch.randn(2, 4, 3)
    with pytest.raises(
        ValueError, match=r"the state has 2 fields \(h, c\), pass them all as LSTMState\(h, c\)"
    ):
        LSTMLayer(3, 5)(x, torch.zeros(2, 1, 5))
    with pytest.raises(
        ValueError, match=r"got a bare tensor of shape \[2, 5\] \(torch.float32\): wrap it as \(h,\)"
    ):
        ElmanRNN(3, 5)(x, torch.zeros(2, 5))


@pytest.mark.parametrize("name", LAYERS)
def test_a_plain_tuple_in_the_documented_order_is_accepted(name, gen):
    layer = make(name)
    x = inputs(layer, gen, name)
    s0 = state_map(lambda t: t + 0.1, layer.initial_state(3))
    y, s = layer(x, s0)
    y2, s2 = layer(x, tuple(s0))
    torch.testing.assert_close(y2, y, atol=0, rtol=0)
    assert type(s2) is type(s)
    assert_close_tree(s2, s, atol=0, what="plain tuple")
    y3, _ = layer.step(x[:, 0], list(s0))
    torch.testing.assert_close(y3, layer.step(x[:, 0], s0)[0], atol=0, rtol=0)
    with pytest.raises(ValueError, match="fields"):
        layer(x, (*s0, s0[0]))


@pytest.mark.parametrize("name", LAYERS)
def test_step_checks_its_inputs_and_starts_from_the_initial_state(name, gen):
    layer = make(name)
    x = inputs(layer, gen, name)
    with pytest.raises(ValueError, match=rf"input_size={layer.input_size}"):
        layer.step(torch.randn(3, layer.input_size + 1), layer.initial_state(3))
    with pytest.raises(ValueError, match=rf"\[batch, {layer.input_size}\]"):
        layer.step(x, layer.initial_state(3))
    y, _ = layer.step(x[:, 0], None)
    torch.testing.assert_close(y, layer.step(x[:, 0], layer.initial_state(3))[0], atol=0, rtol=0)


@pytest.mark.parametrize("name", LAYERS)
def test_integer_inputs_and_other_float_dtypes_get_clear_errors(name, gen):
    layer = make(name)
    x = inputs(layer, gen, name)
    with pytest.raises(ValueError, match="int64 inputs: token ids need an embedding"):
        layer(x.long())
    with pytest.raises(ValueError, match="int64 inputs"):
        layer.step(x[:, 0].long(), None)
    if layer.dtype_policy == "match":
        with pytest.raises(ValueError, match=r"torch\.float32 parameters but the inputs are torch\.float64"):
            layer(x.double())
        with pytest.raises(ValueError, match=r"torch\.float32 parameters but the inputs are torch\.float64"):
            layer.step(x[:, 0].double(), None)
    else:  # frozen weights: computes in the input's dtype
        y, s = layer(x.double())
        assert y.dtype == torch.float64 and all(t.dtype == torch.float64 for t in state_leaves(s))


def test_the_reported_silent_cases_now_raise():
    x = torch.randn(2, 4, 3)
    with pytest.raises(ValueError, match=r"field 'stack' has shape \[2, 8, 2\], expected \[2, 4, 2\]"):
        NNPDA(3, 3, 2, depth=4)(x, NNPDA(3, 3, 2, depth=8).initial_state(2))
    with pytest.raises(ValueError, match=r"field 'h' has shape \[2, 1, 5\], expected \[2, 5\]"):
        ElmanRNN(3, 5)(x, (torch.zeros(2, 1, 5),))
    lstm = LSTMLayer(3, 5)
    with pytest.raises(ValueError, match=r"nn.LSTM/nn.GRU states: memrnn states are batch first"):
        lstm(x, (torch.zeros(1, 2, 5), torch.zeros(1, 2, 5)))
    # the documented plain (h, c) tuple, batch first
    _, s = lstm(x, (torch.zeros(2, 1, 5), torch.zeros(2, 1, 5)))
    assert type(s).__name__ == "LSTMState"


def test_reservoirs_compute_in_the_input_dtype():
    res = Reservoir(3, 5, kind="crj")
    x = torch.randn(2, 4, 3, dtype=torch.float64)
    y64, _ = res(x)
    y32, _ = res(x.float())
    assert y64.dtype == torch.float64 and y32.dtype == torch.float32
    torch.testing.assert_close(y64.float(), y32, atol=1e-6, rtol=0)


@pytest.mark.parametrize("name", LAYERS)
@pytest.mark.parametrize("amp", [torch.bfloat16, torch.float16])
def test_forward_and_backward_under_cpu_autocast(name, amp, gen):
    """Under autocast the recurrence and its state stay in float32 (memrnn.core.checks); the head
    runs in the autocast dtype; backward works inside and outside the autocast region."""
    layer = make(name)
    head = torch.nn.Linear(layer.output_size, 2)
    x = inputs(layer, gen, name)
    mask = torch.arange(6)[None] < torch.tensor([6, 4, 1])[:, None]
    ref_y, ref_s = layer(x, mask=mask)
    for inside in (True, False):
        layer.zero_grad()
        with torch.autocast("cpu", dtype=amp):
            y, s = layer(x.to(amp), mask=mask)
            loss = head(y).float().square().sum()
            if inside:
                loss.backward()
        if not inside:
            loss.backward()
        assert y.dtype == torch.float32 and all(t.dtype == torch.float32 for t in state_leaves(s))
        assert torch.isfinite(y).all() and all(torch.isfinite(t).all() for t in state_leaves(s))
        # the inputs were rounded to the autocast dtype; the recurrence itself ran in float32
        torch.testing.assert_close(y, layer(x.to(amp).float(), mask=mask)[0], atol=0, rtol=0)
        assert (y - ref_y).abs().max() < 0.1
        grads = [p.grad for p in layer.parameters() if p.requires_grad]
        assert all(g is not None and torch.isfinite(g).all() for g in grads)
    with torch.autocast("cpu", dtype=amp):
        y1, s1 = layer.step(x[:, 0].to(amp), ref_s)
        tr = layer.trace(x.to(amp), mask=mask)
    assert y1.dtype == torch.float32 and all(t.dtype == torch.float32 for t in state_leaves(s1))
    torch.testing.assert_close(tr["output"], y, atol=1e-6, rtol=0)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("name", LAYERS)
@pytest.mark.parametrize("amp", [torch.bfloat16, torch.float16])
def test_forward_and_backward_under_cuda_autocast(name, amp, gen):
    layer = make(name).cuda()
    head = torch.nn.Linear(layer.output_size, 2).cuda()  # a trainable head: reservoirs are frozen
    x = inputs(layer, gen, name).cuda()
    with torch.autocast("cuda", dtype=amp):
        y, s = layer(x)
        head(y).float().square().sum().backward()
    assert torch.isfinite(y).all()
    assert all(t.dtype == torch.float32 and torch.isfinite(t).all() for t in state_leaves(s))
    grads = [p.grad for p in [*layer.parameters(), *head.parameters()] if p.requires_grad]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)


def _float_arguments(name):
    import inspect

    from memrnn.core import layer_class

    sig = inspect.signature(layer_class(name).__init__)
    return [p for p, v in sig.parameters.items() if "float" in str(v.annotation)]


@pytest.mark.parametrize("name", LAYERS)
@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_hyper_parameters_are_refused_by_name(name, bad):
    args = _float_arguments(name)
    for arg in args:
        with pytest.raises(ValueError, match=rf"^{arg}\b.*(finite|positive|must)"):
            create_layer(name, **{arg: bad})


#: the layers whose implementation flags were removed (issue 66; StackRNN's ``fused`` goes with its
#: own move), by registry name
REMOVED_FLAG_LAYERS = ("elman", "jordan", "lstm", "gru", "relu_counter", "counter_lstm", "nnpda", "second_order",
                       "hewitt_lstm", "hewitt_srnn")  # fmt: skip


@pytest.mark.parametrize("name", REMOVED_FLAG_LAYERS)
@pytest.mark.parametrize(
    ("flag", "replacement"), [("fused", "reference_paths"), ("bptt", "implementation\\('bptt'\\)")]
)
def test_removed_implementation_flags_are_refused_naming_the_replacement(name, flag, replacement):
    """``fused=``/``bptt=`` chose an implementation per layer; the one switch replaced them
    (:func:`memrnn.reference_paths`, ``implementation(...)``).  Given to the class or to
    ``create_layer``, either raises a ``TypeError`` naming the flag, its replacement and the
    checkpoint upgrade, not Python's bare "unexpected keyword"."""
    from memrnn.core.registry import _REGISTRY

    cls, tiny = _REGISTRY[name]
    for build in (lambda: cls(**tiny, **{flag: False}), lambda: create_layer(name, **{flag: True})):
        with pytest.raises(
            TypeError, match=f"{cls.__name__}.*{flag}= was removed.*{replacement}.*memrnn.lit.upgrade"
        ):
            build()
    cls(**tiny)  # and without it the layer builds
