"""Launch a suite's cells elsewhere: a SLURM job array (:func:`slurm_script`) or a W&B sweep
(:func:`wandb_sweep`).  Both run ``python -m memrnn.suite cell <suite> …`` once per cell, which
is :func:`memrnn.suite.runner.run_cell` in a process of its own; with ``members`` the array runs
one process per group of members instead (:mod:`memrnn.suite.groups`)."""

from __future__ import annotations

import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from memrnn.suite.runner import _cell_command, cell_status
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
    members: str | int | None = None,
    shed: float | None = None,
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
    its next cell and exits non-zero.

    ``members`` (``"auto"`` or a whole number, as ``run --members``): a task per group of the
    cells not done (:meth:`Suite.member_groups`, at most ``members`` a group), running the
    command ``run --members`` runs for it, ``python -m memrnn.suite cell SUITE --cell NAME …
    --members`` (a group of one: its cell alone).  The groups are named by their cells, not by an
    index into the grouping, which would point at other cells once some finish between writing
    and running (the grouping is of the cells not done): a cell done by then is skipped, and a
    group killed at its time limit continues from its checkpoint when submitted again.  Raises
    ``ValueError`` when nothing is left to run, and for a suite whose cells cannot be members
    (``share_data``).  ``shed`` (with ``members``): as ``run --shed``, each group's stopped
    members are written and the others go on alone, in the same task."""
    todo = [c for c in (suite.cells() if cells is None else cells) if cell_status(suite, c) != "done"]
    if shed is not None and members is None:
        raise ValueError("shed acts on groups of members: give members too")
    groups = None if members is None else suite.member_groups(todo, members)
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
    size = min(len(todo) if groups is None else len(groups), max_array_size)
    array = f"0-{size - 1}" + (f"%{parallel}" if parallel else "")
    written = f"python -m memrnn.suite slurm {shlex.quote(str(suite.path))}"
    if groups is None:
        what = "in a job array"
    else:
        written += f" --members {members}" + ("" if shed is None else f" --shed {shed!r}")
        what = f"in a job array of {len(groups)} group(s) of members, one process each"
    lines = [
        "#!/bin/bash",
        f"# memrnn suite {suite.name!r}: {len(todo)} cell(s) not done when this was written, {what}.",
        f"# Written by `{written}`; submit with `sbatch <this file>`.",
        f"#SBATCH --array={array}",
    ]
    for key, value in merged.items():
        if value is None:
            continue
        key = key.removeprefix("--")
        if key == "array":
            raise ValueError("the array is the suite's cells: do not set 'array' in the slurm options")
        lines.append(f"#SBATCH --{key}" if value is True else f"#SBATCH --{key}={value}")
    lines += [
        "set -euo pipefail",
        f"mkdir -p {shlex.quote(str(out / 'logs'))}",
        f"cd {shlex.quote(str(Path(workdir or Path.cwd()).resolve()))}",
    ]
    if groups is not None:
        python = python or sys.executable
        lines += [
            "# group i: the command `run --members` runs for it (`cell` skips the cells done by then)",
            "group() {",
            '  case "$1" in',
            *(
                f"    {i}) {_wrap(_group_command(suite, g, extra, python, out, shed))} ;;"
                for i, g in enumerate(groups)
            ),
            '    *) echo "no group $1" >&2; return 2 ;;',
            "  esac",
            "}",
            'export OMP_NUM_THREADS="${SLURM_CPUS_PER_TASK:-1}"',
            "status=0",
            f"for ((i = SLURM_ARRAY_TASK_ID; i < {len(groups)}; i += {size})); do",
            '  group "$i" || status=$?',
            "done",
            "exit $status",
        ]
        return "\n".join(lines) + "\n"
    parts = [
        shlex.quote(a)
        for a in (python or sys.executable, "-m", "memrnn.suite", "cell", str(suite.path), "--out", str(out))
    ]
    parts.append('--cell "${CELLS[$i]}"')
    if extra:
        parts += ["--", *(shlex.quote(a) for a in extra)]
    lines += [
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


def _wrap(command: Sequence[str], width: int = 100) -> str:
    """``command`` quoted for bash, over continued lines of about ``width`` characters."""
    lines = [""]
    for word in map(shlex.quote, command):
        if lines[-1] and len(lines[-1]) + 1 + len(word) > width:
            lines.append("")
        lines[-1] += (" " if lines[-1] else "") + word
    return " \\\n         ".join(lines)


def _group_command(
    suite: Suite,
    cells: Sequence[Cell],
    extra: Sequence[str],
    python: str,
    out: Path,
    shed: float | None = None,
) -> list[str]:
    """The command :func:`memrnn.suite.runner.run_local` runs for a group of members, with the
    nodes' interpreter and the runs' folder as an absolute path (the script ``cd``s first)."""
    cmd = _cell_command(suite, cells, extra, members=len(cells) > 1, shed=shed)
    cmd[0] = python
    cmd[cmd.index("--out") + 1] = str(out)
    return cmd


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
