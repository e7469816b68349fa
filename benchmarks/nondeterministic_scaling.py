"""Time and memory of the nondeterministic stack RNN (DuSell & Chiang's RNS-RNN) against the
sequence length, with the fitted exponent, and ``nn.LSTM`` of the controller's size in the same
run.  DuSell & Chiang's cell: an LSTM controller of 20 units, 2 PDA states, 3 stack symbols,
batch 10.

    python -m benchmarks.nondeterministic_scaling [--lengths 16 32 64 128 256] [--window 16] [--impls native cpu]
    python -m benchmarks.nondeterministic_scaling --vector-size 5   # the vector RNS-RNN (DuSell & Chiang 2023)

Two rows per length: the unlimited stack (``depth = T``: every start time kept; up to
``--max-unlimited``, as its cost grows as T³) and the memory-limited one (``depth = window``:
linear in T).  Time is
forward+backward (best of ``--repeats``); memory is the bytes kept for the backward (what autograd
saves, plus the C++ run's store and per-step arrays).
``--impls`` times the stack's run in C++ (``native``, the default on CPU), its run in Triton
kernels (``triton``, the default on CUDA: ``--device cuda``) and the torch step (``cpu``) in the
same run.  ``--vector-size m`` times the vector RNS-RNN's stack
instead (elements carrying ``m`` units: the C++ run with ``1 + m`` channels, or the torch step).
``--max-torch-unlimited`` (64) skips the torch step's unlimited rows beyond it: their saved memory
grows as T³."""

from __future__ import annotations

import argparse
import contextlib
from unittest import mock

import torch

from benchmarks.run import fit_slope, memory
from benchmarks.stack_rnn_speed import best_of
from memrnn.layers import StackRNN
from memrnn.ops.dispatch import implementation
from memrnn.ops.native import cpu_description
from memrnn.ops.nondeterministic import NondeterministicRun


@contextlib.contextmanager
def _recording(runs: list[NondeterministicRun]):
    """Collect the runs made inside (C++ or Triton: their store and per-step arrays are kept by
    the run, not saved through autograd, so the saved-tensor count does not see them)."""
    init = NondeterministicRun.__init__

    def record(self, *args, **kwargs):
        init(self, *args, **kwargs)
        runs.append(self)

    with mock.patch.object(NondeterministicRun, "__init__", record):
        yield


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lengths", type=int, nargs="+", default=[16, 32, 64, 128, 256])
    ap.add_argument("--window", type=int, default=16)
    ap.add_argument("--max-unlimited", type=int, default=64, help="longest T for the unlimited stack")
    ap.add_argument("--max-torch-unlimited", type=int, default=64,
                    help="longest T for the unlimited stack with the torch step (its saved memory grows as T³: "
                         "5 GB at T 64 with vectors of 5, past this VM's 23 GB at T 128)")  # fmt: skip
    ap.add_argument("--batch", type=int, default=10)
    ap.add_argument("--hidden", type=int, default=20)
    ap.add_argument("--states", type=int, default=2)
    ap.add_argument("--symbols", type=int, default=3)
    ap.add_argument(
        "--vector-size", type=int, default=0, help="> 0: the vector RNS-RNN's stack, m units per element"
    )
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--device", default="cpu", help="cpu or cuda (memory is then the peak allocated)")
    ap.add_argument("--impls", nargs="+", default=[None], choices=["native", "triton", "cpu"],
                    help="the stack step's implementations to time (default: the dispatch's choice)")  # fmt: skip
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    B, H, n_in, dev = args.batch, args.hidden, 3, args.device
    mem = {"states": args.states, "symbols": args.symbols}
    kind = "nondeterministic"
    if args.vector_size:
        kind, mem["vector_size"] = "vector_nondeterministic", args.vector_size
    print(
        f"torch {torch.__version__}, {dev} ({cpu_description() if dev == 'cpu' else torch.cuda.get_device_name()}), "
        f"{torch.get_num_threads()} threads, batch {B}, LSTM controller {H}, "
        f"{args.states} states x {args.symbols} symbols"
        + (f", vectors of {args.vector_size} units (vector RNS-RNN)" if args.vector_size else "")
    )
    print("| stack | T | depth | impl | fwd+bwd ms | saved MiB | nn.LSTM ms | ×LSTM |")
    print("|---|---|---|---|---|---|---|---|")
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
            net = StackRNN(n_in, H, kind, depth=depth, memory_args=mem).to(dev)
            for impl in args.impls:
                if impl == "cpu" and name == "unlimited" and args.max_torch_unlimited < T:
                    print(f"| {name} | {T} | {depth} | cpu | skipped (T > --max-torch-unlimited) | | | |")
                    continue

                def run(net=net, x=x, impl=impl):
                    with implementation(impl) if impl else contextlib.nullcontext():
                        y, _ = net(x)
                        y.sum().backward()

                t = best_of(run, args.repeats, dev)
                runs: list[NondeterministicRun] = []
                with implementation(impl) if impl else contextlib.nullcontext(), _recording(runs):
                    m = memory(net, x, dev, input_grad=False)
                m = (m + sum(r.nbytes() for r in runs)) / 2**20
                label = impl or "default"
                rows.append({"stack": name, "T": T, "depth": depth, "impl": label, "ms": t * 1e3, "mib": m,
                             "lstm_ms": t_lstm * 1e3})  # fmt: skip
                print(
                    f"| {name} | {T} | {depth} | {label} | {t * 1e3:.1f} | {m:.2f} | {t_lstm * 1e3:.2f} | "
                    f"{t_lstm / t:.4f} |"
                )
    print()
    for name in ("unlimited", "limited"):
        for label in dict.fromkeys(r["impl"] for r in rows):
            sel = [r for r in rows if r["stack"] == name and r["impl"] == label]
            Ts = [r["T"] for r in sel]
            if len(Ts) < 2:
                continue
            print(
                f"{name}{'' if label == 'default' else f' ({label})'}: time ∝ T^{fit_slope(Ts, [r['ms'] for r in sel]):.2f}, "
                f"saved memory ∝ T^{fit_slope(Ts, [r['mib'] for r in sel]):.2f} (fitted over T = {Ts})"
            )
    return rows


if __name__ == "__main__":
    main()
