"""Where each backend's tests run, and the Triton kernels' comparison with their references: the
skip marks (``needs_triton``: Triton and a GPU or its interpreter, ``TRITON_INTERPRET=1``, set by
``tests/conftest.py`` when there is no GPU; ``needs_native``: memrnn's C++ loops built here), the
device the kernels run on, and :func:`assert_kernel_matches` (a kernel against its mechanism's
float64 reference loop: outputs and every gradient) and :func:`assert_member_kernels` (the kernels
with members: one launch for all of them, each member its single launch), shared by the
``tests/ops/test_<mechanism>.py`` files; and, for the hand-written backwards' tests, :func:`function_nodes` (the graph's nodes of
``torch.autograd.Function`` subclasses) and :func:`assert_unwritten` (a saved tensor bit for bit
unchanged)."""

from __future__ import annotations

import pytest
import torch

from memrnn.ops import native
from memrnn.ops.dispatch import interpreting, triton_available

needs_triton = pytest.mark.skipif(
    not triton_available() or (not torch.cuda.is_available() and not interpreting()),
    reason="needs Triton (pip install triton) and a GPU or TRITON_INTERPRET=1",
)


needs_native = pytest.mark.skipif(not native.native_available(), reason="no C++ compiler here")


DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
# (T, B, size): one step and none, a partial tile, and several blocks of units with two tiles
SHAPES = [(1, 3, 5), (0, 3, 5), (5, 19, 70)]


def grads_of(fn, inputs, weights):
    """``fn(*inputs)`` (a tensor or a tuple) and the gradients of ``Σ out·weight`` for every input
    that requires grad."""
    out = fn(*inputs)
    outs = out if isinstance(out, tuple) else (out,)
    loss = sum((o.float() * w).sum() for o, w in zip(outs, weights, strict=True))
    need = [t for t in inputs if isinstance(t, torch.Tensor) and t.requires_grad]
    grads = torch.autograd.grad(loss, need, allow_unused=True) if need and loss.requires_grad else []
    return outs, grads


def assert_kernel_matches(fn, make_inputs, out_shapes, atol, dtype=torch.float32):
    gen = torch.Generator().manual_seed(0)
    weights = [torch.randn(s, generator=gen).to(DEVICE) for s in out_shapes]
    ref_out, ref_grads = grads_of(lambda *a: fn(*a, impl="reference"), make_inputs(torch.float64), weights)
    out, gr = grads_of(lambda *a: fn(*a, impl="triton"), make_inputs(dtype), weights)
    for a, b in zip(out, ref_out, strict=True):
        assert a.dtype == dtype
        torch.testing.assert_close(a.double(), b, atol=atol, rtol=atol)
    for a, b in zip(gr, ref_grads, strict=True):
        if b is None:
            assert a is None or a.numel() == 0 or float(a.abs().max()) == 0
        else:
            torch.testing.assert_close(a.double(), b, atol=atol * 10, rtol=atol * 10)


def randn(*shape, dtype, seed, scale=1.0, grad=True):
    g = torch.Generator().manual_seed(seed)
    return (
        (torch.randn(*shape, generator=g, dtype=torch.float64) * scale).to(DEVICE, dtype).requires_grad_(grad)
    )


def function_nodes(roots) -> list:
    """The autograd nodes of ``torch.autograd.Function`` subclasses in the graph behind ``roots``
    (grad_fns; None skipped), each once; a node's ``_forward_cls`` is its Function."""
    seen, found, todo = set(), [], [r for r in roots if r is not None]
    while todo:
        node = todo.pop()
        if node in seen:
            continue
        seen.add(node)
        if getattr(node, "_forward_cls", None) is not None:
            found.append(node)
        todo.extend(f for f, _ in node.next_functions if f is not None)
    return found


def assert_unwritten(now: torch.Tensor, before: torch.Tensor, what: str) -> None:
    """``now`` holds ``before``'s bytes: compared bit for bit, since a saved buffer may keep cells
    it never wrote (the recomputed memory's checkpoints copy only the rows its window can hold),
    whose garbage can be NaN, which no value comparison equals to itself."""
    assert now.shape == before.shape and now.dtype == before.dtype, f"{what} changed shape or dtype"
    a, b = (t.contiguous().reshape(-1).view(torch.uint8) for t in (now, before))
    if not torch.equal(a, b):
        bad = (now != before) & ~(now.isnan() & before.isnan()) if now.is_floating_point() else now != before
        raise AssertionError(f"{what} written: {int(bad.sum())} of {now.numel()} elements differ")


class Launches:
    """A kernel whose launches are recorded: ``kernel[grid](...)`` runs it and appends ``grid``."""

    def __init__(self, kernel):
        self.kernel, self.grids = kernel, []

    def __getitem__(self, grid):
        self.grids.append(grid)
        return self.kernel[grid]


def assert_member_kernels(
    monkeypatch, module, kernels, run, make_inputs, members, rows, atol=1e-5, per_row=False
):
    """The Triton kernels ``kernels`` (names in ``module``) with members (issue 67): ``run(inputs,
    impl)`` (a tuple of outputs) on ``make_inputs(dtype)`` (every tensor with the member dimension
    first; the ones wanting a gradient are differentiated) launches each kernel once for all
    members, a grid of ``ceil(rows / BLOCK_B)`` row tiles (``per_row``: ``rows`` programs) ×
    ``members``; its float32 outputs and
    gradients equal the float64 member reference (``impl="reference"``) to ``atol``; and member
    ``m`` equals the same kernels on its ``[m]`` slices (one model: ``M = 1``) to 1e-6, the weight
    gradients being one product per member against one product."""
    from memrnn.ops.triton_common import BLOCK_B

    spies = {name: Launches(getattr(module, name)) for name in kernels}
    for name, spy in spies.items():
        monkeypatch.setattr(module, name, spy)
    ref = make_inputs(torch.float64)
    got_in = [a.detach().float().requires_grad_(a.requires_grad) if a.is_floating_point() else a for a in ref]
    gen = torch.Generator().manual_seed(5)
    weights = [
        torch.randn(o.shape, generator=gen, dtype=torch.float64).to(DEVICE) for o in run(ref, "reference")
    ]

    def outputs_and_grads(inputs, impl, m=slice(None)):
        outs = run(inputs, impl)
        loss = sum((o.double() * w[m]).sum() for o, w in zip(outs, weights, strict=True))
        return (*outs, *torch.autograd.grad(loss, [a for a in inputs if a.requires_grad]))

    want = outputs_and_grads(ref, "reference")
    got = outputs_and_grads(got_in, "triton")
    tiles = rows if per_row else -(-rows // BLOCK_B)
    for name, spy in spies.items():
        assert spy.grids == [(tiles, members)], (name, spy.grids)
    for a, b in zip(got, want, strict=True):
        assert a.dtype == torch.float32 and a.shape == b.shape
        torch.testing.assert_close(a.double(), b, atol=atol, rtol=atol)
    for m in range(members):
        one = [a.detach()[m].clone().requires_grad_(a.requires_grad) for a in got_in]
        for a, b in zip(outputs_and_grads(one, "triton", m), got, strict=True):
            torch.testing.assert_close(a, b[m], atol=1e-6, rtol=1e-6)
    for name, spy in spies.items():
        assert spy.grids[1:] == [(tiles, 1)] * members, (name, spy.grids)
