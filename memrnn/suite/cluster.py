"""Launch a suite's cells elsewhere: a SLURM job array (:func:`slurm_script`) or a W&B sweep
(:func:`wandb_sweep`).  Both run ``python -m memrnn.suite cell <suite> …`` once per cell, which
is :func:`memrnn.suite.runner.run_cell` in a process of its own."""

from __future__ import annotations

import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from memrnn.suite.runner import cell_status
from memrnn.suite.spec import Cell, Suite

#: SLURM's default MaxArraySize is 1001 (array indices 0..1000)
MAX_ARRAY_SIZE = 1001


def slurm_script(
    suite: Suite,
    *,
    cells: Sequence[Cell] | None = None,
    options: dict[str, Any] | None = None,
    parallel: int | None = None,
    extra: Sequence[str] = (),
    python: str | None = None,
    workdir: str | Path | None = None,
    max_array_size: int = MAX_ARRAY_SIZE,
) -> str:
    """An ``sbatch`` script whose job array runs one cell per task: the cells of ``cells``
    (default: every cell of the suite) that are not done, listed by name in the script, so a
    changed suite file cannot shift a task onto another cell.

    ``options``: ``#SBATCH`` options over the suite's ``slurm`` section (``{"time": "4:00:00",
    "gres": "gpu:1"}``; a value of ``None`` drops one); ``parallel``: at most this many tasks at
    once (``--array=0-N%parallel``); ``extra``: ``train.py`` overrides for every cell;
    ``python``: the interpreter on the nodes (default: this one); ``workdir``: where the tasks
    start (default: here; the suite file and its configs must be reachable from the nodes).
    More cells than ``max_array_size`` (SLURM's ``MaxArraySize``) share the tasks: task ``i``
    runs cells ``i``, ``i + size``, … one after the other.  A task whose cell fails goes on with
    its next cell and exits non-zero.  Raises ``ValueError`` when nothing is left to run."""
    todo = [c for c in (suite.cells() if cells is None else cells) if cell_status(suite, c) != "done"]
    if not todo:
        raise ValueError(f"every cell of suite {suite.name!r} is done: nothing to submit")
    if max_array_size < 1:
        raise ValueError(f"max_array_size must be >= 1, got {max_array_size}")
    if parallel is not None and parallel < 1:
        raise ValueError(f"parallel must be >= 1, got {parallel}")
    out = Path(suite.out).resolve()
    merged: dict[str, Any] = {
        "job-name": f"memrnn-{suite.name}",
        "output": str(out / "logs" / "slurm-%A_%a.log"),
        "cpus-per-task": 1,
        **suite.slurm,
        **(options or {}),
    }
    size = min(len(todo), max_array_size)
    array = f"0-{size - 1}" + (f"%{parallel}" if parallel else "")
    lines = [
        "#!/bin/bash",
        f"# memrnn suite {suite.name!r}: {len(todo)} cell(s) not done when this was written, in a job array.",
        f"# Written by `python -m memrnn.suite slurm {shlex.quote(str(suite.path))}`; submit with `sbatch <this file>`.",
        f"#SBATCH --array={array}",
    ]
    for key, value in merged.items():
        if value is None:
            continue
        key = key.removeprefix("--")
        if key == "array":
            raise ValueError("the array is the suite's cells: do not set 'array' in the slurm options")
        lines.append(f"#SBATCH --{key}" if value is True else f"#SBATCH --{key}={value}")
    parts = [
        shlex.quote(a)
        for a in (python or sys.executable, "-m", "memrnn.suite", "cell", str(suite.path), "--out", str(out))
    ]
    parts.append('--cell "${CELLS[$i]}"')
    if extra:
        parts += ["--", *(shlex.quote(a) for a in extra)]
    lines += [
        "set -euo pipefail",
        f"mkdir -p {shlex.quote(str(out / 'logs'))}",
        f"cd {shlex.quote(str(Path(workdir or Path.cwd()).resolve()))}",
        "CELLS=(",
        *(f"  {shlex.quote(c.name)}" for c in todo),
        ")",
        'export OMP_NUM_THREADS="${SLURM_CPUS_PER_TASK:-1}"',
        "status=0",
        f"for ((i = SLURM_ARRAY_TASK_ID; i < ${{#CELLS[@]}}; i += {size})); do",
        "  " + " ".join(parts) + " || status=$?",
        "done",
        "exit $status",
    ]
    return "\n".join(lines) + "\n"


def wandb_sweep(suite: Suite, *, extra: Sequence[str] = (), python: str = "${interpreter}") -> dict[str, Any]:
    """A W&B sweep configuration (``wandb sweep <file>``, then ``wandb agent <id>`` on any
    number of machines) whose grid is the suite's: parameters ``arch``, ``task``, ``seed`` and,
    with learning rates, ``lr``; each agent run is ``python -m memrnn.suite cell <suite>
    --arch=… --task=… --seed=… [--lr=…]``, whose W&B run is the sweep's run.  A cell that is
    already done exits at once (``cell`` skips it).  ``extra``: ``train.py`` overrides for
    every cell."""
    params: dict[str, Any] = {
        "arch": {"values": list(suite.architectures)},
        "task": {"values": list(suite.tasks)},
        "seed": {"values": list(suite.seeds)},
    }
    if suite.lrs:
        params["lr"] = {"values": list(suite.lrs)}
    command = ["${env}", python, "-m", "memrnn.suite", "cell", str(suite.path), "--out", str(Path(suite.out).resolve()),
               "${args}"]  # fmt: skip
    if extra:
        command += ["--", *extra]
    return {
        "name": suite.name,
        "description": suite.description or f"memrnn suite {suite.name} ({len(suite.cells())} cells)",
        "method": "grid",
        "metric": {"name": suite.metric, "goal": "maximize" if suite.mode == "max" else "minimize"},
        "parameters": params,
        "command": command,
    }
