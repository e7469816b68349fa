"""Every registered memrnn layer against torch's fused ``nn.LSTM`` of the same state size, timed
in the same process: forward and forward+backward throughput, activation memory, and how time
grows with the sequence length.

    python -m benchmarks                          # both tables, CPU (and CUDA when present)
    python -m benchmarks --quick                  # the headline cell only (size 64, batch 64, T 256)
    python -m benchmarks --layers nnpda lstm --devices cpu --out runs/bench

Table 1 (throughput): for each layer, state size S ∈ {16, 64, 256}, batch ∈ {1, 64}, T ∈ {64,
256, 1024}: forward tokens/s (under ``torch.no_grad``), forward+backward tokens/s (loss = sum of
the outputs; the input requires grad, so frozen layers pass gradient too), and each as a ratio
to ``nn.LSTM(input_size, S)`` measured on the same input right before it.  Times are medians of
repeats after a warm-up (at least 3 repeats and 0.2 s, at most 20).  ``mem`` is the memory
autograd keeps for backward (bytes of the tensors saved by the graph, counted through
``torch.autograd.graph.saved_tensors_hooks``; on CUDA the peak allocated memory instead).

Table 2 (length scaling): forward+backward time at S = 64, batch 64, T = 64 … 4096, with the
slope of log(time) against log(T) fitted by least squares: 1.0 is linear time.

"State size" S means the layer's own width: ``hidden_size`` for the RNN families, ``units`` for
the reservoirs, ``num_states`` for the nnPDA (stack depth fixed at 64), and for Hewitt's
constructions the one-hot construction with m = 4 and k = S/4 (LSTM) or S/8 (SRNN) brackets;
its input size is fixed by k, and the nn.LSTM baseline gets the same input size and state.
Writes ``throughput.csv``, ``scaling.csv`` and ``scaling.png`` under ``--out``.

Allocator: on Linux the suite re-runs itself with glibc's ``mmap`` disabled
(``MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=2**36``).  By default glibc hands every freed block
over 32 MB back to the kernel and faults it in again, page by page, on the next call; on the
project's VM that costs ~1 µs per 4 KB page, grows faster than T, and made every layer superlinear
(nn.LSTM: slope 1.20; memrnn's lstm at T = 4096: 5.4x the page faults of the tuned heap).  PyTorch's CPU
tuning guide gives the same advice (a caching allocator: jemalloc or tcmalloc).  It applies to
the nn.LSTM baseline and the layers alike; ``--system-malloc`` measures glibc's default.
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from memrnn.core import create_layer, list_layers
from memrnn.ops.dispatch import implementation
from memrnn.ops.native import HEAP_MALLOC_ENV, cpu_description

SIZES, BATCHES, LENGTHS = (16, 64, 256), (1, 64), (64, 256, 1024)
# One layer per family (variants that share a kernel, and the slow reference loops, only with
# ``--layers all``).
DEFAULT_LAYERS = (
    "elman", "jordan", "lstm", "gru", "gru_bptt", "hewitt_lstm", "hewitt_srnn", "second_order", "nnpda",
    "relu_counter", "counter_lstm", "reservoir_rand", "reservoir_crj", "reservoir_ldn",
    "superposition_lstm", "stratification_lstm", "queue_lstm", "tape_lstm",
)  # fmt: skip
SCALING_LENGTHS = (64, 128, 256, 512, 1024, 2048, 4096)
INPUT_SIZE = 16  # input features for the layers whose input size is free


def layer_kwargs(name: str, size: int) -> dict[str, Any]:
    """Constructor overrides that give layer ``name`` state size ``size``."""
    if name.startswith("reservoir_ldn"):
        return {"input_size": INPUT_SIZE, "order": max(1, size // INPUT_SIZE), "units": None}
    if name.startswith("reservoir"):
        return {"input_size": INPUT_SIZE, "units": size}
    if name == "nnpda":
        return {"input_size": INPUT_SIZE, "num_states": size, "stack_symbols": 4, "depth": 64}
    if name == "hewitt_lstm":
        return {"k": max(1, size // 4), "m": 4, "encoding": "one_hot"}
    if name == "hewitt_srnn":
        return {"k": max(1, size // 8), "m": 4, "encoding": "one_hot"}
    kw: dict[str, Any] = {"input_size": INPUT_SIZE, "hidden_size": size}
    if name.startswith(("superposition_", "stratification_", "queue_", "tape_")):
        kw.update(width=8, depth=32)  # Delétang et al.'s Stack-RNN: 30-40 cells of width 8
    if name == "jordan":
        kw["feedback_size"] = size
    if name.startswith(("relu_counter", "counter_lstm")):
        kw["hidden_size"] = size - 2 if name != "relu_counter_relu" else size - 1
    return kw


#: rows that time a registered layer on one implementation (``memrnn.ops.dispatch.implementation``):
#: ``gru_bptt`` is ``gru`` on its hand-written BPTT (formerly ``GRULayer(bptt=True)``)
UNDER = {"gru_bptt": ("gru", "bptt")}


def build(name: str, size: int, device: str) -> nn.Module:
    kw = {k: v for k, v in layer_kwargs(name, size).items() if v is not None}
    registered, impl = UNDER.get(name, (name, None))
    layer = create_layer(registered, **kw).to(device)
    if impl is not None:
        forward = layer.forward

        def run(*args: Any, **kwargs: Any) -> Any:
            with implementation(impl):
                return forward(*args, **kwargs)

        layer.forward = run
    return layer


class SavedBytes:
    """Counts the bytes autograd saves for backward while active: ``bytes`` in all, and
    ``storages`` (each saved storage's bytes, by address; a storage saved twice counts once)."""

    def __init__(self) -> None:
        self.bytes = 0
        self.storages: dict[int, int] = {}

    def pack(self, t: Tensor) -> Tensor:
        key = t.untyped_storage().data_ptr()
        if key not in self.storages:
            self.storages[key] = t.untyped_storage().nbytes()
            self.bytes += self.storages[key]
        return t

    def __enter__(self) -> SavedBytes:
        self._ctx = torch.autograd.graph.saved_tensors_hooks(self.pack, lambda t: t)
        self._ctx.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._ctx.__exit__(*exc)


def call_seconds(fn: Callable[[], object], device: str) -> float:
    """Seconds of one call of ``fn``; on CUDA synchronised before and after."""
    if device == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    if device == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - t0


def median_time(fn: Callable[[], object], device: str, max_reps: int = 20) -> float:
    """Median seconds of ``fn`` after one warm-up call: repeats until 0.3 s have passed (at
    least 3; at least 1 when one call takes over 1 s)."""

    def once() -> float:
        return call_seconds(fn, device)

    first = once()  # warm-up
    min_reps = 1 if first > 1.0 else 3
    times: list[float] = []
    while len(times) < min_reps or (sum(times) < 0.3 and len(times) < max_reps):
        times.append(once())
    return statistics.median(times)


def symbolic(layer: nn.Module) -> bool:
    """Layers built for one-hot symbols (second-order RNN, nnPDA): fed one-hot inputs that need
    no gradient, so their indexed-input fast path runs (and the LSTM gets the same input)."""
    return hasattr(layer, "one_hot_input")


def make_input(layer: nn.Module, batch: int, T: int, n_in: int, device: str) -> Tensor:
    if symbolic(layer):
        ids = torch.randint(0, n_in, (batch, T), device=device)
        return torch.nn.functional.one_hot(ids, n_in).float()
    return torch.randn(batch, T, n_in, device=device)


def time_module(
    module: nn.Module, x: Tensor, device: str, *, backward: bool, input_grad: bool = True
) -> float:
    if not backward:
        with torch.no_grad():
            return median_time(lambda: module(x), device)
    x = x.detach().requires_grad_(input_grad)

    def step() -> None:
        out = module(x)[0]
        out.sum().backward()
        module.zero_grad(set_to_none=True)
        x.grad = None

    return median_time(step, device)


def memory(module: nn.Module, x: Tensor, device: str, input_grad: bool = True) -> int:
    x = x.detach().requires_grad_(input_grad)
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        module(x)[0].sum().backward()
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - base
    with SavedBytes() as saved:
        out = module(x)[0]
    out.sum().backward()
    return saved.bytes


class LSTMBaseline(nn.Module):
    """``nn.LSTM`` (batch first) returning ``(outputs, state)`` like a MemoryLayer."""

    def __init__(self, input_size: int, hidden: int, num_layers: int = 1) -> None:
        super().__init__()
        self.input_size = input_size
        self.rnn = nn.LSTM(input_size, hidden, num_layers=num_layers, batch_first=True)

    def forward(self, x: Tensor) -> tuple[Tensor, Any]:
        return self.rnn(x)


def state_size(layer: nn.Module) -> int:
    return int(layer.output_size)


def throughput_rows(names: list[str], device: str, sizes, batches, lengths, log) -> list[dict]:
    rows = []
    for size in sizes:
        for batch in batches:
            for T in lengths:
                baseline: dict[tuple[int, int], dict[str, float]] = {}
                for name in names:
                    torch.manual_seed(0)
                    layer = build(name, size, device)
                    n_in, S = layer.input_size, state_size(layer)
                    layers, grad = getattr(layer, "num_layers", 1), not symbolic(layer)
                    x = make_input(layer, batch, T, n_in, device)
                    key = (n_in, S, layers, grad)
                    if key not in baseline:
                        lstm = LSTMBaseline(n_in, S, layers).to(device)
                        baseline[key] = {
                            "fwd": time_module(lstm, x, device, backward=False),
                            "fwdbwd": time_module(lstm, x, device, backward=True, input_grad=grad),
                        }
                    base = baseline[key]
                    fwd = time_module(layer, x, device, backward=False)
                    fb = time_module(layer, x, device, backward=True, input_grad=grad)
                    row = {
                        "device": device, "layer": name, "size": size, "state": S, "input": n_in,
                        "batch": batch, "T": T, "fwd_tok_s": batch * T / fwd, "fwdbwd_tok_s": batch * T / fb,
                        "lstm_fwd_tok_s": batch * T / base["fwd"], "lstm_fwdbwd_tok_s": batch * T / base["fwdbwd"],
                        "fwd_ratio": base["fwd"] / fwd, "fwdbwd_ratio": base["fwdbwd"] / fb,
                        "mem_mb": memory(layer, x, device, grad) / 2**20,
                        "lstm_layers": layers, "input_kind": "dense" if grad else "one-hot",
                    }  # fmt: skip
                    rows.append(row)
                    log(row)
    return rows


def fit_slope(lengths: list[int], times: list[float]) -> float:
    lx = [math.log(t) for t in lengths]
    ly = [math.log(t) for t in times]
    mx, my = statistics.fmean(lx), statistics.fmean(ly)
    return sum((a - mx) * (b - my) for a, b in zip(lx, ly, strict=True)) / sum((a - mx) ** 2 for a in lx)


def scaling_rows(names: list[str], device: str, lengths, size: int = 64, batch: int = 64) -> list[dict]:
    rows = []
    for name in ["nn.LSTM", *names]:
        times, mems = [], []
        for T in lengths:
            torch.manual_seed(0)
            layer = (
                build(name, size, device) if name != "nn.LSTM" else LSTMBaseline(INPUT_SIZE, size).to(device)
            )
            x = make_input(layer, batch, T, layer.input_size, device)
            grad = not symbolic(layer)
            times.append(time_module(layer, x, device, backward=True, input_grad=grad))
            mems.append(memory(layer, x, device, grad) / 2**20)
        slope = fit_slope(list(lengths), times)
        mem_slope = fit_slope(list(lengths), mems) if min(mems) > 0 else float("nan")
        rows.append({"device": device, "layer": name, "times": times, "mems": mems, "slope": slope,
                     "mem_slope": mem_slope})  # fmt: skip
        print(
            f"  {name:24s} slope {slope:.2f}  " + " ".join(f"{t * 1e3:8.1f}" for t in times) + " ms",
            flush=True,
        )
    return rows


def format_throughput(rows: list[dict]) -> str:
    head = ("| layer | S | batch | T | fwd tok/s | ×LSTM | fwd+bwd tok/s | ×LSTM | mem MB |\n"
            "|---|---|---|---|---|---|---|---|---|")  # fmt: skip
    lines = [head]
    for r in rows:
        lines.append(
            f"| {r['layer']} | {r['state']} | {r['batch']} | {r['T']} | {r['fwd_tok_s']:,.0f} | "
            f"{r['fwd_ratio']:.2f} | {r['fwdbwd_tok_s']:,.0f} | {r['fwdbwd_ratio']:.2f} | {r['mem_mb']:.1f} |"
        )
    return "\n".join(lines)


def format_scaling(rows: list[dict], lengths) -> str:
    head = "| layer | " + " | ".join(f"T={t} ms" for t in lengths) + " | slope | memory slope |\n"
    head += "|---" * (len(lengths) + 3) + "|"
    lines = [head]
    for r in rows:
        cells = " | ".join(f"{t * 1e3:.1f}" for t in r["times"])
        lines.append(f"| {r['layer']} | {cells} | {r['slope']:.2f} | {r['mem_slope']:.2f} |")
    return "\n".join(lines)


def plot_scaling(rows: list[dict], lengths, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 6))
    for r in rows:
        ax.loglog(lengths, r["times"], marker="o", ms=3, label=f"{r['layer']} ({r['slope']:.2f})",
                  lw=2.5 if r["layer"] == "nn.LSTM" else 1)  # fmt: skip
    ax.set_xlabel("sequence length T")
    ax.set_ylabel("forward+backward seconds (S = 64, batch 64)")
    ax.legend(fontsize=6, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def _heap_malloc_set() -> bool:
    return all(os.environ.get(k) == v for k, v in HEAP_MALLOC_ENV.items())


def _reexec_with_heap_malloc() -> None:
    """Run this same command again with glibc's heap kept (:data:`memrnn.ops.native.HEAP_MALLOC_ENV`;
    module docstring), once, on Linux."""
    if sys.platform != "linux" or _heap_malloc_set():
        return
    sys.stdout.flush()
    os.execve(sys.executable, sys.orig_argv, {**os.environ, **HEAP_MALLOC_ENV})


def allocator() -> str:
    """How this process allocates, for the results header."""
    if _heap_malloc_set():
        return "glibc heap without mmap (" + " ".join(f"{k}={v}" for k, v in HEAP_MALLOC_ENV.items()) + ")"
    return "system malloc"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", nargs="+", default=None,
                    help="registered names, or 'all' (default: one per family)")  # fmt: skip
    ap.add_argument("--devices", nargs="+", default=None, help="default: cpu, and cuda when present")
    ap.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    ap.add_argument("--batches", type=int, nargs="+", default=list(BATCHES))
    ap.add_argument("--lengths", type=int, nargs="+", default=list(LENGTHS))
    ap.add_argument("--scaling-lengths", type=int, nargs="+", default=list(SCALING_LENGTHS))
    ap.add_argument("--quick", action="store_true", help="only S 64, batch 64, T 256, and no scaling table")
    ap.add_argument("--no-scaling", action="store_true")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--out", default="runs/benchmarks")
    ap.add_argument("--system-malloc", action="store_true", help="keep glibc's default mmap behaviour")
    args = ap.parse_args(argv)
    if argv is None and not args.system_malloc:
        _reexec_with_heap_malloc()
    if args.threads:
        torch.set_num_threads(args.threads)
    names = list_layers() if args.layers == ["all"] else args.layers or list(DEFAULT_LAYERS)
    unknown = sorted(set(names) - set(list_layers()) - set(UNDER))
    if unknown:
        raise SystemExit(f"unknown layer(s) {unknown}; registered: {', '.join(list_layers())}")
    devices = args.devices or (["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"])
    if args.quick:
        args.sizes, args.batches, args.lengths, args.no_scaling = [64], [64], [256], True
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    print(f"torch {torch.__version__}, {cpu_description()}, "
          f"{torch.get_num_threads()} threads, devices {devices}, {allocator()}")  # fmt: skip
    t_start = time.perf_counter()
    all_rows, all_scaling = [], []
    for device in devices:
        if device == "cuda":
            print(f"cuda: {torch.cuda.get_device_name()}")

        def log(r: dict) -> None:
            print(f"  {r['device']} {r['layer']:24s} S {r['state']:4d} B {r['batch']:3d} T {r['T']:5d}: "
                  f"fwd ×{r['fwd_ratio']:.2f}  fwd+bwd ×{r['fwdbwd_ratio']:.2f}  "
                  f"({r['fwdbwd_tok_s']:,.0f} tok/s)  {r['mem_mb']:.1f} MB", flush=True)  # fmt: skip

        all_rows += throughput_rows(names, device, args.sizes, args.batches, args.lengths, log)
        if not args.no_scaling:
            all_scaling += scaling_rows(names, device, args.scaling_lengths)
    if all_rows:
        with open(out / "throughput.csv", "w", newline="") as f:
            w = csv.DictWriter(f, list(all_rows[0]))
            w.writeheader()
            w.writerows(all_rows)
        headline = [r for r in all_rows if (r["size"], r["batch"], r["T"]) == (64, 64, 256)] or all_rows
        print("\nThroughput (ratio: the layer's tokens/s ÷ nn.LSTM's of the same state size)\n")
        print(format_throughput(headline))
    if all_scaling:
        with open(out / "scaling.csv", "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["device", "layer", *[f"T{t}" for t in args.scaling_lengths], "slope", "mem_slope"])
            for r in all_scaling:
                w.writerow([r["device"], r["layer"], *r["times"], r["slope"], r["mem_slope"]])
        print("\nForward+backward time against T (S 64, batch 64); slope of log time vs log T\n")
        print(format_scaling(all_scaling, args.scaling_lengths))
        plot_scaling(all_scaling, args.scaling_lengths, out / "scaling.png")
    print(f"\ntotal {time.perf_counter() - t_start:.0f} s; results in {out}/")


if __name__ == "__main__":
    main()
