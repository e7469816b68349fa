"""A DuSell & Chiang LSTM cell's grid as one group of members, with and without shedding its stopped members.

    python -m benchmarks.members_shed --lrs 0.01 0.005 0.001 0.0005 --seeds 0 1 \\
        --train-size 1000 --patience 3 --max-epochs 40

Builds a one-task suite of ``configs/dusell/lstm_<task>.yaml`` over ``--lrs`` × ``--seeds`` (one
group of members: ``python -m memrnn.suite run … --members auto``), with its training set cut to
``--train-size`` strings and early stopping at ``--patience`` (the papers' 10,000 and 10), and
runs the group in this process, one run after the other: as one group to the end, then with
``--shed F`` for each fraction given (:func:`memrnn.suite.groups.run_group`, ``shed=F``).
Prints the wall time of each and its ratio to the unshed run, each member's last epoch, and
whether each member's result (test score, best validation loss, validation curve) equals the
unshed group's.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def write_suite(folder: Path, args: argparse.Namespace) -> Path:
    """The suite file (and its LSTM config with early stopping at ``args.patience``) in ``folder``."""
    config = folder / "lstm.yaml"
    config.write_text(yaml.safe_dump({
        "base": str(ROOT / "configs" / "dusell" / f"lstm_{args.task}.yaml"),
        "trainer": {"callbacks": [
            {"class_path": "memrnn.lit.ModelCheckpoint", "init_args": {"monitor": "val/loss", "save_last": True}},
            {"class_path": "lightning.pytorch.callbacks.EarlyStopping",
             "init_args": {"monitor": "val/loss", "mode": "min", "patience": args.patience}}]}}))  # fmt: skip
    spec = {
        "name": "members_shed",
        "defaults": str(ROOT / "configs" / "defaults.yaml"),
        "architectures": {"lstm": str(config)},
        "tasks": {args.task: {}},
        "seeds": list(args.seeds),
        "lrs": list(args.lrs),
        "metric": "test/ce_gap",
        "mode": "min",
        "args": {
            "data.init_args.train_size": args.train_size,
            "data.init_args.val_size": args.val_size,
            "data.init_args.test_per_length": args.test_per_length,
            "trainer.max_epochs": args.max_epochs,
            "trainer.enable_progress_bar": False,
            "trainer.logger.init_args.offline": True,
        },
    }
    path = folder / "suite.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def run(args: argparse.Namespace, out: Path, shed: float | None) -> tuple[float, dict[str, dict[str, Any]]]:
    from memrnn.suite import Suite
    from memrnn.suite.groups import run_group

    out.parent.mkdir(parents=True, exist_ok=True)
    suite = Suite.load(write_suite(out.parent, args), out=out)
    start = time.perf_counter()
    results = run_group(suite, suite.cells(), shed=shed)
    return time.perf_counter() - start, results


def difference(a: dict[str, Any], b: dict[str, Any]) -> tuple[float, float, int]:
    """How two results of a member differ: the test score's and the best validation loss's
    absolute differences, and the first epoch whose validation loss differs (-1: none) in the
    shed run's curve against the same epochs of the other's (which validates a stopped member,
    frozen, to the end)."""
    x, y = a["val_by_epoch"]["val/loss"], b["val_by_epoch"]["val/loss"]
    first = next((e for e, (u, v) in enumerate(zip(x, y, strict=False)) if u != v), -1)
    if first < 0 and len(y) > len(x):
        first = len(x)
    return abs(a["score"] - b["score"]), abs(a["best_score"] - b["best_score"]), first


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", default="marked_reversal")
    ap.add_argument("--lrs", type=float, nargs="+", default=[0.01, 0.005, 0.001, 0.0005])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--train-size", type=int, default=1000)
    ap.add_argument("--val-size", type=int, default=200)
    ap.add_argument("--test-per-length", type=int, default=5)
    ap.add_argument("--patience", type=int, default=3)
    ap.add_argument("--max-epochs", type=int, default=40)
    ap.add_argument("--shed", type=float, nargs="+", default=[0.5], help="fractions to shed at, a run each")
    ap.add_argument("--out", type=Path, help="keep the runs' folders here (default: a temporary folder)")
    args = ap.parse_args(argv)
    warnings.filterwarnings("ignore")
    os.environ.setdefault("WANDB_MODE", "offline")
    os.environ.setdefault("WANDB_SILENT", "true")
    import torch

    print(f"# torch {torch.__version__}, {torch.get_num_threads()} thread(s); {len(args.lrs) * len(args.seeds)} "
          f"members ({args.task}, lrs {args.lrs} x seeds {args.seeds}), train size {args.train_size}, "
          f"patience {args.patience}, at most {args.max_epochs} epochs")  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        where = args.out or Path(tmp)
        plain_s, plain = run(args, where / "plain" / "runs", None)
        runs = [(f, *run(args, where / f"shed{f:g}" / "runs", f)) for f in args.shed]
    out: dict[str, Any] = {"plain_s": plain_s, "members": len(plain), "shed": []}
    for fraction, shed_s, shed in runs:
        print(f"\n## shed at {fraction:g}\n")
        print("| member | epochs | members at its end | seconds at its end (shed) | test score: unshed, shed | "
              "best val loss diff | first val epoch that differs |")  # fmt: skip
        print("|---|---|---|---|---|---|---|")
        equal = 0
        for name in sorted(shed, key=lambda n: (shed[n]["epochs"], n)):
            score, best, first = difference(plain[name], shed[name])
            equal += score == best == 0 and first < 0
            print(f"| {name} | {shed[name]['epochs']} | {shed[name]['members']} | {shed[name]['seconds']:.1f} | "
                  f"{plain[name]['score']:.6g}, "
                  f"{shed[name]['score']:.6g} | {best:.2g} | {'none' if first < 0 else first} |")  # fmt: skip
        parts = 1 + max(len(r["shed_from"]) for r in shed.values())
        out["shed"].append({"fraction": fraction, "shed_s": shed_s, "equal": equal, "parts": parts})
    print("\n| run | parts | seconds | unshed / shed | members equal to the unshed run's |")
    print("|---|---|---|---|---|")
    print(f"| one group to the end | 1 | {plain_s:.1f} | 1.00x | — |")
    for r in out["shed"]:
        print(f"| shed at {r['fraction']:g} | {r['parts']} | {r['shed_s']:.1f} | {plain_s / r['shed_s']:.2f}x | "
              f"{r['equal']} of {len(plain)} |")  # fmt: skip
    return out


if __name__ == "__main__":
    main()
