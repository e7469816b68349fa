"""How far a trained acceptor counts: the question of Weiss et al. 2018, asked exhaustively.

For every ``n`` up to ``n_max``: is ``x_1^n ... x_k^n`` accepted, and is every neighbour with one
block count changed by ±1 rejected?  The first ``n`` where either fails is where the learned
counter breaks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
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


# -- counting dimensions (Weiss et al. 2018 Figure 1) ---------------------------------------------------------
def probe_string(language, n: int | None = None, *, seed: int = 0) -> list[int]:
    """The probe of Weiss et al. 2018 Figure 1: ``x_1^n .. x_k^n END`` for a counting language (default
    ``n`` = 1000 for two blocks, 100 for three); otherwise (a PDA language such as Dyck-n) one
    string sampled with length near ``n`` (default 200)."""
    if isinstance(language, CountingLanguage):
        n = n if n is not None else (1000 if language.blocks == 2 else 100)
        return language.string([n] * language.blocks)
    n = n if n is not None else 200
    return language.sample(np.random.default_rng(seed), (max(2, n // 2), n))


def reference_counters(language, string: Sequence[int]) -> dict[str, np.ndarray]:
    """Counts after every prefix ``t = 0..len(w)`` of ``string`` (its ``END`` dropped):
    ``"a-b"``, ``"b-c"``, ``"a-c"`` (count differences of blocks) for a counting language, the
    stack ``"depth"`` for a language with a PDA."""
    body = [t for t in string if t != language.end_id]
    if isinstance(language, CountingLanguage):
        one = np.zeros((len(body) + 1, language.blocks))
        for t, tok in enumerate(body):
            one[t + 1, tok] = 1
        counts = one.cumsum(0)
        pairs = [(j, j + 1) for j in range(language.blocks - 1)] + ([(0, 2)] if language.blocks == 3 else [])
        return {f"{language.letters[i]}-{language.letters[j]}": counts[:, i] - counts[:, j] for i, j in pairs}
    from memrnn.analysis.reference import available_features, reference_features

    if "depth" in available_features(language):
        return {
            "depth": np.asarray(reference_features(language, [*body, language.end_id])["depth"].values, float)
        }
    raise ValueError(
        f"{language} has no reference counters (a counting language or a PDA language is needed)"
    )


def unit_correlations(units: np.ndarray, refs: dict[str, np.ndarray]) -> np.ndarray:
    """Pearson correlation of every unit with every reference: ``units [T, D]``, ``refs`` of
    ``[T]`` each -> ``[D, len(refs)]``; a constant unit or reference correlates 0."""
    x = np.asarray(units, dtype=np.float64)
    y = np.stack([np.asarray(v, dtype=np.float64) for v in refs.values()], 1)
    if x.shape[0] != y.shape[0]:
        raise ValueError(f"{x.shape[0]} positions of units but {y.shape[0]} of references")
    xc, yc = x - x.mean(0), y - y.mean(0)
    xs, ys = np.sqrt((xc**2).sum(0)), np.sqrt((yc**2).sum(0))
    with np.errstate(invalid="ignore", divide="ignore"):
        r = (xc.T @ yc) / np.outer(xs, ys)
    return np.nan_to_num(r, nan=0.0)
