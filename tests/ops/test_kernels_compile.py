"""Every Triton kernel compiles for a real GPU (sm_90: H100/H200), ahead of time on this CPU
machine: the interpreter tests check what the kernels compute, this checks that Triton's compiler
takes them down to a cubin (``benchmarks/kernel_compile.py``; ``ptxas`` ships with Triton)."""

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


@pytest.mark.skipif(not triton_available(), reason="needs Triton (pip install triton)")
def test_every_kernel_compiles_for_sm90(tmp_path):
    assert len(KERNELS) >= 12, KERNELS  # the scan above found the kernel modules
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_CACHE_DIR"] = str(tmp_path / "cache")
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.kernel_compile", "--targets", "90"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    rows = re.findall(
        r"^\| (_\w+) \| \w* \| sm_90 \| fp32 \| (\d+) \| (-?\d+) \| (\d+) \| .* \| ([^|]+) \|$",
        out.stdout,
        re.M,
    )
    assert {r[0] for r in rows} == KERNELS, out.stdout
    for name, _warps, regs, spills, products in rows:
        # float32 products at float32's accuracy: IEEE or three TF32 products, never one (inputs
        # rounded to 10 bits; Triton 3.6 made the stack kernels' head product one)
        assert re.fullmatch(r"none|((ieee|tf32x3)×\d+(, )?)+", products.strip()), (name, products)
        assert 0 < int(regs) <= 255, (name, regs)
        # under 1 KB (the LSTM's four gate accumulators: 160; the stack kernels' LSTM at 4 warps
        # up to 632, and faster so on an H200 than at 8 warps with 48); the FMA-lowered float32
        # dots this guards against spilled 3-14 KB per thread
        assert int(spills) <= 1024, (name, spills)
