"""What users of ``nn.LSTM`` bring (issue 65): ``num_layers``, ``dropout`` between layers and
``bidirectional`` on the layers that can have them, checked against torch's own modules; a clear
error where a layer cannot; and the batch-first state's layout and its conversions.

Bidirectional layers are not in the registry's interface suite (``tests/core/test_interface.py``
runs ``step`` loops against ``forward``, and a backward direction cannot step): this file holds
their contract.  Stacked unidirectional layers are registered (``lstm_2layer``, ``gru_2layer``,
``elman_2layer``) and run the suite; with dropout they are stochastic in training mode, so their
dropout is checked here."""

import copy
import functools

import lightning as L
import pytest
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from memrnn.core import reference_paths
from memrnn.data import ChomskyDataModule, FormalLanguageDataModule
from memrnn.languages import DyckKM
from memrnn.layers import (
    NNPDA,
    CounterLSTM,
    CounterLSTMState,
    ElmanRNN,
    ElmanState,
    GRULayer,
    GRUState,
    JordanRNN,
    JordanState,
    LSTMLayer,
    LSTMState,
    NNPDAState,
    ReLUCounter,
    ReLUCounterState,
    Reservoir,
    ReservoirState,
    SecondOrderRNN,
    SecondOrderState,
    StackRNN,
)
from memrnn.lit import SequenceModule
from memrnn.ops import dispatch
from memrnn.ops.dispatch import implementation
from tests.layers.under import under

F64 = torch.float64

#: the layers with torch twins: (name, memrnn constructor, torch class)
TWINS = {
    "lstm": (LSTMLayer, nn.LSTM),
    "lstm_reference": (under(LSTMLayer, reference_paths), nn.LSTM),
    "gru": (GRULayer, nn.GRU),
    "gru_bptt": (under(GRULayer, lambda: implementation("bptt")), nn.GRU),
    "gru_reference": (under(GRULayer, reference_paths), nn.GRU),
    "elman": (ElmanRNN, nn.RNN),
    "elman_relu": (lambda *a, **k: ElmanRNN(*a, activation="relu", **k), nn.RNN),
    "elman_reference": (under(ElmanRNN, reference_paths), nn.RNN),
}


def elman_param(layer, torch_name):
    """The ``ElmanRNN`` parameter of ``nn.RNN``'s ``torch_name`` (a one-layer, one-direction layer
    keeps Cotterell et al.'s names ``weight_ih``, ``weight_hh``, ``bias``)."""
    name = torch_name.replace("bias_ih", "bias")
    if layer.num_layers == 1 and not layer.bidirectional:
        name = name.replace("_l0", "")
    return getattr(layer, name)


def twin(name, num_layers, bidirectional, dropout=0.0, seed=0):
    """A memrnn layer and the torch module with the same weights (an ``ElmanRNN`` is ``nn.RNN``
    with ``bias_hh = 0``), both float64."""
    make, torch_cls = TWINS[name]
    torch.manual_seed(seed)
    layer = make(3, 4, num_layers=num_layers, dropout=dropout, bidirectional=bidirectional).to(F64)
    extra = {"nonlinearity": layer.activation} if torch_cls is nn.RNN else {}
    module = torch_cls(
        3, 4, num_layers, batch_first=True, dropout=dropout, bidirectional=bidirectional, dtype=F64, **extra
    )
    with torch.no_grad():
        for n, p in module.named_parameters():
            if torch_cls is nn.RNN:
                p.copy_(torch.zeros_like(p) if "bias_hh" in n else elman_param(layer, n))
            else:
                p.copy_(getattr(layer.rnn, n))
    return layer, module


def memrnn_param_grads(layer, module):
    """The memrnn layer's gradients in the order of the torch module's parameters."""
    if isinstance(layer, ElmanRNN):
        return [None if "bias_hh" in n else elman_param(layer, n).grad for n, _ in module.named_parameters()]
    return [getattr(layer.rnn, n).grad for n, _ in module.named_parameters()]


def fields(state):
    """A state in torch's layout as a tuple: ``(h_n, c_n)`` or ``(h_n,)``."""
    return state if isinstance(state, tuple) else (state,)


def run_memrnn(layer, x, s0, mask, w, wf):
    xx = x.clone().requires_grad_()
    ss = type(s0)(*(t.clone().requires_grad_() for t in s0))
    y, s = layer(xx, ss, mask=mask)
    final = fields(layer.to_torch_state(s))
    ((y * w).sum() + sum((t * v).sum() for t, v in zip(final, wf, strict=True))).backward()
    return y, final, xx.grad, [t.grad for t in ss]


@pytest.mark.parametrize("name", list(TWINS))
@pytest.mark.parametrize("num_layers", [1, 2])
def test_bidirectional_equals_torch_with_packed_sequences(name, num_layers, gen, monkeypatch):
    """Outputs ``[B, T, 2H]``, final states (both directions, in torch's layout after
    ``to_torch_state``) and the gradients of the inputs, the initial state and every parameter
    equal ``nn.LSTM``/``nn.GRU``/``nn.RNN(bidirectional=True)`` run on ``pack_padded_sequence``:
    each row's backward direction starts at its own last real token.  The fused chunks are made
    4 steps long: a bidirectional layer must not be chunked."""
    monkeypatch.setattr(dispatch, "TORCH_RNN_CHUNK", 4)
    layer, module = twin(name, num_layers, True)
    assert layer.output_size == 8
    lengths = torch.tensor([9, 4, 1, 6])
    x = torch.randn(4, 9, 3, generator=gen, dtype=F64)
    mask = torch.arange(9)[None] < lengths[:, None]
    s0 = layer.initial_state(4)
    s0 = type(s0)(*(t + 0.5 * torch.randn(t.shape, generator=gen, dtype=F64) for t in s0))
    w = torch.randn(4, 9, 8, generator=gen, dtype=F64) * mask[..., None]
    wf = [torch.randn(2 * num_layers, 4, 4, generator=gen, dtype=F64) for _ in s0]
    y, final, gx, gs = run_memrnn(layer, x, s0, mask, w, wf)

    xt = x.clone().requires_grad_()
    h0 = [t.transpose(0, 1).clone().requires_grad_() for t in s0]
    packed = pack_padded_sequence(xt, lengths, batch_first=True, enforce_sorted=False)
    yp, hn = module(packed, tuple(h0) if len(h0) > 1 else h0[0])
    yt, _ = pad_packed_sequence(yp, batch_first=True, total_length=9)
    hn = hn if isinstance(hn, tuple) else (hn,)
    ((yt * w).sum() + sum((t * v).sum() for t, v in zip(hn, wf, strict=True))).backward()

    tol = {"atol": 1e-10, "rtol": 1e-10}
    torch.testing.assert_close(y, yt, **tol)
    for a, b in zip(final, hn, strict=True):
        torch.testing.assert_close(a, b, **tol)
    torch.testing.assert_close(gx, xt.grad, **tol)
    for a, b in zip(gs, h0, strict=True):
        torch.testing.assert_close(a, b.grad.transpose(0, 1), **tol)
    for a, (n, p) in zip(memrnn_param_grads(layer, module), module.named_parameters(), strict=True):
        if a is not None:
            torch.testing.assert_close(a, p.grad, **tol, msg=lambda m, n=n: f"{n}: {m}")
    # outputs() (a language model's call) is forward's outputs, the packed ones
    torch.testing.assert_close(layer.outputs(x, s0, mask), y.detach(), atol=1e-12, rtol=0)


@pytest.mark.parametrize("name", ["lstm", "gru_bptt", "elman"])
def test_bidirectional_padded_batch_equals_each_row_alone(name, gen):
    """A row of a padded batch gets what it gets alone; outputs past its end are exactly zero,
    and a row of length 0 keeps its initial state (both directions)."""
    layer, _ = twin(name, 2, True)
    lengths = [7, 4, 0, 1]
    x = torch.randn(4, 7, 3, generator=gen, dtype=F64)
    mask = torch.arange(7)[None] < torch.tensor(lengths)[:, None]
    s0 = layer.initial_state(4)
    s0 = type(s0)(*(t + torch.randn(t.shape, generator=gen, dtype=F64) for t in s0))
    y, s = layer(x, s0, mask=mask)
    for b, n in enumerate(lengths):
        yb, sb = layer(x[b : b + 1, :n], type(s0)(*(t[b : b + 1] for t in s0)))
        torch.testing.assert_close(y[b : b + 1, :n], yb, atol=1e-12, rtol=0)
        assert (y[b, n:] == 0).all()
        for t, tb in zip(s, sb, strict=True):
            torch.testing.assert_close(t[b : b + 1], tb, atol=1e-12, rtol=0)
    for t, t0 in zip(s, s0, strict=True):
        torch.testing.assert_close(t[2], t0[2], atol=0, rtol=0)


@pytest.mark.parametrize("name", ["lstm", "gru", "gru_bptt", "elman"])
def test_bidirectional_fast_path_equals_reference_and_trace(name, gen):
    """Under :func:`memrnn.reference_paths` (the per-direction loops over each layer's cell) a
    bidirectional layer gives its fast path's outputs, state and gradients; ``trace`` reports each
    layer and direction ``[B, T, num_layers * 2, H]``, the forward direction's final state at each
    row's last real position and the backward direction's at position 0."""
    layer, _ = twin(name, 2, True)
    x = torch.randn(3, 6, 3, generator=gen, dtype=F64)
    mask = torch.arange(6)[None] < torch.tensor([6, 3, 1])[:, None]
    w = torch.randn(3, 6, 8, generator=gen, dtype=F64)
    results = []
    for reference in (False, True):
        xx = x.clone().requires_grad_()
        layer.zero_grad()
        if reference:
            with reference_paths():
                y, s = layer(xx, mask=mask)
        else:
            y, s = layer(xx, mask=mask)
        ((y * w).sum() + sum((t**2).sum() for t in s)).backward()
        results.append([y, *s, xx.grad, *(p.grad for p in layer.parameters())])
    for a, b in zip(*results, strict=True):
        torch.testing.assert_close(a, b, atol=1e-10, rtol=1e-10)
    tr = layer.trace(x, mask=mask)
    torch.testing.assert_close(tr["output"], results[0][0].detach(), atol=1e-10, rtol=0)
    h = tr["state.h"]
    assert h.shape == (3, 6, 4, 4)
    final = results[0][1].detach()
    last = torch.tensor([5, 2, 0])
    forward_dirs, backward_dirs = [0, 2], [1, 3]
    torch.testing.assert_close(
        h[torch.arange(3), last][:, forward_dirs], final[:, forward_dirs], atol=1e-10, rtol=0
    )
    torch.testing.assert_close(h[:, 0][:, backward_dirs], final[:, backward_dirs], atol=1e-10, rtol=0)
    # the top layer's output is its two directions' h, [forward; backward]
    torch.testing.assert_close(tr["output"], h[:, :, 2:].flatten(2) * mask[..., None], atol=1e-10, rtol=0)


@pytest.mark.parametrize("name", ["lstm", "lstm_reference", "gru", "gru_bptt", "elman", "elman_reference"])
def test_bidirectional_layers_cannot_step(name, gen):
    """``step`` (what generation and a StackRNN controller need) raises, saying why and what to do."""
    layer, _ = twin(name, 1, True)
    with pytest.raises(
        ValueError, match=r"bidirectional=True\) cannot run step by step: its backward direction"
    ):
        layer.step(torch.randn(2, 3, dtype=F64), None)


@pytest.mark.parametrize("memory", ["superposition", "stratification"])
def test_a_bidirectional_controller_is_refused_by_the_stack_rnn(memory, gen):
    """StackRNN's fast path takes a one-layer LSTM's weights directly: a bidirectional one (whose
    output has the controller's width when its hidden size is half of it) must not silently run
    its forward direction alone."""
    controller = LSTMLayer(2 + 2, 2, bidirectional=True)
    with pytest.raises(ValueError, match="a bidirectional controller cannot"):  # refused when built
        StackRNN(2, 4, memory=memory, controller=controller, width=2, depth=3)


# -- dropout -------------------------------------------------------------------------------------
def torch_dropout_transcription(module, x, p, seed):
    """``module`` (a torch RNN with ``num_layers`` layers), run layer by layer from one-layer copies
    of it, with the dropout of torch's layers written out: after each layer but the last, every
    element of its outputs (time-major ``[T, B, F]``) kept with probability ``1 − p`` and scaled by
    ``1 / (1 − p)``; nothing on the last layer's outputs, the inputs or the recurrent state."""
    layers = []
    for k in range(module.num_layers):
        one = type(module)(
            module.input_size if k == 0 else module.hidden_size * (2 if module.bidirectional else 1),
            module.hidden_size,
            batch_first=True,
            bidirectional=module.bidirectional,
            dtype=F64,
            **({"nonlinearity": module.nonlinearity} if isinstance(module, nn.RNN) else {}),
        )
        with torch.no_grad():
            for n, q in one.named_parameters():
                q.copy_(getattr(module, n.replace("_l0", f"_l{k}")))
        layers.append(one)
    torch.manual_seed(seed)
    inp = x
    for k, one in enumerate(layers):
        if k:
            keep = torch.empty(inp.shape[1], inp.shape[0], inp.shape[2], dtype=F64).bernoulli_(1 - p)
            inp = inp * keep.transpose(0, 1) / (1 - p)
        inp = one(inp)[0]
    return inp


@pytest.mark.parametrize("name", ["lstm", "gru", "gru_bptt", "elman", "elman_relu"])
@pytest.mark.parametrize("bidirectional", [False, True])
def test_dropout_in_training_is_torchs_mask_between_layers(name, bidirectional, gen):
    """In training mode with a fixed seed, the fast path's outputs equal the transcription of
    torch's dropout above (which positions, what scaling, from the same draws), and so do the torch
    module's: for the fused LSTM/GRU that is ``nn.LSTM``'s own dropout kept, for the Elman and
    the GRU's ``bptt`` path memrnn's own, drawing torch's mask on an unpadded batch.  In eval
    mode dropout is off: the layer equals the same weights with ``dropout=0``."""
    p = 0.4
    layer, module = twin(name, 3, bidirectional, dropout=p)
    x = torch.randn(3, 6, 3, generator=gen, dtype=F64)
    want = torch_dropout_transcription(module, x, p, seed=7)
    layer.train()
    torch.manual_seed(7)
    y, _ = layer(x)
    torch.testing.assert_close(y, want, atol=1e-12, rtol=0)
    torch.manual_seed(7)
    torch.testing.assert_close(module.train()(x)[0], want, atol=1e-12, rtol=0)
    # the draws did drop: the eval outputs, which equal dropout=0's, differ
    plain = twin(name, 3, bidirectional)[0]
    plain.load_state_dict(layer.state_dict())
    layer.eval()
    torch.testing.assert_close(layer(x)[0], plain(x)[0], atol=0, rtol=0)
    assert (layer(x)[0] - y).abs().max() > 1e-3


@pytest.mark.parametrize("name", ["lstm_reference", "gru_reference", "elman_reference"])
def test_dropout_of_the_step_loop_draws_a_mask_per_step(name, gen):
    """The reference ``step`` in training mode: layer ``k > 0`` reads the outputs of layer ``k − 1``
    times a fresh mask ``[B, H]`` per step (kept with probability ``1 − p``, scaled by
    ``1 / (1 − p)``), drawn step by step and layer by layer; the state carries the undropped ``h``."""
    p, num_layers = 0.5, 3
    layer, module = twin(name, num_layers, False, dropout=p)
    layer.train()
    x = torch.randn(2, 5, 3, generator=gen, dtype=F64)
    torch.manual_seed(3)
    y, s = layer(x)
    cell = {nn.LSTM: nn.LSTMCell, nn.GRU: nn.GRUCell, nn.RNN: nn.RNNCell}[type(module)]
    extra = {"nonlinearity": module.nonlinearity} if cell is nn.RNNCell else {}
    cells = [cell(3 if k == 0 else 4, 4, dtype=F64, **extra) for k in range(num_layers)]  # before the seed
    with torch.no_grad():
        for k, one in enumerate(cells):
            for n, q in one.named_parameters():
                q.copy_(getattr(module, f"{n}_l{k}"))
    torch.manual_seed(3)
    h = torch.zeros(num_layers, 2, 4, dtype=F64)
    c = torch.zeros(num_layers, 2, 4, dtype=F64)
    ys = []
    for t in range(5):
        inp = x[:, t]
        for k, one in enumerate(cells):
            if k:
                inp = inp * torch.empty(2, 4, dtype=F64).bernoulli_(1 - p) / (1 - p)
            if cell is nn.LSTMCell:
                h[k], c[k] = one(inp, (h[k], c[k]))
            else:
                h[k] = one(inp, h[k])
            inp = h[k].clone()
        ys.append(inp)
    torch.testing.assert_close(y, torch.stack(ys, 1), atol=1e-12, rtol=0)
    torch.testing.assert_close(s.h.transpose(0, 1), h, atol=1e-12, rtol=0)


@pytest.mark.parametrize("name", ["lstm", "gru", "gru_bptt", "elman"])
@pytest.mark.parametrize("bidirectional", [False, True])
def test_dropout_layers_in_eval_mode_equal_their_reference(name, bidirectional, gen):
    """In eval mode a stacked layer with dropout is deterministic, and its fast path equals the
    reference loop (``step`` loop, or per-direction loops when bidirectional) on a padded batch:
    outputs, final state and gradients."""
    layer, _ = twin(name, 2, bidirectional, dropout=0.3)
    layer.eval()
    x = torch.randn(3, 6, 3, generator=gen, dtype=F64)
    mask = torch.arange(6)[None] < torch.tensor([6, 2, 4])[:, None]
    w = torch.randn(3, 6, layer.output_size, generator=gen, dtype=F64)
    results = []
    for reference in (False, True):
        xx = x.clone().requires_grad_()
        layer.zero_grad()
        with reference_paths() if reference else torch.enable_grad():
            y, s = layer(xx, mask=mask)
        ((y * w).sum() + sum((t**2).sum() for t in s)).backward()
        results.append([y, *s, xx.grad, *(p.grad for p in layer.parameters())])
    for a, b in zip(*results, strict=True):
        torch.testing.assert_close(a, b, atol=1e-10, rtol=1e-10)
    if not bidirectional:  # the step loop too
        st, ys = None, []
        for x_t in x.unbind(1):
            y_t, st = layer.step(x_t, st)
            ys.append(y_t)
        torch.testing.assert_close(torch.stack(ys, 1), layer(x)[0], atol=1e-10, rtol=1e-10)


@pytest.mark.parametrize("cls", [LSTMLayer, GRULayer, ElmanRNN])
@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"dropout": 1.0, "num_layers": 2}, r"dropout must be in \[0, 1\), got 1\.0"),
        ({"dropout": -0.1, "num_layers": 2}, r"dropout must be in \[0, 1\), got -0\.1"),
        ({"dropout": float("nan"), "num_layers": 2}, "dropout must be finite, got nan"),
        ({"dropout": "0.2", "num_layers": 2}, "dropout must be a real number, got '0.2'"),
        ({"dropout": True, "num_layers": 2}, "dropout must be a real number, got True"),
        (
            {"dropout": 0.2},
            r"dropout=0\.2 acts between stacked layers .* needs num_layers > 1, got num_layers=1",
        ),
        ({"bidirectional": "yes"}, "bidirectional must be True or False, got 'yes'"),
        ({"num_layers": 0}, "num_layers must be a positive integer, got 0"),
    ],
)
def test_bad_stacking_arguments_are_refused_by_name(cls, kwargs, match):
    """``dropout`` is a number in ``[0, 1)``; with one layer it would act on nothing, which torch
    only warns about and memrnn refuses."""
    with pytest.raises(ValueError, match=match):
        cls(3, 4, **kwargs)


def test_forget_bias_reaches_both_directions():
    torch.manual_seed(0)
    plain = LSTMLayer(3, 4, num_layers=2, bidirectional=True)
    torch.manual_seed(0)
    shifted = LSTMLayer(3, 4, num_layers=2, bidirectional=True, forget_bias=1.0)
    for n, p in shifted.rnn.named_parameters():
        delta = p - getattr(plain.rnn, n)
        want = torch.zeros_like(p)
        if n.startswith("bias_ih"):
            want[4:8] = 1.0
        torch.testing.assert_close(delta, want, atol=1e-6, rtol=0, msg=n)


# -- layers that do not stack ---------------------------------------------------------------------
NOT_STACKED = {
    JordanRNN: {"input_size": 3, "hidden_size": 4, "feedback_size": 2},
    ReLUCounter: {"input_size": 3, "hidden_size": 4},
    CounterLSTM: {"input_size": 3, "hidden_size": 4},
    SecondOrderRNN: {"input_size": 3, "hidden_size": 4},
    NNPDA: {"input_size": 3, "num_states": 3, "stack_symbols": 2, "depth": 4},
    Reservoir: {"input_size": 3, "units": 4},
}


@pytest.mark.parametrize("cls", list(NOT_STACKED), ids=lambda c: c.__name__)
@pytest.mark.parametrize("arg", ["num_layers", "dropout", "bidirectional"])
def test_layers_that_do_not_stack_refuse_the_arguments(cls, arg):
    """A Jordan network feeds its output back, the counter layers, the second-order RNN and the
    nnPDA are single-layer constructions (Weiss et al. 2018, Giles et al. 1990, Stogin et al.
    2020), a reservoir is frozen: none takes ``num_layers``, ``dropout`` or ``bidirectional``, and
    Python's error names the argument."""
    cls(**NOT_STACKED[cls])
    with pytest.raises(TypeError, match=rf"unexpected keyword argument '{arg}'"):
        cls(**NOT_STACKED[cls], **{arg: 2 if arg == "num_layers" else True})


def test_the_cli_takes_the_stacking_arguments_and_names_an_unknown_one(tmp_path, capsys):
    """Through LightningCLI YAML: an Elman layer takes ``num_layers``, ``dropout`` and
    ``bidirectional``; a Jordan network's ``num_layers`` ends the run with an error naming it."""
    from pathlib import Path

    from memrnn.lit.cli import build_cli

    root = Path(__file__).resolve().parents[2]

    def config(layer: str) -> Path:
        path = tmp_path / "run.yaml"
        path.write_text(
            f"base: {root / 'configs/chomsky/_base.yaml'}\nmodel:\n  init_args:\n    layer:\n{layer}"
        )
        return path

    args = [f"--trainer.logger.init_args.save_dir={tmp_path}"]
    good = config(
        "      class_path: memrnn.layers.ElmanRNN\n"
        "      init_args: {hidden_size: 8, num_layers: 2, dropout: 0.25}\n"
    )
    cli = build_cli(
        ["--config", str(good), *args], run=False, default_config_files=[root / "configs/defaults.yaml"]
    )
    assert isinstance(cli.model.layer, ElmanRNN)
    assert (cli.model.layer.num_layers, cli.model.layer.dropout) == (2, 0.25)
    bad = config(
        "      class_path: memrnn.layers.JordanRNN\n"
        "      init_args: {hidden_size: 8, feedback_size: 4, num_layers: 2}\n"
    )
    with pytest.raises(SystemExit):
        build_cli(
            ["--config", str(bad), *args], run=False, default_config_files=[root / "configs/defaults.yaml"]
        )
    err = capsys.readouterr().err.splitlines()[-1]
    assert "JordanRNN has no argument 'num_layers'" in err, err


# -- the batch-first state -----------------------------------------------------------------------
@pytest.mark.parametrize("name", ["lstm", "gru", "elman"])
@pytest.mark.parametrize(("num_layers", "bidirectional"), [(1, False), (2, False), (2, True)])
def test_state_layout_and_conversion_to_torch(name, num_layers, bidirectional, gen):
    """The state is torch's ``h_n`` batch first: ``to_torch_state`` gives exactly what the torch
    module returns, ``from_torch_state`` takes it back and continues as torch does; the top layer
    is ``state.h[:, -1]`` (its backward direction's when bidirectional; forward ``[:, -2]``)."""
    layer, module = twin(name, num_layers, bidirectional)
    x = torch.randn(3, 5, 3, generator=gen, dtype=F64)
    y, s = layer(x)
    _, hn = module(x)
    hn = hn if isinstance(hn, tuple) else (hn,)
    converted = layer.to_torch_state(s)
    for a, b in zip(converted if isinstance(converted, tuple) else (converted,), hn, strict=True):
        assert a.is_contiguous()
        torch.testing.assert_close(a, b, atol=1e-12, rtol=0)
    back = layer.from_torch_state(hn if len(hn) > 1 else hn[0])
    for a, b in zip(back, s, strict=True):
        torch.testing.assert_close(a, b, atol=0, rtol=0)
    x2 = torch.randn(3, 4, 3, generator=gen, dtype=F64)
    torch.testing.assert_close(
        layer(x2, back)[0], module(x2, hn if len(hn) > 1 else hn[0])[0], atol=1e-12, rtol=0
    )
    h = s.h if s.h.dim() == 3 else s.h[:, None]
    if bidirectional:
        torch.testing.assert_close(h[:, -2], y[:, -1, :4], atol=0, rtol=0)
        torch.testing.assert_close(h[:, -1], y[:, 0, 4:], atol=0, rtol=0)
    else:
        torch.testing.assert_close(h[:, -1], y[:, -1], atol=0, rtol=0)
    with pytest.raises(
        ValueError, match=r"from_torch_state: .*expected .*\[num_layers \* num_directions, batch"
    ):
        layer.from_torch_state(
            tuple(t.transpose(0, 1) for t in hn) if len(hn) > 1 else hn[0].transpose(0, 1)[:, :1]
        )
    with pytest.raises(ValueError, match=r"to_torch_state: .*expected \[batch"):
        layer.to_torch_state(type(s)(*(t[:, None] for t in s)))


def test_the_docs_say_where_the_layer_dimension_is():
    """Each state's docstring says where its layer dimension is (the stacked layers': the second,
    the last layer ``state.h[:, -1]``) or that it has none; the gated layers add a note for
    ``nn.LSTM`` users (state layout, NamedTuple return, conversion)."""
    for cls in (LSTMLayer, GRULayer):
        doc = cls.__doc__
        torch_name = "nn.LSTM" if cls is LSTMLayer else "nn.GRU"
        for phrase in (f"Coming from ``{torch_name}``", "state.h[:, -1]", "to_torch_state", "NamedTuple"):
            assert phrase in doc, (cls.__name__, phrase)
    for state in (LSTMState, GRUState, ElmanState):
        assert "state.h[:, -1]" in state.__doc__, state.__name__
    for state in (
        JordanState,
        ReLUCounterState,
        CounterLSTMState,
        SecondOrderState,
        NNPDAState,
        ReservoirState,
    ):
        doc = " ".join(state.__doc__.split())
        assert "batch first" in doc and "no layer dimension" in doc, state.__name__


def test_deepcopy_and_state_dict_of_stacked_bidirectional_layers(gen):
    """Parameter names follow torch's (``_l{k}``, ``_reverse``), so a state dict round-trips."""
    for name in ("lstm", "elman"):
        layer, _ = twin(name, 2, True)
        other = copy.deepcopy(layer)
        for p in other.parameters():
            p.data.normal_()
        other.load_state_dict(layer.state_dict())
        x = torch.randn(2, 3, 3, generator=gen, dtype=F64)
        torch.testing.assert_close(other(x)[0], layer(x)[0], atol=0, rtol=0)
    assert "weight_ih_l1_reverse" in dict(ElmanRNN(3, 4, num_layers=2, bidirectional=True).named_parameters())
    assert set(dict(ElmanRNN(3, 4).named_parameters())) == {"weight_ih", "weight_hh", "bias"}


def test_a_bidirectional_layer_is_refused_where_targets_are_future_inputs(tmp_path):
    """Next-symbol sets and per-prefix labels are about a position's future, and a language model's
    targets are its next inputs: a bidirectional layer would read them; a transduction, whose
    outputs are read at blank inputs, trains with one."""
    bi = functools.partial(LSTMLayer, hidden_size=4, bidirectional=True)
    with pytest.raises(ValueError, match="next_set and acceptor_prefix"):
        SequenceModule(bi, 6, 5, objectives={"next_set": 1.0})
    trainer = L.Trainer(max_steps=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, default_root_dir=tmp_path, limit_val_batches=0)  # fmt: skip
    lm = FormalLanguageDataModule(DyckKM(2, 2), train_size=8, val_size=4, test_size=4, batch_size=4)
    with pytest.raises(ValueError, match="targets are the next inputs"):
        trainer.fit(SequenceModule(bi, lm.vocab_size, lm.num_symbols), datamodule=lm)
    transduction = ChomskyDataModule("reverse_string", train_size=8, val_size=4, test_per_length=1,
                                     test_lengths=(42, 42), batch_size=4)  # fmt: skip
    L.Trainer(max_steps=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
              enable_model_summary=False, default_root_dir=tmp_path, limit_val_batches=0).fit(
        SequenceModule(bi, transduction.vocab_size, transduction.num_symbols), datamodule=transduction
    )  # fmt: skip
