"""The training call with its history buffers held between calls (``memrnn.ops.scratch``) against
the same call with torch's allocator alone (``MEMRNN_SCRATCH_MIB=0``), in one process, the two
alternating: an LSTM stack RNN (batch 64, input and controller 64, width 8), forward+backward of
``StackRNN.outputs``, per memory, T and depth.

    python -m benchmarks.scratch_buffers [--lengths 256] [--depths 256 32] [--memories superposition]
        [--calls 15] [--threads 1]

Columns: the min and the median over ``--calls`` calls of each, in ms, and the page faults
(minor, ``getrusage``) per call.  ``x``: the median without over the median with.

Measured on this project's 2-core CPU (one thread, machine quiet), superposition, T 256, depth
256: medians 66-67 ms without and 61-62 ms with; minor faults per call ~1,200 without, ~350 with
(the rest are Python's own frame-stack chunks).  The mins are within 5%: a call that happens to
reuse glibc's heap pays nothing, which is why a best-of timing hides this.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import time

import torch

from memrnn.layers import StackRNN
from memrnn.ops.native import cpu_description


def _call(net: StackRNN, x: torch.Tensor) -> tuple[float, int]:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    t = time.perf_counter()
    net.outputs(x).sum().backward()
    return time.perf_counter() - t, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lengths", type=int, nargs="+", default=[256])
    ap.add_argument("--depths", type=int, nargs="+", default=[256, 32])
    ap.add_argument("--memories", nargs="+", default=["superposition"])
    ap.add_argument("--calls", type=int, default=15)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--size", type=int, default=64, help="input and controller units")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    print(f"# {cpu_description()}, torch {torch.__version__}, {torch.get_num_threads()} threads")
    print(f"# LSTM stack RNNs, batch {args.batch}, input = controller = {args.size}, width 8; "
          "forward+backward of outputs; ms")  # fmt: skip
    print(f"{'memory':>14} {'T':>5} {'depth':>5} | {'without min':>11} {'median':>7} {'faults':>7} | "
          f"{'with min':>8} {'median':>7} {'faults':>7} | {'x':>5}")  # fmt: skip
    rows = []
    setting = os.environ.get("MEMRNN_SCRATCH_MIB")
    try:
        for memory in args.memories:
            for T in args.lengths:
                for depth in args.depths:
                    torch.manual_seed(0)
                    net = StackRNN(args.size, args.size, memory=memory, width=8, depth=depth)
                    x = torch.randn(args.batch, T, args.size)
                    got = {"0": [], "1024": []}
                    for _ in range(2):  # warm-up: the build, the first pages
                        _call(net, x)
                    for _ in range(args.calls):
                        for mib, out in got.items():
                            os.environ["MEMRNN_SCRATCH_MIB"] = mib
                            out.append(_call(net, x))
                    row = {"memory": memory, "T": T, "depth": depth}
                    line = f"{memory:>14} {T:>5} {depth:>5}"
                    for name, mib in (("without", "0"), ("with", "1024")):
                        times = [t * 1e3 for t, _ in got[mib]]
                        faults = statistics.median(f for _, f in got[mib])
                        row[name] = {"min": min(times), "median": statistics.median(times), "faults": faults}
                        line += f" | {min(times):>{len(name) + 4}.1f} {statistics.median(times):>7.1f} {faults:>7.0f}"
                    line += f" | {row['without']['median'] / row['with']['median']:>5.2f}"
                    print(line, flush=True)
                    rows.append(row)
    finally:
        if setting is None:
            os.environ.pop("MEMRNN_SCRATCH_MIB", None)
        else:
            os.environ["MEMRNN_SCRATCH_MIB"] = setting
    return rows


if __name__ == "__main__":
    main()
