"""Run one config over several seeds and report the median and the max of chosen metrics, as a
one-architecture suite of ``memrnn.suite``.

    python scripts/sweep.py --config configs/weiss/lstm_anbn.yaml --seeds 0 1 2 \\
        --metric val/accept_end --metric counting/first_failure [-- any train.py overrides]

A thin wrapper: it writes ``<out>/<config stem>.suite.yaml`` (the config as the one architecture,
one task, the seeds; each cell ``train.py fit`` then ``test`` with ``--seed_everything=S`` and
``--data.init_args.seed=S``, in ``<out>/<config stem>/config/seed<S>``), prints the equivalent
commands and runs them:

    python -m memrnn.suite run OUT/STEM.suite.yaml -- …
    python -m memrnn.suite collect OUT/STEM.suite.yaml --last METRIC …

``collect --last`` reads each metric's last logged value back from the run's W&B file and prints
one row per seed, then their median and max (then the suite's table of ``test/loss``); a
finished seed is not run again.  Exits non-zero if a run fails.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
#: the suite commands import this checkout's memrnn wherever they are run from
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}


def suite_file(config: Path, seeds: list[int], out: Path) -> Path:
    """Write the suite of ``config`` over ``seeds`` under ``out``; its path."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{config.stem}.suite.yaml"
    suite = {"name": config.stem, "defaults": str(ROOT / "configs" / "defaults.yaml"),
             "architectures": {config.stem: str(config.resolve())}, "tasks": {"config": {}},
             "seeds": seeds, "metric": "test/loss", "mode": "min", "out": str(out.resolve())}  # fmt: skip
    path.write_text(yaml.safe_dump(suite, sort_keys=False))
    return path


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, extra = argv[:i], argv[i + 1 :]
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", required=True, type=Path)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--metric", action="append", required=True, help="a logged key; repeat for several")
    p.add_argument("--out", default="runs/sweep", type=Path)
    args = p.parse_args(argv)
    suite = str(suite_file(args.config, args.seeds, args.out))
    cmds = [[sys.executable, "-m", "memrnn.suite", "run", suite, *(["--", *extra] if extra else [])],
            [sys.executable, "-m", "memrnn.suite", "collect", suite, *(a for m in args.metric for a in ("--last", m))]]  # fmt: skip
    for cmd in cmds:
        print("[sweep] " + shlex.join(["python", *cmd[1:]]), flush=True)
        code = subprocess.run(cmd, env=ENV).returncode
        if code:
            return code
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
