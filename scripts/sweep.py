"""Run one config over several seeds and report the median and the max of chosen metrics.

    python scripts/sweep.py --config configs/weiss/lstm_anbn.yaml --seeds 0 1 2 \
        --metric val/accept_end --metric counting/first_failure [-- any train.py overrides]

Each seed runs ``train.py fit`` in its own process with ``--seed_everything=S`` and
``--data.init_args.seed=S``, logging under ``<out>/<config stem>/seed<S>``; the metrics are read
back from the run's W&B file (offline or online runs both keep one locally).  Prints one row per
seed, then median and max; exits non-zero if a run fails.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from memrnn.lit.wandb_files import read_offline_run  # noqa: E402


def last_values(run_file: Path, metrics: list[str]) -> dict[str, float]:
    run = read_offline_run(run_file, wait=30)
    out: dict[str, float] = {}
    for row in run["history"]:
        for m in metrics:
            if m in row and isinstance(row[m], int | float):
                out[m] = float(row[m])
    return out


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, extra = argv[:i], argv[i + 1 :]
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", required=True)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--metric", action="append", required=True, help="a logged key; repeat for several")
    p.add_argument("--out", default="runs/sweep")
    args = p.parse_args(argv)
    stem = Path(args.config).stem
    rows = {}
    for seed in args.seeds:
        save = Path(args.out) / stem / f"seed{seed}"
        cmd = [sys.executable, str(ROOT / "train.py"), "fit", "--config", args.config,
               f"--seed_everything={seed}", f"--data.init_args.seed={seed}",
               f"--trainer.logger.init_args.save_dir={save}", *extra]  # fmt: skip
        print(f"[sweep] seed {seed}: {' '.join(cmd[1:])}", flush=True)
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            print(done.stdout[-2000:], done.stderr[-4000:], sep="\n", file=sys.stderr)
            print(f"[sweep] seed {seed} failed (exit {done.returncode})", file=sys.stderr)
            return done.returncode
        run_files = sorted(save.glob("wandb/*run-*/run-*.wandb"), key=lambda f: f.stat().st_mtime)
        if not run_files:
            print(f"[sweep] seed {seed}: no W&B run file under {save}", file=sys.stderr)
            return 1
        rows[seed] = last_values(run_files[-1], args.metric)
    width = max(len(m) for m in args.metric)
    print("\n" + f"{'seed':>6}  " + "  ".join(f"{m:>{width}}" for m in args.metric))
    for seed, vals in rows.items():
        print(f"{seed:>6}  " + "  ".join(f"{vals.get(m, float('nan')):>{width}.4g}" for m in args.metric))
    for name, fn in (("median", statistics.median), ("max", max)):
        cells = []
        for m in args.metric:
            vals = [v[m] for v in rows.values() if m in v]
            cells.append(f"{fn(vals):>{width}.4g}" if vals else f"{'n/a':>{width}}")
        print(f"{name:>6}  " + "  ".join(cells))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
