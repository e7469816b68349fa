import contextlib

import pytest
import torch
from torch import nn

from memrnn import reference_paths
from memrnn.layers import GRULayer, LSTMLayer, gated
from memrnn.ops import dispatch
from memrnn.ops.dispatch import implementation


@pytest.mark.parametrize(("cls", "impl"), [(LSTMLayer, None), (GRULayer, None), (GRULayer, "bptt")])
@pytest.mark.parametrize(("dtype", "tol"), [(torch.float32, 1e-5), (torch.float64, 1e-10)])
@pytest.mark.parametrize("num_layers", [1, 2])
@pytest.mark.parametrize(("chunk", "padded"), [(None, True), (4, True), (4, False)])
def test_fast_path_equals_gate_level_reference(
    cls, impl, dtype, tol, num_layers, chunk, padded, gen, monkeypatch
):
    """The default path (torch's kernel; the GRU's hand-written BPTT under ``implementation("bptt")``)
    against the same layer inside ``reference_paths()``: outputs, final state and gradients (inputs,
    initial state, parameters), with padding and a zero-length row, 1e-5 in float32 and 1e-10 in
    float64; ``chunk``: torch's kernel runs on chunks of 4 steps (9 steps: 3 chunks, the last
    holding one row's last step only; :func:`memrnn.ops.dispatch.torch_rnn_chunk`)."""
    if chunk is not None:
        monkeypatch.setattr(dispatch, "TORCH_RNN_CHUNK", chunk)
    torch.manual_seed(0)
    layer = cls(4, 6, num_layers=num_layers).to(dtype)
    x = torch.randn(4, 9, 4, generator=gen, dtype=dtype)
    mask = torch.arange(9)[None] < torch.tensor([9, 5, 0, 2])[:, None] if padded else None
    s0 = layer.initial_state(4, dtype=dtype)
    s0 = type(s0)(*[t + 0.5 * torch.randn(t.shape, generator=gen, dtype=dtype) for t in s0])
    w = torch.randn(4, 9, 6, generator=gen, dtype=dtype)
    fast = contextlib.nullcontext() if impl is None else implementation(impl)
    results = []
    for ctx in (fast, reference_paths()):
        layer.zero_grad()
        xx = x.clone().requires_grad_()
        ss = type(s0)(*[t.clone().requires_grad_() for t in s0])
        with ctx:
            y, s = layer(xx, ss, mask=mask)
        ((y * w).sum() + sum(t.sin().sum() for t in s)).backward()
        results.append((y, s, xx.grad, [t.grad for t in ss], [p.grad.clone() for p in layer.parameters()]))
    (y1, s1, gx1, gs1, gp1), (y2, s2, gx2, gs2, gp2) = results
    torch.testing.assert_close(y1, y2, atol=tol, rtol=tol)
    for a, b in zip([*s1, gx1, *gs1, *gp1], [*s2, gx2, *gs2, *gp2], strict=True):
        torch.testing.assert_close(a, b, atol=tol, rtol=tol)


def test_torch_rnn_chunk_splits_only_long_unidirectional_cpu_sequences():
    """The heuristic behind the chunked torch kernels (:func:`memrnn.ops.dispatch.torch_rnn_chunk`):
    one call up to ``TORCH_RNN_CHUNK`` steps, for a bidirectional module and off CPU; chunks of
    ``TORCH_RNN_CHUNK`` steps past it."""
    n = dispatch.TORCH_RNN_CHUNK
    assert dispatch.torch_rnn_chunk(torch.zeros(2, n, 3)) is None
    assert dispatch.torch_rnn_chunk(torch.zeros(2, n + 1, 3)) == n
    assert dispatch.torch_rnn_chunk(torch.zeros(2, n + 1, 3), bidirectional=True) is None
    assert dispatch.torch_rnn_chunk(torch.zeros(2, n + 1, 3, device="meta")) is None


def test_long_sequences_run_torch_kernel_in_chunks(monkeypatch, gen):
    """``LSTMLayer`` and ``GRULayer`` call their ``nn.LSTM``/``nn.GRU`` once per chunk that
    :func:`memrnn.ops.dispatch.torch_rnn_chunk` gives, with the same numbers as one call."""
    monkeypatch.setattr(dispatch, "TORCH_RNN_CHUNK", 4)
    for cls in (LSTMLayer, GRULayer):
        layer = cls(3, 5).double()
        calls = []
        layer.rnn.register_forward_hook(lambda *_, calls=calls: calls.append(1))
        x = torch.randn(2, 10, 3, generator=gen, dtype=torch.float64)
        y, _ = layer(x)
        assert len(calls) == 3
        torch.testing.assert_close(y, layer.rnn(x)[0])


def test_lstm_trace_reports_gates_and_satisfies_the_equations(gen):
    layer = LSTMLayer(3, 5).double()
    x = torch.randn(2, 6, 3, generator=gen, dtype=torch.float64)
    tr = layer.trace(x)
    for key in ("i", "f", "o", "c_tilde", "c", "h"):
        assert tr[key].shape == (2, 6, 1, 5), key
    c_prev = torch.cat([torch.zeros(2, 1, 1, 5, dtype=torch.float64), tr["c"][:, :-1]], 1)
    torch.testing.assert_close(tr["c"], tr["f"] * c_prev + tr["i"] * tr["c_tilde"])
    torch.testing.assert_close(tr["h"], tr["o"] * torch.tanh(tr["c"]))
    torch.testing.assert_close(tr["h"][:, :, 0], layer(x)[0])  # the fused path agrees
    for key in ("i", "f", "o"):
        assert ((tr[key] > 0) & (tr[key] < 1)).all()


def test_gru_trace_reports_gates(gen):
    layer = GRULayer(3, 5).double()
    x = torch.randn(2, 6, 3, generator=gen, dtype=torch.float64)
    tr = layer.trace(x)
    assert {"r", "z", "n", "h"} <= set(tr)
    h_prev = torch.cat([torch.zeros(2, 1, 1, 5, dtype=torch.float64), tr["h"][:, :-1]], 1)
    torch.testing.assert_close(tr["h"], (1 - tr["z"]) * tr["n"] + tr["z"] * h_prev)


def test_wrapped_module_is_a_plain_torch_lstm(gen):
    """Users can take ``layer.rnn`` out and use it in models that know nothing of memrnn."""
    layer = LSTMLayer(3, 5, num_layers=2)
    assert type(layer.rnn) is nn.LSTM and layer.rnn.batch_first
    x = torch.randn(2, 4, 3, generator=gen)
    y_plain, (h, c) = layer.rnn(x)
    y, s = layer(x)
    torch.testing.assert_close(y, y_plain)
    torch.testing.assert_close(s.h, h.transpose(0, 1))
    torch.testing.assert_close(s.c, c.transpose(0, 1))
    assert set(layer.state_dict()) == {f"rnn.{k}" for k in layer.rnn.state_dict()}
    # the batch-first state converts to and from torch's [num_layers, B, H], and carries on alike
    torch.testing.assert_close(s.to_torch(), (h, c), atol=0, rtol=0)
    assert gated.LSTMState.from_torch((h, c)).h.shape == (2, 2, 5)
    x2 = torch.randn(2, 3, 3, generator=gen)
    torch.testing.assert_close(
        layer(x2, gated.LSTMState.from_torch((h, c)))[0], layer.rnn(x2, s.to_torch())[0]
    )
    gru = GRULayer(3, 5, num_layers=2)
    _, h_gru = gru.rnn(x)
    _, s_gru = gru(x)
    torch.testing.assert_close(s_gru.to_torch(), h_gru)
    torch.testing.assert_close(gated.GRUState.from_torch(h_gru).h, s_gru.h)


def test_float32_default_and_device_dtype_arguments():
    layer = LSTMLayer(2, 3, dtype=torch.float64)
    assert layer.rnn.weight_ih_l0.dtype == torch.float64
    assert layer.initial_state(2).h.dtype == torch.float64
    assert "fused" not in repr(layer)
    with pytest.raises(ValueError, match="num_layers must be a positive integer, got 0"):
        GRULayer(2, 3, num_layers=0)


def test_forget_bias_shifts_only_the_forget_gate_bias():
    torch.manual_seed(0)
    plain = LSTMLayer(3, 4, num_layers=2)
    torch.manual_seed(0)
    shifted = LSTMLayer(3, 4, num_layers=2, forget_bias=1.5)
    for layer in range(2):
        a, b = getattr(plain.rnn, f"bias_ih_l{layer}"), getattr(shifted.rnn, f"bias_ih_l{layer}")
        torch.testing.assert_close(b - a, torch.tensor([0.0] * 4 + [1.5] * 4 + [0.0] * 8), atol=1e-6, rtol=0)
    shifted.reset_parameters()
    assert (shifted.rnn.bias_ih_l0[4:8] - 1.5).abs().max() <= 1 / 2  # torch's U(-1/sqrt(h), 1/sqrt(h)) + 1.5
    with pytest.raises(ValueError, match=r"forget_bias=1\.0 needs bias=True"):
        LSTMLayer(3, 4, bias=False, forget_bias=1.0)
