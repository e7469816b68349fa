"""DuSell & Chiang's context-free language-modelling table: every model × task × seed of
``configs/dusell``, trained, tested on the checkpoint with the lowest validation loss, and
scored by the cross-entropy difference from the exact lower bound (nats per token,
``test/ce_gap``); then one table of the median and the max (and the min) over seeds per cell.

    python scripts/dusell_table.py [--models lstm superposition stratification] \\
        [--tasks marked_reversal unmarked_reversal padded_reversal dyck hardest_cfl] \\
        [--seeds 0 1 2] [--jobs 2] [--out runs/dusell] [--table FILE] [-- train.py overrides]

Each (task, seed) is one worker process (``--jobs`` at a time, one thread each, glibc's heap kept:
:func:`memrnn.suite.runner.worker_env`) that samples
and scores the data once and trains every model on it, so the exact scores of the test
strings (an inside pass per string) are paid once, not once per model; every model's config is
checked to resolve to the same ``data`` section first.  A cell that finishes writes
``<out>/<model>_<task>/seed<S>/result.json``; running the command again skips those and re-runs
the rest, so a crashed or killed cell (reported, with its log) is never dropped: it continues
from its latest epoch's ``last.ckpt`` (the same W&B run; ``--fresh`` starts it again).  A cell
stamps ``STARTED`` (host and process) as it begins, and a cell whose stamp names a live process
of this machine is left to it (:func:`memrnn.suite.runner.live_owner`): two invocations on one
``--out`` never train the same cell twice at once.  Each worker logs to
``<out>/logs/<models>_<task>_seed<S>.log``.  Runs log offline to W&B under the cell's folder.
``--table-only`` prints the table of what is there; ``--by-length`` adds each task's test gap by
string length, ``--by-epoch`` each cell's validation gap by epoch.  A result also keeps its
validation gap by epoch and the epoch of the checkpoint its test scored (:func:`epoch_record`),
so a results folder without the runs' files (``benchmarks/results/dusell``) prints them too;
``--record-epochs`` adds them to results written before they were kept.

The NS-RNN and RNS-RNN cells (``--models ns rns``) run their stack as one C++ run per batch on
CPU (``benchmarks/results/nondeterministic-cpu-2core.md``): 3-8 minutes per epoch on one core of
this project's 2-core VMs (which differ), so 20 epochs × 5 tasks × 3 seeds is 15-40 core-hours per
model; on a cluster, ``configs/suites/dusell.yaml`` runs the same cells as a SLURM job array.
``vrns``, the vector RNS-RNN (DuSell & Chiang 2023), costs about 6 times the RNS-RNN's stack time.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from memrnn.languages import Language

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

MODELS = {"lstm": "LSTM", "superposition": "Superposition", "stratification": "Stratification",
          "ns": "NS-RNN", "rns": "RNS-RNN", "vrns": "Vector RNS-RNN"}  # fmt: skip
TASKS = {"marked_reversal": "Marked reversal", "unmarked_reversal": "Unmarked reversal",
         "padded_reversal": "Padded reversal", "dyck": "Dyck", "hardest_cfl": "Hardest CFL"}  # fmt: skip
CONFIGS = ROOT / "configs" / "dusell"


def cell_dir(out: Path, model: str, task: str, seed: int) -> Path:
    return out / f"{model}_{task}" / f"seed{seed}"


def cli_args(model: str, task: str, seed: int, save: Path, extra: list[str]) -> list[str]:
    return [
        "--config", str(CONFIGS / f"{model}_{task}.yaml"), f"--seed_everything={seed}",
        f"--data.init_args.seed={seed}", f"--trainer.logger.init_args.save_dir={save}",
        *extra,
    ]  # fmt: skip


def worker(task: str, seed: int, models: list[str], out: Path, extra: list[str], fresh: bool = False) -> int:
    """Train and test ``models`` on one (task, seed), sharing one data module; 1 if any failed.
    A model whose earlier run was killed continues from its latest checkpoint unless ``fresh``."""
    import torch
    import wandb

    from memrnn.lit.cli import build_cli
    from memrnn.lit.runs import code_fields, latest_checkpoint
    from memrnn.suite.runner import live_owner, write_started

    torch.set_num_threads(1)
    defaults = [ROOT / "configs" / "defaults.yaml"]
    shared, data_config, failed = None, None, 0
    for model in models:
        save = cell_dir(out, model, task, seed)
        if (save / "result.json").exists():
            continue
        owner = live_owner(save)
        if owner is not None:  # another invocation of this script is training this very cell
            print(
                f"[dusell] {model}_{task} seed {seed}: running in process {owner}; not started again",
                flush=True,
            )
            continue
        save.mkdir(parents=True, exist_ok=True)
        (save / "FAILED").unlink(missing_ok=True)
        write_started(save, f"{model}_{task}/seed{seed}")
        try:
            start = time.perf_counter()
            last = None if fresh else latest_checkpoint(save)
            cli = build_cli(
                cli_args(model, task, seed, save, extra), run=False, default_config_files=defaults,
                continue_from=last,
            )  # fmt: skip
            if cli.continue_from is not None:
                print(f"[dusell] {model}_{task} seed {seed}: continuing from {cli.continue_from}", flush=True)
            data = cli.config.data.as_dict()
            if shared is None:
                shared, data_config = cli.datamodule, data
                shared.setup("fit")
                shared.setup("test")
            elif data != data_config:
                raise ValueError(
                    f"{model}_{task}.yaml resolves to another data section than {models[0]}_{task}.yaml"
                )
            cli.trainer.fit(cli.model, datamodule=shared, ckpt_path=cli.continue_from)
            best = cli.trainer.checkpoint_callback.best_model_path
            (tested,) = cli.trainer.test(cli.model, datamodule=shared, ckpt_path=best or None)
            if wandb.run is not None:  # flush the run's history before reading its epochs back
                wandb.finish()
            result = {
                "model": model, "task": task, "seed": seed,
                "test_ce_gap": tested["test/ce_gap"],
                "best_val_loss": float(cli.trainer.checkpoint_callback.best_model_score or float("nan")),
                "epochs": cli.trainer.current_epoch, "steps": cli.trainer.global_step,
                "checkpoint": str(best), "seconds": time.perf_counter() - start, "overrides": extra,
                "continued_from": None if cli.continue_from is None else str(cli.continue_from),
                **code_fields(cli.continued_record),
                **epoch_record(save, best),
            }  # fmt: skip
            (save / "result.json").write_text(json.dumps(result, indent=1) + "\n")
            print(f"[dusell] {model}_{task} seed {seed}: test/ce_gap {result['test_ce_gap']:.4f} "
                  f"({result['seconds']:.0f} s)", flush=True)  # fmt: skip
        except Exception:
            failed = 1
            (save / "FAILED").write_text(traceback.format_exc())
            print(
                f"[dusell] {model}_{task} seed {seed} FAILED:\n{traceback.format_exc()}",
                file=sys.stderr,
                flush=True,
            )
        finally:
            if wandb.run is not None:  # each cell is its own W&B run
                wandb.finish(exit_code=failed)
    return failed


def task_language(task: str) -> tuple[Language, tuple[int, int]]:
    """The task's language (its task file ``configs/dusell/_<task>.yaml``'s) and its training window."""
    import importlib

    import yaml

    from memrnn.data.presets import get_preset

    spec = yaml.safe_load((CONFIGS / f"_{task}.yaml").read_text())["data"]["init_args"]["language"]
    module, _, name = spec["class_path"].rpartition(".")
    language = getattr(importlib.import_module(module), name)(**(spec.get("init_args") or {}))
    return language, get_preset("dusell").windows(language)[0]


def task_floor(task: str) -> float:
    """The task's length floor on its training lengths (:func:`memrnn.languages.length_floor`):
    the ce_gap a model of the training distribution has there, because it must predict the
    length that the lower bound ``log p(w | length)`` is given."""
    from memrnn.languages import length_floor

    return length_floor(*task_language(task))


def length_curve(cell: Path) -> dict[int, tuple[float, float]]:
    """``{length (END counted): (strings, ce_gap)}`` of a finished cell's test split, read from
    the ``length_curves_test.csv`` its last test wrote (:class:`memrnn.lit.callbacks.reports.LengthCurves`);
    empty if there is none."""
    import csv

    files = sorted(cell.glob("memrnn/*/length_curves_test.csv"), key=lambda f: f.stat().st_mtime)
    if not files:
        return {}
    with files[-1].open() as f:
        return {int(float(r["length"])): (float(r["count"]), float(r["ce_gap"])) for r in csv.DictReader(f)}


def length_bins(lengths: list[int], trained: set[int], width: int = 10) -> list[tuple[str, list[int]]]:
    """The test lengths grouped by ``width`` (41-50, 51-60, ... END counted), a group split where
    it straddles the edge of the training lengths ``trained``, so that every group lies wholly
    on the training lengths or wholly off them: ``[(label, lengths)]`` in order."""
    groups: dict[tuple[int, bool], list[int]] = {}
    for n in sorted(lengths):
        groups.setdefault(((n - 1) // width, n in trained), []).append(n)
    return [(f"{g[0]}-{g[-1]}" if len(g) > 1 else f"{g[0]}", g) for g in groups.values()]


def binned(curve: dict[int, tuple[float, float]], group: list[int], log_k: float | None = None) -> float:
    """The per-token gap over the strings of the lengths ``group`` (each length weighted by its
    tokens, ``strings × length``, as the split's own gap weighs them); with ``log_k``, the length
    floor on them instead: every string pays ``log K``."""
    tokens = sum(curve[n][0] * n for n in group)
    if log_k is not None:
        return sum(curve[n][0] for n in group) * log_k / tokens
    return sum(curve[n][0] * n * curve[n][1] for n in group) / tokens


def by_length(out: Path, models: list[str], tasks: list[str], seeds: list[int]) -> str:
    """Per task, the test gap by string length (END counted; median / max over the seeds whose
    run wrote its per-length curve) beside the length floor on each group of training lengths,
    ``log K / length``: where a cell sits on the floor and where, beyond the training lengths
    (which have no floor), it rises."""
    blocks = []
    for task in tasks:
        language, window = task_language(task)
        possible = language.lengths_in(window)
        trained, log_k = set(possible), math.log(len(possible))  # lengths count END, as the curves do
        curves = {m: [c for s in seeds if (c := length_curve(cell_dir(out, m, task, s)))] for m in models}
        lengths = sorted({n for cs in curves.values() for c in cs for n in c})
        if not lengths:
            continue
        head = "| lengths | floor | " + " | ".join(MODELS.get(m, m) for m in models) + " |"
        lines = [f"{TASKS.get(task, task)} (END counted; training lengths {min(trained)}-{max(trained)}, "
                 f"K = {len(possible)}):", "", head, "|---" * (len(models) + 2) + "|"]  # fmt: skip
        for label, group in length_bins(lengths, trained):
            row = [label]
            ref = next((c for cs in curves.values() for c in cs if all(n in c for n in group)), None)
            row.append(f"{binned(ref, group, log_k):.3f}" if ref and group[0] in trained else "—")
            for m in models:
                gaps = [binned(c, group) for c in curves[m] if all(n in c for n in group)]
                row.append(f"{statistics.median(gaps):.3f} / {max(gaps):.3f} ({len(gaps)})" if gaps else "—")
            lines.append("| " + " | ".join(row) + " |")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def merge_epochs(histories: list[list[dict]], metric: str = "val/ce_gap") -> dict[int, float]:
    """``{epoch: metric}`` over a cell's W&B histories in the order they ran (a killed cell
    continues in a new offline run of the same W&B run): a later run's value for an epoch
    replaces an earlier one's (an epoch that ran again after a kill)."""
    merged: dict[int, float] = {}
    for history in histories:
        for row in history:
            if metric in row and "epoch" in row:
                merged[int(row["epoch"])] = float(row[metric])
    return dict(sorted(merged.items()))


def epoch_curve(cell: Path, metric: str = "val/ce_gap", wait: float = 0.0) -> dict[int, float]:
    """A cell's ``metric`` by epoch (Lightning's, from 0), read from every offline W&B run under
    ``<cell>/wandb`` (:func:`merge_epochs`; the runs' folders are named by their start time).
    ``wait``: seconds to wait for the newest run's exit record (a run finished just now)."""
    from memrnn.lit.wandb_files import read_offline_run

    runs = sorted(cell.glob("wandb/offline-run-*/run-*.wandb"), key=lambda f: f.parent.name)
    return merge_epochs(
        [read_offline_run(f, wait=wait if f == runs[-1] else 0.0)["history"] for f in runs], metric
    )


def by_epoch_list(curve: dict[int, float]) -> list[float | None]:
    """:func:`epoch_curve`'s ``{epoch from 0: value}`` as a list from epoch 1 (``None`` for an
    epoch that logged none), the form results keep and the tables print."""
    return [curve.get(e) for e in range(max(curve) + 1)] if curve else []


def epoch_record(cell: Path, checkpoint: str | Path | None) -> dict:
    """What a result keeps of its run so that its files need not be: ``val_ce_gap_by_epoch``
    (the validation gap of epochs 1, 2, ..., ``None`` for one that logged none; from the cell's
    W&B runs, :func:`epoch_curve`) and ``checkpoint_epoch``, the epoch, counting from 1, of the
    checkpoint the test scored (Lightning's file names count from 0: ``epoch15-…`` is the 16th),
    ``None`` when that checkpoint is gone."""
    from memrnn.suite.runner import checkpoint_epoch

    gaps = by_epoch_list(epoch_curve(cell, wait=30.0))
    tested = Path(checkpoint) if checkpoint else None
    epoch = checkpoint_epoch(tested) + 1 if tested is not None and tested.is_file() else None
    return {"val_ce_gap_by_epoch": gaps, "checkpoint_epoch": epoch}


def record_epochs(out: Path, models: list[str], tasks: list[str], seeds: list[int]) -> list[str]:
    """Add :func:`epoch_record` to every finished cell's ``result.json`` that lacks it (results
    written before it was recorded), from the cell's W&B runs and checkpoint; the cells updated."""
    done = []
    for task in tasks:
        for m in models:
            for s in seeds:
                cell = cell_dir(out, m, task, s)
                f = cell / "result.json"
                if not f.exists():
                    continue
                result = json.loads(f.read_text())
                if result.get("val_ce_gap_by_epoch") and result.get("checkpoint_epoch") is not None:
                    continue
                record = epoch_record(cell, result.get("checkpoint"))
                if not record["val_ce_gap_by_epoch"] and result.get("val_ce_gap_by_epoch"):
                    record["val_ce_gap_by_epoch"] = result["val_ce_gap_by_epoch"]
                if record["checkpoint_epoch"] is None:
                    record["checkpoint_epoch"] = result.get("checkpoint_epoch")
                f.write_text(json.dumps(result | record, indent=1) + "\n")
                done.append(f"{m}_{task} seed {s}")
    return done


def by_epoch(out: Path, models: list[str], tasks: list[str], seeds: list[int]) -> str:
    """One line per cell that has logged a validation epoch: its validation gap (``val/ce_gap``)
    by epoch, counting from 1 as the README and the results file do, from its W&B runs, else
    from its ``result.json`` (:func:`epoch_record`; the committed results keep no W&B files),
    and the epoch of the checkpoint its test scored, where the result records it."""
    lines = []
    for task in tasks:
        for m in models:
            for s in seeds:
                cell = cell_dir(out, m, task, s)
                result = (
                    json.loads((cell / "result.json").read_text()) if (cell / "result.json").exists() else {}
                )
                gaps = by_epoch_list(epoch_curve(cell)) or result.get("val_ce_gap_by_epoch", [])
                if not gaps:
                    continue
                tested = result.get("checkpoint_epoch")
                tested = "" if tested is None else f"; tested on epoch {tested}"
                text = ", ".join("?" if g is None else f"{g:.3f}" for g in gaps)
                lines.append(f"{TASKS[task]}, {MODELS[m]}, seed {s} (epochs 1-{len(gaps)}{tested}): {text}")
    return "\n".join(lines)


def progress(save: Path) -> str:
    """Where a cell without a result stands, for the list of missing cells: ``not started``, or
    how far its latest checkpoint got (:func:`memrnn.suite.runner.checkpoint_summary`: epochs
    done, the best score its checkpoint callback monitors), then whether a live process of this
    machine is training it (``running in process N``), it failed
    (``failed: see <save>/FAILED``) or it stopped (``stopped``: the command continues it)."""
    from memrnn.lit.runs import latest_checkpoint
    from memrnn.suite.runner import checkpoint_summary, live_owner

    last = latest_checkpoint(save) if save.is_dir() else None
    if last is None and not (save / "STARTED").exists():
        return "not started"
    parts = [] if last is None else [checkpoint_summary(last)]
    owner = live_owner(save)
    if owner is not None:
        parts.append(f"running in process {owner}")
    elif (save / "FAILED").exists():
        parts.append(f"failed: see {save / 'FAILED'}")
    else:
        parts.append("stopped")
    return ", ".join(parts)


def collect(out: Path, models: list[str], tasks: list[str], seeds: list[int]) -> tuple[str, list[str]]:
    """The markdown table of ``test/ce_gap`` (median / max / min over seeds, and how many seeds)
    beside each task's length floor on the training lengths (:func:`task_floor`), and the cells
    still missing (each with its :func:`progress`), and the commits the runs came from."""
    from memrnn.lit.runs import code_line

    missing, codes = [], []
    head = "| task | length floor | " + " | ".join(MODELS.get(m, m) for m in models) + " |"
    lines = [head, "|---" * (len(models) + 2) + "|"]
    for task in tasks:
        cells = []
        for model in models:
            gaps = []
            for seed in seeds:
                f = cell_dir(out, model, task, seed) / "result.json"
                if f.exists():
                    result = json.loads(f.read_text())
                    gaps.append(result["test_ce_gap"])
                    codes.append(result.get("code"))
                else:
                    missing.append(
                        f"{model}_{task} seed {seed}: {progress(cell_dir(out, model, task, seed))}"
                    )
            cells.append(
                f"{statistics.median(gaps):.3f} / {max(gaps):.3f} / {min(gaps):.3f} ({len(gaps)})"
                if gaps
                else "—"
            )
        lines.append(f"| {TASKS.get(task, task)} | {task_floor(task):.3f} | " + " | ".join(cells) + " |")
    if codes:
        lines += ["", code_line(codes)]
    return "\n".join(lines), missing


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, extra = argv[:i], argv[i + 1 :]
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", nargs="+", default=["lstm", "superposition", "stratification"])
    p.add_argument("--tasks", nargs="+", default=list(TASKS))
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--jobs", type=int, default=1, help="worker processes at a time")
    p.add_argument("--out", type=Path, default=Path("runs/dusell"))
    p.add_argument("--table", type=Path, help="also write the table here")
    p.add_argument("--table-only", action="store_true")
    p.add_argument("--by-length", action="store_true",
                   help="also print each task's test gap by string length beside the length floor")  # fmt: skip
    p.add_argument("--by-epoch", action="store_true",
                   help="also print each cell's validation gap by epoch (from its offline W&B runs, else its result.json)")  # fmt: skip
    p.add_argument("--fresh", action="store_true", help="start killed cells again instead of continuing them")
    p.add_argument("--record-epochs", action="store_true",
                   help="add each finished cell's validation gap by epoch and its tested checkpoint's epoch "
                        "to its result.json where it lacks them (from its W&B runs and checkpoint)")  # fmt: skip
    p.add_argument("--worker", nargs=2, metavar=("TASK", "SEED"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    for name, given, known in (("model", args.models, MODELS), ("task", args.tasks, TASKS)):
        for g in given:
            if g not in known:
                p.error(f"unknown {name} {g!r}; choose from {', '.join(known)}")
    if args.jobs < 1:
        p.error(f"--jobs must be >= 1, got {args.jobs}")
    if args.worker:
        return worker(args.worker[0], int(args.worker[1]), args.models, args.out, extra, args.fresh)
    failed = []
    if not args.table_only:
        todo = [(t, s) for t in args.tasks for s in args.seeds
                if any(not (cell_dir(args.out, m, t, s) / "result.json").exists() for m in args.models)]  # fmt: skip
        running: list[tuple[str, int, subprocess.Popen, Path]] = []
        from memrnn.suite.runner import worker_env

        env = worker_env(1)  # one thread each, glibc's heap kept (10% off an RNS-RNN batch)
        while todo or running:
            while todo and len(running) < args.jobs:
                task, seed = todo.pop(0)
                log = args.out / "logs" / f"{'-'.join(args.models)}_{task}_seed{seed}.log"
                log.parent.mkdir(parents=True, exist_ok=True)
                cmd = [sys.executable, __file__, "--worker", task, str(seed), "--models", *args.models,
                       "--out", str(args.out), *(["--fresh"] if args.fresh else []), "--", *extra]  # fmt: skip
                print(f"[dusell] start {task} seed {seed} (log {log})", flush=True)
                with log.open("a") as fh:
                    running.append(
                        (task, seed, subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env), log)
                    )
            time.sleep(1)
            for item in list(running):
                task, seed, proc, log = item
                if proc.poll() is not None:
                    running.remove(item)
                    status = "done" if proc.returncode == 0 else f"FAILED (exit {proc.returncode}; see {log})"
                    print(f"[dusell] {task} seed {seed}: {status}", flush=True)
                    if proc.returncode:
                        failed.append(f"{task} seed {seed}")
    if args.record_epochs:
        for cell in record_epochs(args.out, args.models, args.tasks, args.seeds):
            print(f"[dusell] {cell}: validation epochs recorded in its result.json", flush=True)
    table, missing = collect(args.out, args.models, args.tasks, args.seeds)
    note = (
        "test/ce_gap (nats per token above the exact lower bound, DuSell & Chiang's metric): "
        "median / max / min over seeds (seeds); length floor: the gap of a model of the training "
        "distribution on the training lengths (it must predict the length the bound is given)"
    )
    if args.by_length:
        table += "\n\ntest/ce_gap by string length (median / max over seeds (seeds)):\n\n"
        table += by_length(args.out, args.models, args.tasks, args.seeds)
    if args.by_epoch:
        table += "\n\nval/ce_gap by epoch:\n\n" + by_epoch(args.out, args.models, args.tasks, args.seeds)
    print(f"\n{note}\n\n{table}")
    if args.table:
        args.table.parent.mkdir(parents=True, exist_ok=True)
        args.table.write_text(f"{note}\n\n{table}\n")
    if missing:
        print(f"\nmissing ({len(missing)}):\n  " + "\n  ".join(missing), file=sys.stderr)
    if failed:
        print(f"failed workers: {', '.join(failed)} (run the command again to retry)", file=sys.stderr)
    return 1 if failed or (missing and not args.table_only) else 0


if __name__ == "__main__":
    raise SystemExit(main())
