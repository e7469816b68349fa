"""Every code block of ``README.md`` and of the documentation pages runs as written (the rules:
``tests/docs/blocks.py``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs.blocks import ROOT, SKIP, all_blocks, blocks

BLOCKS = all_blocks()
RUNNABLE = [b for b in BLOCKS if b.language and b.skip is None]


def test_the_readme_shows_code_that_runs():
    readme = [b for b in blocks(ROOT / "README.md") if b.language and b.skip is None]
    assert {b.language for b in readme} == {"python", "bash"}, readme
    # the front page's first block is the layer in a model, and it comes within its first screen
    first = next(b for b in blocks(ROOT / "README.md") if b.language)
    assert first.language == "python" and "StackRNN" in first.code and first.line <= 40, first


def test_every_skipped_block_says_why_and_every_marker_precedes_a_block():
    markers = sum(len(SKIP.findall(p.read_text(encoding="utf-8"))) for p in {ROOT / b.path for b in BLOCKS})
    skipped = [b for b in BLOCKS if b.skip is not None]
    assert markers == len(skipped), "a `docs-test: skip` comment that is not the line before a block"
    assert all(b.skip.strip() and b.language for b in skipped), [b.id for b in skipped]
    print("blocks not run:\n" + "\n".join(f"{b.id}: {b.skip}" for b in skipped))


@pytest.mark.parametrize("block", [b for b in RUNNABLE if b.language == "python"], ids=lambda b: b.id)
def test_python_block_runs(block, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a block that writes files writes them here
    exec(compile(block.code, block.id, "exec"), {"__name__": "__docs__"})


def _scratch(tmp_path: Path) -> dict[str, str]:
    for name in ("configs", "scripts", "benchmarks", "notebooks", "train.py"):
        (tmp_path / name).symlink_to(ROOT / name)
    bin_dir = tmp_path / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    # a wrapper, not a symlink: a venv's interpreter finds its packages from the path it is started by
    (bin_dir / "python").write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    (bin_dir / "python").chmod(0o755)
    env = dict(os.environ)
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


@pytest.mark.parametrize("block", [b for b in RUNNABLE if b.language == "bash"], ids=lambda b: b.id)
def test_shell_block_runs(block, tmp_path):
    env = _scratch(tmp_path)
    out = subprocess.run(
        ["bash", "-eo", "pipefail", "-c", block.code], cwd=tmp_path, env=env, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, (
        f"{block.id} exited {out.returncode}:\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}"
    )
