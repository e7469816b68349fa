"""Time and peak memory of every stack RNN memory against the sequence length, forward only (under
``torch.no_grad``: evaluation) and forward+backward (training), at depth 32, T/2 and T, beside
``nn.LSTM`` and, when rau is given, beside DuSell's rau (``--rau``: the ``src`` folder of a checkout
of bdusell/rau's ``differentiable-stacks`` branch).

    python -m benchmarks.memory_scaling [--lengths 64 256 1024] [--memories superposition ...]
    python -m benchmarks.memory_scaling --rau /tmp/rau-src/src --memories superposition stratification

The cell is issue 23's (batch 64, input and controller 64, memory width 8, an LSTM controller), run
through ``StackRNN.outputs`` (what a language model's training step and evaluation call: no final
state, so the trimmed windows apply).  Times: best of ``--repeats`` calls, each row's call
alternating with ``nn.LSTM(64, 64)``'s, so a shared machine's drift moves both.  Peak memory: a
fresh child process per row builds the layer and its input, resets its peak resident set size to
the current one (Linux's ``/proc/self/clear_refs``), runs one forward under ``no_grad`` and reads the
peak (``VmHWM``), then the same for one forward+backward; the table gives the two increases (MiB).  The child runs with
``MALLOC_MMAP_THRESHOLD_=65536``: blocks from 64 KiB come from ``mmap`` and go back to the system
when freed, so the peak RSS is the peak of live tensors up to the allocator's small-block slack.  ``state+out`` is what a forward cannot avoid:
the memory's state for one step plus the outputs ``[B, T, N]``.  rau's columns are its
``SuperpositionStackRNN``/``StratificationStackRNN`` with an LSTM controller (its language model's
recurrence, ``get_stack_rnn_recurrence``), which trim the superposition stack to
``min(t, T − t)`` cells when no final state is asked for.

First-touch page faults are a large part of a long sequence's forward+backward here (a fresh
``mmap`` per large tensor, 4 KiB pages): torch's own ``THP_MEM_ALLOC_ENABLE=1`` (2 MiB-aligned
allocations advised to transparent huge pages, where the kernel allows them) removes most of them
for every row alike.  The header says whether it was set; run the script once with and once
without it to see both.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import torch

from benchmarks.stack_rnn_speed import best_of_pair
from memrnn.layers import StackRNN
from memrnn.ops.native import cpu_description

MEMORIES = ("superposition", "stratification", "queue", "deque", "tape")
B, S, WIDTH = 64, 64, 8


def _depths(T: int) -> list[int]:
    return sorted({min(32, T), T // 2, T})


def _build(kind: str, memory: str, T: int, depth: int, seed: int = 0):
    """``(module, call)`` for one row: ``call(x)`` -> outputs ``[B, T, ·]``."""
    torch.manual_seed(seed)
    if kind == "lstm":
        lstm = torch.nn.LSTM(S, S, batch_first=True)
        return lstm, lambda x: lstm(x)[0]
    if kind == "rau":
        # its language model's recurrence (rau.models.stack_nn.rnn.language_model's
        # get_stack_rnn_recurrence), built here without the module that needs torch_semiring_einsum
        from rau.models.rnn.lstm import LSTM
        from rau.models.stack_nn.rnn.stratification import StratificationStackRNN
        from rau.models.stack_nn.rnn.superposition import SuperpositionStackRNN

        def controller(n: int):
            return LSTM(input_size=n, hidden_units=S, layers=1, dropout=0.0, learned_initial_state=False)

        common = {"input_size": None, "stack_embedding_size": WIDTH, "controller": controller,
                  "controller_output_size": S, "include_reading_in_output": False}  # fmt: skip
        if memory == "superposition":
            model = SuperpositionStackRNN(push_hidden_state=False, max_stack_depth=depth, **common)
        else:
            model = StratificationStackRNN(**common)
        return model, lambda x: model(x, include_first=False)
    layer = StackRNN(S, S, memory, "lstm", width=WIDTH, depth=depth)
    return layer, lambda x: layer.outputs(x)


def _peaks(kind: str, memory: str, T: int, depth: int) -> tuple[float, float]:
    """The child's side: peak RSS increases (MiB) of one no-grad forward, then of one forward+backward."""
    torch.set_num_threads(1)
    _, call = _build(kind, memory, T, min(depth, 2))
    with torch.no_grad():  # load lazily built extensions on a tiny call first
        call(torch.randn(B, 2, S))
    _, call = _build(kind, memory, T, depth)
    x = torch.randn(B, T, S)
    r0 = _reset_peak()
    with torch.no_grad():
        y = call(x)
    del y
    r1 = _status("VmHWM")
    r0b = _reset_peak()
    call(x).sum().backward()
    r2 = _status("VmHWM")
    return (r1 - r0) / 1024, (r2 - r0b) / 1024


def _status(key: str) -> int:
    """A field of ``/proc/self/status`` in KiB (``VmRSS``: resident now, ``VmHWM``: its peak)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {key} in /proc/self/status (peak memory is measured on Linux only)")


def _reset_peak() -> int:
    """Reset the peak resident set size to the current one (Linux: ``clear_refs`` 5); the current (KiB)."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    return _status("VmRSS")


def peaks(kind: str, memory: str, T: int, depth: int, rau: str | None) -> tuple[float, float]:
    """:func:`_peaks` in a fresh child process (so each row's peak is its own)."""
    env_path = [rau] if rau else []
    code = (
        "import sys, json; sys.path[:0] = json.loads(sys.argv[1]); "
        "from benchmarks.memory_scaling import _peaks; "
        "print(json.dumps(_peaks(*json.loads(sys.argv[2]))))"
    )
    args = json.dumps([kind, memory, T, depth])
    # large blocks from mmap, returned to the system when freed: the peak RSS is then the peak of
    # live tensors, not of what glibc's heap (or memrnn.ops.scratch) kept from earlier calls
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536", "MEMRNN_SCRATCH_MIB": "0"}
    out = subprocess.run(
        [sys.executable, "-c", code, json.dumps(env_path), args],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    return tuple(json.loads(out.stdout.strip().splitlines()[-1]))


def times(call, base, x: torch.Tensor, repeats: int) -> dict[str, float]:
    """Best-of-``repeats`` seconds of ``call``'s forward (no_grad) and forward+backward, and of
    ``base``'s, the two alternating (:func:`benchmarks.stack_rnn_speed.best_of_pair`)."""

    def fwd(f):
        def run():
            with torch.no_grad():
                f(x)

        return run

    def train(f):
        return lambda: f(x).sum().backward()

    out = {}
    for mode, wrap in (("fwd", fwd), ("train", train)):
        out[f"lstm_{mode}"], out[mode] = best_of_pair(wrap(base), wrap(call), repeats)
    return out


def state_bytes(memory: str, T: int, depth: int) -> int:
    """One step's memory state plus the outputs ``[B, T, S]``, float32 bytes."""
    cells = {"deque": 2 * depth, "tape": depth}.get(memory, depth)
    extra = depth if memory == "stratification" else 0  # the strengths
    return 4 * (B * (cells * WIDTH + extra + 2 * S) + B * T * S)


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lengths", type=int, nargs="+", default=[64, 256, 1024])
    ap.add_argument("--memories", nargs="+", default=list(MEMORIES), choices=MEMORIES)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument(
        "--rau", default=None, help="rau's src folder: adds its superposition and stratification rows"
    )
    ap.add_argument("--no-memory", action="store_true", help="times only (no child processes)")
    args = ap.parse_args(argv)
    if args.rau:
        sys.path.insert(0, args.rau)
    torch.set_num_threads(1)
    print(f"torch {torch.__version__}, cpu ({cpu_description()}), 1 thread; batch {B}, input = controller = {S}, "
          f"width {WIDTH}, LSTM controller; ms: best of {args.repeats}; MiB: peak RSS increase; "
          f"THP_MEM_ALLOC_ENABLE={os.environ.get('THP_MEM_ALLOC_ENABLE', 'unset')}")  # fmt: skip
    print("| impl | memory | T | depth | fwd ms | fwd+bwd ms | ×LSTM fwd | ×LSTM fwd+bwd | fwd MiB | "
          "fwd+bwd MiB | state+out MiB |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    rows = []
    kinds = [("memrnn", m) for m in args.memories]
    if args.rau:
        kinds += [("rau", m) for m in ("superposition", "stratification") if m in args.memories]
    for T in args.lengths:
        torch.manual_seed(0)
        x = torch.randn(B, T, S)
        _, base = _build("lstm", "", T, 0)
        t = times(base, base, x, args.repeats)
        t["lstm_fwd"], t["lstm_train"] = t["fwd"], t["train"]  # its own row: ratio 1 by definition
        mem = (float("nan"),) * 2 if args.no_memory else peaks("lstm", "", T, 0, args.rau)
        row = {"impl": "nn.LSTM", "memory": "-", "T": T, "depth": "-", "fwd": t["fwd"], "train": t["train"],
               "fwd_mib": mem[0], "train_mib": mem[1], "state_mib": 4 * (B * T * S + 2 * B * S) / 2**20}  # fmt: skip
        rows.append(row)
        _print(row, t)
        for kind, memory in kinds:
            for depth in _depths(T):
                _, call = _build(kind, memory, T, depth)
                t = times(call, base, x, args.repeats)
                mem = (float("nan"),) * 2 if args.no_memory else peaks(kind, memory, T, depth, args.rau)
                row = {"impl": kind, "memory": memory, "T": T, "depth": depth, "fwd": t["fwd"],
                       "train": t["train"], "fwd_mib": mem[0], "train_mib": mem[1],
                       "state_mib": state_bytes(memory, T, depth) / 2**20,
                       "lstm_fwd": t["lstm_fwd"], "lstm_train": t["lstm_train"]}  # fmt: skip
                rows.append(row)
                _print(row, t)
    return rows


def _print(row: dict, t: dict) -> None:
    print(
        f"| {row['impl']} | {row['memory']} | {row['T']} | {row['depth']} | {row['fwd'] * 1e3:.1f} | "
        f"{row['train'] * 1e3:.1f} | {t['lstm_fwd'] / t['fwd']:.2f} | {t['lstm_train'] / t['train']:.2f} | "
        f"{row['fwd_mib']:.1f} | {row['train_mib']:.1f} | {row['state_mib']:.1f} |",
        flush=True,
    )


if __name__ == "__main__":
    main()
