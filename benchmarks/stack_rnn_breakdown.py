"""Where a GPU stack RNN's step time goes: the same cell (input = controller = 64, width 8) at
several batch sizes and depths, forward alone and forward+backward, in µs per time step, beside
memrnn's Elman kernel (one phase per step: the same tiling without the head and the memory) and
cuDNN's ``nn.LSTM``.

    python benchmarks/stack_rnn_breakdown.py                       # batches 16 64 256, depths 2 32
    python benchmarks/stack_rnn_breakdown.py --batches 64 --memories superposition --block-b 32
    python benchmarks/stack_rnn_breakdown.py --batches 64 --memories superposition --precision tf32
    python benchmarks/stack_rnn_breakdown.py --batches 64 --memories superposition --warps 8

Reading it: a row whose time does not move with the batch (1 to 16 programs of 16 rows) is
latency-bound; depth 2 against depth 32 is the memory's per-cell work; the Elman kernel against
the Elman-controlled stack is what the head and the memory phases add to a step.

``--block-b`` (rows per program), ``--precision`` (the controller's and head's products:
``ieee``, the default, ``tf32`` or ``tf32x3``), ``--k-block`` (columns of ``[h ; r]`` per
product, 16 by default), ``--warps`` and ``--no-preload`` (the weight tiles loaded at every step,
not once before the time loop) change the stack kernels of this process only, to see
which resource a step is bound by (one variant per invocation: Triton compiles each on first
use)."""

from __future__ import annotations

import argparse

import torch
import triton.language as tl

from memrnn.layers import ElmanRNN, StackRNN
from memrnn.ops.stack_rnn import triton as kernels


def _time(fn, repeats: int) -> float:
    """Best of ``repeats`` calls of ``fn`` after a warm-up, in seconds (CUDA events)."""
    fn()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(repeats):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        best = min(best, a.elapsed_time(b) / 1e3)
    return best


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--length", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--batches", type=int, nargs="+", default=[16, 64, 256])
    ap.add_argument("--depths", type=int, nargs="+", default=[2, 32])
    ap.add_argument("--memories", nargs="+", default=["superposition", "stratification"])
    ap.add_argument("--controllers", nargs="+", default=["elman", "lstm"])
    ap.add_argument("--block-b", type=int, default=None, help="rows per program (a power of 2, >= 16)")
    ap.add_argument("--precision", choices=["ieee", "tf32", "tf32x3"], default=None)
    ap.add_argument(
        "--k-block", type=int, default=None, help="columns of [h ; r] per product (16 by default)"
    )
    ap.add_argument("--warps", type=int, default=None)
    ap.add_argument(
        "--no-preload",
        action="store_true",
        help="load the weight tiles from global memory at every step, as before the kernels preloaded them",
    )
    ap.add_argument("--no-baselines", action="store_true", help="skip nn.LSTM and memrnn's Elman kernel")
    args = ap.parse_args(argv)
    for flag, value, least, why in (("--block-b", args.block_b, 16, "tl.dot's rows"),
                                    ("--k-block", args.k_block, 16, "tl.dot's depth"),
                                    ("--warps", args.warps, 1, "warps per program")):  # fmt: skip
        if value is not None and (value < least or value & (value - 1)):
            ap.error(f"{flag} takes a power of 2 of at least {least} ({why}), not {value}")
    if not torch.cuda.is_available():
        ap.error("this benchmark times CUDA kernels and needs a GPU")
    if args.block_b is not None:
        kernels.BLOCK_B = args.block_b
    if args.precision is not None:
        kernels.STACK_DOT_PRECISION = tl.constexpr(args.precision)
    if args.warps is not None:
        kernels._stack_warps = lambda *_: args.warps
    if args.k_block is not None:
        kernels._k_blocks = lambda K: (args.k_block, -(-K // args.k_block))
    if args.no_preload:
        kernels.PRELOAD_BYTES = 0
    variant = (
        f"block_b {kernels.BLOCK_B}, k_block {args.k_block or 'default'}, "
        f"{kernels.STACK_DOT_PRECISION.value} products, warps {args.warps or 'default'}, "
        f"weights {'loaded every step' if args.no_preload else 'preloaded where they fit'}"
    )
    T, S = args.length, 64
    print(
        f"torch {torch.__version__}, {torch.cuda.get_device_name()}, T {T}, input = controller = {S}; {variant}"
    )
    print("| model | batch | depth | fwd µs/step | fwd+bwd µs/step |")
    print("|---|---|---|---|---|")
    for B in args.batches:
        x = torch.randn(B, T, S, device="cuda", requires_grad=True)
        models = []
        if not args.no_baselines:
            models += [("nn.LSTM (cuDNN)", "-", torch.nn.LSTM(S, S, batch_first=True)),
                       ("memrnn elman", "-", ElmanRNN(S, S))]  # fmt: skip
        for ctrl in args.controllers:
            for mem in args.memories:
                for depth in args.depths:
                    models.append((f"{mem} {ctrl}", depth, StackRNN(S, S, mem, ctrl, width=8, depth=depth)))
        for name, depth, m in models:
            m = m.to("cuda")

            def fwd(m=m, x=x):
                with torch.no_grad():
                    m(x)

            def both(m=m, x=x):
                m(x)[0].sum().backward()

            tf, tb = _time(fwd, args.repeats), _time(both, args.repeats)
            print(f"| {name} | {B} | {depth} | {tf / T * 1e6:.1f} | {tb / T * 1e6:.1f} |", flush=True)


if __name__ == "__main__":
    main()
