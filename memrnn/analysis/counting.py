"""How far a model counts: the question of Weiss et al. 2018, asked exhaustively.

For every ``n`` up to ``n_max``: is ``x_1^n ... x_k^n`` accepted, and is every neighbour with one
block count changed by ±1 rejected?  The first ``n`` where either fails is where the learned
counter breaks.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from memrnn.analysis.reference import available_features, reference_features
from memrnn.constructions.counters import counter_magnitudes, encode_counter_machine
from memrnn.languages.counting import CountingLanguage

#: ``accepts(block_counts)``: one verdict per count tuple ``(c_1, …, c_k)``, whether the model
#: accepts ``x_1^{c_1} … x_k^{c_k}``.  Counts rather than strings, so that an implementation can
#: share work between strings with common prefixes (``benchmarks/counter_precision.py`` reads
#: ``a^N`` once for every ``a^n b^m``); :func:`strings_acceptor` adapts one over strings.
Accepts = Callable[[Sequence[tuple[int, ...]]], Sequence[bool]]


def strings_acceptor(
    accepts_strings: Callable[[list[list[int]]], Sequence[bool]], language: CountingLanguage
) -> Accepts:
    """An :data:`Accepts` from a callable over token-id strings ``w_1 .. w_n`` (``END`` dropped),
    e.g. :meth:`memrnn.lit.SequenceModule.accepts`."""
    return lambda counts: accepts_strings([language.string(list(c))[:-1] for c in counts])


def counting_cases(language: CountingLanguage, ns: Sequence[int]) -> list[tuple[int, tuple[int, ...], bool]]:
    """``(n, counts, positive)`` for every ``n``: ``x^n`` itself (positive) and its ``2k``
    neighbours with one block count changed by ±1 (negative; a count below 0 is left out)."""
    cases: list[tuple[int, tuple[int, ...], bool]] = []
    for n in ns:
        cases.append((n, (n,) * language.blocks, True))
        for j in range(language.blocks):
            for d in (-1, 1):
                counts = [n] * language.blocks
                counts[j] += d
                if counts[j] >= 0:
                    cases.append((n, tuple(counts), False))
    return cases


def _verdicts(accepts: Accepts, cases: list, batch_size: int) -> list[bool]:
    out: list[bool] = []
    for start in range(0, len(cases), batch_size):
        chunk = [counts for _, counts, _ in cases[start : start + batch_size]]
        got = [bool(v) for v in accepts(chunk)]
        if len(got) != len(chunk):
            raise ValueError(f"accepts returned {len(got)} verdicts for {len(chunk)} strings")
        out += got
    return out


def counting_failures(
    accepts: Accepts, language: CountingLanguage, ns: Sequence[int], *, batch_size: int = 64
) -> dict[int, bool]:
    """``{n: True if x^n is rejected or one of its ±1 neighbours accepted}``."""
    cases = counting_cases(language, ns)
    bad = dict.fromkeys(ns, False)
    for (n, _, positive), accepted in zip(cases, _verdicts(accepts, cases, batch_size), strict=True):
        bad[n] |= accepted != positive
    return bad


@dataclass
class CountingSweep:
    """``n``; whether ``x^n`` was accepted; how many of its ±1 neighbours were rejected (of
    ``2k``); the first failing ``n`` (None: none up to ``n_max``)."""

    n: list[int]
    positive_ok: list[bool]
    negatives_ok: list[int]
    negatives_total: int
    first_failure: int | None


def counting_sweep(
    accepts: Accepts, language: CountingLanguage, n_max: int, *, batch_size: int = 64
) -> CountingSweep:
    """Classify ``x^n`` and its ``2k`` neighbours (each block count ±1) for every
    ``n = min_n..n_max`` with ``accepts`` (see :data:`Accepts`; a trained acceptor gives one
    through :func:`strings_acceptor` and :meth:`memrnn.lit.SequenceModule.accepts`)."""
    if n_max < language.min_n:
        raise ValueError(f"n_max={n_max} is below the language's min_n={language.min_n}")
    ns = list(range(language.min_n, n_max + 1))
    cases = counting_cases(language, ns)
    pos_ok = dict.fromkeys(ns, False)
    neg_ok = dict.fromkeys(ns, 0)
    neg_cases = dict.fromkeys(ns, 0)
    for (n, _, positive), accepted in zip(cases, _verdicts(accepts, cases, batch_size), strict=True):
        if positive:
            pos_ok[n] = accepted
        else:
            neg_ok[n] += not accepted
            neg_cases[n] += 1
    first = next((n for n in ns if not pos_ok[n] or neg_ok[n] < neg_cases[n]), None)
    return CountingSweep(ns, [pos_ok[n] for n in ns], [neg_ok[n] for n in ns], 2 * language.blocks, first)


def first_counting_failure(
    accepts: Accepts, language: CountingLanguage, n_max: int, *, batch_size: int = 64
) -> int | None:
    """The first ``n <= n_max`` where ``x^n`` is rejected or a ±1 neighbour accepted (None: none),
    for ``n_max`` far beyond what :func:`counting_sweep` can visit one by one: ``n`` on a
    geometric grid (``min_n..16``, then 8 points per decade), a decade at a time up to the first
    failing grid point, then bisection-like refinement (at most 256 ``n`` per round) between the
    last passing and the first failing point.  Exact for every ``n`` it visits; a failure
    confined to ``n`` strictly between two passing grid points of an earlier decade is not
    looked for (the finite-precision failures of Weiss et al. 2018 persist once they start)."""
    if n_max < language.min_n:
        raise ValueError(f"n_max={n_max} is below the language's min_n={language.min_n}")
    decades = int(math.log10(n_max)) if n_max >= 10 else 0
    grid = sorted({*range(language.min_n, 17), *(round(10 ** (k / 8)) for k in range(8, 8 * decades + 1))})
    grid = [n for n in grid if language.min_n <= n <= n_max]
    last_ok, fail = language.min_n - 1, None
    for lo in range(0, len(grid), 8):  # a decade at a time; stop at the first failure
        block = grid[lo : lo + 8]
        bad = counting_failures(accepts, language, block, batch_size=batch_size)
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
        bad = counting_failures(accepts, language, cand, batch_size=batch_size)
        hit = [n for n in cand if bad[n]]
        if hit:
            fail = hit[0]
        last_ok = max([last_ok, *(n for n in cand if n < fail)])
    return fail


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


def counter_correlations(
    units: dict[str, np.ndarray], refs: dict[str, np.ndarray], threshold: float = 0.99
) -> tuple[dict[str, float], dict[str, list], dict[str, np.ndarray]]:
    """Which units count (Weiss et al. 2018 Figure 1): ``units`` ``{key: [T, D]}`` (a layer's
    state fields over a probe string), ``refs`` ``{name: [T]}`` (:func:`reference_counters`).

    Returns ``(metrics, table, correlations)``: ``best_abs_r_<ref>`` (the largest ``|r|`` over all
    units) and ``units_<ref>`` (how many reach ``threshold``); one table row per unit
    (``key``, ``unit``, ``r_<ref>``...); ``{key: [D, len(refs)]}`` correlations."""
    correlations = {k: unit_correlations(u, refs) for k, u in units.items()}
    table: dict[str, list] = {"key": [], "unit": [], **{f"r_{r}": [] for r in refs}}
    for k, r in correlations.items():
        for u in range(r.shape[0]):
            table["key"].append(k)
            table["unit"].append(u)
            for j, name in enumerate(refs):
                table[f"r_{name}"].append(float(r[u, j]))
    every = np.concatenate(list(correlations.values()), 0)
    metrics: dict[str, float] = {}
    for j, name in enumerate(refs):
        metrics[f"best_abs_r_{name}"] = float(np.abs(every[:, j]).max())
        metrics[f"units_{name}"] = float((np.abs(every[:, j]) >= threshold).sum())
    return metrics, table, correlations


def construction_counters(language: CountingLanguage, string: Sequence[int]) -> np.ndarray:
    """``[T, counters]``: the counter magnitudes of the compiled counter-machine LSTM
    (:func:`~memrnn.constructions.counters.encode_counter_machine`, float64) on ``BOS`` and
    ``string`` (``END`` dropped), one step behind the input as the construction is."""
    cc = encode_counter_machine(language.machine, "lstm", dtype=torch.float64)
    ids, _ = cc.ids([[language.symbols[t] for t in string[:-1]]])
    return counter_magnitudes(cc, ids)[0].double().numpy()
