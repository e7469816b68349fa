"""Run a suite's cells: one in this process (:func:`run_cell`, what every launcher calls), or all
that are not done, N at a time on this machine (:func:`run_local`).

A cell's folder (``Suite.cell_dir``) says where it stands:

* ``STARTED``: the cell began (host, process, time, SLURM and W&B ids, as JSON);
* ``result.json``: it finished (:func:`run_cell` says what is in it); the cell is *done*, with
  the arguments it ran with beyond the suite's (``overrides``: e.g. ``--trainer.max_steps=100``
  after ``--``), which :func:`off_suite` and the collector report, and the validation metrics of
  the checkpoint it tested (``val_metrics``), which the collector's selection reads;
* ``FAILED``: it raised (the traceback); the W&B run is marked failed (exit code 1).

A cell with ``STARTED`` and neither of the others was killed (or is still running).  Every
launcher runs the cells that are not done, so running a suite again re-runs the failed and the
killed ones and never repeats a finished one.  :func:`run_local` looks again just before it
starts each cell, so two of them on one machine share a suite's folder: neither starts a cell the
other has finished or is running (a ``STARTED`` of this host whose process is alive).
"""

from __future__ import annotations

# Lightning (memrnn.lit) is imported where a cell is run, not here: `python -m memrnn.suite --help`,
# `list` and argument errors need none of it (4.7 s of imports before)
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch

from memrnn.ops.native import HEAP_MALLOC_ENV
from memrnn.suite.spec import RUN_FOLDER_ARGS, Cell, Suite

#: the ``train.py`` defaults read before every config when the suite names none
PROJECT_DEFAULTS = Path("configs") / "defaults.yaml"
#: the prefix of the tested checkpoint's validation metrics in a cell's W&B run summary
TESTED_PREFIX = "tested_checkpoint/"


def worker_env(threads: int) -> dict[str, str]:
    """The environment of a cell process started on this machine: this one's, with ``threads``
    intra-op threads (``OMP_NUM_THREADS``, ``MKL_NUM_THREADS``) and, on Linux, glibc's heap kept
    (:data:`memrnn.ops.native.HEAP_MALLOC_ENV`; a variable already set is left as it is, so exporting e.g.
    ``MALLOC_MMAP_MAX_=65536`` gives glibc's default back)."""
    if threads < 1:
        raise ValueError(f"threads must be >= 1, got {threads}")
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    if sys.platform == "linux":
        for key, value in HEAP_MALLOC_ENV.items():
            env.setdefault(key, value)
    return env


def cell_status(suite: Suite, cell: Cell) -> str:
    """``"done"``, ``"failed"``, ``"killed"`` (started, no result: killed or still running) or
    ``"pending"``."""
    folder = suite.cell_dir(cell)
    if (folder / "result.json").is_file():
        return "done"
    if (folder / "FAILED").is_file():
        return "failed"
    if (folder / "STARTED").is_file():
        return "killed"
    return "pending"


def running_elsewhere(suite: Suite, cell: Cell) -> int | None:
    """The process id of a live process of this machine that is running ``cell`` (its
    ``STARTED`` names this host and that process, and there is no result), else None."""
    if cell_status(suite, cell) != "killed":
        return None
    return live_owner(suite.cell_dir(cell))


def started_stamp(name: str) -> dict[str, Any]:
    """What a run writes to its folder's ``STARTED`` as it begins: ``name``, this host and
    process, the time, and the SLURM and W&B ids it runs under (:func:`live_owner` reads it)."""
    return {
        "cell": name,
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        **{k: os.environ[k] for k in ("SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID",
                                      "WANDB_SWEEP_ID", "WANDB_RUN_ID") if k in os.environ},
    }  # fmt: skip


def write_started(folder: Path, name: str) -> None:
    """Stamp ``folder/STARTED`` with :func:`started_stamp`."""
    _write_json(folder / "STARTED", started_stamp(name))


def live_owner(folder: Path) -> int | None:
    """The process id that ``folder/STARTED`` names if it is a live process of this machine other
    than this one, else None (no stamp, another host's, or a process that has ended)."""
    try:
        stamp = json.loads((folder / "STARTED").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(stamp, dict):
        return None
    pid = stamp.get("pid")
    if stamp.get("host") != socket.gethostname() or not isinstance(pid, int) or pid == os.getpid():
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:  # alive, another user's
        return pid
    return pid


def _scalars(d: dict[str, Any]) -> dict[str, float]:
    out = {}
    for k, v in d.items():
        if isinstance(v, torch.Tensor) and v.numel() == 1:
            v = v.item()
        if isinstance(v, int | float) and not isinstance(v, bool):
            out[k] = float(v)
    return out


def _write_json(path: Path, value: Any) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(value, indent=1) + "\n")
    tmp.replace(path)  # atomic: a reader never sees half a result


def interrupted_checkpoint(suite: Suite, cell: Cell) -> Path | None:
    """The newest ``last.ckpt`` a killed or failed run of ``cell`` left in its folder (None when
    the cell is done, never started, or stopped before its first checkpoint)."""
    if cell_status(suite, cell) not in ("killed", "failed"):
        return None
    from memrnn.lit.runs import latest_checkpoint

    return latest_checkpoint(suite.cell_dir(cell))


def _checkpoint(path: Path) -> dict[str, Any]:
    """A Lightning checkpoint's contents, its tensors memory-mapped (its weights never read)."""
    return torch.load(path, map_location="cpu", weights_only=True, mmap=True)


def checkpoint_epoch(path: Path) -> int:
    """The 0-based epoch a Lightning checkpoint was saved in (read without loading its weights)."""
    return int(_checkpoint(path)["epoch"])


def checkpoint_summary(path: Path) -> str:
    """How far the run behind a Lightning checkpoint got: ``"7 epochs done, best val/loss
    0.5289"`` (the score its ``ModelCheckpoint`` monitors, when it has one), or ``"checkpoint
    <path> unreadable (<error>)"`` for a file torch cannot read (e.g. one cut off mid-write)."""
    try:
        saved = _checkpoint(path)
    except Exception as err:
        return f"checkpoint {path} unreadable ({type(err).__name__})"
    done = int(saved["epoch"]) + 1
    parts = [f"{done} epoch{'' if done == 1 else 's'} done"]
    best = [
        (state.get("monitor"), float(state["best_model_score"]))
        for name, state in saved.get("callbacks", {}).items()
        if name.startswith("ModelCheckpoint") and state.get("best_model_score") is not None
    ]
    if best:
        parts.append(f"best {best[0][0]} {best[0][1]:.4f}")
    return ", ".join(parts)


def _comparable(args: Sequence[str], suite: Suite) -> list[str]:
    """``args`` without :data:`RUN_FOLDER_ARGS`, each ``--config`` path relative to the suite
    file's folder: what a cell computes, comparable across run folders and checkouts."""
    out: list[str] = []
    after_config = False
    for a in args:
        if after_config:
            a = os.path.relpath(a, suite.path.parent)
        elif a.startswith(RUN_FOLDER_ARGS):
            continue
        after_config = a == "--config"
        out.append(a)
    return out


def suite_args(suite: Suite, cell: Cell) -> list[str]:
    """The arguments the suite gives ``cell`` (:meth:`Suite.cli_args`), comparable across run
    folders and checkouts (``--config`` relative to the suite file, no run folder)."""
    return _comparable(suite.cli_args(cell), suite)


def _key(arg: str) -> str:
    return arg.partition("=")[0]


def off_suite(suite: Suite, cell: Cell, result: dict[str, Any]) -> list[str]:
    """How the run behind ``result`` (the cell's ``result.json``) differs from what the suite
    gives ``cell`` now, one entry per argument (empty: it ran as the suite says): first its
    ``overrides`` (given beyond the suite's, as ``-- --trainer.max_steps=100`` does), then what
    changed in the suite file since it ran: ``"--trainer.max_steps=100 (the suite now:
    --trainer.max_steps=2000)"``, ``"without --k=v"`` (the suite now adds one), or a parameter
    budget.  Results written before ``overrides`` was recorded are read from their ``args``."""
    expected = suite_args(suite, cell)
    if "suite_args" not in result and "args" not in result and "test_ce_gap" in result:
        # the former scripts/dusell_table.py's: its config and seed, then its overrides, unordered
        config = _comparable(["--config", str(suite.architectures[cell.arch].config_for(cell.task))], suite)
        script = [*config, f"--seed_everything={cell.seed}", f"--data.init_args.seed={cell.seed}"]
        script += result.get("overrides") or []
        overrides, ran = [], [a for a in expected if a in script] + [a for a in script if a not in expected]
        result = {**result, "budget": suite.budget if suite.architectures[cell.arch].budget_key else None}
    elif "overrides" in result and "suite_args" in result:
        overrides, ran = list(result["overrides"]), list(result["suite_args"])
    else:  # an older result: its args are the suite's, the budget's size, then the overrides
        ran = _comparable(result.get("args") or [], suite)
        budget = result.get("budget") or {}
        sized = suite.architectures[cell.arch].sized(budget.get("value"))
        if budget and all(a in ran[len(expected) :] for a in sized):
            for a in sized:
                ran.remove(a)
        if ran[: len(expected)] == expected:
            ran, overrides = expected, ran[len(expected) :]
        else:
            overrides = []
    out = list(overrides)
    if ran != expected:
        gone = [a for a in ran if a not in expected]
        new = [a for a in expected if a not in ran]
        for a in gone:
            now = [b for b in new if _key(b) == _key(a)]
            out.append(f"{a} (the suite now: {', '.join(now)})" if now else a)
        out += [f"without {b}" for b in new if not any(_key(a) == _key(b) for a in gone)]
        if not gone and not new:
            out.append("the suite's arguments in another order")
    ran_budget = {k: v for k, v in (result.get("budget") or {}).items() if k != "value"} or None
    budget = suite.budget if suite.architectures[cell.arch].budget_key else None  # null: not sized
    if ran_budget != budget:
        out.append(f"budget {ran_budget} (the suite now: {budget})")
    return out


def run_cell(
    suite: Suite,
    cell: Cell,
    extra: Sequence[str] = (),
    *,
    resume: bool = True,
    shared: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Train ``cell`` (``trainer.fit``), test the checkpoint with the best monitored value (the
    last weights without checkpointing), and write ``result.json`` into the cell's folder:
    the cell's coordinates, ``metrics`` (every scalar the test logged), ``curves`` (the test's
    per-length curves), ``parameters`` (trainable), ``steps``, ``epochs``, ``best_score`` and
    ``checkpoint``, ``seconds`` (of this attempt), ``continued_from``, ``code``,
    ``continued_code`` and ``continued_codes`` (the code it ran, the code that saved the checkpoint
    it continued, and every code that trained that checkpoint, oldest first:
    :func:`memrnn.lit.runs.code_fields`), the ``args`` it ran with (``extra`` last), the
    ``suite_args`` (:func:`suite_args`) and the ``overrides`` beyond them (``extra``:
    :func:`off_suite` and the collector mark a cell run with any), the ``data_seed`` the suite
    gave it (``Suite.data_seed_of``), and ``val_metrics`` and ``val_epoch``: the validation
    metrics (``val/…``) logged at the validation of the tested checkpoint and its 0-based epoch
    (:class:`memrnn.suite.validation.ValidationRecord`; ``None`` when the fit recorded none that
    matches: no validation ran, or the run continued a checkpoint written before memrnn kept the
    record), which ``collect``'s selection on validation reads; with W&B, also in the run's
    summary as ``tested_checkpoint/<metric>``.  Returns
    that dict; on an exception writes ``FAILED``, finishes the W&B run with exit code 1 and
    raises.

    With ``resume`` (the default) a cell that was killed or failed after its first checkpoint
    continues from its latest epoch (:func:`interrupted_checkpoint`; the same W&B run, folder and
    best-checkpoint tracking), unless the suite now gives it another model (then it starts again,
    with a warning naming the difference).

    ``shared``: a dict that the cells of one (task, lr, seed) pass along (:func:`run_cells`): the
    first sets up its data module there, the others train on it after checking that their
    config resolves to the same ``data`` section (``ValueError`` naming both cells otherwise).
    The result then also keeps ``val_by_epoch`` (``{val metric: [epoch 1, 2, …]}``, ``None`` for
    an epoch that logged none) and ``clock_by_epoch`` (:func:`clock_by_epoch`: when each epoch
    validated).

    Runs in this process (one cell, one W&B run); DDP ranks each call it, rank 0 writes."""
    import wandb

    from memrnn.lit.cli import build_cli
    from memrnn.lit.runs import code_fields
    from memrnn.suite.validation import ValidationRecord

    folder = suite.cell_dir(cell)
    folder.mkdir(parents=True, exist_ok=True)
    last = interrupted_checkpoint(suite, cell) if resume else None
    (folder / "FAILED").unlink(missing_ok=True)
    args = [*suite.cli_args(cell), *extra]
    if int(os.environ.get("LOCAL_RANK", "0")) == 0 and int(os.environ.get("NODE_RANK", "0")) == 0:
        write_started(folder, cell.name)
    os.environ.setdefault("WANDB_RUN_GROUP", f"{suite.name}:{cell.arch}/{cell.task}")
    os.environ.setdefault("WANDB_TAGS", ",".join([suite.name, cell.arch, cell.task]))
    defaults = [suite.defaults or PROJECT_DEFAULTS]
    if not defaults[0].is_file():
        raise FileNotFoundError(
            f"suite {suite.name!r} names no 'defaults' and {PROJECT_DEFAULTS} is not here: run from the "
            "project root or give the suite a 'defaults:' file"
        )
    start = time.perf_counter()
    failed = 0
    try:
        sized = None
        if suite.budget is not None and suite.architectures[cell.arch].budget_key:
            sized = fit_budget(suite, cell, defaults, extra)
            args = [*suite.cli_args(cell), *suite.architectures[cell.arch].sized(sized), *extra]
        cli = build_cli(args, run=False, default_config_files=defaults, continue_from=last)
        trainer, model, data = cli.trainer, cli.model, cli.datamodule
        if shared is not None:
            section = cli.config.data.as_dict()
            if not shared:
                data.setup("fit")
                data.setup("test")
                shared.update(data=data, section=section, cell=cell.name)
            elif section != shared["section"]:
                raise ValueError(f"{cell.name}: its config resolves to another data section than "
                                 f"{shared['cell']}'s; cells that share data must draw the same")  # fmt: skip
            data = shared["data"]
        record = ValidationRecord()
        trainer.callbacks.insert(0, record)
        if cli.continue_from is not None:
            _say(f"[suite {suite.name}] {cell.name}: continuing from {cli.continue_from}")
        trainer.fit(model, datamodule=data, ckpt_path=cli.continue_from)
        # every validation of the fit: testing a checkpoint restores the callbacks' states, the
        # record's too, to that checkpoint's epoch
        validations = list(record.epochs)
        ckpt = trainer.checkpoint_callback
        # the checkpoint with the best validation (default), or the final weights ("last": the
        # protocol of a paper that has no validation, Delétang et al.'s)
        best = ckpt.best_model_path if ckpt is not None and suite.test_checkpoint == "best" else ""
        (tested,) = trainer.test(model, datamodule=data, ckpt_path=best or None)
        curves = model.length_curves("test") if hasattr(model, "length_curves") else {}
        best_score = ckpt.best_model_score if ckpt is not None else None
        validated = record.tested(ckpt, best)
        val_metrics = None
        if validated is not None:
            val_metrics = {k: v for k, v in validated["metrics"].items() if k.startswith("val/")}
        result = {
            **cell.params,
            "cell": cell.name,
            "suite": suite.name,
            "metric": suite.metric,
            "score": _scalars(tested).get(suite.metric),
            "metrics": _scalars(tested),
            "curves": curves,
            "parameters": sum(p.numel() for p in model.parameters() if p.requires_grad),
            "budget": None if sized is None else {**suite.budget, "value": sized},
            "steps": trainer.global_step,
            "epochs": trainer.current_epoch,
            "best_score": None if best_score is None else float(best_score),
            "checkpoint": str(best) or "final weights",
            "seconds": round(time.perf_counter() - start, 1),
            "continued_from": None if cli.continue_from is None else str(cli.continue_from),
            **code_fields(cli.continued_record),
            "args": args,
            "suite_args": suite_args(suite, cell),
            "overrides": list(extra),
            "data_seed": suite.data_seed_of(cell),
            "val_metrics": val_metrics,
            "val_epoch": None if validated is None else validated["epoch"],
            "val_by_epoch": by_epoch(validations),
            "clock_by_epoch": clock_by_epoch(validations),
        }
        if trainer.is_global_zero:
            if result["score"] is None:
                raise KeyError(
                    f"the test logged no {suite.metric!r} (the suite's metric); it logged {sorted(result['metrics'])}"
                )
            if val_metrics and wandb.run is not None:  # for collect_wandb's selection on validation
                wandb.run.summary.update({f"{TESTED_PREFIX}{k}": v for k, v in val_metrics.items()})
            _write_json(folder / "result.json", result)
        return result
    except BaseException:
        failed = 1
        if int(os.environ.get("LOCAL_RANK", "0")) == 0:
            (folder / "FAILED").write_text(traceback.format_exc())
        raise
    finally:
        if wandb.run is not None:
            wandb.finish(exit_code=failed)


def by_epoch(epochs: Sequence[dict[str, Any]]) -> dict[str, list[float | None]]:
    """``{val metric: [its value at epoch 1, 2, …]}`` from a :class:`ValidationRecord`'s epochs
    (an epoch validated again after an interruption: the later value; ``None``: none logged)."""
    merged: dict[str, dict[int, float]] = {}
    for e in epochs:
        for k, v in e["metrics"].items():
            if k.startswith("val/"):
                merged.setdefault(k, {})[int(e["epoch"])] = v
    return {k: [v.get(i) for i in range(max(v) + 1)] for k, v in merged.items()}


def clock_by_epoch(epochs: Sequence[dict[str, Any]]) -> dict[str, list[float | int | None]]:
    """``{"time": [Unix seconds at epoch 1's validation, 2's, …], "members": […], "stopped": […]}``
    from a :class:`ValidationRecord`'s epochs, as :func:`by_epoch` (the later of an epoch validated
    twice; ``None``: not recorded, as in a checkpoint written before memrnn kept the clock):
    where a run's time went, epoch by epoch (``scripts/group_parts.py`` reads it).  ``members``
    and ``stopped`` only for a members run."""
    merged: dict[str, dict[int, float | int]] = {}
    for e in epochs:
        for k in ("time", "members", "stopped"):
            if e.get(k) is not None:
                merged.setdefault(k, {})[int(e["epoch"])] = e[k]
    return {k: [v.get(i) for i in range(max(v) + 1)] for k, v in merged.items()}


def run_cells(suite: Suite, cells: Sequence[Cell], extra: Sequence[str] = (), *, resume: bool = True) -> int:
    """Run ``cells`` (of one task, learning rate and seed) in this process on one shared data
    module (:func:`run_cell`'s ``shared``; the suite's ``share_data``), skipping those done and
    those a live process of this machine is running (:func:`running_elsewhere`); a failing cell
    is reported and the next one runs.  Returns how many failed."""
    keys = {(c.task, c.lr, c.seed) for c in cells}
    if len(keys) > 1:
        raise ValueError(f"cells that share data need one task, lr and seed; got {sorted(map(str, keys))}")
    shared: dict[str, Any] = {}
    failed = 0
    for cell in cells:
        if cell_status(suite, cell) == "done":
            continue
        pid = live_owner(suite.cell_dir(cell))  # a failed cell's stamp too: another runner retries it
        if pid is not None:
            _say(f"[suite {suite.name}] {cell.name}: running in process {pid}; not started again")
            continue
        try:
            result = run_cell(suite, cell, extra, resume=resume, shared=shared)
            _say(f"[suite {suite.name}] {cell.name}: {suite.metric} = {result['score']:.6g}")
        except Exception:
            failed += 1
            _say(f"[suite {suite.name}] {cell.name} FAILED:\n{traceback.format_exc()}")
    return failed


def _parameters(args: Sequence[str], defaults: Sequence[Path]) -> int:
    from memrnn.lit.cli import build_cli

    cli = build_cli([*args, "--trainer.logger=false"], run=False, default_config_files=defaults)
    return sum(p.numel() for p in cli.model.parameters() if p.requires_grad)


def fit_budget(suite: Suite, cell: Cell, defaults: Sequence[Path], extra: Sequence[str] = ()) -> int:
    """The largest value of the cell's architecture's ``budget_key`` in ``1..budget["max"]``
    whose model has at most ``budget["parameters"]`` trainable parameters (a bisection; the
    count grows with the size), found once per architecture and task and kept in
    ``<out>/budget/<arch>__<task>.json``.  Raises ``ValueError`` when even size 1 exceeds it."""
    assert suite.budget is not None
    target, top = suite.budget["parameters"], suite.budget["max"]
    arch = suite.architectures[cell.arch]
    key = arch.budget_key if isinstance(arch.budget_key, str) else list(arch.budget_key)
    cache = suite.out / "budget" / f"{cell.arch}__{cell.task}.json"
    if cache.is_file():
        saved = json.loads(cache.read_text())
        if (saved.get("parameters"), saved.get("max"), saved.get("key"), saved.get("extra")) == (
            target,
            top,
            key,
            list(extra),
        ):
            return int(saved["value"])

    def count(v: int) -> int:
        return _parameters([*suite.cli_args(cell), *arch.sized(v), *extra], defaults)

    if count(1) > target:
        raise ValueError(
            f"{cell.arch} on {cell.task} has {count(1)} parameters at {key}=1, over the budget {target}"
        )
    lo, hi = 1, top
    while lo < hi:  # the largest v with count(v) <= target
        mid = (lo + hi + 1) // 2
        if count(mid) <= target:
            lo = mid
        else:
            hi = mid - 1
    cache.parent.mkdir(parents=True, exist_ok=True)
    _write_json(
        cache,
        {"parameters": target, "max": top, "key": key, "extra": list(extra), "value": lo, "count": count(lo)},
    )
    return lo


def _say(line: str) -> None:
    print(line, flush=True)


def _exit_on_signal(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)


def _cell_command(
    suite: Suite,
    cells: Sequence[Cell],
    extra: Sequence[str],
    fresh: bool = False,
    members: bool = False,
    shed: float | None = None,
) -> list[str]:
    cmd = [
        sys.executable,
        "-m",
        "memrnn.suite",
        "cell",
        str(suite.path),
        "--cell",
        *(c.name for c in cells),
        "--out",
        str(suite.out),
        *(["--fresh"] if fresh else []),
        *(["--members"] if members else []),
        *(["--shed", repr(shed)] if members and shed is not None else []),
    ]
    return cmd + (["--", *extra] if extra else [])


def run_local(
    suite: Suite,
    *,
    jobs: int = 1,
    threads: int = 1,
    extra: Sequence[str] = (),
    cells: Sequence[Cell] | None = None,
    log: Callable[[str], None] | None = None,
    fresh: bool = False,
    members: str | int | None = None,
    shed: float | None = None,
) -> dict[str, str]:
    """Run every cell of ``cells`` (default: the suite's) that is not done, ``jobs`` processes at
    a time (with the suite's ``share_data``, one process per task, lr and seed, its log named for its
    architectures: :func:`run_cells`), each ``python -m memrnn.suite cell …`` with ``threads`` torch threads (and glibc's heap
    kept: :func:`worker_env`) and its output
    in ``<out>/logs/<cell name>.log``.  Returns ``{cell name: status}`` for the cells it ran, in the
    suite's order
    (``done`` or ``failed (exit N; log …)``); Ctrl-C or SIGTERM stops the running cells, which then count
    as killed and run again next time, from their latest epoch's checkpoint unless ``fresh``
    (:func:`run_cell`).  ``members`` (``"auto"`` or a whole number): the cells that differ only in
    seed and learning rate run as the members of one process, at most that many
    (:mod:`memrnn.suite.groups`); ``shed`` (a fraction, with ``members``): a group's members go on
    alone once that fraction of them has stopped (:func:`memrnn.suite.groups.run_group`)."""
    log = log or _say
    if shed is not None and members is None:
        raise ValueError("shed acts on groups of members: give members too")
    if jobs < 1 or threads < 1:
        raise ValueError(f"jobs and threads must be >= 1, got jobs={jobs}, threads={threads}")
    todo = [c for c in (suite.cells() if cells is None else cells) if cell_status(suite, c) != "done"]
    order = [c.name for c in todo]
    groups: list[list[Cell]] = []  # one process each: a cell, or with share_data a (task, lr, seed)
    if members is not None:
        groups = suite.member_groups(todo, members)
    elif suite.share_data:
        by_key: dict[tuple[str, float | None, int], list[Cell]] = {}
        for c in todo:
            by_key.setdefault((c.task, c.lr, c.seed), []).append(c)
        groups = list(by_key.values())
    else:
        groups = [[c] for c in todo]
    env = worker_env(threads)
    running: list[tuple[list[Cell], subprocess.Popen, Path, float]] = []
    report: dict[str, str] = {}
    unit = "process(es) of a task, lr and seed sharing data" if suite.share_data else "cell(s)"
    if members is not None:
        unit = "process(es) of members (seeds and learning rates of one cell)"
    log(f"[suite {suite.name}] {len(todo)} cell(s) to run in {len(groups)} {unit}, {jobs} at a time")
    previous = None
    if threading.current_thread() is threading.main_thread():
        # SIGTERM (kill, SLURM's time limit) would end this process without its `finally`,
        # leaving its cells running as orphans: turn it into an exit that stops them first
        previous = signal.signal(signal.SIGTERM, _exit_on_signal)
    try:
        while groups or running:
            while groups and len(running) < jobs:
                group, start = groups.pop(0), []
                for cell in group:
                    if cell_status(suite, cell) == "done":  # another runner finished it meanwhile
                        log(f"[suite {suite.name}] {cell.name}: done by another runner")
                        report[cell.name] = "done"
                    elif (pid := running_elsewhere(suite, cell)) is not None:
                        log(f"[suite {suite.name}] {cell.name}: running in process {pid}; not started again")
                        report[cell.name] = f"running in process {pid}"
                    else:
                        start.append(cell)
                if not start:
                    continue
                if members is not None:
                    name = suite.group_dir(start).relative_to(suite.out).as_posix()
                elif len(start) == 1:
                    name = start[0].name
                else:
                    name = "-".join(c.arch for c in start) + "/" + start[0].name.split("/", 1)[1]
                path = suite.out / "logs" / f"{name.replace('/', '_')}.log"
                path.parent.mkdir(parents=True, exist_ok=True)
                with path.open("a") as fh:
                    proc = subprocess.Popen(
                        _cell_command(
                            suite, start, extra, fresh, members is not None and len(start) > 1, shed
                        ),
                        stdout=fh,
                        stderr=subprocess.STDOUT,
                        env=env,
                    )
                running.append((start, proc, path, time.perf_counter()))
                log(f"[suite {suite.name}] start {', '.join(c.name for c in start)} (log {path})")
            time.sleep(0.2)
            for item in list(running):
                group, proc, path, t0 = item
                if proc.poll() is None:
                    continue
                running.remove(item)
                for cell in group:
                    if cell_status(suite, cell) == "done":
                        report[cell.name] = "done"
                        score = json.loads((suite.cell_dir(cell) / "result.json").read_text())["score"]
                        log(f"[suite {suite.name}] {cell.name}: {suite.metric} {score:.4g} "
                            f"({time.perf_counter() - t0:.0f} s)")  # fmt: skip
                    else:
                        report[cell.name] = f"failed (exit {proc.returncode}; log {path})"
                        tail = path.read_text(errors="replace").strip().splitlines()[-5:]
                        log(
                            f"[suite {suite.name}] {cell.name}: FAILED (exit {proc.returncode}; log {path})\n    "
                            + "\n    ".join(tail)
                        )
    finally:
        for _, proc, _, _ in running:
            proc.terminate()
        for _, proc, _, _ in running:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    # in the suite's order, whichever cell finished first
    return {name: report[name] for name in order if name in report}
