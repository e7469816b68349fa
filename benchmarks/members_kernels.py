"""Aggregate forward+backward tokens/s of M members of a layer run as one model
(:class:`memrnn.members.MemberLayer`: one call for all members, on CUDA one launch of each
Triton kernel), against one ``nn.LSTM`` of the same size (on CUDA cuDNN's), measured in the same
run.  Issue 67's GPU bar: M = 32 members at batch 64, state 64, T 256 reach ≥ 8× the LSTM's
tokens/s for the Elman, LSTM, superposition and stratification layers.

    python -m benchmarks.members_kernels --device cuda --out benchmarks/results/members-kernels-h200.md
    python -m benchmarks.members_kernels --members 1 4 --batch 8 --length 32 --size 16   # CPU, small

Each row times ``y, _ = members(x); y.sum().backward()`` for ``x [M, B, T, S]`` against
``nn.LSTM(S, S)`` on ``[B, T, S]`` (interleaved, best of ``--repeats`` each, after a warm-up
call; CUDA synchronised around each call).  ``× LSTM`` is the members' tokens/s (``M·B·T`` per
call) over the LSTM's (``B·T``).  The stack layers have width ``--width`` and depth
``--depth`` (default 32) and an LSTM or Elman controller as named.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.run import call_seconds
from memrnn.layers import ElmanRNN, LSTMLayer, StackRNN
from memrnn.members import MemberLayer
from memrnn.ops.native import cpu_description

#: the layers of the bar, by row name: a factory of input and state size ``S``
LAYERS: dict[str, Callable[[int, int, int], torch.nn.Module]] = {
    "elman": lambda S, width, depth: ElmanRNN(S, S),
    "lstm": lambda S, width, depth: LSTMLayer(S, S),
    "superposition_lstm": lambda S, width, depth: StackRNN(
        S, S, "superposition", "lstm", width=width, depth=depth
    ),
    "stratification_lstm": lambda S, width, depth: StackRNN(
        S, S, "stratification", "lstm", width=width, depth=depth
    ),
    "superposition_elman": lambda S, width, depth: StackRNN(
        S, S, "superposition", "elman", width=width, depth=depth
    ),
    "stratification_elman": lambda S, width, depth: StackRNN(
        S, S, "stratification", "elman", width=width, depth=depth
    ),
}


def best_pair(
    base: Callable[[], None], fn: Callable[[], None], repeats: int, device: str
) -> tuple[float, float]:
    """The best of ``repeats`` timings of ``base`` and of ``fn``, interleaved, after one call of each."""
    base(), fn()
    tb, tf = [], []
    for _ in range(repeats):
        tb.append(call_seconds(base, device))
        tf.append(call_seconds(fn, device))
    return min(tb), min(tf)


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--members", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--layers", nargs="+", default=list(LAYERS), choices=list(LAYERS))
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--length", type=int, default=256)
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--width", type=int, default=8)
    ap.add_argument("--depth", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--device", default="cpu", help="cpu or cuda (the baseline is then cuDNN's LSTM)")
    ap.add_argument("--out", type=Path, default=None, help="also write the table to this file")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    dev, B, T, S = args.device, args.batch, args.length, args.size
    where = (
        torch.cuda.get_device_name()
        if dev == "cuda"
        else f"{cpu_description()}, {torch.get_num_threads()} threads"
    )
    lines = [
        f"torch {torch.__version__}, {dev} ({where}); batch {B}, T {T}, input = state = {S}, "
        f"stacks of width {args.width} and depth {args.depth}; best of {args.repeats}",
        "",
        "| layer | M | members ms | nn.LSTM ms | members tokens/s | × LSTM |",
        "|---|---|---|---|---|---|",
    ]
    print("\n".join(lines), flush=True)
    torch.manual_seed(0)
    lstm = torch.nn.LSTM(S, S, batch_first=True).to(dev)
    x1 = torch.randn(B, T, S, device=dev)

    def base() -> None:
        y, _ = lstm(x1)
        y.sum().backward()

    rows = []
    for name in args.layers:
        for M in args.members:
            members = MemberLayer.build(
                lambda name=name: LAYERS[name](S, args.width, args.depth), seeds=range(M)
            )
            members = members.to(dev)
            x = torch.randn(M, B, T, S, device=dev)

            def run(members=members, x=x) -> None:
                y, _ = members(x)
                y.sum().backward()

            t_lstm, t = best_pair(base, run, args.repeats, dev)
            ratio = M * t_lstm / t
            row = {"layer": name, "members": M, "ms": 1e3 * t, "lstm_ms": 1e3 * t_lstm, "ratio": ratio,
                   "path": members.member_path}  # fmt: skip
            rows.append(row)
            line = (
                f"| {name} | {M} | {1e3 * t:.2f} | {1e3 * t_lstm:.2f} | {M * B * T / t:,.0f} | {ratio:.2f} |"
            )
            lines.append(line)
            print(line, flush=True)
    paths = sorted({(r["layer"], r["path"]) for r in rows})
    lines += ["", "Member paths: " + "; ".join(f"{layer}: {path}" for layer, path in paths)]
    print(lines[-1])
    if args.out:
        args.out.write_text("\n".join(lines) + "\n")
    return rows


if __name__ == "__main__":
    main()
