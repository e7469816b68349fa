"""Trimmed memory windows (issue "pay only for the memory that can still matter"): an LSTM stack RNN
(batch 64, input and controller 64, width 8) on the superposition stack (Joulin & Mikolov 2015;
or the stratification stack, the queue or the DeQue, Grefenstette et al. 2015) at depth ``T`` and
``T/2`` (``--depths``: other depths too),
with the full window ("full": the kernels' ``_live`` switched off, the code path as before the
trim) against the trimmed one ("trim"), in one process, the two alternating ``--repeats`` times
(best of each).

    python benchmarks/stack_trim.py [--lengths 64 256 1024] [--repeats 3] [--impls native cpu]
        [--memories superposition stratification queue deque] [--depths 32] [--rau /tmp/rau/src]

Columns: ``fwd+bwd``: ``StackRNN.outputs`` (no final state, so both of the superposition stack's
trims: the cells that can be non-zero and those still readable) and a backward of the summed
outputs, as a language model's training step runs it; ``fwd``: the same under ``torch.no_grad``;
``fwd+bwd finals``: ``forward`` with its final state (only the filled trim) and a backward
through the outputs and the memory's first field.  Times in seconds; ``x``: full / trim.  The
outputs and gradients of the two are equal bit for bit (``tests/ops/test_stack_trim.py``); this
script checks the outputs once per row too.

``--rau SRC``: also time DuSell's rau (its ``differentiable-stacks`` branch's ``src`` folder:
``mkdir /tmp/rau; git --git-dir=/work/.mirror/bdusell+rau/repo archive differentiable-stacks src |
tar -x -C /tmp/rau``), its ``SuperpositionStackRNN`` with the same sizes, an LSTM controller and
``max_stack_depth=depth`` (it trims to ``min(t, T − t, depth)`` itself), in the same alternation;
``rau/trim``: rau's time over memrnn's trimmed one (rau also returns the initial state's output,
``T + 1`` in all).

Measured on this project's 2-core CPU (one thread, the machine shared: load 5-8, so ±30%), the C++
loops, superposition: fwd+bwd full -> trimmed 0.55 -> 0.39 s at T = d = 256, 5.3 -> 1.6 s at
T = d = 1024 (3.3x; fwd alone 2.8 -> 0.87 s), 4.0 -> 2.3 s at T 1024, d 512.  Against rau, the
machine quiet, one and two threads: ``benchmarks/results/memory-scaling-cpu-2core.md`` (its
first section: fwd+bwd 4.7x / 5.6x at T = d = 256, 5.1x / 5.9x at T = d = 1024).
The stratification stack and the queue: within noise of the full window (their memory is a
small part of a step), 1.0-1.4x.

The DeQue (``--memories deque --lengths 256 1024 --depths 32``, the C++ loops, load 1-3.5 on the
shared 2-core CPU, best of 3, so ±15-30%): fwd+bwd full -> trimmed 0.51 -> 0.26 s at T = d = 256
(2.0x), 7.7 -> 2.5 s at T = d = 1024 (3.1x; with the final state 8.5 -> 3.5 s, 2.4x), 1.2x at
d = T/2 (2.9 -> 2.4 s at T 1024), within noise at d = 32 (0.94-1.26x over repeated runs of best of
7-9 at T 1024); ``fwd`` (under ``no_grad``, the ring without history) runs whole: 0.9-1.0x.  Its
Python loop at T 256: 1.2x / 1.0x / 0.9x fwd+bwd at d = 256 / 128 / 32 (1.62 -> 1.32 s at d = 256);
it sums the readings and the pops' gradients over all cells (their empty ones 0), since torch's
sum over the cells rounds by position."""

from __future__ import annotations

import argparse
import contextlib
import sys
import time

import torch

from memrnn.layers import StackRNN
from memrnn.ops.deque.cpu import DequeKernel
from memrnn.ops.dispatch import implementation
from memrnn.ops.native import cpu_description
from memrnn.ops.stratification.cpu import StratificationKernel
from memrnn.ops.superposition.cpu import SuperpositionKernel


@contextlib.contextmanager
def full_window():
    """Run the memories with their whole windows (no trim), as before the trim."""
    real = {k: k._live for k in (SuperpositionKernel, StratificationKernel, DequeKernel)}
    for k in real:
        k._live = lambda self, *a: None
    try:
        yield
    finally:
        for k, f in real.items():
            k._live = f


def _timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def pair(fn, repeats: int, other=None) -> tuple[float, ...]:
    """Best times of ``fn`` with the full window and trimmed (and of ``other`` when given),
    alternating, after a warm-up each."""
    with full_window():
        _timed(fn)
    _timed(fn)
    if other is not None:
        _timed(other)
    full, trim, more = [], [], []
    for _ in range(repeats):
        with full_window():
            full.append(_timed(fn))
        trim.append(_timed(fn))
        if other is not None:
            more.append(_timed(other))
    return (min(full), min(trim), *([min(more)] if more else []))


def rau_model(src: str, size: int, width: int, depth: int) -> torch.nn.Module:
    """rau's superposition stack RNN (``--rau``) with an LSTM controller of ``size`` units."""
    if src not in sys.path:
        sys.path.insert(0, src)
    from rau.models.rnn.lstm import LSTM
    from rau.models.stack_nn.rnn.superposition import SuperpositionStackRNN

    return SuperpositionStackRNN(
        input_size=size, stack_embedding_size=width, push_hidden_state=False,
        controller=lambda n: LSTM(n, size), controller_output_size=size, include_reading_in_output=False,
        max_stack_depth=depth,
    )  # fmt: skip


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lengths", type=int, nargs="+", default=[64, 256, 1024])
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--width", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--impls", nargs="+", default=["native"], choices=["native", "cpu"])
    ap.add_argument(
        "--memories",
        nargs="+",
        default=["superposition"],
        choices=["superposition", "stratification", "queue", "deque"],
    )
    ap.add_argument("--depths", type=int, nargs="*", default=[], help="fixed depths, beside T and T/2")
    ap.add_argument("--rau", default=None, help="rau's src folder: time its superposition stack RNN too")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"# {cpu_description()}, torch {torch.__version__}, {torch.get_num_threads()} threads")
    print(
        f"# LSTM stack RNNs, batch {args.batch}, input = controller = {args.size}, width {args.width}; seconds"
    )
    head = f"{'memory':>14} {'impl':>6} {'T':>5} {'depth':>5} | {'fwd+bwd full':>12} {'trim':>7} {'x':>5}"
    head += f" | {'fwd full':>8} {'trim':>7} {'x':>5} | {'fwd+bwd finals full':>19} {'trim':>7} {'x':>5}"
    if args.rau:
        head += f" | {'rau fwd+bwd':>11} {'rau/trim':>8} | {'rau fwd':>7} {'rau/trim':>8}"
    print(head)
    rows = []
    gen = torch.Generator().manual_seed(0)
    for memory in args.memories:
        for impl in args.impls:
            for T in args.lengths:
                for depth in dict.fromkeys([T, T // 2, *args.depths]):
                    rows.append(_row(args, gen, memory, impl, T, depth))
    return rows


def _row(args, gen: torch.Generator, memory: str, impl: str, T: int, depth: int) -> dict:
    """Time one (memory, implementation, T, depth) and print its line."""
    torch.manual_seed(0)
    net = StackRNN(args.size, args.size, memory=memory, width=args.width, depth=depth)
    x = torch.randn(args.batch, T, args.size, generator=gen)

    def train():
        net.outputs(x).sum().backward()

    def infer():
        with torch.no_grad():
            net.outputs(x)

    def train_finals():
        y, state = net(x)
        (y.sum() + state[2].sum()).backward()  # the outputs and the memory's first field

    rau = rau_train = rau_infer = None
    if args.rau and memory == "superposition":
        rau = rau_model(args.rau, args.size, args.width, depth)

        def rau_train():
            rau(x).sum().backward()

        def rau_infer():
            with torch.no_grad():
                rau(x)

    with implementation(impl):
        with torch.no_grad():
            y_trim = net.outputs(x)
            with full_window():
                y_full = net.outputs(x)
        if not torch.equal(y_trim, y_full):
            raise AssertionError(f"{memory} T {T} depth {depth}: the trimmed window's outputs differ")
        times = [pair(train, args.repeats, rau_train), pair(infer, args.repeats, rau_infer)]
        times.append(pair(train_finals, args.repeats))
    row = {"memory": memory, "impl": impl, "T": T, "depth": depth}
    line = f"{memory:>14} {impl:>6} {T:>5} {depth:>5}"
    for name, (full, trim, *_), w in zip(("train", "infer", "train_finals"), times, (12, 8, 19), strict=True):
        row[name] = {"full": full, "trim": trim}
        line += f" | {full:>{w}.3f} {trim:>7.3f} {full / trim:>5.2f}"
    if rau is not None:
        for name, (_, trim, r), w in zip(("train", "infer"), times[:2], (11, 7), strict=True):
            row[name]["rau"] = r
            line += f" | {r:>{w}.3f} {r / trim:>8.2f}"
    print(line, flush=True)
    return row


if __name__ == "__main__":
    main()
