"""One or two torch threads for the default job's M-member training step, alternating in one process.

    python -m benchmarks.member_threads --members 10 --rounds 4

Each round times the same module through a bare ``lightning.Trainer`` (40 batches after 5 of
warm-up; ``benchmarks.train_loop.lightning_seconds_per_step``) on one thread, then on two, so a
drift of the machine's speed falls on both alike.  Prints ms per step per round and the medians.
The fused member LSTM splits its members over the threads (``member_chunks`` in
``memrnn/ops/lstm/native_lstm.cpp``, on torch's OpenMP pool); the rest of the step is ATen's.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.members import batches_of, build
from benchmarks.train_loop import lightning_seconds_per_step


def main(argv: list[str] | None = None) -> dict[int, list[float]]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--members", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--batches", type=int, default=40)
    args = ap.parse_args(argv)
    warnings.filterwarnings("ignore")
    module, dm, clip = build("default", args.members, "cpu")
    batches = batches_of(dm, args.batches + 5, "cpu")
    ms: dict[int, list[float]] = {1: [], 2: []}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.rounds):
            for threads in ms:
                torch.set_num_threads(threads)
                ms[threads].append(1e3 * lightning_seconds_per_step(module, batches, 5, "cpu", tmp, clip))
    for threads, xs in ms.items():
        print(
            f"{threads} thread(s): {', '.join(f'{x:.1f}' for x in xs)} ms/step; median {statistics.median(xs):.1f}"
        )
    print(f"1 thread / 2 threads: {statistics.median(ms[1]) / statistics.median(ms[2]):.2f}")
    return ms


if __name__ == "__main__":
    main()
