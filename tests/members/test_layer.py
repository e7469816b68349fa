"""Members of one layer (:class:`memrnn.members.MemberLayer`): member ``m`` computes exactly what
the layer built with member ``m``'s weights computes alone, for every registered layer, on the
member path and on the loop over members."""

from __future__ import annotations

import contextlib
import warnings

import pytest
import torch
from torch import nn

from memrnn.constructions import HewittLSTM, HewittSimpleRNN
from memrnn.core import create_layer, list_layers, state_leaves, state_map
from memrnn.core.switch import reference_paths
from memrnn.layers import (
    NNPDA,
    CounterLSTM,
    ElmanRNN,
    GRULayer,
    JordanRNN,
    LSTMLayer,
    ReLUCounter,
    Reservoir,
    SecondOrderRNN,
    StackRNN,
)
from memrnn.layers.nnpda import StackOverflowError
from memrnn.members import MemberEmbedding, MemberLayer, MemberLinear, member_view, stack_modules
from tests.ops.backends import DEVICE, needs_triton

M, B, T = 2, 3, 5
LENGTHS = torch.tensor([5, 3, 1])


def _build(name: str, dtype: torch.dtype) -> MemberLayer:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the registry's tiny values
        return MemberLayer.build(lambda: create_layer(name).to(dtype), seeds=range(M)).to(dtype)


def _perturbed(state, gen):
    return state_map(
        lambda t: (
            (t.detach() + 0.3 * torch.randn(t.shape, generator=gen, dtype=t.dtype)).requires_grad_()
            if t.is_floating_point()
            else t
        ),
        state,
    )


def _run(layer, x, state, mask, weights_gen):
    """outputs, the final state's float fields, and the gradients of a random projection of both
    w.r.t. x, the state's float fields and the parameters."""
    y, final = layer(x, state, mask=mask)
    leaves = [t for t in state_leaves(final) if t.is_floating_point()]
    loss = (y * torch.randn(y.shape, generator=weights_gen, dtype=y.dtype)).sum()
    for t in leaves:
        loss = loss + (t * torch.randn(t.shape, generator=weights_gen, dtype=t.dtype)).sum()
    inputs = [x, *(t for t in state_leaves(state) if t.requires_grad)]
    params = [p for p in layer.parameters() if p.requires_grad]
    grads = torch.autograd.grad(loss, inputs + params, allow_unused=True)
    return y, leaves, grads


@pytest.mark.parametrize("name", list_layers())
def test_each_member_is_its_single_layer(name):
    """Every registered layer, float64, with right padding and a given state: the members' outputs,
    final states and the gradients of inputs, states and parameters equal each member's layer run
    alone (:meth:`MemberLayer.member`) to 1e-12."""
    dtype = torch.float64
    members = _build(name, dtype)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(M, B, T, members.input_size, generator=gen, dtype=dtype, requires_grad=True)
    mask = torch.arange(T)[None, :] < LENGTHS[:, None]
    state = _perturbed(members.initial_state(B, dtype=dtype), gen)
    y, finals, grads = _run(members, x, state, mask, torch.Generator().manual_seed(1))
    n_in = 1 + sum(t.requires_grad for t in state_leaves(state))
    param_grads = grads[n_in:]
    w_gen = torch.Generator().manual_seed(1)
    # the same random projection, member by member: draw the members' weights as the stacked run did
    proj_y = torch.randn(y.shape, generator=w_gen, dtype=dtype)
    proj_f = [torch.randn(t.shape, generator=w_gen, dtype=dtype) for t in finals]
    for m in range(M):
        single = members.member(m)
        x_m = x.detach()[m].clone().requires_grad_()
        state_m = state_map(lambda t, m=m: t.detach()[m].clone().requires_grad_(t.requires_grad), state)
        y_m, final_m = single(x_m, state_m, mask=mask)
        leaves_m = [t for t in state_leaves(final_m) if t.is_floating_point()]
        torch.testing.assert_close(y_m, y[m], atol=1e-12, rtol=0)
        for a, b in zip(leaves_m, finals, strict=True):
            torch.testing.assert_close(a, b[m], atol=1e-12, rtol=0)
        loss = (y_m * proj_y[m]).sum() + sum((t * p[m]).sum() for t, p in zip(leaves_m, proj_f, strict=True))
        ins = [x_m, *(t for t in state_leaves(state_m) if t.requires_grad)]
        params = [p for p in single.parameters() if p.requires_grad]
        got = torch.autograd.grad(loss, ins + params, allow_unused=True)
        for i, (a, b) in enumerate(zip(got[:n_in], grads[:n_in], strict=True)):
            assert (a is None) == (b is None), i
            if a is not None:
                torch.testing.assert_close(a, b[m], atol=1e-12, rtol=0)
        for a, b in zip(got[n_in:], param_grads, strict=True):
            assert (a is None) == (b is None)
            if a is not None:
                torch.testing.assert_close(a, b[m], atol=1e-12, rtol=0)


#: Delétang et al.'s (2023) Stack-RNN cell: a ReLU Elman controller, the pushed vector unsquashed
DELETANG = {
    "controller": "elman",
    "controller_args": {"activation": "relu"},
    "memory_args": {"push_activation": "identity"},
}
LEARNED_H0 = {"controller_args": {"learned_initial_state": True}}
WRITE_MLP = {"memory_args": {"write_mlp": [3]}}  # the Tape-RNN's write MLP
NS = {"states": 2, "symbols": 2}  # a small nondeterministic stack

PATH_CASES = [
    (LSTMLayer, {}, "lstm_sequence"),
    (LSTMLayer, {"num_layers": 2}, "lstm_sequence"),
    (LSTMLayer, {"extra_bias": False, "learned_initial_state": True}, "lstm_sequence"),
    (ElmanRNN, {}, "elman_sequence"),
    (ElmanRNN, {"activation": "relu", "bias": False}, "elman_sequence"),
    (ElmanRNN, {"activation": "sigmoid", "learned_initial_state": True}, "elman_sequence"),
    (GRULayer, {}, "gru_sequence"),
    (GRULayer, {"num_layers": 2}, "gru_sequence"),
    (GRULayer, {"num_layers": 2, "bias": False, "learned_initial_state": True}, "gru_sequence"),
    (SecondOrderRNN, {"sensitivity": 2.0}, "second_order_sequence"),
    (SecondOrderRNN, {"learn_sensitivity": True, "bias": False}, "second_order_sequence"),
    (NNPDA, {"stack_symbols": 2, "depth": 4}, "nnpda_sequence"),
    (
        NNPDA,
        {"stack_symbols": 2, "depth": 3, "action": "sigmoid", "learn_sensitivity": True, "output": "state"},
        "nnpda_sequence",
    ),
    (CounterLSTM, {"counters": 2}, "lstm_sequence"),
    (CounterLSTM, {"counters": 3, "cell_activation": "tanh"}, "lstm_sequence"),
    (ReLUCounter, {"counters": 2}, "counter_sequence"),
    (ReLUCounter, {"counters": 1, "activation": "heaviside"}, "counter_sequence"),
    (JordanRNN, {"feedback_size": 3}, "jordan_sequence"),
    (JordanRNN, {"feedback_size": 2, "output_activation": "sigmoid", "bias": False}, "jordan_sequence"),
    (
        JordanRNN,
        {"feedback_size": 3, "activation": "heaviside", "output_activation": "identity"},
        "jordan_sequence",
    ),
    (Reservoir, {}, "elman_sequence"),
    (Reservoir, {"kind": "crj", "leak": 0.5}, "elman_sequence"),
    (Reservoir, {"kind": "ldn", "order": 2, "leak": 0.7}, "elman_sequence"),
    (StackRNN, {"memory": "superposition", "width": 2, "depth": 4}, "stack_rnn_sequence"),
    (StackRNN, {**DELETANG, "width": 2, "depth": 4}, "stack_rnn_sequence"),
    (
        StackRNN,
        {"memory": "stratification", "width": 2, "depth": 4, "output": "hidden+reading"},
        "stack_rnn_sequence",
    ),
    (StackRNN, {"memory": "queue", "controller": "elman", "width": 2, "depth": 4}, "stack_rnn_sequence"),
    (StackRNN, {"memory": "deque", "width": 2, "depth": 4, **LEARNED_H0}, "stack_rnn_sequence"),
    (
        StackRNN,
        {"memory": "tape", "controller": "elman", "width": 2, "depth": 4, **WRITE_MLP},
        "stack_rnn_sequence",
    ),
    (
        StackRNN,
        {"memory": "tape_jump", "width": 2, "depth": 4, "memory_args": {"jump": 3}},
        "stack_rnn_sequence",
    ),
    (StackRNN, {"memory": "nondeterministic", "depth": 3, "memory_args": NS}, "nondeterministic_sequence"),
    (
        StackRNN,
        {
            "memory": "nondeterministic",
            "controller": "elman",
            "depth": 6,
            "output": "hidden+reading",
            "memory_args": {**NS, "normalize_transitions": True, "states_in_reading": False},
        },
        "nondeterministic_sequence",
    ),
    (
        StackRNN,
        {
            "memory": "vector_nondeterministic",
            "depth": 3,
            "memory_args": {**NS, "vector_size": 2},
            **LEARNED_H0,
        },
        "nondeterministic_sequence",
    ),
    (
        StackRNN,
        {
            "memory": "vector_nondeterministic",
            "controller": "elman",
            "controller_args": {"activation": "relu"},
            "depth": 4,
            "output": "hidden+reading",
            "memory_args": {**NS, "vector_size": 2, "bottom_symbol": "original"},
        },
        "nondeterministic_sequence",
    ),
]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize(("cls", "kwargs", "op"), PATH_CASES)
def test_member_paths_equal_the_loop_and_the_reference(cls, kwargs, op, dtype):
    """A member path (the layer's op batched over the members) against the loop over the members
    (the layer's own forward each) and under :func:`memrnn.reference_paths`."""
    tol = {"atol": 1e-12, "rtol": 0} if dtype == torch.float64 else {"atol": 2e-6, "rtol": 1e-5}
    if op == "nondeterministic_sequence" and dtype == torch.float32:  # log space: the stack's own tests'
        tol = {"atol": 2e-5, "rtol": 1e-4}
    layers = []
    for seed in range(3):
        torch.manual_seed(seed)
        layers.append(cls(4, 6, **kwargs).to(dtype))
    members = MemberLayer(layers)
    assert members.member_path == f"{op} (members batched)"
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(3, B, T, 4, generator=gen, dtype=dtype, requires_grad=True)
    mask = torch.arange(T)[None, :] < LENGTHS[:, None]
    runs = {}
    for how in ("path", "loop", "reference"):
        if how == "loop":
            y, final = members._loop(x, None, mask.expand(3, B, T), outputs_only=False)
        elif how == "reference":
            with reference_paths():
                y, final = members(x, mask=mask)
        else:
            y, final = members(x, mask=mask)
        loss = (y * y.detach().cos()).sum() + sum((t * (i + 2)).sum() for i, t in enumerate(final))
        runs[how] = (y, *final, *torch.autograd.grad(loss, [x, *members.parameters()]))
    for how in ("loop", "reference"):
        for a, b in zip(runs["path"], runs[how], strict=True):
            torch.testing.assert_close(a, b, **tol)
    assert (runs["path"][0][:, 2, 1:] == 0).all()  # padded outputs are zero


#: the layers with an indexed one-hot path, on one-hot inputs (each member its own ids)
ONE_HOT_CASES = [
    (SecondOrderRNN, {"sensitivity": 2.0}, "second_order_sequence"),
    (
        SecondOrderRNN,
        {"learn_sensitivity": True, "bias": False, "one_hot_input": True},
        "second_order_sequence",
    ),
    (NNPDA, {"stack_symbols": 2, "depth": 4, "action": "clamp"}, "nnpda_sequence"),
    (
        NNPDA,
        {
            "stack_symbols": 3,
            "depth": 3,
            "action": "sigmoid",
            "learn_sensitivity": True,
            "one_hot_input": True,
        },
        "nnpda_sequence",
    ),
]


@needs_triton
@pytest.mark.parametrize(
    "kwargs",
    [
        {"memory": "superposition", "width": 2, "depth": 4},
        {"memory": "deque", "width": 2, "depth": 4, **LEARNED_H0},
        {"memory": "tape_jump", "controller": "elman", "width": 2, "depth": 4, "memory_args": {"jump": 3}},
    ],
    ids=["superposition", "deque", "tape_jump-elman"],
)
def test_stack_rnn_member_path_on_the_kernels(kwargs):
    """The stack RNNs' member path on the Triton kernels (``implementation("triton")``: what CUDA
    tensors get; here under Triton's interpreter): one launch per direction for all members, and
    outputs, final states and every gradient equal the loop over the members on the single
    kernels (float32: the forward to the bit but for the members' products, every tensor to 1e-6 of
    its largest entry: a weight gradient of entries up to 12 sums its batch's and steps' terms in
    another order, 2 units in the last place apart)."""
    from memrnn.ops.dispatch import implementation

    layers = []
    for seed in range(3):
        torch.manual_seed(seed)
        layers.append(StackRNN(4, 6, **kwargs))
    members = MemberLayer(layers)
    assert members.member_path == "stack_rnn_sequence (members batched)"
    x = torch.randn(3, B, T, 4, generator=torch.Generator().manual_seed(0), requires_grad=True).to(DEVICE)
    members.to(DEVICE)
    mask = (torch.arange(T)[None, :] < LENGTHS[:, None]).to(DEVICE)
    runs = {}
    for how in ("path", "loop"):
        with implementation("triton"):
            if how == "loop":
                y, final = members._loop(x, None, mask.expand(3, B, T), outputs_only=False)
            else:
                y, final = members(x, mask=mask)
        loss = (y * y.detach().cos()).sum() + sum((t * (i + 2)).sum() for i, t in enumerate(final))
        runs[how] = (y, *final, *torch.autograd.grad(loss, [x, *members.parameters()]))
    for a, b in zip(runs["path"], runs["loop"], strict=True):
        torch.testing.assert_close(a, b, atol=1e-6 * max(1.0, float(b.abs().max())), rtol=1e-6)


def _path_and_loop(members, x, mask, impl=None):
    """Outputs, final state and the gradients of inputs and parameters (of a loss reading both),
    through the member path and through the loop over the members (``impl``: under that
    implementation)."""
    from memrnn.ops.dispatch import implementation

    M, Bx, Tx = x.shape[:3]
    runs = {}
    for how in ("path", "loop"):
        with contextlib.nullcontext() if impl is None else implementation(impl):
            if how == "loop":
                y, final = members._loop(x, None, mask.expand(M, Bx, Tx), outputs_only=False)
            else:
                y, final = members(x, mask=mask)
        loss = (y * y.detach().cos()).sum() + sum((t * (i + 2)).sum() for i, t in enumerate(final))
        runs[how] = (y, *final, *torch.autograd.grad(loss, [x, *members.parameters()]))
    return runs["path"], runs["loop"]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_the_nondeterministic_path_gives_each_member_its_bottom_vector(dtype):
    """The vector RNS-RNN's learned bottom vector is each member's own in the members' initial
    state: with a different bottom per member, outputs, final states and every gradient (the
    bottom's included) equal the loop over the members."""
    layers = []
    for seed in range(3):
        torch.manual_seed(seed)
        layer = StackRNN(
            4, 5, memory="vector_nondeterministic", depth=3, memory_args={**NS, "vector_size": 2}
        )
        with torch.no_grad():
            layer.memory.bottom.normal_(0, 2)
        layers.append(layer.to(dtype))
    members = MemberLayer(layers)
    assert members.member_path == "nondeterministic_sequence (members batched)"
    x = torch.randn(3, B, T, 4, generator=torch.Generator().manual_seed(0), dtype=dtype, requires_grad=True)
    mask = torch.arange(T)[None, :] < LENGTHS[:, None]
    path, loop = _path_and_loop(members, x, mask)
    tol = {"atol": 1e-12, "rtol": 0} if dtype == torch.float64 else {"atol": 2e-5, "rtol": 1e-4}
    for a, b in zip(path, loop, strict=True):
        torch.testing.assert_close(a, b, **tol)
    names = [n for n, _ in members.named_parameters()]
    bottom_grad = path[len(path) - len(names) + names.index("layer.memory.bottom")]
    assert bottom_grad.shape == (3, 2) and bool((bottom_grad.abs().sum(1) > 0).all())


@pytest.mark.parametrize(
    "kwargs",
    [
        {"memory": "nondeterministic", "depth": 4, "memory_args": NS},
        {"memory": "superposition", "width": 2, "depth": 8},
    ],
    ids=["nondeterministic", "superposition"],
)
def test_outputs_alone_equal_the_forwards_outputs(kwargs):
    """:meth:`MemberLayer.outputs` runs the path's outputs alone (no final window for a
    nondeterministic stack, the superposition stack's window trimmed to what can still be read):
    the forward's outputs and the input's gradient, bit for bit."""
    members = MemberLayer.build(lambda: StackRNN(4, 5, **kwargs), seeds=range(3))
    x = torch.randn(3, B, T, 4, generator=torch.Generator().manual_seed(0), requires_grad=True)
    mask = torch.arange(T)[None, :] < LENGTHS[:, None]
    y = members(x, mask=mask)[0]
    alone = members.outputs(x, mask=mask)
    assert torch.equal(alone, y)
    (g_full,) = torch.autograd.grad((y * y.detach().sin()).sum(), x)
    (g_alone,) = torch.autograd.grad((alone * alone.detach().sin()).sum(), x)
    assert torch.equal(g_alone, g_full)


@needs_triton
@pytest.mark.parametrize(
    "kwargs",
    [
        {"memory": "nondeterministic", "depth": 3, "memory_args": NS, **LEARNED_H0},
        {
            "memory": "vector_nondeterministic",
            "controller": "elman",
            "depth": 3,
            "output": "hidden+reading",
            "memory_args": {**NS, "vector_size": 2},
        },
    ],
    ids=["nondeterministic", "vector-elman"],
)
def test_the_nondeterministic_member_path_on_the_triton_run(kwargs):
    """On the Triton run (``implementation("triton")``: what CUDA tensors get; here under Triton's
    interpreter) the members' stack is one run on their ``M·B`` rows: outputs, final states and
    every gradient equal the loop over the members, each on its own run."""
    from memrnn.ops import nondeterministic

    members = MemberLayer.build(lambda: StackRNN(4, 5, **kwargs), seeds=range(3)).to(DEVICE)
    x = torch.randn(3, B, T, 4, generator=torch.Generator().manual_seed(0)).to(DEVICE).requires_grad_()
    mask = (torch.arange(T)[None, :] < LENGTHS[:, None]).to(DEVICE)
    made = []
    real = nondeterministic.NondeterministicRun.__init__

    def spy(self, gamma, *args, **kw):
        made.append((gamma.shape[0], kw.get("impl")))
        real(self, gamma, *args, **kw)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(nondeterministic.NondeterministicRun, "__init__", spy)
        path, loop = _path_and_loop(members, x, mask, impl="triton")
    assert made == [(3 * B, "triton")] + [(B, "triton")] * 3  # one run for the members, then one each
    for a, b in zip(path, loop, strict=True):
        torch.testing.assert_close(a, b, atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize(("cls", "kwargs", "op"), ONE_HOT_CASES)
def test_one_hot_member_paths_equal_the_loop_and_the_reference(cls, kwargs, op, dtype):
    """The member paths of the layers with an indexed one-hot path (their bucketed Functions with
    members), on one-hot inputs, each member its own sensitivity and ids: outputs, final states
    and the gradients of the parameters and the initial state equal the loop over the members and
    the reference paths."""
    tol = {"atol": 1e-12, "rtol": 0} if dtype == torch.float64 else {"atol": 2e-6, "rtol": 1e-5}
    layers = []
    for seed in range(3):
        torch.manual_seed(seed)
        layers.append(cls(4, 6, **{**kwargs, "sensitivity": 1.0 + seed}).to(dtype))
    members = MemberLayer(layers)
    assert members.member_path == f"{op} (members batched)"
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 4, (3, B, T), generator=gen)
    x = nn.functional.one_hot(ids, 4).to(dtype)
    mask = torch.arange(T)[None, :] < LENGTHS[:, None]
    state = _perturbed(members.initial_state(B, dtype=dtype), gen)
    leaves = [t for t in state_leaves(state) if t.requires_grad]
    runs = {}
    for how in ("path", "loop", "reference"):
        if how == "loop":
            y, final = members._loop(x, state, mask.expand(3, B, T), outputs_only=False)
        elif how == "reference":
            with reference_paths():
                y, final = members(x, state, mask=mask)
        else:
            y, final = members(x, state, mask=mask)
        loss = (y * y.detach().cos()).sum() + sum((t * (i + 2)).sum() for i, t in enumerate(final))
        runs[how] = (y, *final, *torch.autograd.grad(loss, [*leaves, *members.parameters()]))
    for how in ("loop", "reference"):
        for a, b in zip(runs["path"], runs[how], strict=True):
            torch.testing.assert_close(a, b, **tol)
    assert (runs["path"][0][:, 2, 1:] == 0).all()  # padded outputs are zero
    if kwargs.get("one_hot_input"):  # a member whose input is not one-hot is named
        x[1, 2, 0] = 0.5
        with pytest.raises(ValueError, match=f"{cls.__name__} member 1 .* at row 2, step 0 is not one-hot"):
            members(x, mask=mask)


@pytest.mark.parametrize("one_hot", [True, False])
def test_nnpda_member_path_strict_names_the_member(one_hot):
    """``strict``: a member whose push meets a full window raises as its layer would, naming the
    member; the others' overflow-free runs do not."""
    layers = [NNPDA(3, 2, 2, depth=2, sensitivity=5.0, strict=True, one_hot_input=one_hot) for _ in range(2)]
    with torch.no_grad():
        layers[0].weight_push.zero_()
        layers[1].weight_push.fill_(1.0)  # p+ = 1·Σ R ≥ 1 at the first step
    members = MemberLayer(layers)
    assert members.member_path == "nnpda_sequence (members batched)"
    state = members.initial_state(B)
    state.stack[:, :, -1, 0] = 1.0  # the window's bottom cell holds a symbol
    x = nn.functional.one_hot(torch.randint(0, 3, (2, B, T), generator=torch.Generator().manual_seed(0)), 3)
    x = x.float() if one_hot else x.float() * 0.9
    with pytest.raises(
        StackOverflowError, match=r"member 1: nnPDA stack overflow at step t=0 \(0-based\), batch row 0"
    ):
        members(x, state)
    with pytest.raises(StackOverflowError, match=r"at step t=0 \(0-based\), batch row 0"):
        members.member(1)(x[1], state_map(lambda t: t[1], state))
    members.member(0)(x[0], state_map(lambda t: t[0], state))  # member 0 alone does not overflow


@pytest.mark.parametrize(("cls", "op"), [(HewittLSTM, "lstm_sequence"), (HewittSimpleRNN, "elman_sequence")])
def test_hewitts_constructions_take_their_base_classes_member_path(cls, op):
    """Hewitt et al.'s (2020) Dyck-(k,m) layers run their base class's member path (the LSTM's in
    float64 only); members moved apart (as training does) equal the loop over the members, float64,
    padded."""
    gen = torch.Generator().manual_seed(0)
    layers = []
    for _ in range(3):
        layer = cls(k=2, m=2, beta=2.0).double()
        with torch.no_grad():
            for p in layer.parameters():
                p.add_(0.1 * torch.randn(p.shape, generator=gen, dtype=p.dtype))
        layers.append(layer)
    members = MemberLayer(layers)
    assert members.member_path == f"{op} (members batched)"
    if cls is HewittLSTM:  # float32 rounds otherwise than nn.LSTM, which Adam amplifies: the loop
        assert members.float().member_path.startswith("loop (float32: ")
        members.double()
    x = torch.randn(3, B, T, members.input_size, generator=gen, dtype=torch.float64, requires_grad=True)
    mask = (torch.arange(T)[None, :] < LENGTHS[:, None]).expand(3, B, T)
    runs = {}
    for how in ("path", "loop"):
        y, final = (
            members(x, mask=mask) if how == "path" else members._loop(x, None, mask, outputs_only=False)
        )
        loss = (y * y.detach().cos()).sum() + sum((t * (i + 2)).sum() for i, t in enumerate(final))
        runs[how] = (y, *final, *torch.autograd.grad(loss, [x, *members.parameters()]))
    for a, b in zip(runs["path"], runs["loop"], strict=True):
        torch.testing.assert_close(a, b, atol=1e-12, rtol=0)


def test_the_loop_is_named_where_no_member_path_applies():
    torch.manual_seed(0)

    class ElmanSubclass(ElmanRNN):  # paths go by exact class: a subclass may compute otherwise
        pass

    members = MemberLayer([ElmanSubclass(3, 4), ElmanSubclass(3, 4)])
    assert members.member_path == "loop (no member path for ElmanSubclass)"
    assert MemberLayer([ElmanRNN(3, 4, num_layers=2)] * 2).member_path == "loop (stacked or bidirectional)"
    bi = MemberLayer([LSTMLayer(3, 4, bidirectional=True) for _ in range(2)])
    assert bi.member_path == "loop (bidirectional)"
    drop = MemberLayer([LSTMLayer(3, 4, num_layers=2, dropout=0.5) for _ in range(2)])
    assert drop.member_path == "loop (dropout between layers in training)"
    assert drop.eval().member_path == "lstm_sequence (members batched)"
    assert MemberLayer([GRULayer(3, 4, bidirectional=True)] * 2).member_path == "loop (bidirectional)"
    gru_drop = MemberLayer([GRULayer(3, 4, num_layers=2, dropout=0.5) for _ in range(2)])
    assert gru_drop.member_path == "loop (dropout between layers in training)"
    assert gru_drop.eval().member_path == "gru_sequence (members batched)"


def test_the_stack_rnns_loop_is_named_where_no_member_path_applies():
    """The stack RNN's member path covers the fused memories under an LSTM or Elman controller,
    the nondeterministic stacks' path theirs under a one-layer LSTM or Elman controller; a GRU or
    stacked controller and ``strict`` run the loop, which names why."""
    tiny = {"width": 2, "depth": 3}
    ns = {"memory": "nondeterministic", "depth": 3, "memory_args": NS}
    assert (
        MemberLayer([StackRNN(3, 4, **ns)] * 2).member_path == "nondeterministic_sequence (members batched)"
    )
    for why, kwargs in [
        ("GRULayer", {"controller": "gru"}),
        ("ElmanRNN", {"controller": "elman", "controller_args": {"num_layers": 2}}),
    ]:
        looped = MemberLayer([StackRNN(3, 4, **ns, **kwargs)] * 2).member_path
        assert looped == (
            f"loop (controller {why} is not a one-layer LSTM with biases or a one-layer unidirectional Elman RNN)"
        )
    assert MemberLayer([StackRNN(3, 4, strict=True, **ns)] * 2).member_path == (
        "loop (strict (overflow checked member by member))"
    )
    gru = MemberLayer([StackRNN(3, 4, controller="gru", **tiny)] * 2)
    assert gru.member_path.startswith("loop (controller GRULayer is not a one-layer LSTM with biases")
    assert MemberLayer([StackRNN(3, 4, strict=True, **tiny)] * 2).member_path == (
        "loop (strict (overflow checked member by member))"
    )
    assert MemberLayer([StackRNN(3, 4, **tiny)] * 2).member_path == "stack_rnn_sequence (members batched)"


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_a_jump_tapes_member_path_takes_each_rows_input_length(dtype):
    """Delétang et al.'s Tape-RNN jump tape (jumps by each row's input length), each member with its
    own rows' ``input_lengths [M, B]``: the member path equals the loop over the members, outputs,
    final states and gradients, with right padding; a row without its input length is named."""
    tol = {"atol": 1e-12, "rtol": 0} if dtype == torch.float64 else {"atol": 2e-6, "rtol": 1e-5}
    members = MemberLayer.build(lambda: StackRNN(4, 6, memory="tape_jump", width=2, depth=5), seeds=[0, 1, 2])
    members = members.to(dtype)
    assert members.member_path == "stack_rnn_sequence (members batched)"
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(3, B, T, 4, generator=gen, dtype=dtype, requires_grad=True)
    mask = torch.arange(T)[None, :] < LENGTHS[:, None]
    state = members.initial_state(
        B, dtype=dtype, input_lengths=torch.tensor([[1, 2, 3], [4, 0, 2], [3, 3, 1]])
    )
    runs = []
    for loop in (False, True):
        y, final = (
            members._loop(x, state, mask.expand(3, B, T), outputs_only=False)
            if loop
            else members(x, state, mask)
        )
        loss = (y * y.detach().cos()).sum() + (final.tape * 2).sum()
        runs.append((y, *final, *torch.autograd.grad(loss, [x, *members.parameters()])))
    for a, b in zip(*runs, strict=True):
        torch.testing.assert_close(a, b, **tol)
    with pytest.raises(
        ValueError, match=r"member 0: JumpTape: row 0 has jump -1\.0; each row needs its input length"
    ):
        members(x, members.initial_state(B, dtype=dtype))
    # member 2's row 1 without its length: named by member and by its own row, not the batch's 7
    lengths = torch.tensor([[1, 2, 3], [4, 0, 2], [3, -1, 1]])
    with pytest.raises(ValueError, match=r"member 2: JumpTape: row 1 has jump -1\.0"):
        members(x, members.initial_state(B, dtype=dtype, input_lengths=lengths))


def test_build_gives_each_member_its_seeds_weights_and_restores_the_generator():
    torch.manual_seed(123)
    before = torch.random.get_rng_state()
    members = MemberLayer.build(lambda: LSTMLayer(3, 4), seeds=[7, 11])
    assert torch.equal(torch.random.get_rng_state(), before)
    for m, seed in enumerate([7, 11]):
        torch.manual_seed(seed)
        single = LSTMLayer(3, 4)
        got = members.member(m).state_dict()
        assert got.keys() == single.state_dict().keys()
        assert all(torch.equal(got[k], v) for k, v in single.state_dict().items())


def test_state_dict_round_trip_and_one_member_as_an_ordinary_layer():
    members = MemberLayer.build(lambda: LSTMLayer(3, 4, num_layers=2), seeds=[0, 1, 2])
    sd = members.state_dict()
    assert sd["layer.rnn.weight_ih_l0"].shape == (3, 16, 3)  # the single layer's keys, members first
    other = MemberLayer.build(lambda: LSTMLayer(3, 4, num_layers=2), seeds=[5, 6, 7])
    other.load_state_dict(sd)
    x = torch.randn(3, 2, 4, 3, generator=torch.Generator().manual_seed(0))
    assert torch.equal(other(x)[0], members(x)[0])
    plain = LSTMLayer(3, 4, num_layers=2)
    plain.load_state_dict(members.member(1).state_dict())
    torch.testing.assert_close(plain(x[1])[0], members(x)[0][1], atol=1e-6, rtol=1e-5)


def test_bad_inputs_are_named():
    members = MemberLayer.build(lambda: LSTMLayer(3, 4), seeds=[0, 1])
    with pytest.raises(
        ValueError, match=r"inputs \[members, batch, time, input_size\] = \[2, B, T, 3\], got \(3, 5, 3\)"
    ):
        members(torch.zeros(3, 5, 3))
    with pytest.raises(ValueError, match=r"mask must be \[batch, time\] = \(2, 5\)"):
        members(torch.zeros(2, 2, 5, 3), mask=torch.ones(3, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"mask must be a bool tensor, got dtype torch\.float32"):
        members(torch.zeros(2, 2, 5, 3), mask=torch.ones(2, 5))
    holes = torch.ones(2, 2, 5, dtype=torch.bool)
    holes[1, 0, 2] = False
    with pytest.raises(ValueError, match=r"right padding .* at \[1, 0\] a real position at t=3"):
        members(torch.zeros(2, 2, 5, 3), mask=holes)
    with pytest.raises(ValueError, match="has the members first"):
        members(torch.zeros(2, 2, 5, 3), state=members.initial_state(2)._replace(h=torch.zeros(3, 2, 1, 4)))
    with pytest.raises(ValueError, match=r"member 2 does not exist; this MemberLayer has members 0..1"):
        members.member(2)
    with pytest.raises(ValueError, match="member 1 differs from member 0"):
        MemberLayer([LSTMLayer(3, 4), LSTMLayer(3, 5)])
    with pytest.raises(ValueError, match="seeds must be a non-empty sequence"):
        MemberLayer.build(lambda: LSTMLayer(3, 4), seeds=3)


def test_member_view_computes_as_the_member_and_carries_gradients():
    torch.manual_seed(0)
    lins = [nn.Linear(3, 2) for _ in range(3)]
    stacked = stack_modules(lins)
    x = torch.randn(4, 3)
    with member_view(stacked, 1) as one:
        y = one(x)
    torch.testing.assert_close(y, lins[1](x))
    y.sum().backward()
    assert stacked.weight.grad[0].abs().sum() == 0 and stacked.weight.grad[1].abs().sum() > 0


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_embedding_and_heads_are_each_members_modules(dtype):
    torch.manual_seed(0)
    embs = [nn.Embedding(7, 5).to(dtype) for _ in range(3)]
    heads = [nn.Linear(5, 4).to(dtype) for _ in range(3)]
    emb, head = MemberEmbedding.from_modules(embs), MemberLinear.from_modules(heads)
    ids = torch.randint(0, 7, (2, 6), generator=torch.Generator().manual_seed(1))
    own = torch.randint(0, 7, (3, 2, 6), generator=torch.Generator().manual_seed(2))
    out, out_own = head(emb(ids)), head(emb(own, per_member=True))
    for m in range(3):
        torch.testing.assert_close(out[m], heads[m](embs[m](ids)), atol=1e-6, rtol=1e-6)
        torch.testing.assert_close(out_own[m], heads[m](embs[m](own[m])), atol=1e-6, rtol=1e-6)
        assert torch.equal(emb.member(m).weight, embs[m].weight) and torch.equal(
            head.member(m).weight, heads[m].weight
        )
    with pytest.raises(ValueError, match=r"unknown token id 7; the embedding has ids 0\.\.6"):
        emb(torch.tensor([[7]]))
    with pytest.raises(ValueError, match=r"MemberLinear takes \[members, ..., in\] = \[3, ..., 5\]"):
        head(torch.zeros(2, 4, 5, dtype=dtype))
    frozen = MemberEmbedding.from_modules([nn.Embedding.from_pretrained(torch.eye(4)) for _ in range(2)])
    assert not list(frozen.parameters()) and torch.equal(frozen(torch.tensor([2]))[1, 0], torch.eye(4)[2])


@pytest.mark.parametrize("bias", [True, False])
def test_member_heads_gradients_are_each_members_linears(bias):
    """:class:`MemberLinear` on CPU computes its products with the rows last (``(w xᵀ + b)ᵀ``, the
    weight gradient ``(gᵀ x)ᵀ``): outputs and the input, weight and bias gradients within float64
    rounding of each member's ``nn.Linear``, and twice differentiable (gradgradcheck)."""
    torch.manual_seed(0)
    heads = [nn.Linear(6, 3, bias=bias).double() for _ in range(4)]
    head = MemberLinear.from_modules(heads)
    x = torch.randn(4, 2, 5, 6, dtype=torch.float64, requires_grad=True)
    g = torch.randn(4, 2, 5, 3, dtype=torch.float64)
    out = head(x)
    assert out.is_contiguous() and out.shape == (4, 2, 5, 3)
    wrt = [x, head.weight] + ([head.bias] if bias else [])
    got = torch.autograd.grad(out, wrt, g)
    for m, lin in enumerate(heads):
        xm = x[m].detach().clone().requires_grad_()
        ym = lin(xm)
        torch.testing.assert_close(out[m], ym, atol=1e-12, rtol=1e-12)
        want = torch.autograd.grad(ym, [xm, *lin.parameters()], g[m])
        torch.testing.assert_close(got[0][m], want[0], atol=1e-12, rtol=1e-12)
        for a, b in zip(got[1:], want[1:], strict=True):
            torch.testing.assert_close(a[m], b, atol=1e-12, rtol=1e-12)
    assert torch.autograd.gradgradcheck(
        lambda *a: head(a[0]), (x[:, :1, :2].detach().clone().requires_grad_(),)
    )


@pytest.mark.parametrize(("cls", "kwargs"), [(LSTMLayer, {}), (LSTMLayer, {"num_layers": 2}), (GRULayer, {})])
@pytest.mark.parametrize("per_member", [False, True])
def test_outputs_from_tokens_equal_the_lookup_then_the_layer(cls, kwargs, per_member):
    """:meth:`MemberLayer.outputs_from_tokens` (the LSTM's member path folds the lookup into its
    first layer's input projection; the GRU's has no token path and looks the embeddings up)
    equals :meth:`MemberLayer.outputs` on the looked-up embeddings: outputs and the gradients of
    the table and every parameter within float64 rounding, under right padding; bad tables and
    ids are named."""
    torch.manual_seed(0)
    members = MemberLayer([cls(4, 5, **kwargs).double() for _ in range(3)])
    table = torch.randn(3, 7, 4, dtype=torch.float64, requires_grad=True)
    ids = torch.randint(0, 7, (3, 2, 6) if per_member else (2, 6))
    mask = torch.ones(2, 6, dtype=torch.bool)
    mask[1, 4:] = False
    params = [table, *members.parameters()]
    got = members.outputs_from_tokens(ids, table, mask=mask)
    g_got = torch.autograd.grad(got.square().sum(), params)
    rows = (ids if per_member else ids[None]) + torch.arange(3).view(3, 1, 1) * 7
    want = members.outputs(table.reshape(21, 4)[rows], mask=mask)
    g_want = torch.autograd.grad(want.square().sum(), params)
    torch.testing.assert_close(got, want, atol=1e-12, rtol=1e-12)
    for a, b in zip(g_got, g_want, strict=True):
        torch.testing.assert_close(a, b, atol=1e-12, rtol=1e-12)
    with pytest.raises(
        ValueError, match=r"table \[members, vocabulary, input_size\] = \[3, V, n\], got \(7, 4\)"
    ):
        members.outputs_from_tokens(ids, table[0])
    with pytest.raises(ValueError, match=r"ids \[B, T\] or \[3, B, T\], got \(2, 2, 6\)"):
        members.outputs_from_tokens(torch.zeros(2, 2, 6, dtype=torch.long), table)


@pytest.mark.parametrize(("cls", "kwargs", "op"), PATH_CASES)
def test_a_member_paths_initial_state_and_output_are_each_members(cls, kwargs, op):
    """The member paths build the members' initial state at once (no member view each; what
    :meth:`MemberLayer.initial_state` gives without keyword arguments) and read their outputs at a
    state at once (:meth:`MemberLayer.output_at`, where the path has it): equal bit for bit to each
    member's ``initial_state`` and ``output_at`` under its member view, learned initial states
    included (gradients reaching ``h0_input``), in the layer's dtype or the one asked for."""
    from memrnn.members.layer import member_path_of
    from memrnn.members.stacking import member_view

    layers = []
    for seed in range(3):
        torch.manual_seed(seed)
        layer = cls(4, 6, **kwargs)
        if getattr(layer, "h0_input", None) is not None:
            with torch.no_grad():
                layer.h0_input.normal_()
        layers.append(layer)
    members = MemberLayer(layers)
    x = torch.zeros(3, 5, 2, 4)
    path = member_path_of(members.layer)[0]
    fast = path.initial(members.layer, 5, x)
    for dtype in (None, torch.float64):
        slow = members._initial_loop(5, dtype=dtype)
        got = members.initial_state(5, dtype=dtype)
        for a, b, c in zip(fast, slow, got, strict=True):
            assert torch.equal(b, c) and c.dtype == (dtype or torch.float32)
            assert dtype is not None or torch.equal(a, b)
    if not hasattr(layers[0], "output_at"):  # the layer gives no output at a state (e.g. JordanRNN)
        assert path.output_at is None
        return
    state = _perturbed(members.initial_state(5), torch.Generator().manual_seed(1))
    looped = []
    for m in range(3):
        with member_view(members.layer, m) as layer:
            looped.append(layer.output_at(state_map(lambda t, m=m: t[m], state)))
    out = members.output_at(state)
    assert torch.equal(out, torch.stack(looped))
    if path.output_at is None:
        return
    controller = getattr(members.layer, "controller", members.layer)
    h0 = getattr(members.layer, "h0_input", None)
    h0 = getattr(controller, "h0_input", None) if h0 is None else h0
    if h0 is not None:  # a learned initial state: the output at it reaches h0_input
        (grad,) = torch.autograd.grad(members.output_at(members.initial_state(5)).sum(), h0)
        assert bool(grad.abs().sum() > 0)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_the_stack_rnns_members_run_the_member_kernels_on_cuda():
    """On CUDA the stack RNN's member path runs the two Triton kernels once for all members (a grid
    of row tiles × members), each member equal to its single layer (on the single kernels)."""
    members = MemberLayer.build(lambda: StackRNN(4, 6, width=2, depth=4), seeds=[0, 1]).cuda()
    assert members.member_path == "stack_rnn_sequence (members batched)"
    x = torch.randn(2, B, T, 4, generator=torch.Generator().manual_seed(0)).cuda()
    y, _ = members(x)
    for m in range(2):
        torch.testing.assert_close(y[m], members.member(m)(x[m])[0], atol=1e-6, rtol=1e-6)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_the_nondeterministic_members_run_one_triton_run_on_cuda():
    """On CUDA the nondeterministic stacks' member path runs one Triton run on the members' rows,
    each member's outputs and final state equal to its single layer's (float32, log space: the
    stack's own tolerance)."""
    kwargs = {"memory": "vector_nondeterministic", "depth": 3, "memory_args": {**NS, "vector_size": 2}}
    members = MemberLayer.build(lambda: StackRNN(4, 6, **kwargs), seeds=[0, 1]).cuda()
    assert members.member_path == "nondeterministic_sequence (members batched)"
    x = torch.randn(2, B, T, 4, generator=torch.Generator().manual_seed(0)).cuda()
    y, final = members(x)
    for m in range(2):
        y_m, final_m = members.member(m)(x[m])
        torch.testing.assert_close(y[m], y_m, atol=2e-5, rtol=1e-4)
        for a, b in zip(final, final_m, strict=True):
            torch.testing.assert_close(a[m], b, atol=2e-5, rtol=1e-4)
