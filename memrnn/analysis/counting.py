"""How far a trained acceptor counts: Weiss et al.'s question (seed 004), asked exhaustively.

For every ``n`` up to ``n_max``: is ``x_1^n ... x_k^n`` accepted, and is every neighbour with one
block count changed by ±1 rejected?  The first ``n`` where either fails is where the learned
counter breaks.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from memrnn.data.datamodule import bos_inputs
from memrnn.languages.counting import CountingLanguage
from memrnn.lit.sequence import SequenceModule, acceptor_end_logits


@dataclass
class CountingSweep:
    """``n``; whether ``x^n`` was accepted; how many of its ±1 neighbours were rejected (of
    ``2k``); the first failing ``n`` (None: none up to ``n_max``)."""

    n: list[int]
    positive_ok: list[bool]
    negatives_ok: list[int]
    negatives_total: int
    first_failure: int | None


@torch.no_grad()
def counting_sweep(
    model: SequenceModule, language: CountingLanguage, n_max: int, *, batch_size: int = 64
) -> CountingSweep:
    """Classify ``x^n`` and its ``2k`` neighbours (each block count ±1) for ``n = min_n..n_max``
    with the model's acceptor head, read at each string's own end."""
    if "acceptor" not in model.heads:
        raise ValueError("counting_sweep needs a model trained with an acceptor objective")
    if n_max < language.min_n:
        raise ValueError(f"n_max={n_max} is below the language's min_n={language.min_n}")
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    cases: list[tuple[int, list[int], bool]] = []
    for n in range(language.min_n, n_max + 1):
        cases.append((n, [n] * language.blocks, True))
        for j in range(language.blocks):
            for d in (-1, 1):
                counts = [n] * language.blocks
                counts[j] += d
                if counts[j] >= 0:
                    cases.append((n, counts, False))
    verdicts = []
    for start in range(0, len(cases), batch_size):
        chunk = cases[start : start + batch_size]
        inp, mask, lengths = bos_inputs(
            [language.string(counts)[:-1] for _, counts, _ in chunk], language.bos_id
        )
        out = model.heads_out(inp.to(device), mask.to(device))
        verdicts += (acceptor_end_logits(out["acceptor"], lengths) > 0).tolist()
    model.train(was_training)
    ns = list(range(language.min_n, n_max + 1))
    pos_ok = {n: False for n in ns}
    neg_ok = {n: 0 for n in ns}
    neg_total = 2 * language.blocks
    for (n, _, positive), accepted in zip(cases, verdicts, strict=True):
        if positive:
            pos_ok[n] = accepted
        else:
            neg_ok[n] += not accepted
    counts_per_n = {n: sum(1 for m, _, p in cases if m == n and not p) for n in ns}
    first = next((n for n in ns if not pos_ok[n] or neg_ok[n] < counts_per_n[n]), None)
    return CountingSweep(ns, [pos_ok[n] for n in ns], [neg_ok[n] for n in ns], neg_total, first)
