"""Probabilistic context-free grammars: exact length distributions, exact sampling given a
length, exact string probabilities (inside algorithm) and an Earley next-token oracle.

A PCFG is a list of rules ``(lhs, rhs, weight)``; any symbol that is the left-hand side of a
rule is a nonterminal, every other right-hand-side symbol must be a declared terminal.
Weights are normalised per left-hand side (``normalize=True``) or checked to sum to 1.

To compute with lengths, the grammar is rewritten into an equivalent one with no ε-rules, no
unary rules and binary right-hand sides (the standard construction, keeping probabilities):

1. ``e[A] = P(A ⇒* ε)``, the least fixed point of ``e = f(e)`` (iterated from 0);
2. each rule is expanded into every variant that erases some of its nullable nonterminals,
   weighted by ``Π e[X]`` over the erased ones (the all-erased variant is ``e``'s share);
3. unary chains are closed: ``A → β`` gets ``Σ_B [(I − U)^{-1}]_{AB} · w(B → β)``;
4. right-hand sides are binarised, terminals in long rules go through pre-terminals.

The rewritten grammar generates exactly the non-empty strings of the original one with the
same probabilities, which makes ``Z[A, n] = P(A ⇒* some string of length n)`` a simple
convolution over split points and gives exact sampling *given* a length: at each node choose a
(rule, split) with probability ``w · Z[B, i] · Z[C, n − i] / Z[A, n]``.  This is what DuSell &
Chiang's benchmark does (``docs/references.md``), including, as an option, the public
implementation's quirk of dropping the start symbol's own unary and ε rules (``root="public"``).

Everything here counts *symbols*; the :class:`~memrnn.languages.base.Language` wrappers add
``END``.
"""

from __future__ import annotations

import itertools
import math
import numbers
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
from torch import Tensor

from memrnn.languages.base import check_table_cost

_NEG_INF = -math.inf


def cont(mean: float) -> float:
    """Continue-probability of a geometric length with mean ``mean``: ``1 − 1/(mean + 1)``."""
    if isinstance(mean, bool) or not isinstance(mean, numbers.Real) or not 0 <= mean < math.inf:
        raise ValueError(f"a mean length must be a finite number >= 0, got {mean!r}")
    return 1.0 - 1.0 / (mean + 1.0)


@dataclass(frozen=True)
class Rule:
    """``lhs → rhs`` with probability ``weight``."""

    lhs: str
    rhs: tuple[str, ...]
    weight: float

    def __str__(self) -> str:
        return f"{self.lhs} → {' '.join(self.rhs) or 'ε'} ({self.weight:.4g})"


def _logsumexp(a: np.ndarray, axis: int | None = None) -> np.ndarray:
    m = np.max(a, axis=axis, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    with np.errstate(divide="ignore"):
        out = np.log(np.sum(np.exp(a - m), axis=axis, keepdims=True)) + m
    return np.squeeze(out, axis=axis) if axis is not None else out.reshape(())


class PCFG:
    """A PCFG with exact length tables, sampling given a length, and inside probabilities.

    Args:
        rules: ``(lhs, rhs, weight)`` triples; ``rhs`` a sequence of symbols (empty for ε).
        start: the start nonterminal.
        terminals: the terminal alphabet (in the order the language will number them).
        normalize: divide weights by their per-lhs total; otherwise the totals must be 1.
        root: ``"paper"`` (the grammar as written) or ``"public"`` (condition on the start
            symbol's first rule being neither unary nor ε, as DuSell's public code does).
    """

    def __init__(
        self,
        rules: Iterable[tuple[str, Sequence[str], float]],
        start: str,
        terminals: Sequence[str],
        *,
        normalize: bool = True,
        root: Literal["paper", "public"] = "paper",
    ) -> None:
        raw = [(str(lhs), tuple(str(s) for s in rhs), float(w)) for lhs, rhs, w in rules]
        if not raw:
            raise ValueError("a PCFG needs at least one rule")
        if root not in ("paper", "public"):
            raise ValueError(f"root must be 'paper' or 'public', got {root!r}")
        self.terminals = tuple(terminals)
        if len(set(self.terminals)) != len(self.terminals):
            raise ValueError(f"duplicate terminals in {self.terminals}")
        self.nonterminals = tuple(dict.fromkeys(lhs for lhs, _, _ in raw))
        overlap = set(self.nonterminals) & set(self.terminals)
        if overlap:
            raise ValueError(f"symbols {sorted(overlap)} are both terminals and nonterminals")
        if start not in self.nonterminals:
            raise ValueError(f"start symbol {start!r} has no rule; nonterminals are {self.nonterminals}")
        for lhs, rhs, w in raw:
            if not (w >= 0 and math.isfinite(w)):
                raise ValueError(f"rule {lhs} → {' '.join(rhs)} has invalid weight {w}")
            for s in rhs:
                if s not in self.terminals and s not in self.nonterminals:
                    raise ValueError(
                        f"unknown symbol {s!r} in rule {lhs} → {' '.join(rhs)}: not a terminal "
                        f"{self.terminals} and no rule has it on the left"
                    )
        totals: dict[str, float] = defaultdict(float)
        for lhs, _, w in raw:
            totals[lhs] += w
        for lhs, tot in totals.items():
            if tot <= 0:
                raise ValueError(f"nonterminal {lhs!r} has total rule weight 0")
            if not normalize and abs(tot - 1.0) > 1e-9:
                raise ValueError(f"rules of {lhs!r} sum to {tot}, not 1 (pass normalize=True)")
        self.rules = tuple(Rule(lhs, rhs, w / totals[lhs]) for lhs, rhs, w in raw if w > 0)
        self.start, self.root = start, root
        self._check_productive()
        self._build()
        self._z_max = 0
        self._log_z = np.full((self._n_nt, 1), _NEG_INF)
        self._choice_cache: dict[tuple[int, int], tuple[np.ndarray, list]] = {}

    def __repr__(self) -> str:
        return f"PCFG(start={self.start!r}, {len(self.rules)} rules, root={self.root!r})"

    # -- construction ---------------------------------------------------------------------
    def _check_productive(self) -> None:
        productive: set[str] = set()
        changed = True
        while changed:
            changed = False
            for r in self.rules:
                if r.lhs not in productive and all(s in self.terminals or s in productive for s in r.rhs):
                    productive.add(r.lhs)
                    changed = True
        dead = [a for a in self.nonterminals if a not in productive]
        if dead:
            raise ValueError(f"nonterminals {dead} derive no terminal string")

    def _build(self) -> None:
        """The normal form the inside algorithm runs on: nullable probabilities, ε-removal, the
        public root (``root="public"``), the unary closure, then binary rules and per-terminal
        rules in log space, grouped by left-hand side."""
        nts = self.nonterminals
        e = _nullable_probs(self.rules, nts)
        self.null_prob = e
        nonempty = _remove_epsilon(self.rules, e)
        lhs_names = list(nts)
        top = self.start
        if self.root == "public":
            top = "__root__"
            lhs_names.append(top)
            _add_public_root(nonempty, self.start, nts)
        closed = _unary_closure(nonempty, lhs_names, nts)
        names, term_rules, bin_rules = _binarize(closed, lhs_names, self.terminals)
        self._names = names
        self._n_nt = len(names)
        self._top = names.index(top)
        if self.root == "public":
            # P(root rule is non-unary, non-ε) for a consistent grammar: Σ_r w_r Π (1 − e[X])
            mass = 0.0
            for (lhs, rhs), w in nonempty.items():
                if lhs == "__root__":
                    for s in rhs:
                        w *= 1.0 - e[s] if s in e else 1.0
                    mass += w
            self._log_top_norm = math.log(mass)
            self._log_empty = _NEG_INF
        else:
            self._log_top_norm = 0.0
            self._log_empty = math.log(e[self.start]) if e[self.start] > 0 else _NEG_INF
        self._term = np.full((self._n_nt, len(self.terminals)), _NEG_INF)
        for a, t, lw in term_rules:
            self._term[a, t] = np.logaddexp(self._term[a, t], lw)
        bin_rules.sort(key=lambda r: r[0])  # grouped by lhs, for the grouped log-sum-exp
        self._bin = np.array([(a, b, c) for a, b, c, _ in bin_rules], dtype=np.int64).reshape(-1, 3)
        self._bin_logw = np.array([lw for *_, lw in bin_rules], dtype=np.float64)
        self._bin_of = [np.flatnonzero(self._bin[:, 0] == a) for a in range(self._n_nt)]
        lhs = self._bin[:, 0]
        self._group_starts = (
            np.flatnonzero(np.r_[True, lhs[1:] != lhs[:-1]]) if len(lhs) else np.zeros(0, int)
        )
        self._group_lhs = lhs[self._group_starts] if len(lhs) else np.zeros(0, int)
        self._group_of_rule = np.cumsum(np.r_[False, lhs[1:] != lhs[:-1]]) if len(lhs) else np.zeros(0, int)

    def _grouped_logsumexp(self, values: np.ndarray) -> np.ndarray:
        """Log-sum-exp of ``values [M, R]`` over the rules of each lhs -> ``[M, groups]``,
        shifting each group by its own maximum (no underflow across nonterminals)."""
        top = np.maximum.reduceat(values, self._group_starts, axis=1)
        top = np.where(np.isfinite(top), top, 0.0)
        with np.errstate(divide="ignore"):
            summed = np.add.reduceat(np.exp(values - top[:, self._group_of_rule]), self._group_starts, axis=1)
            return np.log(summed) + top

    # -- length tables ----------------------------------------------------------------------
    def table_cost(self, n: int) -> tuple[float, float]:
        """``(bytes, operations)`` of the length tables up to ``n`` symbols (what sampling given a
        length and the length distribution need): ``Z [nonterminals, n + 1]`` float64 and a
        split buffer ``[rules, n]``; a convolution over split points per length, ``rules · n²/2``."""
        rules = max(len(self._bin), 1)
        return 8.0 * (self._n_nt * (n + 1) + rules * n), rules * n * n / 2.0 + n

    def inside_cost(self, n: int) -> tuple[float, float]:
        """``(bytes, 0)`` of the inside chart of one string of ``n`` symbols (:meth:`log_prob`:
        ``[n + 1, n, nonterminals]`` float64 and the split products; :meth:`log_probs`'s scaled
        chart takes about as much); its time is not limited (strings are scored as given)."""
        rules = max(len(self._bin), 1)
        return 8.0 * n * (n + 1) * (self._n_nt + 3 * rules), 0.0

    _TABLES = "its grammar's length tables (their time grows as the length squared)"

    def _ensure(self, n: int) -> None:
        if n <= self._z_max:
            return
        check_table_cost(self, n, self.table_cost, self._TABLES)
        z = np.full((self._n_nt, n + 1), _NEG_INF)
        z[:, : self._log_z.shape[1]] = self._log_z
        z[:, 1] = _logsumexp(self._term, axis=1)
        _, b_idx, c_idx = self._bin.T if len(self._bin) else (np.zeros(0, int),) * 3
        for ln in range(max(2, self._z_max + 1), n + 1):
            if not len(self._bin):
                break
            splits = z[b_idx, 1:ln] + z[c_idx, ln - 1 : 0 : -1]  # [R, ln-1]
            per_rule = self._bin_logw + _logsumexp(splits, axis=1)
            z[self._group_lhs, ln] = self._grouped_logsumexp(per_rule[None, :])[0]
        self._log_z, self._z_max = z, n

    def length_log_probs(self, max_length: int) -> np.ndarray:
        """``log P(|w| = n)`` for ``n = 0..max_length`` (symbols, no ``END``), ``[max_length + 1]``."""
        if max_length < 0:
            raise ValueError(f"max_length must be >= 0, got {max_length}")
        self._ensure(max(max_length, 1))
        out = self._log_z[self._top, : max_length + 1].copy() - self._log_top_norm
        out[0] = self._log_empty
        return out

    # -- sampling ---------------------------------------------------------------------------
    def _choices(self, a: int, n: int) -> tuple[np.ndarray, list]:
        key = (a, n)
        if key not in self._choice_cache:
            logs, opts = [], []
            if n == 1:
                for t in np.flatnonzero(np.isfinite(self._term[a])):
                    logs.append(self._term[a, t])
                    opts.append(("t", int(t)))
            else:
                for r in self._bin_of[a]:
                    _, b, c = self._bin[r]
                    vals = self._bin_logw[r] + self._log_z[b, 1:n] + self._log_z[c, n - 1 : 0 : -1]
                    for i in np.flatnonzero(np.isfinite(vals)):
                        logs.append(vals[i])
                        opts.append(("b", int(b), int(c), int(i) + 1))
            if not logs:
                raise ValueError(f"{self._names[a]} derives no string of length {n}")
            lv = np.array(logs)
            p = np.exp(lv - _logsumexp(lv))
            self._choice_cache[key] = (np.cumsum(p), opts)
        return self._choice_cache[key]

    def sample_given_length(self, rng: np.random.Generator, n: int) -> list[int]:
        """One string of exactly ``n`` symbols (terminal indices) drawn from ``p(w | |w| = n)``."""
        if n == 0:
            if self._log_empty == _NEG_INF:
                raise ValueError("the grammar generates no empty string")
            return []
        self._ensure(n)
        if not np.isfinite(self._log_z[self._top, n]):
            raise ValueError(f"the grammar generates no string of length {n}")
        out: list[int] = []
        todo = [(self._top, n)]
        while todo:
            a, ln = todo.pop()
            cdf, opts = self._choices(a, ln)
            o = opts[min(int(np.searchsorted(cdf, rng.random() * cdf[-1], side="right")), len(opts) - 1)]
            if o[0] == "t":
                out.append(o[1])
            else:
                _, b, c, i = o
                todo.append((c, ln - i))
                todo.append((b, i))
        return out

    # -- inside probabilities ---------------------------------------------------------------
    def log_prob(self, word: Sequence[int]) -> float:
        """``log p(w)`` of a string of terminal indices (``-inf`` if not generated); CKY in log
        space over the rewritten grammar, ``O(n^3 · rules)``."""
        n = len(word)
        if n == 0:
            return self._log_empty
        check_table_cost(self, n, self.inside_cost, "its inside chart")
        for pos, t in enumerate(word):
            if not 0 <= int(t) < len(self.terminals):
                raise ValueError(f"unknown terminal index {t!r} at position {pos}")
        chart = np.full((n + 1, n, self._n_nt), _NEG_INF)  # [span length, start, A]
        chart[1] = self._term[:, np.asarray(word, dtype=np.int64)].T
        if len(self._bin):
            _, b_idx, c_idx = self._bin.T
            for s in range(2, n + 1):
                k = np.arange(1, s)[:, None]
                i = np.arange(n - s + 1)[None, :]
                left = chart[k, i][..., b_idx]  # [s-1, m, R]
                right = chart[s - k, i + k][..., c_idx]
                per_rule = self._bin_logw + _logsumexp(left + right, axis=0)  # [m, R]
                chart[s][: n - s + 1, self._group_lhs] = self._grouped_logsumexp(per_rule)
        return float(chart[n, 0, self._top] - self._log_top_norm)

    def log_probs(self, words: Sequence[Sequence[int]], chunk: int = 64) -> np.ndarray:
        """``log p(w)`` of many strings, ``[len(words)]``: the same CKY as :meth:`log_prob`,
        vectorised over up to ``chunk`` strings of equal length at a time (a dataset's strings
        share a few lengths, so the per-span Python work is paid once per group, not per string).

        The chart is kept in probability space with one log scale per (string, span length),
        ``inside[A, i, s] = exp(L[s]) · P[s][i, A]`` with ``max P[s] = 1``: the split points of a
        span then sum as plain products (no ``exp``/``log`` per term), each split weighted by
        ``exp(L[k] + L[s−k] − max)``.  A string whose probability underflows the scaled chart
        (its inside weight below 1e-308 of the largest at the same span length) is rescored by
        the log-space CKY, so the result never reports ``-inf`` for a generated string."""
        if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
            raise ValueError(f"chunk must be a positive int, got {chunk!r}")
        out = np.full(len(words), _NEG_INF)
        by_length: dict[int, list[int]] = defaultdict(list)
        for j, w in enumerate(words):
            for pos, t in enumerate(w):
                if not 0 <= int(t) < len(self.terminals):
                    raise ValueError(f"unknown terminal index {t!r} at position {pos} of string {j}")
            by_length[len(w)].append(j)
        check_table_cost(self, max(by_length, default=0), self.inside_cost, "its inside chart")
        for n, rows in by_length.items():
            if n == 0:
                out[rows] = self._log_empty
                continue
            # the chart takes about 2·n²·rules float64 per string: at most ~256 MB at a time
            per_string = 16 * n * (n + 1) * max(len(self._bin), 1)
            step = max(1, min(chunk, (256 << 20) // per_string))
            for lo in range(0, len(rows), step):
                idx = rows[lo : lo + step]
                ids = np.array([words[j] for j in idx], dtype=np.int64)  # [B, n]
                lp = self._scaled_inside(ids)
                for j, v in zip(idx, lp, strict=True):
                    out[j] = v if v > _NEG_INF else self.log_prob(words[j])
        return out

    def _scaled_inside(self, ids: np.ndarray) -> np.ndarray:
        """``log p(w)`` of ``ids [B, n]`` (equal lengths) by the scaled probability-space CKY of
        :meth:`log_probs`; ``-inf`` where ``w`` is not generated or the scaled chart may have
        lost precision (a stored value below 1e-150 of its cell's largest, or a cell whose
        largest sum fell below 1e-250: products of two such values could leave float64's range)."""
        B, n = ids.shape
        nt, top = self._n_nt, self._top
        term = torch.from_numpy(np.exp(self._term[:, ids].transpose(1, 2, 0)))  # [B, n, NT]
        if n == 1 or not len(self._bin):
            with np.errstate(divide="ignore"):
                one = np.log(term[:, 0, top].numpy()) if n == 1 else np.full(B, _NEG_INF)
            return one - self._log_top_norm
        b_idx, c_idx, lhs = (torch.from_numpy(self._bin[:, j]) for j in (1, 2, 0))
        w = torch.from_numpy(np.exp(self._bin_logw))
        R, f64 = len(w), torch.float64
        # The chart gathered at each rule's left and right child, [start, span, B, R], with one
        # log scale per cell, [start, span, B]: inside(A, i, s) = exp(L[i, s]) · P[i, s, A] and
        # max_A P[i, s, A] = 1.  The left children of span s at start i (span k, start i) are
        # then a slice and the right ones (span s−k, start i+k) a strided view, k = 1..s−1.
        left = torch.zeros(n, n + 1, B, R, dtype=f64)
        right = torch.zeros(n, n + 1, B, R, dtype=f64)
        L = torch.full((n, n + 1, B), -math.inf, dtype=f64)
        risky = torch.zeros(B, dtype=torch.bool)

        def normalise(P: Tensor) -> tuple[Tensor, Tensor]:  # P [m, B, NT] -> P / max, log max
            mx = P.amax(2)  # [m, B]
            ok = mx > 0
            risky.logical_or_((ok & (mx < 1e-250)).any(0))
            one = torch.where(ok, mx, torch.ones_like(mx))
            P /= one[..., None]
            risky.logical_or_(((P > 0) & (P < 1e-150)).any(2).any(0))
            return P, torch.where(ok, torch.log(one), -math.inf)

        P1, L[:, 1] = normalise(term.permute(1, 0, 2).contiguous())  # [start, B, NT]
        left[:, 1], right[:, 1] = P1[..., b_idx], P1[..., c_idx]
        st, sl = right.stride(), L.stride()
        scratch = torch.empty(max((n - s + 1) * (s - 1) for s in range(2, n + 1)) * B * R, dtype=f64)
        for s in range(2, n + 1):
            m, k = n - s + 1, s - 1
            off, offl = st[0] + (s - 1) * st[1], sl[0] + (s - 1) * sl[1]
            lft, lftL = left[:m, 1:s], L[:m, 1:s]  # [m, k, B, R], [m, k, B]
            rgt = right.as_strided((m, k, B, R), (st[0], st[0] - st[1], st[2], st[3]), off)
            rgtL = L.as_strided((m, k, B), (sl[0], sl[0] - sl[1], sl[2]), offl)
            E = lftL + rgtL  # each split's log scale
            M = E.amax(1)  # [m, B]
            M = torch.where(torch.isfinite(M), M, torch.zeros_like(M))
            f = torch.exp(E - M[:, None])  # [m, k, B], ≤ 1
            prod = scratch[: m * k * B * R].view(m, k, B, R)  # reused: no page faults
            torch.mul(lft, f[..., None], out=prod).mul_(rgt)
            per_rule = prod.sum(1).mul_(w)  # [m, B, R]
            P, logmx = normalise(torch.zeros(m, B, nt, dtype=f64).index_add_(2, lhs, per_rule))
            Ls = M + logmx
            if s < n:
                L[:m, s] = Ls
                left[:m, s], right[:m, s] = P[..., b_idx], P[..., c_idx]
        with np.errstate(divide="ignore"):
            val = np.log(P[0, :, top].numpy()) + Ls[0].numpy()
        val[risky.numpy()] = _NEG_INF
        return val - self._log_top_norm


def _is_unary(rhs: tuple[str, ...], nonterminals: Sequence[str]) -> bool:
    return len(rhs) == 1 and rhs[0] in nonterminals


# -- the normal form, step by step (PCFG._build) -------------------------------------------------------
RuleWeights = dict[tuple[str, tuple[str, ...]], float]


def _nullable_probs(rules: Sequence[Rule], nts: Sequence[str]) -> dict[str, float]:
    """``e[A]``: the probability that ``A`` derives the empty string, the least fixed point of
    ``e[A] = Σ_{A → α} w Π_{X ∈ α} e[X]`` (iterated from 0; terminals have ``e = 0``)."""
    e = dict.fromkeys(nts, 0.0)
    for _ in range(100_000):
        new = dict.fromkeys(nts, 0.0)
        for r in rules:
            p = r.weight
            for s in r.rhs:
                p *= e.get(s, 0.0)
            new[r.lhs] += p
        delta = max(abs(new[a] - e[a]) for a in nts)
        e = new
        if delta < 1e-16:
            break
    return e


def _remove_epsilon(rules: Sequence[Rule], e: dict[str, float]) -> RuleWeights:
    """Every non-empty variant of every rule: each nullable occurrence is kept (weight 1) or
    erased (weight ``e[X]``); variants with the same lhs and rhs add up."""
    nonempty: RuleWeights = defaultdict(float)
    for r in rules:
        nullable = [e.get(s, 0.0) > 0 for s in r.rhs]
        for erase in itertools.product(*[(False, True) if n else (False,) for n in nullable]):
            w = r.weight
            for s, x in zip(r.rhs, erase, strict=True):
                if x:
                    w *= e[s]
            rhs = tuple(s for s, x in zip(r.rhs, erase, strict=True) if not x)
            if rhs and w > 0:
                nonempty[(r.lhs, rhs)] += w
    return nonempty


def _add_public_root(nonempty: RuleWeights, start: str, nts: Sequence[str]) -> None:
    """Add ``__root__``: ``start``'s non-unary, non-ε rules only (in place)."""
    kept = {rhs: w for (lhs, rhs), w in nonempty.items() if lhs == start and not _is_unary(rhs, nts)}
    if not kept:
        raise ValueError(f"root='public' leaves {start!r} without a non-unary, non-ε rule")
    for rhs, w in kept.items():
        nonempty[("__root__", rhs)] += w


def _unary_closure(
    nonempty: RuleWeights, lhs_names: Sequence[str], nts: Sequence[str]
) -> dict[str, dict[tuple[str, ...], float]]:
    """Unary rules folded away: ``A → α`` gets ``Σ_B [(I − U)^{-1}]_{AB} w(B → α)`` for every
    proper (non-unary) rule of ``B``, ``U`` the unary-rule matrix."""
    idx = {a: i for i, a in enumerate(lhs_names)}
    n = len(lhs_names)
    unary = np.zeros((n, n))
    proper: dict[str, list[tuple[tuple[str, ...], float]]] = defaultdict(list)
    for (lhs, rhs), w in nonempty.items():
        if _is_unary(rhs, nts):
            unary[idx[lhs], idx[rhs[0]]] += w
        else:
            proper[lhs].append((rhs, w))
    if n and np.max(np.abs(np.linalg.eigvals(unary))) >= 1 - 1e-12:
        raise ValueError("the grammar has a unary cycle taken with probability 1")
    closure = np.linalg.inv(np.eye(n) - unary)
    closed: dict[str, dict[tuple[str, ...], float]] = defaultdict(lambda: defaultdict(float))
    for a in lhs_names:
        for b in lhs_names:
            c = closure[idx[a], idx[b]]
            if c > 0:
                for rhs, w in proper[b]:
                    closed[a][rhs] += c * w
    return closed


def _binarize(
    closed: dict[str, dict[tuple[str, ...], float]], lhs_names: Sequence[str], terminals: Sequence[str]
) -> tuple[list[str], list[tuple[int, int, float]], list[tuple[int, int, int, float]]]:
    """Chomsky normal form: ``(names, term_rules (A, terminal, log w), bin_rules (A, B, C, log w))``.
    Nonterminal ids: ``lhs_names`` first, then helpers: ``<t>`` for a terminal inside a longer
    right-hand side, ``<X Y ...>`` for a rhs suffix of length >= 2 (shared between rules)."""
    names = list(lhs_names)
    nt_id = {a: i for i, a in enumerate(names)}
    term_rules: list[tuple[int, int, float]] = []
    bin_rules: list[tuple[int, int, int, float]] = []
    tid = {t: i for i, t in enumerate(terminals)}
    pre: dict[str, int] = {}
    chains: dict[tuple[str, ...], int] = {}

    def new_nt(name: str) -> int:
        names.append(name)
        nt_id[name] = len(names) - 1
        return nt_id[name]

    def sym(s: str) -> int:
        if s in tid:
            if s not in pre:
                pre[s] = new_nt(f"<{s}>")
                term_rules.append((pre[s], tid[s], 0.0))
            return pre[s]
        return nt_id[s]

    def chain(rhs: tuple[str, ...]) -> int:  # a helper deriving exactly rhs (len >= 2)
        if rhs not in chains:
            a = new_nt(f"<{' '.join(rhs)}>")
            chains[rhs] = a
            b = sym(rhs[0])
            c = sym(rhs[1]) if len(rhs) == 2 else chain(rhs[1:])
            bin_rules.append((a, b, c, 0.0))
        return chains[rhs]

    for a in lhs_names:
        for rhs, w in closed[a].items():
            lw = math.log(w)
            if len(rhs) == 1:
                term_rules.append((nt_id[a], tid[rhs[0]], lw))
            else:
                b = sym(rhs[0])
                c = sym(rhs[1]) if len(rhs) == 2 else chain(rhs[1:])
                bin_rules.append((nt_id[a], b, c, lw))
    return names, term_rules, bin_rules


class Earley:
    """Earley recogniser of a CFG (weights ignored) with nullable completion (Aycock & Horspool),
    incremental over a prefix: gives membership and the exact set of terminals that can follow
    any prefix (the next-token oracle of any context-free language)."""

    def __init__(self, grammar: PCFG) -> None:
        self.g = grammar
        self.rules = [(r.lhs, r.rhs) for r in grammar.rules]
        self.by_lhs: dict[str, list[int]] = defaultdict(list)
        for i, (lhs, _) in enumerate(self.rules):
            self.by_lhs[lhs].append(i)
        self.nullable = {a for a, p in grammar.null_prob.items() if p > 0}
        if grammar.root == "public":
            raise ValueError("Earley recognises the grammar as written; use root='paper'")
        self.start = "__start__"
        self.rules.append((self.start, (grammar.start,)))
        self.by_lhs[self.start] = [len(self.rules) - 1]
        self.nts = set(grammar.nonterminals) | {self.start}

    def _closure(self, items: set, chart: list[set], pos: int) -> set:
        agenda = list(items)
        while agenda:
            r, d, o = agenda.pop()
            lhs, rhs = self.rules[r]
            if d < len(rhs):
                s = rhs[d]
                if s in self.nts:
                    for r2 in self.by_lhs[s]:
                        it = (r2, 0, pos)
                        if it not in items:
                            items.add(it)
                            agenda.append(it)
                    if s in self.nullable:
                        it = (r, d + 1, o)
                        if it not in items:
                            items.add(it)
                            agenda.append(it)
            else:  # complete
                src = items if o == pos else chart[o]
                for r2, d2, o2 in list(src):
                    rhs2 = self.rules[r2][1]
                    if d2 < len(rhs2) and rhs2[d2] == lhs:
                        it = (r2, d2 + 1, o2)
                        if it not in items:
                            items.add(it)
                            agenda.append(it)
        return items

    def charts(self, word: Sequence[str]) -> list[set]:
        """Earley sets ``0..len(word)``; stops early (shorter list) once a set is empty."""
        chart: list[set] = []
        chart.append(self._closure({(self.by_lhs[self.start][0], 0, 0)}, chart, 0))
        for pos, t in enumerate(word, start=1):
            scanned = set()
            for r, d, o in chart[-1]:
                rhs = self.rules[r][1]
                if d < len(rhs) and rhs[d] == t:
                    scanned.add((r, d + 1, o))
            if not scanned:
                chart.append(set())
                break
            chart.append(self._closure(scanned, chart, pos))
        return chart

    def expected(self, items: set) -> tuple[set[str], bool]:
        """Terminals that can come next, and whether the prefix is itself a complete string."""
        nxt = set()
        done = False
        for r, d, o in items:
            lhs, rhs = self.rules[r]
            if d < len(rhs) and rhs[d] not in self.nts:
                nxt.add(rhs[d])
            if lhs == self.start and d == len(rhs) and o == 0:
                done = True
        return nxt, done

    def recognizes(self, word: Sequence[str]) -> bool:
        ch = self.charts(word)
        return len(ch) == len(word) + 1 and self.expected(ch[-1])[1]
