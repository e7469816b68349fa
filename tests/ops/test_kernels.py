"""memrnn's Triton kernels as a whole: their tests run where the dev setup installs Triton, and every
layer with a kernel, run with every op forced to Triton, equals the same layer on its reference
loop.  Each kernel against its mechanism's reference is in ``tests/ops/test_<mechanism>.py``."""

from __future__ import annotations

import platform

import pytest
import torch
import torch.nn.functional as F

from memrnn.core import create_layer, list_layers, state_leaves, state_map
from memrnn.ops.dispatch import implementation, interpreting, triton_available
from tests.ops.backends import DEVICE, needs_triton


def test_the_kernel_tests_run_where_the_dev_setup_installs_triton():
    """On Linux x86-64 (CI's machines) the dev extra installs Triton and ``tests/conftest.py``
    sets ``TRITON_INTERPRET=1`` without a GPU, so the kernels' tests must run there, not skip."""
    if platform.system() != "Linux" or platform.machine() != "x86_64":
        pytest.skip("the dev extra installs Triton on Linux x86-64 only")
    assert triton_available(), "Triton is missing from the test environment (pyproject's dev extra)"
    assert torch.cuda.is_available() or interpreting()


LAYERS_WITH_KERNELS = [
    n
    for n in list_layers()
    if n.startswith(
        (
            "elman",
            "hewitt_srnn",
            "reservoir",
            "jordan",
            "relu_counter",
            "counter_lstm",
            "second_order",
            "nnpda",
            "superposition_lstm",
            "superposition_elman",
            "stratification_lstm",
            "stratification_elman",
            "queue_lstm",
            "queue_elman",
            "tape_lstm",
            "tape_elman",
            "deque_lstm",
            "deque_elman",
        )
    )
]


@needs_triton
@pytest.mark.parametrize("name", LAYERS_WITH_KERNELS)
def test_layers_on_their_kernels_equal_the_reference(name):
    """Each layer with a kernel, run with every op forced to Triton, equals the same layer on its
    reference loop: padded outputs, final states and every gradient."""
    from memrnn.core import reference_paths

    torch.manual_seed(0)
    layer = create_layer(name).to(DEVICE)
    B, T = 19, 6
    if name.startswith(("second_order", "nnpda")):
        x = F.one_hot(torch.randint(0, layer.input_size, (B, T)), layer.input_size).float().to(DEVICE)
    else:
        x = torch.randn(B, T, layer.input_size, device=DEVICE, requires_grad=True)
    mask = (torch.arange(T)[None] < torch.randint(0, T + 1, (B,))[:, None]).to(DEVICE)
    s0 = state_map(lambda t: (t + 0.1).requires_grad_(), layer.initial_state(B))
    results = []
    for context in (implementation("triton"), reference_paths()):
        layer.zero_grad()
        with context:
            y, s = layer(x, s0, mask)
        loss = y.square().sum() + sum(t.sum() for t in state_leaves(s))
        grads = torch.autograd.grad(
            loss, [t for t in (x, *state_leaves(s0), *layer.parameters()) if t.requires_grad]
        )
        results.append((y, *state_leaves(s), *grads))
    for a, b in zip(*results, strict=True):
        torch.testing.assert_close(a, b, atol=2e-4, rtol=2e-4)
