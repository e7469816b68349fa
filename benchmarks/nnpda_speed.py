"""Tokens per second (forward + backward) of the tensor-RNN layers against ``torch.nn.LSTM`` of
the same state size, measured in one process.

    python benchmarks/nnpda_speed.py                    # CPU
    python benchmarks/nnpda_speed.py --device cuda

Rows: SecondOrderRNN and NNPDA with one-hot input (the indexed input slice) and with dense
input (the state-first contraction), each against nn.LSTM(hidden = the state size), on the
same [batch, time, vocab] one-hot batch; "ratio" = layer tokens/s ÷ LSTM tokens/s.
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F

from memrnn.layers import NNPDA, SecondOrderRNN


def tokens_per_second(fn, tokens: int, device: str, repeats: int) -> float:
    fn()  # warm-up
    if device == "cuda":
        torch.cuda.synchronize()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        if device == "cuda":
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t0)
    return tokens / best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--vocab", type=int, default=8)
    ap.add_argument("--sizes", type=int, nargs="+", default=[8, 32, 128])
    ap.add_argument("--stack-symbols", type=int, default=4)
    ap.add_argument("--depth", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    dev = args.device
    torch.manual_seed(0)
    ids = torch.randint(0, args.vocab, (args.batch, args.steps), device=dev)
    x = F.one_hot(ids, args.vocab).float()
    tokens = args.batch * args.steps
    print(
        f"device {dev}, batch {args.batch}, steps {args.steps}, vocab {args.vocab}, torch {torch.__version__}"
    )
    print(f"{'layer':34} {'state':>5} {'tok/s':>10} {'LSTM tok/s':>11} {'ratio':>6}")
    for n in args.sizes:
        lstm = torch.nn.LSTM(args.vocab, n, batch_first=True).to(dev)

        def run_lstm(lstm=lstm):
            y, _ = lstm(x)
            y.sum().backward()

        base = tokens_per_second(run_lstm, tokens, dev, args.repeats)
        layers = {
            "SecondOrderRNN one-hot": SecondOrderRNN(args.vocab, n, one_hot_input=True),
            "SecondOrderRNN dense": SecondOrderRNN(args.vocab, n, one_hot_input=False),
            f"NNPDA one-hot (m2={args.stack_symbols}, D={args.depth})": NNPDA(
                args.vocab, n, args.stack_symbols, depth=args.depth, action="sigmoid", one_hot_input=True
            ),
            f"NNPDA dense (m2={args.stack_symbols}, D={args.depth})": NNPDA(
                args.vocab, n, args.stack_symbols, depth=args.depth, action="sigmoid", one_hot_input=False
            ),
        }
        for name, layer in layers.items():
            layer = layer.to(dev)

            def run(layer=layer):
                y, _ = layer(x)
                y.sum().backward()

            tps = tokens_per_second(run, tokens, dev, args.repeats)
            print(f"{name:34} {n:5d} {tps:10.0f} {base:11.0f} {tps / base:6.2f}")


if __name__ == "__main__":
    main()
