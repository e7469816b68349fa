"""Time and memory of the nondeterministic stack RNN (DuSell & Chiang's RNS-RNN) against the
sequence length, with the fitted exponent, and ``nn.LSTM`` of the controller's size in the same
run.  DuSell & Chiang's cell: an LSTM controller of 20 units, 2 PDA states, 3 stack symbols,
batch 10.

    python -m benchmarks.nondeterministic_scaling [--lengths 16 32 64 128 256] [--window 16]

Two rows per length: the unlimited stack (``depth = T``: every start time kept; up to
``--max-unlimited``, as its cost grows as T³) and the memory-limited one (``depth = window``:
linear in T).  Time is
forward+backward (best of ``--repeats``); memory is the bytes autograd saves for backward."""

from __future__ import annotations

import argparse

import torch

from benchmarks.run import fit_slope, memory
from benchmarks.stack_rnn_speed import best_of
from memrnn.layers import StackRNN


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lengths", type=int, nargs="+", default=[16, 32, 64, 128, 256])
    ap.add_argument("--window", type=int, default=16)
    ap.add_argument("--max-unlimited", type=int, default=64, help="longest T for the unlimited stack")
    ap.add_argument("--batch", type=int, default=10)
    ap.add_argument("--hidden", type=int, default=20)
    ap.add_argument("--states", type=int, default=2)
    ap.add_argument("--symbols", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--device", default="cpu", help="cpu or cuda (memory is then the peak allocated)")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    B, H, n_in, dev = args.batch, args.hidden, 3, args.device
    mem = {"states": args.states, "symbols": args.symbols}
    print(
        f"torch {torch.__version__}, {dev}, {torch.get_num_threads()} threads, batch {B}, LSTM controller {H}, "
        f"{args.states} states x {args.symbols} symbols"
    )
    print("| stack | T | depth | fwd+bwd ms | saved MiB | nn.LSTM ms | ×LSTM |")
    print("|---|---|---|---|---|---|---|")
    rows = []
    for T in args.lengths:
        torch.manual_seed(0)
        x = torch.randn(B, T, n_in, device=dev)
        lstm = torch.nn.LSTM(n_in, H, batch_first=True).to(dev)

        def base(lstm=lstm, x=x):
            y, _ = lstm(x)
            y.sum().backward()

        t_lstm = best_of(base, args.repeats, dev)
        cells = [("unlimited", T)] if args.max_unlimited >= T else []
        for name, depth in [*cells, ("limited", min(args.window, T))]:
            net = StackRNN(n_in, H, "nondeterministic", depth=depth, memory_args=mem).to(dev)

            def run(net=net, x=x):
                y, _ = net(x)
                y.sum().backward()

            t = best_of(run, args.repeats, dev)
            m = memory(net, x, dev, input_grad=False) / 2**20
            rows.append(
                {"stack": name, "T": T, "depth": depth, "ms": t * 1e3, "mib": m, "lstm_ms": t_lstm * 1e3}
            )
            print(
                f"| {name} | {T} | {depth} | {t * 1e3:.1f} | {m:.2f} | {t_lstm * 1e3:.2f} | {t_lstm / t:.4f} |"
            )
    print()
    for name in ("unlimited", "limited"):
        sel = [r for r in rows if r["stack"] == name]
        Ts = [r["T"] for r in sel]
        print(
            f"{name}: time ∝ T^{fit_slope(Ts, [r['ms'] for r in sel]):.2f}, "
            f"saved memory ∝ T^{fit_slope(Ts, [r['mib'] for r in sel]):.2f} (fitted over T = {Ts})"
        )
    return rows


if __name__ == "__main__":
    main()
