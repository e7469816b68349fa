"""The superposition stack's trimmed windows (Joulin & Mikolov 2015; issue "pay only for the memory
that can still matter"): an LSTM stack RNN (batch 64, input and controller 64, width 8) at depth
``T`` and ``T/2``, with the full window ("full": :meth:`SuperpositionKernel._live` switched off, the
code path as before the trim) against the trimmed one ("trim"), in one process, the two
alternating ``--repeats`` times (best of each).

    python benchmarks/stack_trim.py [--lengths 64 256 1024] [--repeats 3] [--impls native cpu]

Columns: ``fwd+bwd``: ``StackRNN.outputs`` (no final state, so both trims: the cells that can be
non-zero and those still readable) and a backward of the summed outputs, as a language model's
training step runs it; ``fwd``: the same under ``torch.no_grad``; ``fwd+bwd finals``: ``forward``
with its final state (only the filled trim applies) and a backward.  Times in seconds; ``x``: full
/ trim.  The outputs and gradients of the two are equal bit for bit (``tests/ops/test_stack_trim.py``);
this script checks the forward's outputs once per row too."""

from __future__ import annotations

import argparse
import contextlib
import time

import torch

from memrnn.layers import StackRNN
from memrnn.ops.dispatch import implementation
from memrnn.ops.native import cpu_description
from memrnn.ops.superposition.cpu import SuperpositionKernel


@contextlib.contextmanager
def full_window():
    """Run the superposition stack with its whole window (no trim), as before the trim."""
    real = SuperpositionKernel._live
    SuperpositionKernel._live = lambda self, *a: None
    try:
        yield
    finally:
        SuperpositionKernel._live = real


def _timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def pair(fn, repeats: int) -> tuple[float, float]:
    """Best times of ``fn`` with the full window and trimmed, alternating, after a warm-up each."""
    with full_window():
        _timed(fn)
    _timed(fn)
    full, trim = [], []
    for _ in range(repeats):
        with full_window():
            full.append(_timed(fn))
        trim.append(_timed(fn))
    return min(full), min(trim)


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lengths", type=int, nargs="+", default=[64, 256, 1024])
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--width", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--impls", nargs="+", default=["native"], choices=["native", "cpu"])
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"# {cpu_description()}, torch {torch.__version__}, {torch.get_num_threads()} threads")
    print(
        f"# superposition LSTM stack RNN, batch {args.batch}, input = controller = {args.size}, width {args.width}"
    )
    head = f"{'impl':>6} {'T':>5} {'depth':>5} | {'fwd+bwd full':>12} {'trim':>8} {'x':>5} | {'fwd full':>9} {'trim':>8}"
    head += f" {'x':>5} | {'fwd+bwd finals full':>19} {'trim':>8} {'x':>5}"
    print(head)
    rows = []
    gen = torch.Generator().manual_seed(0)
    for impl in args.impls:
        for T in args.lengths:
            for depth in (T, T // 2):
                torch.manual_seed(0)
                net = StackRNN(args.size, args.size, memory="superposition", width=args.width, depth=depth)
                x = torch.randn(args.batch, T, args.size, generator=gen)

                def train(net=net, x=x):
                    net.outputs(x).sum().backward()

                def infer(net=net, x=x):
                    with torch.no_grad():
                        net.outputs(x)

                def train_finals(net=net, x=x):
                    y, state = net(x)
                    (y.sum() + state.stack.sum()).backward()

                with implementation(impl):
                    with torch.no_grad():
                        y_trim = net.outputs(x)
                        with full_window():
                            y_full = net.outputs(x)
                    assert torch.equal(y_trim, y_full), "the trimmed window's outputs differ"
                    times = [pair(fn, args.repeats) for fn in (train, infer, train_finals)]
                row = {"impl": impl, "T": T, "depth": depth}
                line = f"{impl:>6} {T:>5} {depth:>5}"
                for name, (full, trim), w in zip(
                    ("train", "infer", "train_finals"), times, (12, 9, 19), strict=True
                ):
                    row[name] = {"full": full, "trim": trim}
                    line += f" | {full:>{w}.3f} {trim:>8.3f} {full / trim:>5.2f}"
                print(line, flush=True)
                rows.append(row)
    return rows


if __name__ == "__main__":
    main()
