"""The tables ``python -m memrnn.suite collect`` adds to a suite's results table on request:

* :func:`by_length`: per task, the test score by string length, grouped (``--by-length``), beside
  the length floor on the training lengths (DuSell & Chiang's cross-entropy difference);
* :func:`by_epoch`: each run's validation metric by epoch and the epoch its test read (``--by-epoch``);
* :func:`last_logged`: per run, the last logged value of chosen metrics (from its W&B run file) and
  their median and max (``--last``; what ``scripts/sweep.py`` printed).

:func:`task_floor` gives the ``length floor`` column of a suite with ``floor: true``.
"""

from __future__ import annotations

import csv
import math
import statistics
from pathlib import Path
from typing import Any, Protocol

from memrnn.languages import length_floor
from memrnn.suite.spec import Suite


class Results(Protocol):
    """What the tables read of :class:`memrnn.suite.collect.Results` (a protocol, so that this
    module, which ``collect`` imports, imports nothing back)."""

    suite: Suite
    rows: list[dict[str, Any]]


_TASK_DATA: dict[tuple[str, str], Any] = {}


def task_data(suite: Suite, task: str) -> tuple[Any, tuple[int, int]] | None:
    """The language and training window of ``task``'s data module, built from the suite's first
    architecture's config for it (its first seed's cell); None when the data module has none."""
    key = (str(suite.path), task)
    if key not in _TASK_DATA:
        from memrnn.lit.cli import build_cli

        cell = next(c for c in suite.cells() if c.task == task)
        defaults = [suite.defaults] if suite.defaults else []
        cli = build_cli([*suite.cli_args(cell), "--trainer.logger=false"], run=False,
                        default_config_files=defaults)  # fmt: skip
        data = cli.datamodule
        language, windows = getattr(data, "language", None), getattr(data, "windows", None)
        _TASK_DATA[key] = None if language is None or not windows else (language, windows["train"])
    return _TASK_DATA[key]


def task_floor(suite: Suite, task: str) -> float | None:
    """The task's length floor on its training lengths (:func:`memrnn.languages.length_floor`):
    the cross-entropy difference a model of the training distribution has there, because it must
    predict the length that the lower bound ``log p(w | length)`` is given; None without a language."""
    found = task_data(suite, task)
    return None if found is None else length_floor(*found)


def length_bins(lengths: list[int], trained: set[int], width: int = 10) -> list[tuple[str, list[int]]]:
    """The test lengths grouped by ``width`` (41-50, 51-60, ... END counted), a group split where
    it straddles the edge of the training lengths ``trained``, so that every group lies wholly
    on the training lengths or wholly off them: ``[(label, lengths)]`` in order."""
    groups: dict[tuple[int, bool], list[int]] = {}
    for n in sorted(lengths):
        groups.setdefault(((n - 1) // width, n in trained), []).append(n)
    return [(f"{g[0]}-{g[-1]}" if len(g) > 1 else f"{g[0]}", g) for g in groups.values()]


def binned(curve: dict[int, tuple[float, float]], group: list[int], log_k: float | None = None) -> float:
    """The per-token value over the strings of the lengths ``group`` (``curve``: ``{length:
    (strings, value)}``; each length weighted by its tokens, ``strings × length``, as the split's
    own gap weighs them); with ``log_k``, the length floor on them instead: every string pays ``log K``."""
    tokens = sum(curve[n][0] * n for n in group)
    if log_k is not None:
        return sum(curve[n][0] for n in group) * log_k / tokens
    return sum(curve[n][0] * n * curve[n][1] for n in group) / tokens


def length_curve(row: dict[str, Any], folder: Path, name: str = "ce_gap") -> dict[int, tuple[float, float]]:
    """``{length: (strings, value)}`` of a run's test curve ``name``: its result's ``curves``, else
    the ``length_curves_test.csv`` its test wrote under ``folder`` (results of the former
    ``scripts/dusell_table.py``); empty if there is none."""
    curves = row.get("curves") or {}
    if name in curves and "count" in curves:
        return {int(n): (float(c), float(v)) for n, c, v in zip(curves["length"], curves["count"], curves[name],
                                                                strict=True)}  # fmt: skip
    files = sorted(folder.glob("memrnn/*/length_curves_test.csv"), key=lambda f: f.stat().st_mtime)
    if not files:
        return {}
    with files[-1].open() as f:
        return {int(float(r["length"])): (float(r["count"]), float(r[name])) for r in csv.DictReader(f)}


def by_length(results: Results) -> str:
    """Per task, the test ``ce_gap`` by string length (END counted; median / max over the runs that
    have a per-length curve) beside the length floor on each group of training lengths, ``log K /
    length``: where a cell sits on the floor and where, beyond the training lengths (which have
    no floor), it rises."""
    s = results.suite
    blocks = []
    for task in s.tasks:
        found = task_data(s, task)
        if found is None:
            continue
        language, window = found
        possible = language.lengths_in(window)
        trained, log_k = set(possible), math.log(len(possible))
        curves: dict[str, list[dict[int, tuple[float, float]]]] = {a: [] for a in s.architectures}
        for row in results.rows:
            if row["task"] == task and (c := length_curve(row, s.cell_dir(s.cell(row["cell"])))):
                curves[row["arch"]].append(c)
        lengths = sorted({n for cs in curves.values() for c in cs for n in c})
        if not lengths:
            continue
        head = "| lengths | floor | " + " | ".join(s.label("arch", a) for a in s.architectures) + " |"
        lines = [f"{s.label('task', task)} (END counted; training lengths {min(trained)}-{max(trained)}, "
                 f"K = {len(possible)}):", "", head, "|---" * (len(s.architectures) + 2) + "|"]  # fmt: skip
        for label, group in length_bins(lengths, trained):
            row = [label]
            ref = next((c for cs in curves.values() for c in cs if all(n in c for n in group)), None)
            row.append(f"{binned(ref, group, log_k):.3f}" if ref and group[0] in trained else "—")
            for a in s.architectures:
                gaps = [binned(c, group) for c in curves[a] if all(n in c for n in group)]
                row.append(f"{statistics.median(gaps):.3f} / {max(gaps):.3f} ({len(gaps)})" if gaps else "—")
            lines.append("| " + " | ".join(row) + " |")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def epoch_metric(suite: Suite) -> str:
    """The validation metric :func:`by_epoch` prints: the suite's ``select`` metric, else the
    validation twin of its test metric (``test/ce_gap`` -> ``val/ce_gap``)."""
    return suite.select["metric"] if suite.select else "val/" + suite.metric.split("/", 1)[-1]


def by_epoch(results: Results, metric: str | None = None) -> str:
    """One line per run that recorded validation epochs (``val_by_epoch`` of its result): its
    ``metric`` (default :func:`epoch_metric`) by epoch, counting from 1, and the epoch of the
    checkpoint its test read; tasks outermost, then architectures, learning rates and seeds."""
    s = results.suite
    metric = metric or epoch_metric(s)
    rows = {r["cell"]: r for r in results.rows}
    lines = []
    for task in s.tasks:
        for cell in (c for c in s.cells() if c.task == task and c.name in rows):
            r = rows[cell.name]
            gaps = (r.get("val_by_epoch") or {}).get(metric) or []
            if not gaps:
                continue
            tested = "" if r.get("val_epoch") is None else f"; tested on epoch {r['val_epoch'] + 1}"
            text = ", ".join("?" if g is None else f"{g:.3f}" for g in gaps)
            lr = "" if cell.lr is None else f", lr {cell.lr:g}"
            lines.append(f"{s.label('task', task)}, {s.label('arch', cell.arch)}{lr}, seed {cell.seed} "
                         f"(epochs 1-{len(gaps)}{tested}): {text}")  # fmt: skip
    return "\n".join(lines)


def last_logged(results: Results, metrics: list[str]) -> str:
    """Per run, the last value each of ``metrics`` was logged with (any key a run logs, e.g.
    ``val/ce_gap`` or ``counting/first_failure``, read from the newest W&B run file in its folder),
    then their median and max over runs: one row per run, named by its seed when the suite has one
    architecture and task and no learning rates, else by its cell."""
    from memrnn.lit.wandb_files import read_offline_run

    s = results.suite
    by_seed = len(s.architectures) == 1 and len(s.tasks) == 1 and not s.lrs
    values: dict[str, dict[str, float]] = {}
    for r in results.rows:
        files = sorted(s.cell_dir(s.cell(r["cell"])).glob("wandb/*run-*/run-*.wandb"),
                       key=lambda f: f.stat().st_mtime)  # fmt: skip
        out: dict[str, float] = {}
        for row in read_offline_run(files[-1], wait=30)["history"] if files else []:
            for m in metrics:
                if isinstance(row.get(m), int | float):
                    out[m] = float(row[m])
        values[str(r["seed"]) if by_seed else r["cell"]] = out
    width = max(len(m) for m in metrics)
    name = max([6, *(len(k) for k in values)])
    lines = [f"{'seed' if by_seed else 'run':>{name}}  " + "  ".join(f"{m:>{width}}" for m in metrics)]
    for key, vals in values.items():
        lines.append(
            f"{key:>{name}}  " + "  ".join(f"{vals.get(m, float('nan')):>{width}.4g}" for m in metrics)
        )
    for label, fn in (("median", statistics.median), ("max", max)):
        cells = []
        for m in metrics:
            vals = [v[m] for v in values.values() if m in v]
            cells.append(f"{fn(vals):>{width}.4g}" if vals else f"{'n/a':>{width}}")
        lines.append(f"{label:>{name}}  " + "  ".join(cells))
    return "\n".join(lines)
