"""Stogin et al.'s (2020) Theorem 3.7, measured: encoded PDAs run for 10^4+ steps next to the ideal PDA.

For each PDA (Dyck-1 of appendix E, Dyck-2, a^n b^n, marked palindromes), each dtype and each
sensitivity H, prints ε_Q = max over strings and steps of ‖Q^t − Q̄^t‖∞, ε_K = the same for
sup_i ‖K^t_i − K̄^t_i‖∞ (every cell, the tail included), and the share of strings whose
accept/reject verdict equals the PDA's; then the smallest H on the grid from which every
larger H classifies every string exactly.

    python benchmarks/nnpda_stability.py                 # length 10^4, 48 strings per PDA
    python benchmarks/nnpda_stability.py --length 100000 --strings 12

Strings: a third random walks through the PDA's live configurations (steered to close
brackets at the end), a third "mountains" (push for the first half, then pop: a^n b^n,
w $ w^R, deep nests, depth ~ length/2), a third mountains with rare random symbols.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from memrnn.analysis.nnpda import deviation_from_ideal, pda_walks
from memrnn.constructions import encode_pda
from memrnn.languages import DyckN, dyck1_pda
from memrnn.languages.counting import AnBn
from memrnn.languages.reversal import Palindrome

PDAS = {
    "dyck1 (app. E)": dyck1_pda,
    "dyck2": lambda: DyckN(2).pda(),
    "anbn": lambda: AnBn().pda(),
    "palindrome": lambda: Palindrome().pda(),
}


def batches(pda, rng, count, length):
    end = "END" if "END" in pda.alphabet else "e"
    third = max(1, count // 3)
    lengths = [int(x) for x in rng.integers(length // 2, length + 1, size=3 * third)]
    kinds = [
        pda_walks(pda, rng, lengths[:third], steer=True, noise=0, end=end),
        pda_walks(pda, rng, lengths[third : 2 * third], mountain=True, noise=0, end=end),
        pda_walks(pda, rng, lengths[2 * third :], mountain=True, steer=True, noise=1 / length, end=end),
    ]
    out = []
    for words in kinds:
        depth = max(max((len(s.stack) for s in pda.run(w)), default=0) for w in words) + 1
        out.append((words, depth, torch.tensor([pda.accepts(w) for w in words])))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--length", type=int, default=10_000)
    ap.add_argument("--strings", type=int, default=48)
    ap.add_argument(
        "--sensitivities", type=float, nargs="+", default=[5, 6, 7, 7.5, 8, 9, 10, 12, 15, 20, 30]
    )
    ap.add_argument("--dtypes", nargs="+", default=["float32", "float64"])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    torch.set_grad_enabled(False)
    print(f"strings: {args.strings} per PDA, lengths {args.length // 2}..{args.length}; device {args.device}")
    print(
        f"{'PDA':16} {'dtype':8} {'H':>5} {'eps_Q':>9} {'eps_K':>9} {'exact':>7} {'accepted':>8} {'sec':>6}"
    )
    smallest: dict[tuple[str, str], float | None] = {}
    for name, make in PDAS.items():
        pda = make()
        data = batches(pda, np.random.default_rng(args.seed), args.strings, args.length)
        accepted = float(torch.cat([d[2] for d in data]).float().mean())
        for dname in args.dtypes:
            dtype = getattr(torch, dname)
            exact_from = None
            for h in sorted(args.sensitivities):
                t0 = time.perf_counter()
                eq = ek = 0.0
                right = total = 0
                for words, depth, want in data:
                    enc = encode_pda(pda, sensitivity=h, depth=depth, dtype=dtype, device=args.device)
                    ids, mask = enc.ids(words)
                    dev = deviation_from_ideal(enc.layer, ids, mask)
                    assert not bool(dev.overflow.any())
                    got = (dev.q.amax(-1) > 0.5) & (enc.readout.accept[dev.q.argmax(-1)] > 0.5)
                    right += int((got.cpu() == want).sum())
                    total += len(words)
                    eq, ek = max(eq, float(dev.q_err.max())), max(ek, float(dev.stack_err.max()))
                ok = right == total
                exact_from = (exact_from if exact_from is not None else h) if ok else None
                sec = time.perf_counter() - t0
                print(
                    f"{name:16} {dname:8} {h:5g} {eq:9.2e} {ek:9.2e} {right / total:7.3f} {accepted:8.2f} {sec:6.1f}"
                )
            smallest[(name, dname)] = exact_from
    print("\nsmallest H on the grid from which every larger H classifies every string exactly:")
    for (name, dname), h in smallest.items():
        print(f"  {name:16} {dname:8} {h if h is not None else 'none'}")


if __name__ == "__main__":
    main()
