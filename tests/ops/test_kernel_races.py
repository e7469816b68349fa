"""No launch of memrnn's Triton kernels races: no two programs of a launch store the same
address or read what another stores, and no program reads back what it stored without a barrier
(:mod:`tests.ops.race_check`, over Triton's interpreter).  Races pass the interpreter's
one-program-after-another run and fail on a GPU; this is the check a CPU machine can make."""

from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl

from memrnn.core import create_layer, state_leaves, state_map
from memrnn.ops.dispatch import implementation, interpreting, triton_available
from tests.ops.race_check import detect_races
from tests.ops.test_triton_kernels import LAYERS_WITH_KERNELS

needs_interpreter = pytest.mark.skipif(
    not triton_available() or not interpreting(), reason="needs Triton's interpreter (TRITON_INTERPRET=1)"
)


@triton.jit
def _planted(p, q, BARRIER: tl.constexpr):
    i = tl.program_id(0)
    lanes = tl.arange(0, 4)
    tl.store(p + 0, i * 1.0)  # every program stores p[0]: store-store
    tl.store(q + 8 + i, tl.load(p + 0))  # and loads it: store-load (and load-after-store)
    tl.store(q + lanes, lanes * 1.0)
    if BARRIER:
        tl.debug_barrier()
    tl.store(q + 16 + i, tl.sum(tl.load(q + 3 - lanes), 0))  # another lane's store: a barrier needed


@needs_interpreter
def test_the_check_finds_planted_races_and_accepts_a_barrier():
    for barrier in (False, True):
        p, q = torch.zeros(4), torch.zeros(32)
        with detect_races() as report:
            _planted[(3,)](p, q, barrier)
        kinds = {kind for (_, kind) in report}
        assert {"store-store", "store-load"} <= kinds, report
        assert report[("_planted", "store-store")] == 5  # p[0] and q[0:4], stored by every program
        lines = [where for (where, kind) in report if kind == "load-after-store"]
        # without the barrier the read of q[0:4] is flagged; p[0] is read back in every case
        assert len(lines) == (1 if barrier else 2), report


LAYERS = [*LAYERS_WITH_KERNELS, "nondeterministic_lstm", "vector_nondeterministic_lstm"]


@needs_interpreter
@pytest.mark.parametrize("name", LAYERS)
def test_no_kernel_launch_races(name):
    """Each layer with kernels, forward and backward with every op on its kernels, over three
    tiles of batch rows (35 > 2 × 16; the nondeterministic run's programs are per row and start
    offset: 3 rows), padding and a perturbed initial state: no launch races."""
    torch.manual_seed(0)
    layer = create_layer(name)
    B, T = (3, 4) if "nondeterministic" in name else (35, 5)
    if name.startswith(("second_order", "nnpda")):
        x = torch.nn.functional.one_hot(torch.randint(0, layer.input_size, (B, T)), layer.input_size).float()
    else:
        x = torch.randn(B, T, layer.input_size, requires_grad=True)
    mask = torch.arange(T)[None] < torch.randint(0, T + 1, (B,))[:, None]
    s0 = state_map(
        lambda t: (t + 0.1).requires_grad_() if t.is_floating_point() else t, layer.initial_state(B)
    )
    with detect_races() as report, implementation("triton"):
        y, s = layer(x, s0, mask)
        loss = y.square().sum() + sum(t.sum() for t in state_leaves(s) if t.is_floating_point())
        loss.backward()
    assert not report, dict(report)
