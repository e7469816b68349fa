"""What the whole-sequence recurrences with hand-written backpropagation through time share.

Autograd over a per-step loop records ~15 nodes per step and replays them one by one; these
:class:`torch.autograd.Function` s run the forward loop without a graph, keep what the backward
needs in ``[T, B, ·]`` buffers, compute the local derivatives for blocks of :data:`BLOCK` steps
at once (a block's buffers stay in cache, so time stays linear in ``T``), and leave
only a few fused operations and one matrix product per step in the backward loop.  The weight
gradients are a few large matrix products (per block or per sequence).  Masks are the caller's business: the
recurrences run over every step and the caller masks outputs and picks each row's final state
with :func:`memrnn.ops.buckets.final_by_length` (right padding makes this exact).

The backward passes are first order (``once_differentiable``: differentiating them again raises);
inside :func:`memrnn.reference_paths` the layers run the reference loop under autograd, for second derivatives.

The Functions live with their mechanism: :class:`memrnn.ops.lstm.cpu.LSTMSequence`,
:class:`memrnn.ops.counter.cpu.CounterRNNSequence`, :class:`memrnn.ops.jordan.cpu.JordanSequence`,
:class:`memrnn.ops.gru.cpu.GRUSequence` (and :mod:`memrnn.ops.elman.cpu`).  All are checked against the layers' reference ``step`` loops in each mechanism's ``tests/ops/test_<mechanism>.py``
(outputs, final states and all gradients, float64 to rounding, float32, right padding).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from memrnn.core.activations import identity


def derivative(fn: Callable[[Tensor], Tensor], a: Tensor) -> Tensor:
    """Elementwise derivative ``fn'(a)`` for all entries at once (``fn`` elementwise), with the
    same subgradient conventions as autograd uses in the reference loop."""
    with torch.enable_grad():
        leaf = a.detach().requires_grad_()
        (d,) = torch.autograd.grad(fn(leaf), leaf, torch.ones_like(leaf))
    return d


#: elementwise activations whose derivative is a function of their output ``y = fn(a)``, as
#: autograd computes it (``tanh_backward``, ``sigmoid_backward``; the identity has none to take)
_FROM_OUTPUT: dict[Callable[[Tensor], Tensor], Callable[[Tensor], Tensor]] = {
    torch.tanh: lambda y: 1 - y * y,
    torch.sigmoid: lambda y: (1 - y) * y,
    torch.relu: lambda y: (y > 0).to(y.dtype),  # threshold_backward on the result
    identity: torch.ones_like,
}


def from_output(fn: Callable[[Tensor], Tensor]) -> Callable[[Tensor], Tensor] | None:
    """``y -> fn'(a)`` for ``y = fn(a)`` where that exists (tanh, sigmoid, relu, identity), else
    ``None``: the sequences that have it keep their outputs for the backward, not the
    pre-activations as well."""
    return _FROM_OUTPUT.get(fn)


BLOCK = 64  # steps whose local derivatives the backward passes compute at once (cache-sized)


def blocks(T: int) -> list[tuple[int, int]]:
    """``(lo, hi)`` step ranges of at most :data:`BLOCK` steps, last block first."""
    return [(max(0, hi - BLOCK), hi) for hi in range(T, 0, -BLOCK)]


def time_major(x: Tensor) -> Tensor:
    """``[B, T, n]`` -> contiguous ``[T·B, n]`` (time-major rows)."""
    return x.transpose(0, 1).reshape(-1, x.shape[-1])


def input_grads_block(gb, x, w_in, lo, hi, grad_w_in, grad_b, grad_xt) -> None:
    """Accumulate, for steps ``lo..hi−1``, the gradients of a transposed input projection
    ``W_in x_tᵀ + b`` from ``gb = ∂L/∂(W_in x_tᵀ + b)`` ``[hi−lo, G, B]``: into ``grad_w_in
    [G, n]``, ``grad_b [G]`` and ``grad_xt[lo:hi]`` ``[hi−lo, n, B]`` (each skipped when None)."""
    if grad_w_in is not None:
        grad_w_in += torch.bmm(gb, x[:, lo:hi].transpose(0, 1)).sum(0)
    if grad_b is not None:
        grad_b += gb.sum((0, 2))
    if grad_xt is not None:
        torch.bmm(w_in.t().expand(hi - lo, -1, gb.shape[1]), gb, out=grad_xt[lo:hi])


def input_grads(ctx, ga: Tensor, xt: Tensor, w_in: Tensor, B: int, T: int):
    """Gradients of ``pre = x w_inᵀ + b`` from ``∂pre`` time-major ``[T·B, G]``."""
    need_x, need_w, need_b = ctx.needs_input_grad[:3]
    grad_x = (ga @ w_in).view(T, B, -1).transpose(0, 1) if need_x else None
    grad_w = ga.t() @ xt if need_w else None
    grad_b = ga.sum(0) if need_b else None
    return grad_x, grad_w, grad_b


#: activations with an ``out=`` form, by ``__name__``: the forward loops write into their buffers
OUT_FNS: dict[str, Callable[..., Tensor]] = {
    "tanh": torch.tanh,
    "sigmoid": torch.sigmoid,
    "relu": lambda a, out: torch.clamp_min(a, 0, out=out),
}
