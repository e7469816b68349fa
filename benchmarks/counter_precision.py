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
* ``relu``: ``encode_counter_machine("anbn", "relu")`` (8 units, MLP readout).
* ``lstm``: ``encode_counter_machine("anbn", "lstm")`` (g = tanh, 8 units, MLP readout).
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

from memrnn.analysis.counting import Accepts, first_counting_failure
from memrnn.constructions.counters import encode_counter_machine
from memrnn.languages import AnBn

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


def acceptor(rnn: nn.RNNBase, readout: Callable[[Tensor], Tensor]) -> Accepts:
    """:data:`memrnn.analysis.counting.Accepts` for ``a^i b^j`` with shared prefixes: one pass
    over ``a^N`` records the states after every ``i`` asked for, a second reads ``b``'s from all
    of them at once and reads the verdict after every ``j`` asked for."""

    @torch.no_grad()
    def accepts(counts) -> list[bool]:
        _, state = rnn(_one_hot(BOS, 1, 1, rnn.weight_ih_l0.dtype))
        after_a = _run(rnn, A, state, max(i for i, _ in counts), {i for i, _ in counts})
        rows = [after_a[i] for i, _ in counts]
        marks = {j for _, j in counts if j > 0}
        verdicts = _run(rnn, B, _cat(rows), max(marks), marks, readout) if marks else {}
        out = []
        for r, (_, j) in enumerate(counts):
            if j == 0:  # no b read: the verdict on the state after the a's
                h = rows[r][0][-1] if isinstance(rows[r], tuple) else rows[r][-1]
                out.append(bool(readout(h)[0]))
            else:
                out.append(bool(verdicts[j][r]))
        return out

    return accepts


def first_failure(rnn, readout, n_max: int) -> int | None:
    return first_counting_failure(acceptor(rnn, readout), AnBn(), n_max, batch_size=1 << 30)


def compiled(kind: str, dtype):
    cc = encode_counter_machine("anbn", kind, dtype=dtype)
    plain = cc.to_torch()
    return plain.rnn, lambda h: plain.readout(h) > 0


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
