"""Every registered layer computes today what it computed when ``tests/ops/bitwise_layers.pt`` was
recorded: outputs, final states and the gradients of a fixed loss with respect to the parameters,
the inputs and the initial state, in float32 and float64, on CPU, through the default path, the
``"cpu"`` path and the references.  It guards moves of code (issue "memories by mechanism"):
nothing users rely on may change numerically.

Each tensor is kept as its shape, the SHA-256 of its bytes, its sum and the sum of its absolute
values.  On the machine and torch build that recorded it the bytes must match (bit for bit);
elsewhere (another CPU's instruction set reaches the C++ loops and torch's kernels) the two sums
must agree to 1e-5 in float32 and 1e-12 in float64 of the recorded sum of absolute values (a sum
that cancels, 0.52 of terms whose magnitudes add to 122, differs between instruction sets by far
more than 1e-5 of itself: CI's machine, issue 67).  The machine is named with the
instruction set torch dispatches on (``torch.backends.cpu.get_cpu_capability()``): 52 of the 247
cases differ in their last bits between an AVX512 and an AVX2 AMD EPYC, whose names are the same;
and with what the C++ loops' ``-march=native`` build depends on, the CPU's extensions
(``memrnn.ops.native``'s CPU tag) and the compiler's version.

Record again (only when a change of numbers is intended, and say so in the commit):

    python -m tests.ops.test_bitwise_fixture --record
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from memrnn.core import create_layer, list_layers, state_leaves, state_map
from memrnn.core.switch import reference_paths
from memrnn.ops import native
from memrnn.ops.dispatch import implementation

FIXTURE = Path(__file__).with_name("bitwise_layers.json")
DTYPES = {"float32": torch.float32, "float64": torch.float64}
PATHS = ("default", "cpu", "reference")
#: recorded layers no longer registered, each with the reason (none since the recording of 2 December
#: 2026, which dropped the five variants issue 66 removed: lstm_reference, gru_reference, gru_bptt,
#: gru_bptt_2layer, stratification_lstm_reference; their reasons are in this file's history)
REMOVED: dict[str, str] = {}


def _machine() -> str:
    cpu = ""
    with contextlib.suppress(OSError, StopIteration):
        cpu = next(
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        )
    # the instruction set torch dispatches its kernels on: the same CPU name and torch build give
    # other last bits on AVX512 than on AVX2 (an AMD EPYC of either kind reads "AMD EPYC" here)
    isa = torch.backends.cpu.get_cpu_capability()
    # the C++ loops are compiled here with -march=native by this compiler: their bits follow the
    # CPU's full set of extensions (two AVX2 EPYCs of different generations tune differently) and
    # the compiler's version
    compiler = ""
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        compiler = subprocess.run(
            [os.environ.get("CXX", "c++"), "-dumpfullversion"], capture_output=True, text=True, timeout=30
        ).stdout.strip()
    return (
        f"{platform.machine()} {cpu} cpu {isa} native {native._cpu_tag()} c++ {compiler} "
        f"torch {torch.__version__} python {sys.version_info[:2]}"
    )


def _run(name: str, dtype: torch.dtype, path: str) -> dict[str, list[torch.Tensor]]:
    """Outputs, final state and gradients of layer ``name`` on fixed inputs, in one thread (torch's
    reductions split by thread count: nnPDA's float64 gradients differ in the last bits between
    one and two threads)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _run_one_thread(name, dtype, path)
    finally:
        torch.set_num_threads(threads)


def _run_one_thread(name: str, dtype: torch.dtype, path: str) -> dict[str, list[torch.Tensor]]:
    torch.manual_seed(0)
    layer = create_layer(name).to(dtype)
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(3, 7, layer.input_size, generator=gen, dtype=dtype, requires_grad=True)
    mask = torch.arange(7)[None, :] < torch.tensor([7, 5, 2])[:, None]
    state = state_map(
        lambda t: (t.detach() + 0.3 * torch.randn(t.shape, generator=gen, dtype=t.dtype)).requires_grad_(
            t.is_floating_point()
        ),
        layer.initial_state(3, dtype=dtype),
    )
    if path == "reference":
        with reference_paths():
            y, final = layer(x, state, mask=mask)
    elif path == "cpu":
        with implementation("cpu"):
            y, final = layer(x, state, mask=mask)
    else:
        y, final = layer(x, state, mask=mask)
    leaves = [t for t in state_leaves(final) if t.is_floating_point()]
    loss = (y * torch.randn(y.shape, generator=gen, dtype=dtype)).sum()
    for t in leaves:
        loss = loss + (t * torch.randn(t.shape, generator=gen, dtype=dtype)).sum()
    params = [p for p in layer.parameters() if p.requires_grad]
    inputs = [x, *(t for t in state_leaves(state) if t.requires_grad)]
    grads = torch.autograd.grad(loss, params + inputs, allow_unused=True)
    zero = torch.zeros(())
    return {
        "out": [y.detach(), *(t.detach() for t in leaves)],
        "grad": [zero if g is None else g for g in grads],
    }


CASES = [(n, d, p) for n in list_layers() for d in DTYPES for p in PATHS]


def _summary(t: torch.Tensor) -> dict:
    t = t.detach().contiguous()
    return {
        "shape": list(t.shape),
        "sha256": hashlib.sha256(t.numpy().tobytes()).hexdigest()[:24],
        "sum": float(t.double().sum()),
        "abs": float(t.double().abs().sum()),
    }


def _summaries(run: dict[str, list[torch.Tensor]]) -> dict[str, list[dict]]:
    return {k: [_summary(t) for t in v] for k, v in run.items()}


def record() -> None:
    data = {f"{n}|{d}|{p}": _summaries(_run(n, DTYPES[d], p)) for n, d, p in CASES}
    lines = [f"{json.dumps(k)}: {json.dumps(v, separators=(',', ':'))}" for k, v in data.items()]
    FIXTURE.write_text(f'{{"machine": {json.dumps(_machine())}, "cases": {{\n' + ",\n".join(lines) + "\n}}\n")
    print(f"recorded {len(data)} cases on {_machine()} to {FIXTURE}")


@pytest.fixture(scope="module")
def recorded():
    return json.loads(FIXTURE.read_text())


def test_every_registered_layer_is_recorded(recorded):
    have = {k.split("|")[0] for k in recorded["cases"]}
    assert set(list_layers()) <= have, f"not recorded: {sorted(set(list_layers()) - have)}"
    gone = have - set(list_layers())
    assert gone <= set(REMOVED), f"recorded layers no longer registered: {sorted(gone - set(REMOVED))}"


@pytest.mark.parametrize(("name", "dtype", "path"), CASES, ids=["|".join(c) for c in CASES])
def test_layer_computes_what_was_recorded(recorded, name, dtype, path):
    want = recorded["cases"][f"{name}|{dtype}|{path}"]
    got = _summaries(_run(name, DTYPES[dtype], path))
    exact = recorded["machine"] == _machine()
    rtol = {"float32": 1e-5, "float64": 1e-12}[dtype]
    for kind in ("out", "grad"):
        assert len(got[kind]) == len(want[kind]), (
            f"{kind}: {len(got[kind])} tensors, recorded {len(want[kind])}"
        )
        for i, (a, b) in enumerate(zip(got[kind], want[kind], strict=True)):
            what = f"{name} {dtype} {path} {kind}[{i}]"
            assert a["shape"] == b["shape"], f"{what}: shape {a['shape']}, recorded {b['shape']}"
            if exact:
                assert a["sha256"] == b["sha256"], (
                    f"{what}: not bit for bit what was recorded (sum {a['sum']!r}, recorded {b['sum']!r})"
                )
            else:  # a sum's rounding is bounded by its terms' magnitudes (abs), not by the sum
                scale = rtol * max(b["abs"], 1.0)
                for key in ("sum", "abs"):
                    assert a[key] == pytest.approx(b[key], rel=0, abs=scale), (
                        f"{what}: {key} {a[key]!r}, recorded {b[key]!r} (to {scale:.3g}: {rtol:g} of the sum of |·|)"
                    )


if __name__ == "__main__":
    if sys.argv[1:] != ["--record"]:
        sys.exit("usage: python -m tests.ops.test_bitwise_fixture --record")
    record()
