"""DuSell & Chiang's context-free language-modelling table, as the suite ``configs/suites/dusell.yaml``:
every model × task × seed of ``configs/dusell``, trained, tested on the checkpoint with the lowest
validation loss, and scored by the cross-entropy difference from the exact lower bound (nats per
token, ``test/ce_gap``); then one table of the median, max and min over seeds per cell beside each
task's length floor (``memrnn.languages.length_floor``).

    python scripts/dusell_table.py [--models lstm superposition stratification] \\
        [--tasks marked_reversal unmarked_reversal padded_reversal dyck hardest_cfl] \\
        [--seeds 0 1 2] [--jobs 2] [--out runs/dusell] [--table FILE] [-- train.py overrides]

A thin wrapper: it prints the equivalent ``python -m memrnn.suite`` commands and runs them,

    python -m memrnn.suite run configs/suites/dusell.yaml --out OUT --arch M… --task T… --seed S… --jobs J -- …
    python -m memrnn.suite collect configs/suites/dusell.yaml --out OUT --arch M… --task T… --seed S… [--by-length] [--by-epoch]

(``--table-only``: the second alone).  The suite does what this script did: one process per
(task, seed) trains every model on one data module (``share_data``: each test string's exact
score is computed once; every model's config must resolve to the same ``data`` section), a cell
finished is never run again and a killed one continues from its latest epoch (``--fresh`` starts
it again), a cell a live process of this machine is training is left to it, and the cells'
folders are ``<out>/<model>_<task>/seed<S>``, so that the results it wrote before
(``benchmarks/results/dusell``) are collected as they are.  The table's first line names the
statistics (the script's note is gone), and cells run with overrides after ``--`` are marked
``*`` (named under the table); ``--table FILE`` copies the collected ``table.md`` there.

The NS-RNN and RNS-RNN cells (``--models ns rns``) run their stack as one C++ run per batch on
CPU (``benchmarks/results/nondeterministic-cpu-2core.md``): 3-8 minutes per epoch on one core of
this project's 2-core VMs, so 20 epochs × 5 tasks × 3 seeds is 15-40 core-hours per model.
``vrns``, the vector RNS-RNN (DuSell & Chiang 2023), costs about 6 times the RNS-RNN's stack time.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: the suite commands import this checkout's memrnn wherever they are run from
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
SUITE = ROOT / "configs" / "suites" / "dusell.yaml"
MODELS = ("lstm", "superposition", "stratification", "ns", "rns", "vrns")
TASKS = ("marked_reversal", "unmarked_reversal", "padded_reversal", "dyck", "hardest_cfl")


def commands(argv: list[str]) -> tuple[list[list[str]], argparse.Namespace]:
    """The ``python -m memrnn.suite`` commands this script's arguments stand for, and the parsed arguments."""
    extra: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, extra = argv[:i], argv[i + 1 :]
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", nargs="+", default=["lstm", "superposition", "stratification"])
    p.add_argument("--tasks", nargs="+", default=list(TASKS))
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--jobs", type=int, default=1, help="processes at a time")
    p.add_argument("--out", type=Path, default=Path("runs/dusell"))
    p.add_argument("--table", type=Path, help="also write the table here")
    p.add_argument("--table-only", action="store_true")
    p.add_argument("--by-length", action="store_true", help="also each task's test gap by string length")
    p.add_argument("--by-epoch", action="store_true", help="also each cell's validation gap by epoch")
    p.add_argument("--fresh", action="store_true", help="start killed cells again instead of continuing them")
    args = p.parse_args(argv)
    for name, given, known in (("model", args.models, MODELS), ("task", args.tasks, TASKS)):
        for g in given:
            if g not in known:
                p.error(f"unknown {name} {g!r}; choose from {', '.join(known)}")
    if args.jobs < 1:
        p.error(f"--jobs must be >= 1, got {args.jobs}")
    suite = [sys.executable, "-m", "memrnn.suite"]
    cells = ["--out", str(args.out), "--arch", *args.models, "--task", *args.tasks,
             "--seed", *map(str, args.seeds)]  # fmt: skip
    out = []
    if not args.table_only:
        out.append([*suite, "run", str(SUITE), *cells, "--jobs", str(args.jobs),
                    *(["--fresh"] if args.fresh else []), *(["--", *extra] if extra else [])])  # fmt: skip
    out.append([*suite, "collect", str(SUITE), *cells, *(["--by-length"] if args.by_length else []),
                *(["--by-epoch"] if args.by_epoch else []), *(["--partial"] if args.table_only else [])])  # fmt: skip
    return out, args


def main(argv: list[str] | None = None) -> int:
    cmds, args = commands(list(sys.argv[1:] if argv is None else argv))
    code = 0
    for cmd in cmds:
        print("[dusell] " + shlex.join(["python", *cmd[1:]]), flush=True)
        code = subprocess.run(cmd, env=ENV).returncode or code
    if args.table:
        args.table.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(args.out / "results" / "table.md", args.table)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
