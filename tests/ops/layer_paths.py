"""A layer's default (fast) paths against its reference, at the layer: :class:`Under` runs the same
module (the same weights) inside :func:`memrnn.reference_paths` or an implementation, and
:func:`compare_layers` holds outputs, final states and every gradient equal, in float64 (to rounding) and
float32.  Shared by the ``tests/ops/test_<mechanism>.py`` files and ``tests/layers/test_fast_paths.py``."""

from __future__ import annotations

import torch

from memrnn import reference_paths

TOL = {torch.float64: 1e-10, torch.float32: 2e-4}


def weighted_loss(y, state):
    """The loss every comparison differentiates: the outputs weighed along their last axis, the
    squares of the final state's leaves."""
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


def compare_layers(fast, ref, x, state, mask, dtype):
    """``fast`` and ``ref`` (same weights) agree on outputs, final states and the gradients of
    the input (when it requires grad), every initial-state leaf and every parameter."""
    out = []
    inputs = [x] if x.requires_grad else []
    for model in (fast, ref):
        y, s = model(x, state, mask)
        grads = torch.autograd.grad(weighted_loss(y, s), [*inputs, *state, *model.parameters()])
        out.append((y, s, grads))
    (y1, s1, g1), (y2, s2, g2) = out
    tol = TOL[dtype]
    torch.testing.assert_close(y1, y2, atol=tol, rtol=tol)
    for a, b in zip(s1, s2, strict=True):
        torch.testing.assert_close(a, b, atol=tol, rtol=tol)
    for a, b in zip(g1, g2, strict=True):
        torch.testing.assert_close(a, b, atol=tol * 10, rtol=tol * 10)


def random_mask(B, T, seed=0):
    """Right padding ``[B, T]``: random row lengths, the first row of length T."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(0, T + 1, (B,), generator=g)
    lengths[0] = T
    return torch.arange(T)[None] < lengths[:, None]
