"""``python -m memrnn.suite``: list, run, launch and collect a suite of ``train.py`` runs.

    python -m memrnn.suite list    SUITE                    the cells and where each stands
    python -m memrnn.suite run     SUITE [--jobs N]         every cell not done, N at a time here
                                   [--members auto|M]       (seeds and lrs of a cell as members of one process)
                                   [--shed [F]]             (members go on alone once F of them stopped)
    python -m memrnn.suite cell    SUITE --cell NAME        one cell in this process
    python -m memrnn.suite slurm   SUITE [--submit]         a SLURM array script (and sbatch it)
                                   [--members auto|M]       (a task per process of members, as `run`)
    python -m memrnn.suite sweep   SUITE                    a W&B sweep configuration
    python -m memrnn.suite collect SUITE [--wandb E/P/ID]   the results table, curves and plot

SUITE is a suite file (``configs/suites/*.yaml``).  ``run``, ``slurm`` and ``sweep`` take
``--arch/--task/--seed/--lr`` to select cells (``run`` and ``slurm``) and pass anything after
``--`` to ``train.py`` for every cell (``-- --trainer.accelerator=gpu``).  A cell run so records
those arguments; ``list`` and ``collect`` mark a done cell that ran with other arguments than the
suite gives it (``collect --exclude-overrides`` leaves it out of the table).  ``collect
--select-on val/ce_gap --select-mode min`` tabulates, per architecture and task, the test score of
the run with the best validation metric (DuSell & Chiang's ``print_best.py``) instead of the mean,
median and best over runs; a suite's ``select`` makes that its default (``--select-on none``
undoes it).  ``collect --by-length``, ``--by-epoch`` and ``--last KEY`` add the tables of
:mod:`memrnn.suite.tables` (``scripts/dusell_table.py`` and ``scripts/sweep.py`` run these).
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import yaml

from memrnn.suite.cluster import slurm_script, wandb_sweep
from memrnn.suite.collect import collect, collect_wandb
from memrnn.suite.groups import run_group
from memrnn.suite.runner import (
    cell_status,
    checkpoint_epoch,
    interrupted_checkpoint,
    off_suite,
    run_cell,
    run_cells,
    run_local,
    running_elsewhere,
)
from memrnn.suite.spec import Cell, Suite


def _select(suite: Suite, args: argparse.Namespace) -> list[Cell]:
    cells = suite.cells()
    for key, known in (
        ("arch", suite.architectures),
        ("task", suite.tasks),
        ("seed", suite.seeds),
        ("lr", suite.lrs),
    ):
        wanted = getattr(args, key, None)
        if not wanted:
            continue
        bad = [w for w in wanted if w not in known]
        if bad:
            raise SystemExit(f"error: suite {suite.name!r} has no {key} {bad}; it has {list(known)}")
        cells = [c for c in cells if getattr(c, key) in wanted]
    return cells


def cell_off_suite(suite: Suite, cell: Cell) -> list[str]:
    """:func:`off_suite` of a done cell's ``result.json`` (empty for an unreadable one)."""
    try:
        result = json.loads((suite.cell_dir(cell) / "result.json").read_text())
    except (OSError, ValueError):
        return []
    return off_suite(suite, cell, result)


def _filters(p: argparse.ArgumentParser) -> None:
    p.add_argument("--arch", nargs="+", help="only these architectures")
    p.add_argument("--task", nargs="+", help="only these tasks")
    p.add_argument("--seed", nargs="+", type=int, help="only these seeds")
    p.add_argument("--lr", nargs="+", type=float, help="only these learning rates")


FRESH = "start killed or failed cells again instead of continuing from their latest epoch's checkpoint"


def _members_arg(text: str) -> str | int:
    if text == "auto":
        return text
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"--members takes 'auto' or a whole number >= 1, got {text!r}")
    return value


SHED = (
    "with --members: once at least the fraction F (default 0.5) of a group's members, but not all, have "
    "stopped (early stopping or divergence), write them and continue the others as a group of their own "
    "(each member's results the unshed group's, up to float rounding where a part pads its batches less; "
    "a step's cost follows the members left)"
)


def _shed_arg(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"--shed takes a fraction in (0, 1], got {text!r}")
    return value


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m memrnn.suite", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)

    def add(name: str, help: str) -> argparse.ArgumentParser:
        q = sub.add_parser(name, help=help)
        q.add_argument("suite", type=Path, help="a suite file (configs/suites/*.yaml)")
        q.add_argument("--out", type=Path, help="the runs' folder (default: the suite's `out`)")
        return q

    q = add("list", "the cells and their status")
    _filters(q)
    q.add_argument("--commands", action="store_true", help="also print each cell's train.py arguments")
    q = add("run", "run every cell that is not done on this machine")
    _filters(q)
    q.add_argument("--jobs", type=int, default=1, help="cells at a time (default 1)")
    q.add_argument("--threads", type=int, default=1, help="torch threads per cell (default 1)")
    q.add_argument("--fresh", action="store_true", help=FRESH)
    q.add_argument("--members", type=_members_arg, metavar="auto|M",
                   help="run the cells that differ only in seed and learning rate as the members of one "
                   "process (at most M; auto: all of them); each writes its own result.json")  # fmt: skip
    q.add_argument("--shed", type=_shed_arg, nargs="?", const=0.5, metavar="F", help=SHED)
    q = add("cell", "run one cell in this process")
    q.add_argument("--cell", nargs="+", help="the cell's name, e.g. lstm/parity_check/lr0.0003/seed0; "
                   "several of one task, lr and seed run on one shared data module")  # fmt: skip
    q.add_argument("--index", type=int, help="the cell's index in `list`")
    q.add_argument("--arch")
    q.add_argument("--task")
    q.add_argument("--seed", type=int)
    q.add_argument("--lr", type=float)
    q.add_argument("--force", action="store_true", help="run it even if it is done (afresh)")
    q.add_argument("--fresh", action="store_true", help=FRESH)
    q.add_argument("--members", action="store_true",
                   help="the cells (one architecture and task) as the members of one process")  # fmt: skip
    q.add_argument("--shed", type=_shed_arg, nargs="?", const=0.5, metavar="F", help=SHED)
    q = add("slurm", "write a SLURM job-array script for the cells not done")
    _filters(q)
    q.add_argument("--script", type=Path, help="where to write it (default: <out>/slurm.sbatch)")
    q.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                   help="an #SBATCH option over the suite's slurm section (repeat)")  # fmt: skip
    q.add_argument("--parallel", type=int, help="at most this many array tasks at once")
    q.add_argument("--python", help="the interpreter on the nodes (default: this one)")
    q.add_argument("--submit", action="store_true", help="run sbatch on the script")
    q.add_argument("--members", type=_members_arg, metavar="auto|M",
                   help="a task per group of members: the process `run --members` starts for the cells "
                   "that differ only in seed and learning rate (at most M; auto: all of them)")  # fmt: skip
    q.add_argument("--shed", type=_shed_arg, nargs="?", const=0.5, metavar="F", help=SHED)
    q = add("sweep", "write a W&B sweep configuration of the suite's grid")
    q.add_argument("--config", type=Path, help="where to write it (default: <out>/sweep.yaml)")
    q = add("collect", "the results table, per-length curves and plot of the finished cells")
    _filters(q)
    q.add_argument("--wandb", metavar="ENTITY/PROJECT/SWEEP_ID", help="read a W&B sweep's runs instead")
    q.add_argument("--to", type=Path, help="where to write them (default: <out>/results)")
    q.add_argument("--partial", action="store_true", help="exit 0 even if some cells are not done")
    q.add_argument("--exclude-overrides", action="store_true",
                   help="leave out (as not done) the cells that ran with other arguments than the suite "
                   "gives them, e.g. `-- --trainer.max_steps=100`; by default they are marked")  # fmt: skip
    q.add_argument("--select-on", metavar="VAL_METRIC",
                   help="tabulate per architecture and task the test score of the run with the best "
                   "value of this validation metric (e.g. val/ce_gap; `none`: mean / median / best over "
                   "runs); default: the suite's `select`")  # fmt: skip
    q.add_argument("--by-length", action="store_true",
                   help="also each task's test ce_gap by string length beside the length floor")  # fmt: skip
    q.add_argument("--by-epoch", action="store_true",
                   help="also each run's validation metric by epoch (the suite's select metric, else "
                   "val/<its test metric>) and the epoch its test read")  # fmt: skip
    q.add_argument("--last", action="append", default=[], metavar="KEY",
                   help="also each run's last logged value of KEY (from its W&B run file; repeat) and "
                   "their median and max")  # fmt: skip
    q.add_argument("--select-mode", choices=("min", "max"),
                   help="whether the lowest (min) or highest (max) --select-on value is best")  # fmt: skip
    return p


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, extra = argv[:i], argv[i + 1 :]
    args = parser().parse_args(argv)
    try:
        suite = Suite.load(args.suite, out=args.out)
    except (ValueError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2

    if args.command == "list":
        for cell in _select(suite, args):
            status, note = cell_status(suite, cell), ""
            pid = running_elsewhere(suite, cell)
            if pid is not None:
                status, note = "running", f"  (process {pid})"
            elif (last := interrupted_checkpoint(suite, cell)) is not None:
                note = f"  (continues after epoch {checkpoint_epoch(last) + 1})"
            elif status == "done" and (differs := cell_off_suite(suite, cell)):
                status, note = "done*", f"  (ran with {'; '.join(differs)})"
            print(f"{cell.index:>5}  {status:<8} {cell.name}{note}")
            if args.commands:
                print("       train.py fit " + shlex.join(suite.cli_args(cell) + extra))
        return 0

    if getattr(args, "shed", None) is not None and not args.members:
        print("error: --shed acts on groups of members: give --members too", file=sys.stderr)
        return 2

    if args.command == "cell":
        if args.members:
            try:
                group = [suite.cell(name) for name in args.cell or []]
                if not group:
                    raise ValueError("--members needs the cells' names (--cell NAME ...)")
                if args.force:
                    for c in group:
                        (suite.cell_dir(c) / "result.json").unlink(missing_ok=True)
                results = run_group(
                    suite, group, extra, resume=not (args.fresh or args.force), shed=args.shed
                )
            except (KeyError, ValueError) as e:
                print(f"error: {e.args[0]}", file=sys.stderr)
                return 2
            if not results:  # done by another process since the group was written (a SLURM array's)
                print(
                    f"[suite {suite.name}] {', '.join(c.name for c in group)}: done; --force runs them again"
                )
            for name, result in results.items():
                note = " (diverged: stopped)" if result["diverged"] else ""
                print(f"[suite {suite.name}] {name}: {suite.metric} = {result['score']:.6g}{note}")
            return 0
        if args.cell is not None and len(args.cell) > 1:
            try:
                group = [suite.cell(name) for name in args.cell]
                if args.force:
                    for c in group:
                        (suite.cell_dir(c) / "result.json").unlink(missing_ok=True)
                return 1 if run_cells(suite, group, extra, resume=not (args.fresh or args.force)) else 0
            except (KeyError, ValueError) as e:
                print(f"error: {e.args[0]}", file=sys.stderr)
                return 2
        try:
            if args.cell is not None:
                cell = suite.cell(args.cell[0])
            elif args.index is not None:
                cells = suite.cells()
                if not 0 <= args.index < len(cells):
                    raise KeyError(f"suite {suite.name!r} has cells 0..{len(cells) - 1}, not {args.index}")
                cell = cells[args.index]
            else:
                cell = suite.cell(arch=args.arch, task=args.task, seed=args.seed, lr=args.lr)
        except KeyError as e:
            print(f"error: {e.args[0]}", file=sys.stderr)
            return 2
        if cell_status(suite, cell) == "done" and not args.force:
            differs = cell_off_suite(suite, cell)
            ran = f", ran with {'; '.join(differs)}" if differs else ""
            print(
                f"[suite {suite.name}] {cell.name} is done ({suite.cell_dir(cell) / 'result.json'}{ran}); --force runs it again"
            )
            return 0
        forced = cell_status(suite, cell) == "done"
        (suite.cell_dir(cell) / "result.json").unlink(missing_ok=True)
        result = run_cell(suite, cell, extra, resume=not (args.fresh or forced))
        print(f"[suite {suite.name}] {cell.name}: {suite.metric} = {result['score']:.6g}")
        return 0

    if args.command == "run":
        if args.members is not None and suite.share_data:
            print(f"error: suite {suite.name!r} shares data across architectures (share_data); --members groups "
                  "a cell's seeds and learning rates instead: run it without one of them", file=sys.stderr)  # fmt: skip
            return 2
        report = run_local(
            suite,
            jobs=args.jobs,
            threads=args.threads,
            extra=extra,
            cells=_select(suite, args),
            fresh=args.fresh,
            members=args.members,
            shed=args.shed,
        )
        results = collect(suite)
        try:
            paths = results.write(suite.out / "results")
            print("\n" + results.table())
            print(f"written: {', '.join(str(p) for p in paths.values())}")
        except ValueError as e:  # the suite's selection on validation cannot be applied
            print(f"error: {e}", file=sys.stderr)
        failed = [k for k, v in report.items() if v != "done"]
        if failed:
            print(
                f"failed ({len(failed)}; run the command again to re-run them): {', '.join(failed)}",
                file=sys.stderr,
            )
        return 1 if failed else 0

    if args.command == "slurm":
        options = {}
        for o in args.option:
            key, sep, value = o.partition("=")
            if not sep or not key:
                print(f"error: --option takes KEY=VALUE, got {o!r}", file=sys.stderr)
                return 2
            options[key] = value
        todo = [c for c in _select(suite, args) if cell_status(suite, c) != "done"]
        try:
            text = slurm_script(suite, cells=todo, options=options, parallel=args.parallel, extra=extra,
                                python=args.python, members=args.members, shed=args.shed)  # fmt: skip
        except ValueError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        script = args.script or suite.out / "slurm.sbatch"
        script.parent.mkdir(parents=True, exist_ok=True)
        (suite.out / "logs").mkdir(parents=True, exist_ok=True)  # sbatch does not create --output's folder
        script.write_text(text)
        if args.members is None:
            tasks = f"{len(todo)} cell(s)"
        else:
            tasks = f"{len(suite.member_groups(todo, args.members))} group(s) of members ({len(todo)} cells)"
        print(f"wrote {script}: a job array of {tasks}; submit with `sbatch {script}`")
        if args.submit:
            done = subprocess.run(["sbatch", str(script)], capture_output=True, text=True)
            sys.stdout.write(done.stdout)
            sys.stderr.write(done.stderr)
            return done.returncode
        return 0

    if args.command == "sweep":
        path = args.config or suite.out / "sweep.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(wandb_sweep(suite, extra=extra), sort_keys=False))
        print(
            f"wrote {path}: `wandb sweep {path}`, then `wandb agent <entity/project/sweep id>` on each machine"
        )
        return 0

    # collect
    try:
        suite = suite.subset(arch=args.arch, task=args.task, seed=args.seed, lr=args.lr)
    except KeyError as e:
        print(f"error: {e.args[0]}", file=sys.stderr)
        return 2
    select: dict[str, str] | str | None = "suite"
    if args.select_on is not None and args.select_on != "none" and args.select_mode is None:
        print("error: --select-on needs --select-mode min or max (which value is best)", file=sys.stderr)
        return 2
    if args.select_on == "none":
        select = None
    elif args.select_on is not None:
        select = {"metric": args.select_on, "mode": args.select_mode}
    elif args.select_mode is not None:
        print("error: --select-mode goes with --select-on", file=sys.stderr)
        return 2
    try:
        if args.wandb:
            results = collect_wandb(suite, args.wandb, select=select)
        else:
            results = collect(suite, exclude_overrides=args.exclude_overrides, select=select)
        paths = results.write(args.to or suite.out / "results")
        text = results.table()
        if args.by_length or args.by_epoch or args.last:
            import memrnn.suite.tables as tables

            if args.by_length:
                text += "\ntest/ce_gap by string length (median / max over runs (runs)):\n\n"
                text += tables.by_length(results) + "\n"
            if args.by_epoch:
                text += f"\n{tables.epoch_metric(suite)} by epoch:\n\n" + tables.by_epoch(results) + "\n"
            if args.last:
                text += "\n" + tables.last_logged(results, args.last) + "\n"
            paths["table"].write_text(text)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(text)
    print(f"written: {', '.join(str(p) for p in paths.values())}")
    return 0 if args.partial or not results.missing else 1


if __name__ == "__main__":
    raise SystemExit(main())
