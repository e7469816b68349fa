"""Seed-steps per second of M members trained as one model in one process
(:class:`memrnn.lit.members.MemberSequenceModule`) against M sequential runs of the same job
through the same module and trainer, and against K single runs in K parallel processes.

    python -m benchmarks.members                                   # CPU, the first three jobs below
    python -m benchmarks.members --jobs default --members 1 10     # one job, two sizes
    python -m benchmarks.members --device cuda --out benchmarks/results/members-h200.md

Jobs (each its config's model and batches; gradient clipping as configured):

* ``default``: ``train.py``'s default job (``configs/dyck/lstm_k2_m3.yaml``: a 16-unit LSTM
  language model on Dyck-(2,3), batch 16);
* ``deletang``: Delétang et al.'s (2023) Stack-RNN cell on reverse string
  (``configs/chomsky/stack_rnn.yaml``: ReLU controller of 256 units, superposition stack 30×8,
  batch 128);
* ``dusell``: DuSell & Chiang's LSTM-20 cell on marked reversal (``configs/dusell/lstm_marked_reversal.yaml``:
  batch 10, lengths 40–80);
* ``superposition``: DuSell & Chiang's superposition-stack cell on marked reversal
  (``configs/dusell/superposition_marked_reversal.yaml``: the LSTM-20 controller, stack cells of
  width 20, depth 104);
* ``rns``: DuSell & Chiang's RNS-RNN cell on marked reversal (``configs/dusell/rns_marked_reversal.yaml``:
  the same LSTM-20 controller over a nondeterministic stack of 2 states × 3 symbols, depth 104),
  whose members' stack is one run on their rows (:mod:`memrnn.members.paths.nondeterministic`).

Rows: ``sequential`` (one single run's steps/s: M runs one after another give the same seed-steps/s),
``K processes`` (K single runs at once, each with ``torch.set_num_threads(1)``, K = the cores:
their summed steps/s), and ``members M`` (one process: M × steps/s).  The in-process rows run
``--threads`` torch threads (default 1, as each parallel process: on a loaded 2-core machine two
threads of one small model spin against each other; with ``--threads 2`` the members' fused
LSTM cell runs its members in two chunks, one per thread, and the sequential row gets two
threads too).  Every row runs the same
batches, after ``--warmup`` steps, under a bare ``lightning.Trainer`` (no logger, no callbacks, no
validation, no learning-rate schedule), so the ratios measure one step of each: ``x seq`` and ``x procs`` are the members'
seed-steps/s over the sequential and the parallel rows.  Every row runs once per round
(``--repeats`` rounds, rows one after another): the rates printed are medians over the rounds,
and the ratios the medians of each round's own ratios, so that the machine's drift between
rounds cancels.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.train_loop import lightning_seconds_per_step
from memrnn.lit.cli import build_cli

ROOT = Path(__file__).resolve().parents[1]
JOBS = {
    "default": ["--config", "configs/dyck/lstm_k2_m3.yaml"],
    "deletang": ["--config", "configs/chomsky/stack_rnn.yaml", "--data.init_args.task=reverse_string"],
    "dusell": ["--config", "configs/dusell/lstm_marked_reversal.yaml"],
    "superposition": ["--config", "configs/dusell/superposition_marked_reversal.yaml"],
    "stratification": ["--config", "configs/dusell/stratification_marked_reversal.yaml"],
    "rns": ["--config", "configs/dusell/rns_marked_reversal.yaml"],
}


def build(job: str, members: int | None, device: str):
    """The job's module (a :class:`MemberSequenceModule` of seeds 0..M−1 when ``members``), its
    training batches and gradient clipping."""
    # no schedule: the rows run no validation, which a plateau schedule reads
    extra = [
        "--trainer.logger=false",
        f"--trainer.accelerator={device}",
        "--model.init_args.lr_scheduler=null",
    ]
    if members is not None:
        extra += [
            "--model.class_path=memrnn.lit.members.MemberSequenceModule",
            f"--model.init_args.seeds={list(range(members))}",
        ]
    cli = build_cli(["--config", str(ROOT / "configs/defaults.yaml"), *JOBS[job], *extra], run=False)
    return cli.model, cli.datamodule, cli.trainer.gradient_clip_val


def seconds_per_step(module, batches: list[dict], clip: float | None, warmup: int, device: str) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        return lightning_seconds_per_step(module, batches, warmup, device, tmp, gradient_clip_val=clip)


def batches_of(datamodule, n: int, device: str) -> list[dict]:
    datamodule.prepare_data()
    datamodule.setup("fit")
    out = []
    for batch in datamodule.train_dataloader():
        out.append({k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()})
        if len(out) == n:
            break
    return out


def single_rate(job: str, n: int, warmup: int, device: str) -> float:
    module, dm, clip = build(job, None, device)
    return 1.0 / seconds_per_step(module, batches_of(dm, n, device), clip, warmup, device)


def parallel_rate(job: str, n: int, warmup: int, processes: int) -> float:
    """K single runs at once, one thread each: their summed steps/s."""
    cmd = [
        sys.executable,
        "-m",
        "benchmarks.members",
        "--single",
        job,
        "--batches",
        str(n),
        "--warmup",
        str(warmup),
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    procs = [
        subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        for _ in range(processes)
    ]
    rates = [json.loads(p.communicate()[0].strip().splitlines()[-1])["steps_per_s"] for p in procs]
    return sum(rates)


def _median(xs: list[float]) -> float:
    xs = sorted(xs)
    return xs[len(xs) // 2] if len(xs) % 2 else (xs[len(xs) // 2 - 1] + xs[len(xs) // 2]) / 2


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", nargs="+", default=["default", "deletang", "dusell"], choices=list(JOBS))
    ap.add_argument("--members", type=int, nargs="+", default=[1, 2, 4, 8, 10, 16, 32])
    ap.add_argument("--batches", type=int, default=60, help="training batches per row (after the warm-up)")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--processes", type=int, default=os.cpu_count() or 1, help="K of the parallel row")
    ap.add_argument("--out", help="write the tables (markdown) here too")
    ap.add_argument("--threads", type=int, default=1, help="torch threads of the in-process rows")
    ap.add_argument("--repeats", type=int, default=3, help="rounds of every row (medians reported)")
    ap.add_argument("--single", choices=list(JOBS), help=argparse.SUPPRESS)  # a parallel row's worker
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    import warnings

    warnings.filterwarnings("ignore")
    n = args.batches + args.warmup
    if args.single:
        torch.set_num_threads(1)
        print(json.dumps({"steps_per_s": single_rate(args.single, n, args.warmup, args.device)}))
        return []
    rows, lines = [], []
    for job in args.jobs:
        # rounds: every row once per round, one after another, so that a drift of the machine's
        # speed (this VM's runs a minute apart differ by up to 40%) falls on every row alike; the
        # ratios are the medians of each round's own ratios
        rounds = []
        for _ in range(args.repeats):
            seq = single_rate(job, n, args.warmup, args.device)
            par = parallel_rate(job, n, args.warmup, args.processes) if args.device == "cpu" else float("nan")
            rates = {}
            for m in args.members:
                module, dm, clip = build(job, m, args.device)
                rates[m] = m / seconds_per_step(
                    module, batches_of(dm, n, args.device), clip, args.warmup, args.device
                )
            rounds.append((seq, par, rates))
            print(f"{job} round {len(rounds)}: sequential {seq:.1f}, {args.processes} processes {par:.1f}, "
                  + ", ".join(f"M {m}: {r:.1f}" for m, r in rates.items()), flush=True)  # fmt: skip
        seq, par = _median([r[0] for r in rounds]), _median([r[1] for r in rounds])
        lines += [f"\n### {job}\n", f"sequential: {seq:.1f} seed-steps/s; {args.processes} processes: {par:.1f} "
                  f"(medians of {args.repeats} rounds)\n",
                  "| members | s/step | seed-steps/s | x seq | x procs |", "|---|---|---|---|---|"]  # fmt: skip
        for m in args.members:
            rate = _median([r[2][m] for r in rounds])
            x_seq = _median([r[2][m] / r[0] for r in rounds])
            x_par = _median([r[2][m] / r[1] for r in rounds])
            row = {"job": job, "members": m, "s_per_step": m / rate, "seed_steps_per_s": rate,
                   "x_sequential": x_seq, "x_processes": x_par}  # fmt: skip
            rows.append(row)
            lines.append(f"| {m} | {m / rate * 1000:.1f} ms | {rate:.1f} | {x_seq:.2f} | {x_par:.2f} |")
        print("\n".join(lines[-(4 + len(args.members)) :]), flush=True)
    if args.out:
        head = (
            f"# Members in one process: seed-steps/s\n\n`python -m benchmarks.members {' '.join(argv or sys.argv[1:])}` "
            f"on {args.device} ({os.cpu_count()} cores), torch {torch.__version__}, {time.strftime('%Y-%m-%d')}.\n"
        )
        Path(args.out).write_text(head + "\n".join(lines) + "\n")
    return rows


if __name__ == "__main__":
    main()
