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
continues from its latest epoch; a member whose training loss is not finite is stopped (frozen),
reported and written with ``diverged: true``, and the others go on.
"""

from __future__ import annotations

import os
import time
import traceback
from collections.abc import Sequence
from typing import Any

import torch

from memrnn.suite.runner import (
    PROJECT_DEFAULTS,
    _say,
    _scalars,
    _write_json,
    by_epoch,
    cell_status,
    fit_budget,
    suite_args,
    write_started,
)
from memrnn.suite.spec import Cell, Suite


def _member_keys(values: dict[str, Any], m: int) -> dict[str, Any]:
    """Member ``m``'s entries of a members run's logged values (``<key>/m<m>`` -> ``<key>``)."""
    tail = f"/m{m}"
    return {k[: -len(tail)]: v for k, v in values.items() if k.endswith(tail)}


def run_group(
    suite: Suite, cells: Sequence[Cell], extra: Sequence[str] = (), *, resume: bool = True
) -> dict[str, dict[str, Any]]:
    """Train ``cells`` as the members of one process and write each cell's ``result.json``
    (module docstring); the cells already done are left out.  Returns ``{cell name: result}``; on
    an exception writes each cell's ``FAILED`` and raises."""
    import wandb

    from memrnn.lit.cli import build_cli
    from memrnn.lit.members import MemberSequenceModule, member_checkpoint
    from memrnn.lit.runs import code_fields, latest_checkpoint
    from memrnn.suite.validation import ValidationRecord

    cells = [c for c in cells if cell_status(suite, c) != "done"]
    if not cells:
        return {}
    folder = suite.group_dir(cells)
    folder.mkdir(parents=True, exist_ok=True)
    last = latest_checkpoint(folder) if resume else None
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
        args = suite.group_args(cells)
        sized = None
        if suite.budget is not None and suite.architectures[first.arch].budget_key:
            sized = fit_budget(suite, first, defaults, extra)
            args += suite.architectures[first.arch].sized(sized)
        args += list(extra)
        cli = build_cli(args, run=False, default_config_files=defaults, continue_from=last)
        trainer, model, data = cli.trainer, cli.model, cli.datamodule
        if not isinstance(model, MemberSequenceModule):
            raise ValueError(f"{first.arch}'s model is not a SequenceModule: its cells cannot run as members")
        record = ValidationRecord()
        trainer.callbacks.insert(0, record)
        if cli.continue_from is not None:
            _say(f"[suite {suite.name}] group {folder}: continuing from {cli.continue_from}")
        trainer.fit(model, datamodule=data, ckpt_path=cli.continue_from)
        if suite.test_checkpoint == "best":
            model.restore_best()
        (tested,) = trainer.test(model, datamodule=data)
        tested = _scalars(tested)
        seconds = round(time.perf_counter() - start, 1)
        results = {}
        for m, cell in enumerate(cells):
            metrics = _member_keys(tested, m)
            val = None
            step = int(model.best_step[m]) if suite.test_checkpoint == "best" else None
            chosen = [e for e in record.epochs if step is None or e["step"] == step]
            if chosen:
                val = {
                    k: v for k, v in _member_keys(chosen[-1]["metrics"], m).items() if k.startswith("val/")
                }
            member_epochs = [{**e, "metrics": _member_keys(e["metrics"], m)} for e in record.epochs]
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
                "steps": trainer.global_step,
                "epochs": trainer.current_epoch,
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
                "group": str(folder),
                "member": m,
                "members": len(cells),
                "stopped": bool(model.stopped[m]),
                "diverged": bool(model.diverged[m]),
            }
            if trainer.is_global_zero:
                if result["score"] is None:
                    raise KeyError(f"the test logged no {suite.metric!r}/m{m} (the suite's metric per member); "
                                   f"it logged {sorted(tested)}")  # fmt: skip
                torch.save(member_checkpoint(model, m, group=str(folder)), ckpt_path)
                _write_json(suite.cell_dir(cell) / "result.json", result)
            results[cell.name] = result
        return results
    except BaseException:
        failed = 1
        if int(os.environ.get("LOCAL_RANK", "0")) == 0:
            for c in cells:
                (suite.cell_dir(c) / "FAILED").write_text(traceback.format_exc())
        raise
    finally:
        if wandb.run is not None:
            wandb.finish(exit_code=failed)
