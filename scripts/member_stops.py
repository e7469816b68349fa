"""Give the results of stopped members written before memrnn recorded where a member stops their
own steps, epochs and validations.

A suite group (``python -m memrnn.suite run --members auto``) wrote each member's ``result.json``
with the group's ``steps`` and ``epochs``, and every validation the group ran: a member stopped by
early stopping was credited with the epochs the group ran on with it frozen (to the group's end,
or to the epoch that shed it).  Its single run would report the epoch it stopped in.  Since
memrnn records the stop (``MemberSequenceModule.stop_step``/``stop_epoch``) the results say so;
this rewrites the older ones from what they hold.

A frozen member validates to the same value every epoch, so the epoch it stopped in is the first
of the run of equal ``val/loss`` values its record ends with.  The rewrite checks that epoch
against the stopping rule, ``patience`` validations after the best (``val_epoch``), and refuses a
result where the two disagree.  A result already right (its record ends where it stopped) is left
as it is, so running this twice changes nothing.

    python scripts/member_stops.py benchmarks/results/dusell_grid --patience 10 [--check]

``--report`` prints, per (architecture, task), the member-epochs its groups computed and those its
members trained: a stopped member stays in its group, frozen but computed, until the group ends
or sheds it (``--shed``), which is the epoch the last member it writes stopped at.

    python scripts/member_stops.py benchmarks/results/dusell_grid --report
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


def stop_epoch(result: dict[str, Any], patience: int) -> int:
    """The index (from 0) of the validation at which a stopped member stopped, checked."""
    losses = result["val_by_epoch"]["val/loss"]
    e = len(losses) - 1
    while e > 0 and losses[e - 1] == losses[e]:
        e -= 1
    if result["val_epoch"] + patience != e:
        raise ValueError(
            f"{result['cell']}: its validations are frozen from epoch {e + 1}, but its best is at epoch "
            f"{result['val_epoch'] + 1} and patience {patience} stops it at epoch {result['val_epoch'] + patience + 1}"
        )
    return e


def restamp(result: dict[str, Any], patience: int) -> dict[str, Any]:
    """``result`` with a stopped member's own ``steps``, ``epochs`` and ``val_by_epoch``."""
    if not result.get("stopped") or result.get("diverged") or "members" not in result:
        return result
    e = stop_epoch(result, patience)
    per_epoch, rest = divmod(result["steps"], result["epochs"])
    if rest:
        raise ValueError(
            f"{result['cell']}: {result['steps']} steps in {result['epochs']} epochs is no whole epoch"
        )
    return {
        **result,
        "steps": (e + 1) * per_epoch,
        "epochs": e + 1,
        "val_by_epoch": {k: v[: e + 1] for k, v in result["val_by_epoch"].items()},
    }


def frozen_share(results: list[dict[str, Any]]) -> dict[tuple[str, str], tuple[int, int]]:
    """Per (architecture, task): ``(member-epochs computed, member-epochs trained)``.  A group
    (or a shed part) ends at the last epoch a member it writes trained."""
    ends: dict[str, int] = {}
    for r in results:
        ends[r["group"]] = max(ends.get(r["group"], 0), r["epochs"])
    out: dict[tuple[str, str], tuple[int, int]] = {}
    for r in results:
        key = (r["arch"], r["task"])
        computed, trained = out.get(key, (0, 0))
        out[key] = (computed + ends[r["group"]], trained + r["epochs"])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, help="a suite's results: every result.json under it")
    parser.add_argument("--patience", type=int, help="the early stopping's patience (to rewrite or check)")
    parser.add_argument("--check", action="store_true", help="write nothing; fail if a result needs it")
    parser.add_argument(
        "--report", action="store_true", help="write nothing; print the frozen members' share"
    )
    args = parser.parse_args()
    if args.report:
        results = [json.loads(p.read_text()) for p in sorted(args.folder.rglob("result.json"))]
        results = [r for r in results if "members" in r]
        print("| architecture | task | member-epochs computed | trained | frozen share |")
        print("|---|---|---|---|---|")
        for (arch, task), (computed, trained) in frozen_share(results).items():
            print(f"| {arch} | {task} | {computed} | {trained} | {1 - trained / computed:.2f} |")
        return
    if args.patience is None:
        parser.error("--patience is needed to rewrite or --check")
    changed = 0
    for path in sorted(args.folder.rglob("result.json")):
        result = json.loads(path.read_text())
        new = restamp(result, args.patience)
        if new == result:
            continue
        changed += 1
        print(
            f"{result['cell']}: epochs {result['epochs']} -> {new['epochs']}, steps {result['steps']} -> {new['steps']}"
        )
        if not args.check:
            path.write_text(json.dumps(new, indent=1) + "\n")
    print(f"{changed} result(s) {'to rewrite' if args.check else 'rewritten'}")
    if args.check and changed:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
