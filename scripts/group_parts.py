"""Where a group of members spent its time, part by part, from its W&B run files or its results.

A suite group (``python -m memrnn.suite run --members auto [--shed]``) writes a W&B run (offline
when there is no account) for every process part: the group's first, each part that goes on
after a shed, and each continuation of a killed part.  Every run's history holds a timestamp at
each validation.  This prints, per run in the order they ran: its folder, its members, the
epochs it validated, the median seconds between its validations (an epoch), the seconds from its
last validation to its test (when it tested: a shed or the end), and the seconds from the run
before's last validation to its own first (``switch``: the run before's test and this run's
start, data and first epoch; after a kill, the time the part lay dead too).  ``start`` is that
switch less one epoch: what a part's start costs beside its training.

    python scripts/group_parts.py /work/runs/dusell_grid/groups/superposition_w20/dyck

Given a task's results instead (a folder of ``result.json`` files, committed ones included), it
reads their ``clock_by_epoch`` (when each epoch validated, with how many members the process
trained and how many of them were stopped): a part is then a stretch of epochs one process
trained with one number of members (a continuation after a kill stays in its part; the median
epoch ignores the gap), the test's seconds are not known, and the table adds the members stopped
at the part's end and its first and last validation's UTC time (``switch`` and ``start`` read
the part before in time, meaningless for parts that ran side by side):

    python scripts/group_parts.py benchmarks/results/dusell_grid/stratification_w20/dyck
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import json
import re
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

_MEMBER_VAL = re.compile(r"^val/loss/m(\d+)$")


def parts(folder: Path) -> list[dict[str, Any]]:
    """One row per W&B run under ``folder`` (a group's folder or a folder of groups), in the order
    they ran: ``folder`` (the group folder's name), ``members``, ``epochs`` (first and last
    validated), ``epoch_s`` (median seconds between validations; None with one), ``test_s``
    (last validation to the test; None without a test), ``switch_s`` and ``start_s`` (module
    docstring; None for the first run)."""
    from memrnn.lit.wandb_files import read_offline_run

    rows = []
    for path in sorted(Path(folder).glob("**/wandb/*run-*/run-*.wandb")):
        history = [h for h in read_offline_run(path)["history"] if "_timestamp" in h]
        seen: dict[int, float] = {}
        members: set[str] = set()
        test = None
        for h in history:
            found = [m.group(1) for k in h if (m := _MEMBER_VAL.match(k))]
            if found and h.get("epoch") is not None:
                seen.setdefault(int(h["epoch"]), h["_timestamp"])
                members.update(found)
            if test is None and any(k.startswith("test/") for k in h):
                test = h["_timestamp"]
        if not seen:
            continue
        epochs = sorted(seen)
        times = [seen[e] for e in epochs]
        gaps = [b - a for a, b in itertools.pairwise(times)]
        rows.append({
            "folder": path.parents[2].name,
            "members": len(members),
            "epochs": (epochs[0], epochs[-1]),
            "first": times[0],
            "last": times[-1],
            "epoch_s": statistics.median(gaps) if gaps else None,
            "test_s": None if test is None else test - times[-1],
        })  # fmt: skip
    return _switches(sorted(rows, key=lambda r: r["first"]))


def parts_from_results(folder: Path) -> list[dict[str, Any]]:
    """The rows of :func:`parts` from the ``clock_by_epoch`` of the ``result.json`` files under
    ``folder`` (module docstring), with ``folder`` None, ``test_s`` None and ``stopped`` (the
    members stopped after the part's last validation).  Each member's clock is cut where the
    members its process trained change; members that trained a stretch together share its first
    epoch's time (one process's record), so two groups running side by side stay two parts.
    Epochs without a clock (written before memrnn kept one) add nothing."""
    stretches: dict[tuple[int, int, float], dict[int, tuple[float, int | None]]] = {}
    for path in sorted(Path(folder).glob("**/result.json")):
        clock = json.loads(path.read_text()).get("clock_by_epoch") or {}
        times, members, stopped = (clock.get(k) or [] for k in ("time", "members", "stopped"))
        members = [*members, *[None] * (len(times) - len(members))]
        counts = [(e, members[e] or 1) for e, t in enumerate(times) if t is not None]
        for m, pairs in itertools.groupby(counts, key=lambda pair: pair[1]):
            run = [e for e, _ in pairs]
            seen = stretches.setdefault((m, run[0], times[run[0]]), {})
            for e in run:
                seen[e] = (times[e], stopped[e] if e < len(stopped) else None)
    rows: list[dict[str, Any]] = []
    for (members, _, _), seen in stretches.items():
        epochs = sorted(seen)
        times = [seen[e][0] for e in epochs]
        gaps = [b - a for a, b in itertools.pairwise(times)]
        rows.append({
            "folder": None,
            "members": members,
            "epochs": (epochs[0], epochs[-1]),
            "first": times[0],
            "last": times[-1],
            "epoch_s": statistics.median(gaps) if gaps else None,
            "test_s": None,
            "stopped": seen[epochs[-1]][1],
        })  # fmt: skip
    return _switches(sorted(rows, key=lambda r: r["first"]))


def _switches(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    for before, row in zip([None, *rows], rows, strict=False):
        row["switch_s"] = None if before is None else row["first"] - before["last"]
        epoch = row["epoch_s"] or (before or {}).get("epoch_s")
        row["start_s"] = None if row["switch_s"] is None or epoch is None else row["switch_s"] - epoch
    return rows


def _s(value: float | None) -> str:
    return "—" if value is None else f"{value:.1f}"


def _utc(stamp: float) -> str:
    return datetime.datetime.fromtimestamp(stamp, datetime.UTC).strftime("%Y-%m-%d %H:%M")


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "folder", type=Path, help="a group's folder, a folder of groups (one task's), or a task's results"
    )
    args = ap.parse_args(argv)
    if next(args.folder.glob("**/result.json"), None) is not None:
        rows = parts_from_results(args.folder)
        print(
            "| members | epochs | stopped at the end | s / epoch | switch, s | start, s | first validation | last validation |"
        )
        print("|---|---|---|---|---|---|---|---|")
        for r in rows:
            print(f"| {r['members']} | {r['epochs'][0]}–{r['epochs'][1]} | {r['stopped'] if r['stopped'] is not None else '—'} | "
                  f"{_s(r['epoch_s'])} | {_s(r['switch_s'])} | {_s(r['start_s'])} | {_utc(r['first'])} | {_utc(r['last'])} |")  # fmt: skip
        return rows
    rows = parts(args.folder)
    print("| part | members | epochs | s / epoch | last validation to test, s | switch, s | start, s |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['folder']} | {r['members']} | {r['epochs'][0]}–{r['epochs'][1]} | {_s(r['epoch_s'])} | "
              f"{_s(r['test_s'])} | {_s(r['switch_s'])} | {_s(r['start_s'])} |")  # fmt: skip
    return rows


if __name__ == "__main__":
    main()
