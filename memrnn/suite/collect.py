"""Read a suite's finished cells into one results table, per-length curves and a plot.

:func:`collect` reads the cells' ``result.json`` files (local, SLURM: a shared file system);
:func:`collect_wandb` reads the runs of a W&B sweep through the W&B API instead (a sweep whose
agents ran on machines without a shared disk).  Both give a :class:`Results`: one row per
finished run, and the cells that are not done with their status, so a crashed or killed run
is reported, never dropped.

A cell that ran with other arguments than the suite gives it (overrides after ``--`` such as
``--trainer.max_steps=100``, or a suite file changed since: :func:`memrnn.suite.runner.off_suite`)
is done, but not the suite's run: its row is marked (``*`` after the run count in the table, the
arguments in a note under it and in ``results.csv``), or, with ``exclude_overrides``, left out
and listed with the cells not done.

Two rules make the table (its first line says which):

* without a selection, the mean, median and best (max, or min for a ``mode: min`` suite) of the
  suite's test metric over seeds × learning rates (× drawn values): Delétang et al. (2023) report
  the max over seeds × learning rates, Hewitt et al. (2020) the median over seeds;
* with a selection on validation (the suite's ``select``, or ``collect(select=…)``,
  ``python -m memrnn.suite collect --select-on val/… --select-mode min``), the test metric of the
  one run with the best value of a validation metric, as DuSell & Chiang's ``print_best.py``
  (``bdusell/nondeterministic-stack-rnn``, tag ``iclr2022``) picks, per model and task, the run
  (of learning rates × restarts × stack widths) with the lowest validation cross-entropy
  difference and tests it alone.  The validation metric is the one logged at the validation of
  each run's tested checkpoint (``val_metrics`` of ``result.json``; ``tested_checkpoint/…`` in a
  W&B run's summary); ties go to the first run in the suite's order.
"""

from __future__ import annotations

import csv
import json
import math
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memrnn.suite.runner import TESTED_PREFIX, cell_status, off_suite, running_elsewhere

if TYPE_CHECKING:  # matplotlib and memrnn.lit (Lightning) are imported when a table is made
    from matplotlib.figure import Figure
from memrnn.suite.spec import Cell, Suite, check_select

#: the per-length curve tabulated when the suite's metric does not name one
CURVE_ORDER = ("acc", "ce_gap", "accept_end", "next_set_sequence")


def _num(v: float) -> str:
    """Three decimals, or three significant digits below 0.0005 (an error rate of 3e-05 is not
    0.000: Hewitt et al.'s Figure 3 asks for errors below 1e-4)."""
    return f"{v:.2e}" if 0 < abs(v) < 5e-4 else f"{v:.3f}"


def curve_of(metric: str, available: list[str]) -> str | None:
    """The per-length curve that goes with a metric: ``test/acc_mean_over_lengths`` -> ``acc``;
    otherwise the first of :data:`CURVE_ORDER` that a run has."""
    stem = metric.split("/", 1)[-1].removesuffix("_mean_over_lengths")
    if stem in available:
        return stem
    return next((c for c in CURVE_ORDER if c in available), None)


def resolve_select(suite: Suite, select: dict[str, str] | str | None) -> dict[str, str] | None:
    """The selection rule a collection uses: ``"suite"`` -> the suite's ``select``; ``None`` or
    ``"none"`` -> none (mean / median / best); a ``{metric: val/…, mode: min|max}`` rule, checked."""
    if select == "suite":
        return suite.select
    if select is None or select == "none":
        return None
    return check_select(select, f"suite {suite.name!r}: selection")


def _selection_key(metric: str, mode: str) -> Any:
    """Sort key of rows by their validation ``metric``, the best one least (``min`` takes the
    first of equals); a NaN is worst."""
    sign = 1.0 if mode == "min" else -1.0

    def key(row: dict[str, Any]) -> tuple[bool, float]:
        v = float(row["val_metrics"][metric])
        return (math.isnan(v), sign * v)

    return key


@dataclass
class Results:
    """``rows``: one dict per finished run (the cell's coordinates, ``score``, ``parameters``,
    ``steps``, ``seconds``, ``curves``, ``val_metrics``, and ``off_suite``: how it ran otherwise
    than the suite says, empty for the suite's runs); ``missing``: ``{cell name: status}`` of the
    others; ``select``: the selection on validation (``{"metric": "val/…", "mode": …}``) or None
    (module docstring)."""

    suite: Suite
    rows: list[dict[str, Any]]
    missing: dict[str, str] = field(default_factory=dict)
    select: dict[str, str] | None = None

    def __post_init__(self) -> None:
        self.select = check_select(self.select, f"suite {self.suite.name!r}: selection")

    def selected(self) -> dict[tuple[str, str], dict[str, Any]]:
        """Per (architecture, task), the row with the best validation metric of :attr:`select`
        (the first in the suite's order among equals).  ``ValueError`` when there is no
        selection, or when a run has no such metric (naming the runs and what they have)."""
        if self.select is None:
            raise ValueError(f"suite {self.suite.name!r}: no selection on validation to apply")
        metric, mode = self.select["metric"], self.select["mode"]
        lacking = []
        for r in self.rows:
            have = r.get("val_metrics")
            if not isinstance(have, dict):
                lacking.append(
                    f"{r['cell']} (no validation metrics recorded: run before memrnn kept them, or no "
                    "validation matched its tested checkpoint; `python -m memrnn.suite cell SUITE --cell "
                    "NAME --force` runs it again)"
                )
            elif metric not in have:
                lacking.append(f"{r['cell']} (it has {', '.join(sorted(have)) or 'none'})")
        if lacking:
            raise ValueError(
                f"cannot select on {metric!r}: {len(lacking)} run(s) have no such validation metric: "
                + "; ".join(lacking)
            )
        key = _selection_key(metric, mode)
        return {group: min(rows, key=key) for group, rows in self.groups().items()}

    def groups(self) -> dict[tuple[str, str], list[dict[str, Any]]]:
        """The rows by (architecture, task), over seeds and learning rates."""
        out: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
        for row in self.rows:
            out[row["arch"], row["task"]].append(row)
        return out

    def summary(self) -> dict[tuple[str, str], dict[str, Any]]:
        """Per (architecture, task): ``mean``, ``median``, ``best`` (max, or min when the suite's
        mode is ``min``), ``max``, ``min``, ``n`` runs, and the ``best_lr`` whose median over seeds is best; with a
        selection, also ``selected`` (the chosen run's cell), ``selected_score`` (its test score)
        and ``selected_val`` (its validation metric)."""
        pick = max if self.suite.mode == "max" else min
        chosen = self.selected() if self.select is not None else {}
        out = {}
        for key, rows in self.groups().items():
            scores = [r["score"] for r in rows]
            by_lr: dict[Any, list[float]] = defaultdict(list)
            for r in rows:
                by_lr[r.get("lr")].append(r["score"])
            best_lr = pick(by_lr, key=lambda lr: statistics.median(by_lr[lr]))
            out[key] = {
                "mean": statistics.fmean(scores),
                "median": statistics.median(scores),
                "best": pick(scores),
                "max": max(scores),
                "min": min(scores),
                "n": len(scores),
                "off_suite": sum(bool(r.get("off_suite")) for r in rows),
                "best_lr": best_lr,
                "parameters": rows[0].get("parameters"),
            }
            if key in chosen:
                row = chosen[key]
                out[key].update(selected=row["cell"], selected_score=row["score"],
                                selected_val=row["val_metrics"][self.select["metric"]])  # fmt: skip
        return out

    def table(self) -> str:
        """A markdown table, tasks by architectures: ``mean / median / best (n)`` of the suite's
        metric over seeds and learning rates or, with a selection, ``score (lr…/seed…: val; n)``
        (the selected run's test score, the run, its validation metric), with the parameter counts
        under the header (none when no run recorded them: results of the former
        ``scripts/dusell_table.py``) and the rule in the first line; ``(n, k*)`` where k of the n
        runs ran with other arguments than the suite's (named in a note under the table).  The
        suite's ``stats`` say which statistics a cell shows, ``labels`` name the rows and columns,
        and ``floor`` adds a ``length floor`` column (:func:`memrnn.suite.tables.task_floor`)."""
        s = self.suite
        best = "max" if s.mode == "max" else "min"
        summ = self.summary()
        archs = list(s.architectures)
        params = []
        for a in archs:
            counts = sorted(
                {v["parameters"] for (arch, _), v in summ.items() if arch == a and v["parameters"]}
            )
            params.append(
                f"{counts[0]:,}–{counts[-1]:,}" if len(counts) > 1 else f"{counts[0]:,}" if counts else "—"
            )
        over = "seeds" + (" and learning rates" if s.lrs else "")
        if self.select is None:
            shown = " / ".join(best if x == "best" else x for x in s.stats)
            rule = f"`{s.metric}`: {shown} over {over} (runs)"
        else:
            sel, lowest = self.select["metric"], "lowest" if self.select["mode"] == "min" else "highest"
            rule = (
                f"`{s.metric}` of the run with the {lowest} `{sel}` over {over} (selection on validation, "
                f"as DuSell & Chiang's print_best.py), with that run and its `{sel}` (runs)"
            )
        floor = ["length floor"] if s.floor else []
        counted = any(p != "—" for p in params)
        lines = [
            rule + ("; parameters under each architecture (a range where the tasks' vocabularies differ)"
                    if counted else ""),
            "",
            "| task | " + " | ".join(floor + [s.label("arch", a) for a in archs]) + " |",
            "|---" * (len(archs) + 1 + len(floor)) + "|",
        ] + (["| *parameters* | " + " | ".join(["—"] * len(floor) + params) + " |"] if counted else [])  # fmt: skip
        if s.floor:
            from memrnn.suite.tables import task_floor

            floors = {t: task_floor(s, t) for t in s.tasks}
        for task in s.tasks:
            cells = [] if not s.floor else ["—" if floors[task] is None else f"{floors[task]:.3f}"]
            for a in archs:
                v = summ.get((a, task))
                marked = f", {v['off_suite']}*" if v and v["off_suite"] else ""
                if not v:
                    cells.append("—")
                elif self.select is None:
                    cells.append(" / ".join(_num(v[x]) for x in s.stats) + f" ({v['n']}{marked})")
                else:
                    run = v["selected"].split("/", 2)[2]  # the cell's lr/seed part
                    cells.append(
                        f"{_num(v['selected_score'])} ({run}: {_num(v['selected_val'])}; {v['n']}{marked})"
                    )
            lines.append(f"| {s.label('task', task)} | " + " | ".join(cells) + " |")
        by_difference: dict[str, list[str]] = defaultdict(list)
        for r in self.rows:
            if r.get("off_suite"):
                by_difference["; ".join(r["off_suite"])].append(r["cell"])
        if by_difference:
            n = sum(len(v) for v in by_difference.values())
            lines += [
                "",
                f"*: {n} run{'s' if n > 1 else ''} ran with other arguments than the suite gives "
                f"{'them' if n > 1 else 'it'} (`python -m memrnn.suite cell SUITE --cell NAME --force` "
                "runs one as the suite says):",
                *(f"- `{d}`: {', '.join(cells)}" for d, cells in by_difference.items()),
            ]
        from memrnn.lit.runs import code_line

        code = code_line([r.get("code") for r in self.rows])
        if code:
            lines += ["", code]
        if self.missing:
            lines += [
                "",
                f"Not done ({len(self.missing)}): "
                + ", ".join(f"{k} ({v})" for k, v in self.missing.items()),
            ]
        return "\n".join(lines) + "\n"

    def curves(self) -> list[dict[str, Any]]:
        """Per (architecture, task, length): median, min and max over runs of the per-length
        curve that goes with the suite's metric (:func:`curve_of`); with a selection, the
        selected run's curve alone."""
        out = []
        groups = self.groups()
        if self.select is not None:
            groups = {key: [row] for key, row in self.selected().items()}
        for (arch, task), rows in groups.items():
            per_len: dict[int, list[float]] = defaultdict(list)
            name = None
            for r in rows:
                curves = r.get("curves") or {}
                name = name or curve_of(
                    self.suite.metric, [k for k in curves if k not in ("length", "count")]
                )
                if name is None or name not in curves:
                    continue
                for length, v in zip(curves["length"], curves[name], strict=True):
                    per_len[int(length)].append(float(v))
            for length in sorted(per_len):
                vals = per_len[length]
                out.append({"arch": arch, "task": task, "curve": name, "length": length,
                            "median": statistics.median(vals), "min": min(vals), "max": max(vals),
                            "runs": len(vals)})  # fmt: skip
        return out

    def write(self, folder: str | Path) -> dict[str, Path]:
        """Write ``table.md``, ``results.csv`` (one row per run), ``curves.csv`` and, when there
        are curves, ``curves.png`` into ``folder``; returns the paths by kind."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        paths = {
            "table": folder / "table.md",
            "results": folder / "results.csv",
            "curves": folder / "curves.csv",
        }
        from memrnn.lit.runs import code_label

        paths["table"].write_text(self.table())
        cols = [
            "cell",
            "arch",
            "task",
            "lr",
            "seed",
            "score",
            "parameters",
            "steps",
            "epochs",
            "seconds",
            "off_suite",
            "commit",
        ]
        extra: dict[str, dict[str, Any]] = {r["cell"]: {} for r in self.rows}
        if self.select is not None:  # each run's validation metric, and which run each group chose
            sel = self.select["metric"]
            cols[-1:-1] = [sel, "selected"]
            chosen = {r["cell"] for r in self.selected().values()}
            for r in self.rows:
                extra[r["cell"]] = {sel: r["val_metrics"][sel], "selected": r["cell"] in chosen}
        with paths["results"].open("w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=cols, extrasaction="ignore")
            w.writeheader()
            w.writerows(
                {**r, "commit": code_label(r.get("code")), "off_suite": "; ".join(r.get("off_suite") or []),
                 **extra[r["cell"]]}
                for r in self.rows
            )  # fmt: skip
        curves = self.curves()
        with paths["curves"].open("w", newline="") as fh:
            w = csv.DictWriter(
                fh, fieldnames=["arch", "task", "curve", "length", "median", "min", "max", "runs"]
            )
            w.writeheader()
            w.writerows(curves)
        if curves:
            paths["plot"] = folder / "curves.png"
            self.plot(curves).savefig(paths["plot"], dpi=110, bbox_inches="tight")
        return paths

    def plot(self, curves: list[dict[str, Any]] | None = None) -> Figure:
        """One panel per task: the median curve of each architecture against the length, with
        its min–max band over runs (a matplotlib ``Figure``)."""
        from matplotlib.figure import Figure

        curves = self.curves() if curves is None else curves
        tasks = [t for t in self.suite.tasks if any(c["task"] == t for c in curves)]
        fig = Figure(figsize=(4.2 * max(len(tasks), 1), 3.2))
        axes = fig.subplots(1, max(len(tasks), 1), squeeze=False)
        for ax, task in zip(axes[0], tasks, strict=False):
            for arch in self.suite.architectures:
                pts = [c for c in curves if c["task"] == task and c["arch"] == arch]
                if not pts:
                    continue
                x = [c["length"] for c in pts]
                (line,) = ax.plot(x, [c["median"] for c in pts], label=arch, lw=1.2)
                ax.fill_between(
                    x, [c["min"] for c in pts], [c["max"] for c in pts], alpha=0.2, color=line.get_color()
                )
            ax.set_title(task)
            ax.set_xlabel("length")
            ax.set_ylabel(pts[0]["curve"] if pts else "")
            ax.legend(fontsize=7)
        if self.select is None:
            fig.suptitle(f"{self.suite.name}: median and range over runs")
        else:
            fig.suptitle(f"{self.suite.name}: the run selected on {self.select['metric']}")
        return fig


def read_result(suite: Suite, cell: Cell) -> dict[str, Any]:
    """A done cell's ``result.json``; one the former ``scripts/dusell_table.py`` wrote (in a folder
    of the suite's ``folder`` pattern, ``<model>_<task>/seed<S>``) read as a suite's: its
    ``test_ce_gap`` is the ``score`` (and ``metrics``), ``val_ce_gap_by_epoch`` the
    ``val_by_epoch`` of ``val/ce_gap``, and ``checkpoint_epoch`` (from 1) the ``val_epoch`` (from 0)."""
    result = json.loads((suite.cell_dir(cell) / "result.json").read_text())
    if "score" not in result and "test_ce_gap" in result:
        if suite.metric != "test/ce_gap":
            raise ValueError(f"{suite.cell_dir(cell)}: a result of scripts/dusell_table.py has test/ce_gap, "
                             f"not the suite's metric {suite.metric!r}")  # fmt: skip
        tested = result.get("checkpoint_epoch")
        result = {**result, "score": result["test_ce_gap"], "metrics": {"test/ce_gap": result["test_ce_gap"]},
                  "val_by_epoch": {"val/ce_gap": result.get("val_ce_gap_by_epoch") or []},
                  "val_epoch": None if tested is None else tested - 1}  # fmt: skip
    return result


def collect(
    suite: Suite, *, exclude_overrides: bool = False, select: dict[str, str] | str | None = "suite"
) -> Results:
    """The finished cells' ``result.json`` under the suite's ``out``; every other cell in
    ``missing`` with its status (``failed``, ``killed``, ``running in process N`` where its
    ``STARTED`` names a live process of this machine, ``pending``).  A finished cell that ran
    otherwise than the suite says (:func:`memrnn.suite.runner.off_suite`) is a marked row, or,
    with ``exclude_overrides``, in ``missing`` as ``"other arguments: …"``.  ``select``: the
    selection on validation (:func:`resolve_select`: by default the suite's)."""
    rule = resolve_select(suite, select)
    rows, missing = [], {}
    for cell in suite.cells():
        status = cell_status(suite, cell)
        if status == "killed" and (pid := running_elsewhere(suite, cell)) is not None:
            status = f"running in process {pid}"  # a live run of this machine (a group's, say)
        if status != "done":
            missing[cell.name] = status
            continue
        result = read_result(suite, cell)
        differs = off_suite(suite, cell, result)
        if differs and exclude_overrides:
            missing[cell.name] = "other arguments: " + "; ".join(differs)
            continue
        rows.append({**result, **cell.params, "cell": cell.name, "off_suite": differs})
    return Results(suite, rows, missing, rule)


def collect_wandb(
    suite: Suite, sweep: str, *, api: Any = None, select: dict[str, str] | str | None = "suite"
) -> Results:
    """The runs of the W&B sweep ``entity/project/sweep_id`` (made by :func:`wandb_sweep`) as
    :class:`Results`: a run counts when its state is ``finished`` and its summary has the
    suite's metric; the cells without such a run are ``missing`` with the state of their last
    run (``failed``, ``crashed``, ``running``, or ``pending`` when none ran).  Per-length curves
    stay in the runs' tables (``test/length_curves``) and are not read.  A row's
    ``val_metrics`` are the summary's ``tested_checkpoint/val/…`` values (what the selection on
    validation reads).  ``api``: a ``wandb.Api`` (default: a new one, which needs the network
    and a login)."""
    rule = resolve_select(suite, select)
    if api is None:
        import wandb

        api = wandb.Api()
    states: dict[str, str] = {}
    rows: dict[str, dict[str, Any]] = {}
    for run in api.sweep(sweep).runs:
        config = {
            k: (v.get("value") if isinstance(v, dict) and "value" in v else v)
            for k, v in dict(run.config).items()
        }
        try:
            cell = suite.cell(
                **{k: config.get(k) for k in ("arch", "task", "seed", "lr") if config.get(k) is not None}
            )
        except KeyError:
            continue  # a run of another grid
        summary = dict(run.summary)
        score = summary.get(suite.metric)
        if run.state == "finished" and isinstance(score, int | float):
            tested = {k.removeprefix(TESTED_PREFIX): float(v) for k, v in summary.items()
                      if k.startswith(TESTED_PREFIX) and isinstance(v, int | float)}  # fmt: skip
            rows[cell.name] = {**cell.params, "cell": cell.name, "score": float(score), "run": run.id,
                               "steps": summary.get("trainer/global_step"), "metrics": {
                                   k: v for k, v in summary.items() if isinstance(v, int | float)},
                               "val_metrics": tested or None}  # fmt: skip
        elif cell.name not in rows:
            states[cell.name] = run.state
    ordered = [rows[c.name] for c in suite.cells() if c.name in rows]
    missing = {c.name: states.get(c.name, "pending") for c in suite.cells() if c.name not in rows}
    return Results(suite, ordered, missing, rule)
