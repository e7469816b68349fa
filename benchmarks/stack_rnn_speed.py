"""Stack RNNs against ``nn.LSTM`` in the same run: the cell of issue 23 (batch 64, input and
controller 64, memory width 8, LSTM or Elman controller, forward+backward tokens/s), at depth 32
(Delétang et al.'s Stack-RNN keeps 30-40 cells) and at depth T (the papers' unbounded stacks,
exact for every string of the batch).

    python benchmarks/stack_rnn_speed.py [--lengths 64 256 1024] [--threads 2] [--impls native cpu]
    python benchmarks/stack_rnn_speed.py --device cuda --lengths 256 --warps 8 4   # one table per warp count

Prints one table row per (memory, controller, T, depth, implementation) with its ratio to
``nn.LSTM(64, 64)`` forward+backward tokens/s.  The baseline is timed beside each row, the two
alternating ``--repeats`` times (best of each), so a machine whose speed drifts during the run (a
shared VM) moves both.  ``--impls`` picks the stack RNN's implementations to time
(:func:`memrnn.ops.dispatch.implementation`: ``native`` the C++ time loops on CPU, ``cpu`` the
Python loops, ``triton`` the CUDA kernels; default: what the dispatch picks).  For reference, measured on this
project's 2-core CPU by issue 23's author with the public code: bdusell/rau's superposition
stack RNN 0.12x / 0.11x / 0.08x of nn.LSTM at T 64 / 256 / 1024 and its stratification stack RNN
0.031x / 0.010x / 0.003x."""

from __future__ import annotations

import argparse
import contextlib
import time

import torch

from memrnn.layers import StackRNN
from memrnn.ops.dispatch import choose, implementation
from memrnn.ops.native import cpu_description
from memrnn.ops.stack_rnn import _NATIVE_MEMORIES, _TRITON_MEMORIES

MEMORIES = ("superposition", "stratification", "queue", "tape")
#: also measurable (--memories): Delétang et al.'s tape with its jumps (by T // 2 here, every row)
#: and Grefenstette et al.'s DeQue (depth per end; it reads 2 x width units)
MORE_MEMORIES = ("tape_jump", "deque")


def _timed(fn, device: str) -> float:
    """Seconds one call of ``fn`` takes (waiting for the GPU on CUDA)."""
    t = time.perf_counter()
    fn()
    if device == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - t


def best_of(fn, repeats: int, device: str = "cpu") -> float:
    """Best of ``repeats`` calls after a warm-up."""
    _timed(fn, device)
    return min(_timed(fn, device) for _ in range(repeats))


def default_impl(x: torch.Tensor, memory: str) -> str:
    """What :func:`memrnn.ops.stack_rnn.stack_rnn_sequence` runs for ``x`` by default."""
    return choose(x, triton_ok=memory in _TRITON_MEMORIES, native_ok=memory in _NATIVE_MEMORIES)


def best_of_pair(base, fn, repeats: int, device: str = "cpu") -> tuple[float, float]:
    """Best times of ``base`` and ``fn``, run alternately ``repeats`` times after a warm-up each."""
    _timed(base, device)
    _timed(fn, device)
    pairs = [(_timed(base, device), _timed(fn, device)) for _ in range(repeats)]
    return min(p[0] for p in pairs), min(p[1] for p in pairs)


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lengths", type=int, nargs="+", default=[64, 256, 1024])
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--width", type=int, default=8)
    ap.add_argument("--controllers", nargs="+", default=["lstm", "elman"])
    ap.add_argument("--memories", nargs="+", default=list(MEMORIES), choices=[*MEMORIES, *MORE_MEMORIES])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--device", default="cpu", help="cpu or cuda (the baseline is then cuDNN's LSTM)")
    ap.add_argument("--impls", nargs="+", default=[None], choices=["native", "cpu", "triton"],
                    help="the stack RNN's implementations to time (default: the dispatch's choice)")  # fmt: skip
    ap.add_argument("--warps", type=int, nargs="+", default=[None],
                    help="warps per program of the CUDA kernels, one table each (default: the layer's "
                         "choice, memrnn.ops.stack_rnn.triton._stack_warps)")  # fmt: skip
    args = ap.parse_args(argv)
    if args.warps == [None]:
        return _tables(args)
    if any(w is None or w < 1 or w & (w - 1) for w in args.warps):
        ap.error(f"--warps takes powers of 2, not {args.warps}")
    from memrnn.ops.stack_rnn import triton as kernels  # Triton only when asked

    chosen, rows = kernels._stack_warps, []
    try:
        for w in args.warps:
            kernels._stack_warps = lambda *_, w=w: w
            print(f"num_warps {w}")
            rows += _tables(args)
    finally:
        kernels._stack_warps = chosen
    return rows


def _tables(args: argparse.Namespace) -> list[dict]:
    """Time and print every row that ``args`` asks for; the rows."""
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    B, S, dev = args.batch, args.size, args.device
    where = (
        torch.cuda.get_device_name()
        if dev == "cuda"
        else f"{cpu_description()}, {torch.get_num_threads()} threads"
    )
    print(
        f"torch {torch.__version__}, {dev} ({where}), batch {B}, input = controller = {S}, width {args.width}"
    )
    print("| memory | controller | T | depth | impl | fwd+bwd ms | nn.LSTM ms | ×LSTM |")
    print("|---|---|---|---|---|---|---|---|")
    rows = []
    for T in args.lengths:
        x = torch.randn(B, T, S, device=dev)
        lstm = torch.nn.LSTM(S, S, batch_first=True).to(dev)

        def base(lstm=lstm, x=x):
            y, _ = lstm(x)
            y.sum().backward()

        for memory in args.memories:
            for controller in args.controllers:
                for depth in sorted({min(32, T), T}):
                    extra = {"memory_args": {"jump": T // 2}} if memory == "tape_jump" else {}
                    layer = StackRNN(S, S, memory, controller, width=args.width, depth=depth, **extra).to(dev)
                    for impl in args.impls:

                        def run(layer=layer, x=x, impl=impl):
                            with implementation(impl) if impl else contextlib.nullcontext():
                                y, _ = layer(x)
                                y.sum().backward()

                        t_lstm, t = best_of_pair(base, run, args.repeats, dev)
                        name = impl or default_impl(x, memory)
                        row = {"memory": memory, "controller": controller, "T": T, "depth": depth, "impl": name,
                               "ms": t * 1e3, "lstm_ms": t_lstm * 1e3, "ratio": t_lstm / t}  # fmt: skip
                        rows.append(row)
                        print(
                            f"| {memory} | {controller} | {T} | {depth} | {name} | {t * 1e3:.1f} | "
                            f"{t_lstm * 1e3:.1f} | {t_lstm / t:.2f} |"
                        )
    return rows


if __name__ == "__main__":
    main()
