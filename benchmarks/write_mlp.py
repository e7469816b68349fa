"""The cost of the Tape-RNN's MLP write head (Delétang et al. 2023: ``write_mlp=(64, 64)``) on the
jump tape, forward + backward, measured in one process: the C++ loop (``native``) and the Python
loop (``cpu``) of the fused path, the reference loop over ``step`` (inside ``memrnn.reference_paths()``), and
the tape without the MLP (``write_mlp=()``, native) as the baseline.

    python benchmarks/write_mlp.py [--repeats 7] [--threads 1] [--controllers lstm elman]

The cell: CPU, float32, batch 64, input = controller = 64, width 8, depth 40 (the authors'
example.py), T 64, every row jumping T // 2 cells.  The rows of one controller are timed round
robin, ``--repeats`` rounds after a warm-up, so a machine whose speed drifts (a shared VM) moves
them all; each row's median wall-clock time is printed with its ratio to the baseline's and the
step loop's over it, and its median CPU time (``time.process_time``: with one thread, what a
loaded machine's other processes change least).

Measured on this project's 2-core CPU (AMD EPYC, AVX2; shared, load average 9-10, so wall-clock
times ran ~4x the CPU times), CPU ms: LSTM 46.4 without the MLP, 51.6 with it (native), 113.7
(Python loop), 190.0 (step loop); Elman 29.1, 36.4, 84.8, 140.4.  The MLP costs the C++ path
1.1-1.25x, and it stays 3.7-3.9x faster than the step loop.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from memrnn.core import reference_paths
from memrnn.layers import StackRNN
from memrnn.ops.dispatch import implementation
from memrnn.ops.native import cpu_description

#: (label, write_mlp, implementation; "reference": the step loop): the first row is the baseline of the ratios
ROWS = (
    ("write_mlp=()", (), "native"),
    ("write_mlp=(64, 64)", (64, 64), "native"),
    ("write_mlp=(64, 64)", (64, 64), "cpu"),
    ("write_mlp=(64, 64)", (64, 64), "reference"),
)


def _timed(fn) -> tuple[float, float]:
    """Wall-clock and CPU seconds of one call."""
    t, c = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - t, time.process_time() - c


def medians(fns: list, repeats: int) -> list[tuple[float, float]]:
    """Each function's median wall-clock and CPU times over ``repeats`` round-robin rounds, after a
    warm-up each."""
    for fn in fns:
        fn()
    times = [[] for _ in fns]
    for _ in range(repeats):
        for ts, fn in zip(times, fns, strict=True):
            ts.append(_timed(fn))
    return [(statistics.median(w for w, _ in ts), statistics.median(c for _, c in ts)) for ts in times]


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--width", type=int, default=8)
    ap.add_argument("--depth", type=int, default=40)
    ap.add_argument("--length", type=int, default=64)
    ap.add_argument("--controllers", nargs="+", default=["lstm", "elman"])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    B, S, T = args.batch, args.size, args.length
    print(
        f"torch {torch.__version__}, cpu ({cpu_description()}, {torch.get_num_threads()} threads), float32, "
        f"batch {B}, input = controller = {S}, width {args.width}, depth {args.depth}, T {T}, jump {T // 2}, "
        f"median of {args.repeats}"
    )
    print(
        "| controller | write head | path | fwd+bwd ms | ×(write_mlp=() native) | step loop ÷ this | CPU ms |"
    )
    print("|---|---|---|---|---|---|---|")
    torch.manual_seed(0)
    x = torch.randn(B, T, S)
    out = []
    for controller in args.controllers:
        fns = []
        for _, write_mlp, impl in ROWS:
            torch.manual_seed(0)
            layer = StackRNN(
                S, S, "tape_jump", controller, width=args.width, depth=args.depth,
                memory_args={"jump": T // 2, "write_mlp": write_mlp},
            )  # fmt: skip

            def run(layer=layer, impl=impl):
                with reference_paths() if impl == "reference" else implementation(impl):
                    y, _ = layer(x)
                    y.sum().backward()

            fns.append(run)
        times = medians(fns, args.repeats)
        base, loop = times[0][0], times[-1][0]
        for (label, _, impl), (t, c) in zip(ROWS, times, strict=True):
            path = "step loop" if impl == "reference" else f"fused, {impl}"
            out.append(
                {
                    "controller": controller,
                    "write_head": label,
                    "path": path,
                    "ms": t * 1e3,
                    "cpu_ms": c * 1e3,
                }
            )
            print(
                f"| {controller} | {label} | {path} | {t * 1e3:.1f} | {t / base:.2f} | {loop / t:.2f} | {c * 1e3:.1f} |"
            )
    return out


if __name__ == "__main__":
    main()
