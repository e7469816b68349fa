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
from tests.ops.race_check import detect_races, poisoned_empties, reversed_programs
from tests.ops.test_kernels import LAYERS_WITH_KERNELS

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


@needs_interpreter
def test_reversed_programs_and_poisoned_memory_show_what_they_should():
    """The last program to store p[0] wins: the third in order, the first reversed; fresh float
    memory is NaN inside ``poisoned_empties`` (and integers untouched)."""
    p, q = torch.zeros(4), torch.zeros(32)
    _planted[(3,)](p, q, True)
    assert p[0] == 2
    with reversed_programs():
        _planted[(3,)](p, q, True)
    assert p[0] == 0
    originals = (torch.empty, torch.empty_like, torch.Tensor.new_empty)
    with poisoned_empties():
        assert torch.empty(3).isnan().all() and torch.zeros(2).new_empty(2).isnan().all()
        assert torch.empty_like(torch.zeros(2)).isnan().all()
        assert torch.empty(2, dtype=torch.long).dtype == torch.long  # integers are left alone
    assert (torch.empty, torch.empty_like, torch.Tensor.new_empty) == originals  # restored


LAYERS = [*LAYERS_WITH_KERNELS, "nondeterministic_lstm", "vector_nondeterministic_lstm"]


@needs_interpreter
@pytest.mark.parametrize("name", LAYERS)
def test_no_kernel_launch_races(name):
    """Each layer with kernels, forward and backward with every op on its kernels, over three
    tiles of batch rows (35 > 2 × 16; the nondeterministic run's programs are per row and start
    offset: 3 rows), padding and a perturbed initial state: no launch races, and the same numbers
    bit for bit with each launch's programs run last to first and fresh memory full of NaN."""
    torch.manual_seed(0)
    layer = create_layer(name)
    B, T = (3, 4) if "nondeterministic" in name else (35, 5)
    if name.startswith(("second_order", "nnpda")):
        x = torch.nn.functional.one_hot(torch.randint(0, layer.input_size, (B, T)), layer.input_size).float()
    else:
        x = torch.randn(B, T, layer.input_size, requires_grad=True)
    mask = torch.arange(T)[None] < torch.randint(0, T + 1, (B,))[:, None]
    s0 = state_map(
        lambda t: (t.detach() + 0.1).requires_grad_() if t.is_floating_point() else t, layer.initial_state(B)
    )
    leaves = [t for t in (x, *state_leaves(s0), *layer.parameters()) if t.requires_grad]

    def run():
        for t in leaves:
            t.grad = None
        y, s = layer(x, s0, mask)
        loss = y.square().sum() + sum(t.sum() for t in state_leaves(s) if t.is_floating_point())
        loss.backward()
        return [y.detach(), *(t.grad for t in leaves)]

    with detect_races() as report, implementation("triton"):
        first = run()
    assert not report, dict(report)
    # the programs last to first, and NaN wherever memory is fresh: the same numbers, bit for bit
    with reversed_programs(), poisoned_empties(), implementation("triton"):
        second = run()
    for a, b in zip(first, second, strict=True):
        assert (a is None) == (b is None), name  # a leaf without a path (an unused state field)
        assert a is None or torch.equal(a, b), (name, float((a - b).abs().nan_to_num(float("inf")).max()))
