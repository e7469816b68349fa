"""Every Triton kernel compiles for a real GPU (sm_90: H100/H200), ahead of time on this CPU
machine: the interpreter tests check what the kernels compute, this checks that Triton's compiler
takes them down to a cubin (``benchmarks/kernel_compile.py``; ``ptxas`` ships with Triton).

The default run compiles each kernel and each of the stack kernels' memories once
(``--quick``: a kernel that no longer compiles is caught, in half the time); the sweep of every
launch, which also holds each launch's spills to the committed table, is marked ``slow``
(``bash scripts/dev.sh slow``; 12.5 of the 70 minutes of a default run on a loaded 2-core
machine before)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from memrnn.ops.dispatch import triton_available

ROOT = Path(__file__).resolve().parents[2]
# every kernel memrnn has: each ``@triton.jit`` function named ``_*_fwd`` / ``_*_bwd`` in its ops
KERNELS = {
    name
    for path in (ROOT / "memrnn" / "ops").glob("*/triton.py")
    for name in re.findall(r"@triton\.jit\s+def (_\w+_(?:fwd|bwd))\(", path.read_text())
}


ROW = re.compile(
    r"^\| (_\w+) \| (\w*) \| sm_90 \| fp32 \| (\d+) \| (\d+) \| (-?\d+) \| \d+ \| .* \| ([^|]+) \|$",
    re.M,
)


def _rows(table: str) -> list[tuple[str, str, int, int, int, str]]:
    """(kernel, first launched by, warps, registers, spill bytes, products) of each sm_90 float32
    row of a ``benchmarks.kernel_compile`` table."""
    return [(k, b, int(w), int(r), int(s), p) for k, b, w, r, s, p in ROW.findall(table)]


def _committed_spills(version: str) -> dict[tuple[str, str, int], int]:
    """The largest spill stores per (kernel, first launched by, warps) in the committed
    ``benchmarks/results/kernels-compiled.md`` table for Triton ``version`` (empty if it has none)."""
    text = (ROOT / "benchmarks" / "results" / "kernels-compiled.md").read_text()
    found = re.search(rf"^triton {re.escape(version)},.*?(?=^## |\Z)", text, re.M | re.S)
    spills: dict[tuple[str, str, int], int] = {}
    for name, by, warps, _regs, spill, _products in _rows(found.group(0) if found else ""):
        spills[name, by, warps] = max(spill, spills.get((name, by, warps), 0))
    return spills


def test_committed_table_is_read():
    """The regression bound above reads the committed table: the Triton 3.9 section's stack
    kernels (the stratification stack's forward at 4 warps spills 108 bytes per thread since the
    weights are preloaded; 632 before)."""
    spills = _committed_spills("3.9.0")
    assert spills["_stack_fwd", "stratification_lstm", 4] == 108
    assert spills["_elman_fwd", "elman", 8] == 0
    assert len(spills) >= 40
    assert _committed_spills("0.0.0") == {}


def _compile_and_check(tmp_path, *options: str) -> list[tuple[str, str, int, int, int, str]]:
    """Run ``benchmarks.kernel_compile --targets 90 *options`` with a fresh Triton cache and check
    every row it prints: each kernel memrnn has, float32 products at float32's accuracy, registers
    within the GPU's, spills under 1 KB and near the committed table's for the same launch."""
    assert len(KERNELS) >= 12, KERNELS  # the scan above found the kernel modules
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_CACHE_DIR"] = str(tmp_path / "cache")
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.kernel_compile", "--targets", "90", *options],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    rows = _rows(out.stdout)
    assert {r[0] for r in rows} == KERNELS, out.stdout
    # the resources come from the log of Triton's own ptxas run (a fresh cache: every kernel is
    # compiled), not from running ptxas a second time
    assert f"resources of {len(rows)} of {len(rows)} from Triton's own ptxas -v log" in out.stdout
    version = re.search(r"^triton (\S+),", out.stdout, re.M).group(1)
    committed = _committed_spills(version)
    # the committed table for this Triton names every launch (regenerate it when a kernel, its
    # warps or its first launcher change: ``python -m benchmarks.kernel_compile --targets 90 80
    # --dtypes float32 bfloat16 float64``)
    missing = {(n, b, w) for n, b, w, *_ in rows} - set(committed)
    assert not committed or not missing, ("not in kernels-compiled.md", sorted(missing))
    for name, by, warps, regs, spills, products in rows:
        # float32 products at float32's accuracy: IEEE or three TF32 products, never one (inputs
        # rounded to 10 bits; Triton 3.6 made the stack kernels' head product one)
        assert re.fullmatch(r"none|((ieee|tf32x3)×\d+(, )?)+", products.strip()), (name, products)
        assert 0 < int(regs) <= 255, (name, regs)
        # under 1 KB (the LSTM's four gate accumulators: 160; the stack kernels' LSTM at 4 warps
        # up to 632, and faster so on an H200 than at 8 warps with 48); the FMA-lowered float32
        # dots this guards against spilled 3-14 KB per thread
        assert int(spills) <= 1024, (name, spills)
        # and no launch spills much more than the committed table says it did under this Triton
        # (``ptxas`` ships with Triton, so the same version compiles the same cubin here and in CI)
        if (name, by, warps) in committed:
            bound = committed[name, by, warps] * 5 // 4 + 64
            assert int(spills) <= bound, (name, by, warps, spills, "committed", bound)
    return rows


@pytest.mark.skipif(not triton_available(), reason="needs Triton (pip install triton)")
def test_each_kernel_and_memory_compiles_for_sm90(tmp_path):
    """``--quick``: every kernel, every memory of the stack kernels and both of their controllers,
    the nondeterministic stack plain and vector, each compiled once."""
    rows = _compile_and_check(tmp_path, "--quick")
    layers = {by for _, by, *_ in rows}
    for memory in ("superposition", "stratification", "queue", "tape", "tape_jump", "deque"):
        assert {f"{memory}_lstm", f"{memory}_elman"} & layers, (memory, layers)
    stack = [
        by.removesuffix("_no_grad")
        for by in layers
        if by.startswith(("superposition", "stratification", "queue", "tape", "deque"))
    ]
    assert {by.rsplit("_", 1)[1] for by in stack} == {"lstm", "elman"}
    assert {"nondeterministic_lstm", "vector_nondeterministic_lstm"} <= layers
    # each memory's forward without history (under no_grad: a ring of slots) is its own compiled code
    for memory in ("superposition", "stratification", "queue", "tape", "tape_jump", "deque"):
        assert {f"{memory}_lstm_no_grad", f"{memory}_elman_no_grad"} & layers, (memory, layers)
    assert len(rows) <= 46  # of the whole sweep's 64, and 6 launches without history


@pytest.mark.slow
@pytest.mark.skipif(not triton_available(), reason="needs Triton (pip install triton)")
def test_every_kernel_compiles_for_sm90(tmp_path):
    """Every launch the layers make (``bash scripts/dev.sh slow``)."""
    rows = _compile_and_check(tmp_path)
    assert len(rows) >= 60
