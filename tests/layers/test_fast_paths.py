"""What every fast path shares: the token buckets' contraction and weight gradient, first-order
backward passes (a gradient penalty raises, :func:`memrnn.reference_paths` gives second
derivatives), and the fused paths on CUDA against CPU.  Each mechanism's fast path against its
reference is in ``tests/ops/test_<mechanism>.py``."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from memrnn.layers import NNPDA, CounterLSTM, GRULayer, JordanRNN, ReLUCounter, SecondOrderRNN
from memrnn.ops.buckets import TokenBuckets
from memrnn.ops.dispatch import implementation
from tests.ops.layer_paths import Under


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
