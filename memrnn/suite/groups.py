"""A suite's cells run as members (``python -m memrnn.suite run SUITE --members auto|N``): cells
that differ only in their seed and learning rate train as the members of one
:class:`memrnn.lit.members.MemberSequenceModule` in one process (``docs/guide/members.md``).

Each member is exactly its cell's single run (its seed's initial weights, its learning rate, its
data: the members draw each their own data, ``member_data: independent``, when their data seeds
differ), and writes its cell's ``result.json`` as :func:`memrnn.suite.runner.run_cell` does, so
``list``, ``collect``, the tables and a later ungrouped run read it as any other; its fields add
``group`` (where the process wrote), ``member`` (its index there), ``stopped`` and ``diverged``.
The tested weights are each member's best by the checkpoint's monitor (or its last weights with
``test_checkpoint: last``), also written as an ordinary checkpoint, ``member.ckpt``, in the
cell's folder.

A group's checkpoints and logs live in ``<out>/groups/<arch>/<task>/<members>``: a killed group
continues from its latest epoch, also when its cells are grouped otherwise the next time
(:func:`regroup`); a member whose training loss is not finite is stopped (frozen),
reported and written with ``diverged: true``, and the others go on.
"""

from __future__ import annotations

import json
import os
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from memrnn.suite.runner import (
    PROJECT_DEFAULTS,
    _say,
    _scalars,
    _write_json,
    by_epoch,
    cell_status,
    clock_by_epoch,
    fit_budget,
    suite_args,
    write_started,
)
from memrnn.suite.spec import Cell, Suite

#: the file in a shed group's folder naming the folders its members ran in before, their seconds
#: and their data path (``member_data``, kept: :meth:`memrnn.suite.Suite.group_args`)
SHED_FILE = "shed.json"


def _member_keys(values: dict[str, Any], m: int) -> dict[str, Any]:
    """Member ``m``'s entries of a members run's logged values (``<key>/m<m>`` -> ``<key>``)."""
    tail = f"/m{m}"
    return {k[: -len(tail)]: v for k, v in values.items() if k.endswith(tail)}


def run_group(
    suite: Suite,
    cells: Sequence[Cell],
    extra: Sequence[str] = (),
    *,
    resume: bool = True,
    shed: float | None = None,
) -> dict[str, dict[str, Any]]:
    """Train ``cells`` as the members of one process and write each cell's ``result.json``
    (module docstring); the cells already done are left out.  Returns ``{cell name: result}``; on
    an exception writes each cell's ``FAILED`` and raises.

    ``shed`` (a fraction in ``(0, 1]``): once at least that fraction of the members, but not all,
    have stopped, the stopped ones are tested and written and the others continue as a group of
    their own, in this process, from the epoch's checkpoint
    (:class:`memrnn.lit.members.ShedStopped`, :func:`memrnn.lit.members.select_members`), until
    every member is done."""
    results: dict[str, dict[str, Any]] = {}
    todo = list(cells)
    drawn: tuple[str, Any] | None = None
    while todo:
        done, todo, drawn = _run_segment(suite, todo, extra, resume=resume, shed=shed, drawn=drawn)
        results.update(done)
        resume = True  # the rest continue from the checkpoint the segment left them
    return results


def _limits_reached(trainer: Any) -> bool:
    """Whether the fit ended at its epoch or step limit (then nobody continues)."""
    epochs = trainer.max_epochs
    if epochs is not None and epochs >= 0 and trainer.current_epoch >= epochs:
        return True
    return (
        trainer.max_steps is not None and trainer.max_steps >= 0 and trainer.global_step >= trainer.max_steps
    )


def _shed_checkpoint(trainer: Any) -> dict[str, Any]:
    """The checkpoint the members that go on continue from: the ``last.ckpt`` of the epoch at
    whose end the others were shed (a killed group continues from the same), checked to be that
    epoch's."""
    ckpt = trainer.checkpoint_callback
    path = getattr(ckpt, "last_model_path", "") if ckpt is not None else ""
    if not path or not os.path.exists(path):
        raise ValueError(
            "shedding members continues them from the epoch's last.ckpt: the Trainer needs a ModelCheckpoint "
            "with save_last=True (configs/defaults.yaml has one)"
        )
    checkpoint = torch.load(path, map_location="cpu", weights_only=False)
    if checkpoint["epoch"] != trainer.current_epoch - 1:
        raise ValueError(
            f"{path} is of epoch {checkpoint['epoch']}, not of epoch {trainer.current_epoch - 1} that shed members: "
            "the ModelCheckpoint must save last.ckpt at every validation, one per epoch"
        )
    return checkpoint


def _member_rows(suite: Suite, cells: Sequence[Cell], member_data: str | None) -> list[dict[str, Any]]:
    """The ``members`` table :meth:`Suite.group_args` gives ``cells`` (on ``member_data``'s path)."""
    flag = "--model.init_args.members="
    args = suite.group_args(cells, member_data=member_data)
    return json.loads(next(a for a in args if a.startswith(flag))[len(flag) :])


def regroup(suite: Suite, cells: Sequence[Cell], own: Path | None = None) -> Path | None:
    """The checkpoint ``cells``' group continues from, given its own latest (``own``; None when it
    has none) and the other groups of this task that trained them (another ``--members``, or a
    group killed after a shed): the newest ``last.ckpt`` that holds every one of ``cells`` as a
    member.  When that is another group's, it is cut to ``cells``
    (:func:`memrnn.lit.members.select_members`), as a shed does, and saved as this group's
    ``regrouped/checkpoints/last.ckpt`` with its :data:`SHED_FILE` (the groups it ran in before,
    their seconds as far as recorded, its data path).  None when no group holds any of them (a
    fresh start).  ``ValueError`` naming the groups when some hold them in part at a later epoch
    than the newest that holds them all, or none holds them all (rerun with the ``--members`` that
    made those groups, or ``--fresh``): a member never goes back to an older epoch silently."""
    from memrnn.lit.members import select_members

    folder = suite.group_dir(cells)
    base = suite.out / "groups" / cells[0].arch / cells[0].task
    whole: list[tuple[int, float, Path, dict[str, Any] | None, list[int]]] = []
    if own is not None:
        whole.append((int(torch.load(own, map_location="cpu", weights_only=False).get("epoch", -1)),
                      own.stat().st_mtime, own, None, []))  # fmt: skip
    partial: dict[str, int] = {}  # another group that holds some of them: its latest epoch
    for path in sorted(base.glob("*/**/checkpoints/last*.ckpt")):
        source = base / path.relative_to(base).parts[0]
        if source == folder:
            continue
        ckpt = torch.load(path, map_location="cpu", weights_only=False)
        hparams = ckpt.get("hyper_parameters", {})
        rows = hparams.get("members")
        if not isinstance(rows, list):
            continue
        held = [
            rows.index(r) if r in rows else None
            for r in _member_rows(suite, cells, hparams.get("member_data"))
        ]
        epoch = int(ckpt.get("epoch", -1))
        if all(k is not None for k in held):
            whole.append((epoch, path.stat().st_mtime, path, ckpt, [int(k) for k in held if k is not None]))
        elif any(k is not None for k in held):
            partial[source.name] = max(epoch, partial.get(source.name, -1))
    if not whole and not partial:
        return None
    epoch, _, path, ckpt, held = (
        max(whole, key=lambda w: (w[0], w[1])) if whole else (-1, 0.0, None, None, [])
    )
    newer = [f"{name} (epoch {e})" for name, e in sorted(partial.items()) if e > epoch]
    if path is None or newer:
        where = (
            "none holds them all"
            if path is None
            else f"the newest that holds them all is {path} (epoch {epoch})"
        )
        raise ValueError(
            f"group {folder.name}: other groups trained some of its {len(cells)} cells further "
            f"({'; '.join(newer or sorted(partial))}) and {where}: run them with the --members that made "
            "those groups to continue them, or with --fresh to start them again"
        )
    if ckpt is None:  # its own
        return path
    source = base / path.relative_to(base).parts[0]
    earlier = json.loads((source / SHED_FILE).read_text()) if (source / SHED_FILE).exists() else {}
    out = folder / "regrouped" / "checkpoints" / "last.ckpt"
    out.parent.mkdir(parents=True, exist_ok=True)
    torch.save(select_members(ckpt, held), out)
    record = {"from": [*earlier.get("from", []), str(source)], "seconds": earlier.get("seconds", 0.0),
              "member_data": ckpt["hyper_parameters"].get("member_data")}  # fmt: skip
    _write_json(folder / SHED_FILE, record)
    _say(f"[suite {suite.name}] group {folder}: continues its {len(cells)} members from {path} (epoch {epoch}), "
         "where another grouping trained them")  # fmt: skip
    return out


def _data_config(cli: Any) -> str:
    """The data config a segment's CLI built its data from, but the seed (each member's module
    has its own): two segments with the same draw the same splits for a seed."""
    data = cli.config.get("data")
    if data is None:
        return "null"
    data = data.as_dict() if hasattr(data, "as_dict") else dict(data)
    if isinstance(data.get("init_args"), dict):
        data["init_args"].pop("seed", None)
    return json.dumps(data, sort_keys=True, default=repr)


def _run_segment(
    suite: Suite,
    cells: Sequence[Cell],
    extra: Sequence[str],
    *,
    resume: bool,
    shed: float | None,
    drawn: tuple[str, Any] | None = None,
) -> tuple[dict[str, dict[str, Any]], list[Cell], tuple[str, Any] | None]:
    """One process's fit of ``cells`` as members (:func:`run_group`): the results it wrote, the
    cells that go on (shed from their stopped fellows; none unless ``shed``), and its data config
    and data module, from which the next segment takes the splits drawn here when its config is
    the same (``drawn``; :func:`memrnn.data.members.reuse_drawn`)."""
    import wandb

    from memrnn.data.members import reuse_drawn
    from memrnn.lit.cli import build_cli
    from memrnn.lit.members import MemberSequenceModule, ShedStopped, member_checkpoint, select_members
    from memrnn.lit.runs import code_fields, latest_checkpoint
    from memrnn.suite.validation import ValidationRecord

    cells = [c for c in cells if cell_status(suite, c) != "done"]
    if not cells:
        return {}, [], drawn
    folder = suite.group_dir(cells)
    folder.mkdir(parents=True, exist_ok=True)
    last = regroup(suite, cells, latest_checkpoint(folder)) if resume else None
    # a group shed from a larger one: the folders it ran in before and their seconds
    earlier = (
        json.loads((folder / SHED_FILE).read_text())
        if last is not None and (folder / SHED_FILE).exists()
        else {}
    )
    for c in cells:
        suite.cell_dir(c).mkdir(parents=True, exist_ok=True)
        (suite.cell_dir(c) / "FAILED").unlink(missing_ok=True)
        write_started(suite.cell_dir(c), c.name)
    write_started(folder, ", ".join(c.name for c in cells))
    first = cells[0]
    os.environ.setdefault("WANDB_RUN_GROUP", f"{suite.name}:{first.arch}/{first.task}")
    os.environ.setdefault("WANDB_TAGS", ",".join([suite.name, first.arch, first.task, "members"]))
    defaults = [suite.defaults or PROJECT_DEFAULTS]
    start = time.perf_counter()
    failed = 0
    try:
        args = suite.group_args(cells, member_data=earlier.get("member_data"))
        sized = None
        if suite.budget is not None and suite.architectures[first.arch].budget_key:
            sized = fit_budget(suite, first, defaults, extra)
            args += suite.architectures[first.arch].sized(sized)
        args += list(extra)
        cli = build_cli(args, run=False, default_config_files=defaults, continue_from=last)
        trainer, model, data = cli.trainer, cli.model, cli.datamodule
        config = _data_config(cli)
        if drawn is not None and drawn[0] == config and (given := reuse_drawn(data, drawn[1])):
            _say(f"[suite {suite.name}] group {folder}: {given} data split(s) drawn before, not drawn again")
        if not isinstance(model, MemberSequenceModule):
            raise ValueError(f"{first.arch}'s model is not a SequenceModule: its cells cannot run as members")
        record = ValidationRecord()
        trainer.callbacks.insert(0, record)
        shedder = None if shed is None else ShedStopped(shed)
        if shedder is not None:
            trainer.callbacks.append(shedder)
        if earlier and cli.continue_from is None:
            raise ValueError(
                f"group {folder} goes on from its members in {earlier['from'][-1]} (shed or regrouped), but its checkpoint "
                f"{last} holds another model than the suite gives it ({cli.continue_refused}); run it "
                "with the arguments it was started with, or --fresh"
            )
        if cli.continue_from is not None:
            _say(f"[suite {suite.name}] group {folder}: continuing from {cli.continue_from}")
        trainer.fit(model, datamodule=data, ckpt_path=cli.continue_from)
        keep: list[int] = []
        if shedder is not None and shedder.fired and not _limits_reached(trainer):
            keep = [m for m, s in enumerate(model.stopped.cpu().tolist()) if not s]
        shed_from = _shed_checkpoint(trainer) if keep else None
        if suite.test_checkpoint == "best":
            model.restore_best()
        (tested,) = trainer.test(model, datamodule=data)
        tested = _scalars(tested)
        seconds = round(time.perf_counter() - start + earlier.get("seconds", 0.0), 1)
        results = {}
        for m, cell in enumerate(cells):
            if m in keep:
                continue
            metrics = _member_keys(tested, m)
            val = None
            step = int(model.best_step[m]) if suite.test_checkpoint == "best" else None
            chosen = [e for e in record.epochs if step is None or e["step"] == step]
            if chosen:
                val = {
                    k: v for k, v in _member_keys(chosen[-1]["metrics"], m).items() if k.startswith("val/")
                }
            # a stopped member's own steps, epochs and validations, as its single run reports them
            # (the run went on with it frozen, or shed it later)
            steps, epochs = model.member_progress(m, trainer.global_step, trainer.current_epoch)
            member_epochs = [
                {**e, "metrics": _member_keys(e["metrics"], m)} for e in record.epochs if e["step"] <= steps
            ]
            ckpt_path = suite.cell_dir(cell) / "member.ckpt"
            result = {
                **cell.params,
                "cell": cell.name,
                "suite": suite.name,
                "metric": suite.metric,
                "score": metrics.get(suite.metric),
                "metrics": metrics,
                "curves": model.member_curves.get("test", [{}] * len(cells))[m],
                "parameters": sum(p[m].numel() for p in model.parameters() if p.requires_grad),
                "budget": None if sized is None else {**suite.budget, "value": sized},
                "steps": steps,
                "epochs": epochs,
                "best_score": None if step is None else float(model.best_score[m]),
                "checkpoint": str(ckpt_path),
                "seconds": seconds,
                "continued_from": None if cli.continue_from is None else str(cli.continue_from),
                **code_fields(cli.continued_record),
                "args": args,
                "suite_args": suite_args(suite, cell),
                "overrides": list(extra),
                "data_seed": suite.data_seed_of(cell),
                "val_metrics": val,
                "val_epoch": chosen[-1]["epoch"] if chosen else None,
                "val_by_epoch": by_epoch(member_epochs),
                "clock_by_epoch": clock_by_epoch(member_epochs),
                "group": str(folder),
                "member": m,
                "members": len(cells),
                "stopped": bool(model.stopped[m]),
                "diverged": bool(model.diverged[m]),
                "shed_from": earlier.get("from", []),
            }
            if trainer.is_global_zero:
                if result["score"] is None:
                    raise KeyError(f"the test logged no {suite.metric!r}/m{m} (the suite's metric per member); "
                                   f"it logged {sorted(tested)}")  # fmt: skip
                torch.save(member_checkpoint(model, m, group=str(folder)), ckpt_path)
                _write_json(suite.cell_dir(cell) / "result.json", result)
            results[cell.name] = result
        rest = [cells[m] for m in keep]
        if keep and trainer.is_global_zero:
            nxt = suite.group_dir(rest)
            path = nxt / "shed" / "checkpoints" / "last.ckpt"
            path.parent.mkdir(parents=True, exist_ok=True)
            torch.save(select_members(shed_from, keep), path)
            shed_record = {"from": [*earlier.get("from", []), str(folder)], "seconds": seconds,
                           "member_data": model.member_data}  # fmt: skip
            _write_json(nxt / SHED_FILE, shed_record)
            _say(f"[suite {suite.name}] group {folder}: {len(cells) - len(keep)} member(s) stopped and written; "
                 f"{len(keep)} continue in {nxt}")  # fmt: skip
        if keep:  # the other ranks wait for the cut checkpoint
            trainer.strategy.barrier("shed")
        return results, rest, (config, data)
    except BaseException:
        failed = 1
        if int(os.environ.get("LOCAL_RANK", "0")) == 0:
            for c in cells:
                (suite.cell_dir(c) / "FAILED").write_text(traceback.format_exc())
        raise
    finally:
        if wandb.run is not None:
            wandb.finish(exit_code=failed)
