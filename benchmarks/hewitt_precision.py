"""Hewitt's constructions in low precision: Definition 5 and the closing metric on sampled strings
(up to 10x Table 2's lengths) with the network run in float64, float32, bfloat16 and float16.

    python benchmarks/hewitt_precision.py [--tokens 5000]

Prints, per construction, (k, m) and dtype: positions checked, Definition-5 mismatches, the
smallest allowed probability, the largest disallowed one and Hewitt's closing accuracy.  The
dense layers run in the dtype (weights cast); logits are normalised in float64.
"""

from __future__ import annotations

import argparse

import numpy as np
import torch

from memrnn.analysis.generation import GenerationReport, dyck_next_structure, dyck_update
from memrnn.constructions import encode_dyck
from memrnn.languages import DyckKM
from memrnn.languages.base import bracket_annotations
from memrnn.lit.metrics import BracketClosingAccuracy

DTYPES = {
    "float64": torch.float64,
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
}


def check(arch: str, encoding: str, k: int, m: int, dtype: torch.dtype, tokens: int) -> tuple:
    g = encode_dyck(k, m, arch, encoding, dtype=torch.float64).to(dtype)
    lang = DyckKM(k, m)
    hi = 10 * lang.default_lengths("train")[1]
    rng = np.random.default_rng(0)
    report = GenerationReport(g.layer.spec.constants.epsilon)
    closing = BracketClosingAccuracy(k)
    seen = 0
    while seen < tokens:
        s = lang.sample(rng, (hi // 2, hi))
        with torch.no_grad():
            logits, _ = g(torch.tensor([[lang.bos_id, *s[:-1]]]))
        logits = logits[0].double()
        can_open, other = dyck_next_structure(lang, s)
        dyck_update(report, logits, can_open, other, k)
        ann = bracket_annotations(lang, s)
        closing.update(
            logits[None], torch.tensor([s]), torch.from_numpy(ann["distance"])[None],
            torch.from_numpy(ann["depth"])[None], torch.from_numpy(ann["full"])[None],
        )  # fmt: skip
        seen += len(s)
    return report, float(closing.compute()["closing"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokens", type=int, default=5000)
    args = ap.parse_args()
    print(f"{'arch':>5} {'enc':>7} {'k':>5} {'m':>2} {'dtype':>9} {'positions':>9} {'mismatch':>8} "
          f"{'min allowed':>11} {'max disallowed':>14} {'closing':>8}")  # fmt: skip
    for arch, enc in (("lstm", "log"), ("lstm", "one_hot"), ("srnn", "log"), ("srnn", "one_hot")):
        for k, m in ((2, 3), (8, 5), (128, 8)):
            for name, dtype in DTYPES.items():
                rep, acc = check(arch, enc, k, m, dtype, args.tokens)
                print(
                    f"{arch:>5} {enc:>7} {k:>5} {m:>2} {name:>9} {rep.prefixes:>9} {rep.mismatches:>8} "
                    f"{rep.min_allowed:>11.3g} {rep.max_disallowed:>14.3g} {acc:>8.4f}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
