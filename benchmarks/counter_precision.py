"""Where counting breaks in finite precision (Weiss et al. 2018, sections 4-5): the compiled ReLU and LSTM
counters against the best-effort tanh RNN and GRU counters, on a^n b^n, n up to 10^6, in float32,
float64 and bfloat16.

    python benchmarks/counter_precision.py [--n-max 1000000] [--dtypes float32 float64 bfloat16]

For each model and dtype it finds the first n at which a^n b^n is rejected or one of its
neighbours a^n b^(n±1), a^(n±1) b^n is accepted: n on a geometric grid (8 points per decade,
plus 1..16), then every n between the last passing and the first failing grid point.  Every
model is a plain torch module (``nn.RNN``, ``nn.LSTM``, ``nn.GRU``) with set weights, run by
torch's fused kernels in chunks; one pass over a^N records the states after n−1, n, n+1 a's,
a second pass reads b's from all of them at once.

Models:
* ``relu``: ``compile_counter_machine("anbn", "relu")`` (8 units, MLP readout).
* ``lstm``: ``compile_counter_machine("anbn", "lstm")`` (g = tanh, 8 units, MLP readout).
* ``tanh w=…``: one tanh unit ``u ← tanh(u + w)`` on a, ``tanh(u − w)`` on b (Weiss et al. 2018 section 4:
  "counting within a tanh"), accept iff ``|u| < w/2``, for w = 0.1, 0.01, 0.001, and the best
  ``w`` of 10^-1 … 10^-12 (``tanh best``).  Near 0 a float ``tanh`` *is* the identity
  (``tanh x == x`` once ``x²/3`` is below half an ulp), so a tiny ``w`` counts exactly until
  ``n·w`` leaves that region, at the price of a readout that resolves ``w/2``.
* ``gru``: footnote 4's GRU counter: two units set to 1 by BOS (``z = 0``, ``h̃ = 1``), halved by
  their symbol (``z = 1/2``, ``h̃ = 0``), held otherwise (``z = 1``); the most favourable readout,
  exact equality of the two units.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch import Tensor, nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from memrnn.constructions.counters import compile_counter_machine

A, B, BOS = 0, 1, 2
CHUNK = 8192
DTYPES = {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16}


def _one_hot(sym: int, batch: int, steps: int, dtype) -> Tensor:
    x = torch.zeros(batch, steps, 3, dtype=dtype)
    x[..., sym] = 1
    return x


def _run(rnn: nn.RNNBase, sym: int, state, steps: int, record: set[int], readout=None):
    """Read ``steps`` copies of ``sym``; return the state after each step count in ``record``
    (``{count: state}``) or, with ``readout``, ``{count: verdicts [batch]}``."""
    out, done = {}, 0
    marks = sorted(m for m in record if 0 < m <= steps)
    if 0 in record:
        out[0] = state if readout is None else None
    while done < steps:
        nxt = min(steps, done + CHUNK)
        if readout is None:  # stop at every mark: we need the full state there
            nxt = min([m for m in marks if m > done] + [nxt])
        batch = (state[0] if isinstance(state, tuple) else state).shape[1]
        y, state = rnn(_one_hot(sym, batch, nxt - done, rnn.weight_ih_l0.dtype), state)
        if readout is None:
            if nxt in record:
                out[nxt] = state
        else:
            for m in marks:
                if done < m <= nxt:
                    out[m] = readout(y[:, m - done - 1])
        done = nxt
    return out


def _cat(states: list):
    if isinstance(states[0], tuple):
        return tuple(torch.cat(parts, 1) for parts in zip(*states, strict=True))
    return torch.cat(states, 1)


@torch.no_grad()
def failures(rnn: nn.RNNBase, readout: Callable[[Tensor], Tensor], ns: list[int]) -> dict[int, bool]:
    """``{n: True if a^n b^n or a neighbour is misclassified}``."""
    n_top = max(ns) + 1
    _, state = rnn(_one_hot(BOS, 1, 1, rnn.weight_ih_l0.dtype))
    record = {m for n in ns for m in (n - 1, n, n + 1) if m >= 0}
    after_a = _run(rnn, A, state, n_top, record)
    rows, plan = [], []  # (n, a-offset) per start row
    for n in ns:
        for da in (-1, 0, 1):
            if n + da >= 0:
                rows.append(after_a[n + da])
                plan.append((n, da))
    verdicts = _run(
        rnn, B, _cat(rows), n_top + 1, {m for n in ns for m in (n - 1, n, n + 1) if m >= 0}, readout
    )
    bad = dict.fromkeys(ns, False)
    for r, (n, da) in enumerate(plan):
        for db in (-1, 0, 1) if da == 0 else (0,):
            m = n + db
            if m < 0:
                continue
            accepted = (
                bool(readout(rows[r][0][-1] if isinstance(rows[r], tuple) else rows[r][-1])[0])
                if m == 0
                else bool(verdicts[m][r])
            )
            if accepted != (da == 0 and db == 0):
                bad[n] = True
    return bad


def first_failure(rnn, readout, n_max: int) -> int | None:
    grid = sorted({*range(1, 17), *(round(10 ** (k / 8)) for k in range(8, 8 * int(math.log10(n_max)) + 1))})
    grid = [n for n in grid if n <= n_max]
    last_ok, fail = 0, None
    for lo in range(0, len(grid), 8):  # a decade at a time; stop at the first failure
        block = grid[lo : lo + 8]
        bad = failures(rnn, readout, block)
        hit = [n for n in block if bad[n]]
        if hit:
            fail = hit[0]
            last_ok = max([last_ok, *(n for n in block if n < fail)])
            break
        last_ok = block[-1]
    if fail is None:
        return None
    while fail - last_ok > 1:
        cand = list(range(last_ok + 1, fail))
        if len(cand) > 256:
            cand = sorted(
                {round(last_ok + (fail - last_ok) * i / 257) for i in range(1, 257)} - {last_ok, fail}
            )
        bad = failures(rnn, readout, cand)
        hit = [n for n in cand if bad[n]]
        if hit:
            fail = hit[0]
        last_ok = max([last_ok, *(n for n in cand if n < fail)])
    return fail


def compiled(kind: str, dtype):
    cc = compile_counter_machine("anbn", kind, dtype=dtype)
    rnn, head = cc.to_torch()
    return rnn, lambda h: head(h).squeeze(-1) > 0


def tanh_counter(w: float, dtype):
    rnn = nn.RNN(3, 1, nonlinearity="tanh", batch_first=True, dtype=dtype)
    with torch.no_grad():
        rnn.weight_hh_l0.fill_(1.0)
        rnn.weight_ih_l0.copy_(torch.tensor([[w, -w, 0.0]]))
        rnn.bias_ih_l0.zero_()
        rnn.bias_hh_l0.zero_()
    return rnn, lambda h: h[..., 0].abs() < w / 2


def gru_counter(dtype, big: float = 40.0):
    rnn = nn.GRU(3, 2, batch_first=True, dtype=dtype)
    with torch.no_grad():
        for p in rnn.parameters():
            p.zero_()
        w_ih = rnn.weight_ih_l0.view(3, 2, 3)  # gates r, z, n
        b_ih = rnn.bias_ih_l0.view(3, 2)
        # z: 1/2 on the unit's own symbol, 0 on BOS, 1 (hold) otherwise
        w_ih[1, 0] = torch.tensor([0.0, big, -big])
        w_ih[1, 1] = torch.tensor([big, 0.0, -big])
        # h̃ = tanh(big · [BOS]): 1 on BOS, 0 otherwise
        w_ih[2, :, BOS] = big
        del b_ih
    return rnn, lambda h: h[..., 0] == h[..., 1]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n-max", type=int, default=1_000_000)
    p.add_argument("--dtypes", nargs="+", default=list(DTYPES), choices=list(DTYPES))
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    rows = []
    names = ("relu", "lstm", "tanh w=0.1", "tanh w=0.01", "tanh w=0.001", "tanh best", "gru")
    for name in names:
        for dname in args.dtypes:
            dt = DTYPES[dname]
            t0 = time.perf_counter()
            if name in ("relu", "lstm"):
                fail, note = first_failure(*compiled(name, dt), args.n_max), ""
            elif name == "gru":
                fail, note = first_failure(*gru_counter(dt), args.n_max), "exact-equality readout"
            elif name != "tanh best":
                fail, note = first_failure(*tanh_counter(float(name.split("=")[1]), dt), args.n_max), ""
            else:
                best = None
                for e in range(1, 13):
                    f = first_failure(*tanh_counter(10.0**-e, dt), args.n_max)
                    if best is None or (f or math.inf) > (best[0] or math.inf):
                        best = (f, e)
                fail, note = best[0], f"best w = 1e-{best[1]}"
            rows.append((name, dname, fail, note, time.perf_counter() - t0))
            shown = f"> {args.n_max:,}" if fail is None else f"{fail:,}"
            print(
                f"{name:12s} {dname:9s} first failing n: {shown:>12s}  {note}  ({rows[-1][4]:.1f} s)",
                flush=True,
            )
    print("\n| model | " + " | ".join(args.dtypes) + " |")
    print("| --- |" + " --- |" * len(args.dtypes))
    for name in names:
        cells = []
        for dname in args.dtypes:
            r = next(r for r in rows if r[0] == name and r[1] == dname)
            cells.append(
                (f"> {args.n_max:,}" if r[2] is None else f"{r[2]:,}") + (f" ({r[3]})" if r[3] else "")
            )
        print(f"| {name} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
