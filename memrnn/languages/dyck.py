"""Dyck-(k,m): k bracket types, at most m unclosed brackets (Hewitt et al. 2020, appendix B and H.1).

Ids: open bracket ``⟨_i`` is ``i``, close ``⟩_i`` is ``k + i`` (``i = 0..k-1``), ``END`` (ω) is
``2k``; models get ``BOS = 2k + 1`` as an input-only id.

Generating distribution (H.1, eqs. H.2–H.3): on the empty stack, each open ``1/(2k)`` and
``END`` ``1/2``; with ``0 < depth < m``, each open ``1/(2k)`` and the close of the top ``1/2``;
at ``depth = m``, the close of the top ``1``.

Lengths count every token *including* ``END``, as the authors' generator does
(``len(string)`` after appending ``END``), so Table 2's windows are ``1..84`` (m = 3) and
``1..180`` (m = 5) for training, ``85..168`` and ``181..360`` for testing
(in general ``1..8m(m−2)+60`` and ``(max, 2·max]``; the formula is exact for m = 3, 5).

Two ways to restrict to a window ``[lo, hi]`` (``truncation``):

* ``"hewitt"`` (default; what the authors' public code does): while fewer than ``lo``
  brackets have been emitted, ``END`` is re-drawn, i.e. on the empty stack each open bracket
  gets ``1/k``; strings longer than ``hi`` (``END`` counted) are rejected whole.  (The code
  checks ``len(string) < min_length`` *before* appending ``END``, so with Table 2's
  ``1..84`` the empty string never occurs and every string has at least one bracket pair.)
* ``"rejection"``: the H.1 distribution conditioned on the length lying in ``[lo, hi]``
  (rejecting whole strings on both sides).  With ``lo = 1`` half of all samples are the
  empty string, which is why the authors' code does not do this.

Both are computed exactly by one backward recursion over (position, depth): ``Z[t, d]``, the
probability that a string now at position ``t`` with depth ``d`` ends inside the window.  It
gives exact sampling (no rejection loop, so test windows that rejection would almost never hit
cost nothing), exact string probabilities and the exact next-token distribution, the
Bayes-optimal predictor against which models are scored.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from functools import lru_cache
from typing import Literal

import numpy as np

from memrnn.core.checks import positive_int
from memrnn.languages.automata import DFA, DPDA, EMPTY, NOOP, POP, push
from memrnn.languages.base import PYTHON_STEP, Language, Lengths, check_table_cost, check_window

ACCEPT = "accept"
REJECT = "reject"
State = tuple[int, ...] | str

_NEG_INF = -math.inf


class DyckKM(Language):
    """The Dyck-(k,m) language, its DFA and its generating distribution.

    Args:
        k: bracket types, ``k >= 1``.
        m: depth bound, ``m >= 1``.
        truncation: ``"hewitt"`` or ``"rejection"``, how a length window restricts the
            distribution (module docstring).
    """

    def __init__(self, k: int = 2, m: int = 3, truncation: Literal["hewitt", "rejection"] = "hewitt") -> None:
        positive_int("k", k)
        positive_int("m", m)
        if truncation not in ("hewitt", "rejection"):
            raise ValueError(f"truncation must be 'hewitt' or 'rejection', got {truncation!r}")
        self.k, self.m, self.truncation = k, m, truncation
        self.bracket_types, self.bracket_bound = k, m
        self.symbols = (*[f"({i}" for i in range(k)], *[f"{i})" for i in range(k)], "END")

    def __repr__(self) -> str:
        return f"DyckKM(k={self.k}, m={self.m}, truncation={self.truncation!r})"

    __str__ = __repr__

    # -- ids ----------------------------------------------------------------------------------
    def open_id(self, i: int) -> int:
        return i

    def close_id(self, i: int) -> int:
        return self.k + i

    def is_open(self, tok: int) -> bool:
        return tok < self.k

    def is_close(self, tok: int) -> bool:
        return self.k <= tok < 2 * self.k

    # -- the DFA (appendix B) -------------------------------------------------------------------
    @property
    def initial_state(self) -> State:
        """``q_0 = []``, the empty stack."""
        return ()

    def transition(self, state: State, tok: int) -> State:
        """δ of appendix B (B.1–B.5); every other move goes to the reject state."""
        (tok,) = self.check_ids([tok])
        if state in (REJECT, ACCEPT):
            return REJECT
        assert isinstance(state, tuple)
        if tok == self.end_id:
            return ACCEPT if not state else REJECT
        if self.is_open(tok):
            return (*state, tok) if len(state) < self.m else REJECT
        if state and state[-1] == tok - self.k:
            return state[:-1]
        return REJECT

    def run(self, ids: Sequence[int]) -> State:
        """The DFA state after reading ``ids``."""
        state = self.initial_state
        for tok in self.check_ids(ids):
            state = self.transition(state, tok)
        return state

    def reachable_states(self) -> list[tuple[int, ...]]:
        """Every stack state reachable from ``[]`` (breadth first); there are Σ_{i≤m} k^i."""
        seen = {(): None}
        queue = deque([()])
        while queue:
            s = queue.popleft()
            for tok in range(2 * self.k):
                nxt = self.transition(s, tok)
                if isinstance(nxt, tuple) and nxt not in seen:
                    seen[nxt] = None
                    queue.append(nxt)
        return list(seen)

    def dfa(self) -> DFA:
        """Appendix B's automaton as a :class:`~memrnn.languages.automata.DFA` over the symbol
        names: one state per reachable stack (named by its ids, e.g. ``"0,1"``; ``""`` is the
        empty stack) plus ``"accept"`` (after ``END``); missing moves are the reject state."""

        def name(state: tuple[int, ...]) -> str:
            return ",".join(map(str, state))

        stacks = self.reachable_states()
        trans = []
        for st in stacks:
            for tok in range(self.num_symbols):
                nxt = self.transition(st, tok)
                if nxt == ACCEPT:
                    trans.append((name(st), self.symbols[tok], ACCEPT))
                elif isinstance(nxt, tuple):
                    trans.append((name(st), self.symbols[tok], name(nxt)))
        return DFA([*map(name, stacks), ACCEPT], self.symbols, trans, name(()), [ACCEPT])

    def pda(self) -> DPDA:
        """A DPDA for Dyck-(k,m) (input: the symbols, ``END`` included) whose state ``d<i>`` is the
        depth: push each open bracket (not at depth ``m``: no move, the string is rejected), pop
        on its close, accept on ``END`` at depth 0."""
        opens = [self.symbols[self.open_id(i)] for i in range(self.k)]
        closes = [self.symbols[self.close_id(i)] for i in range(self.k)]
        depth = [f"d{d}" for d in range(self.m + 1)]
        t = [(depth[d], o, "*", depth[d + 1], push(o)) for d in range(self.m) for o in opens]
        t += [
            (depth[d], c, o, depth[d - 1], POP)
            for d in range(1, self.m + 1)
            for o, c in zip(opens, closes, strict=True)
        ]
        t.append((depth[0], "END", EMPTY, ACCEPT, NOOP))
        return DPDA([*depth, ACCEPT], self.symbols, opens, t, depth[0], [ACCEPT])

    def accepts(self, ids: Sequence[int]) -> bool:
        """Whether ``ids`` (ending with ``END``) is in Dyck-(k,m)."""
        return self.run(ids) == ACCEPT

    def allowed_next(self, prefix: Sequence[int]) -> frozenset[int]:
        """Ids that can follow ``prefix`` (``END`` only on the empty stack)."""
        state = self.run(prefix)
        if not isinstance(state, tuple):
            return frozenset()
        out = set(range(self.k)) if len(state) < self.m else set()
        if state:
            out.add(self.k + state[-1])
        else:
            out.add(self.end_id)
        return frozenset(out)

    # -- lengths -------------------------------------------------------------------------------
    def default_lengths(self, split: str) -> Lengths:
        """Table 2: train ``1..8m(m−2)+60``, test ``(train max, 2·train max]`` (``END`` counted)."""
        train_max = 8 * self.m * (self.m - 2) + 60
        if split in ("train", "val", "validation", "dev"):
            return (1, train_max)
        if split == "test":
            return (train_max + 1, 2 * train_max)
        raise ValueError(f"unknown split {split!r}; use 'train', 'val' or 'test'")

    def _check_lengths(self, lengths: Lengths | None) -> Lengths | None:
        if lengths is None:
            return None
        lo, hi = check_window(lengths)
        if lo < 1:
            raise ValueError(f"length window must satisfy 1 <= min <= max (END counted), got {(lo, hi)}")
        return lo, hi

    # -- the generating distribution (H.1) -------------------------------------------------------
    def _base_log_probs(self, t: int, depth: int, lengths: Lengths | None) -> tuple[float, float, float]:
        """Unconditioned ``(log p(END), log p(each open), log p(close top))`` at position ``t``."""
        half, half_k = math.log(0.5), math.log(0.5 / self.k)
        if depth == 0:
            end_ok = lengths is None or self.truncation == "rejection" or t >= lengths[0]
            return (half, half_k, _NEG_INF) if end_ok else (_NEG_INF, -math.log(self.k), _NEG_INF)
        if depth < self.m:
            return (_NEG_INF, half_k, half)
        return (_NEG_INF, _NEG_INF, 0.0)

    def _table_cost(self, length: int) -> tuple[float, float]:
        """``(bytes, operations)`` of the exact table ``Z [length + 1, m + 1]`` float64, filled
        one (position, depth) cell per Python step (the length distribution takes as many)."""
        cells = (length + 1) * (self.m + 1)
        return 8.0 * cells, float(PYTHON_STEP * cells)

    def _log_z(self, lengths: Lengths | None) -> np.ndarray | None:
        if lengths is None:
            return None
        check_table_cost(self, lengths[1], self._table_cost, "its exact sampling table Z[position, depth]")
        return _log_z_table(self.k, self.m, self.truncation, *lengths)

    def _log_z_at(self, log_z: np.ndarray | None, t: int, depth: int) -> float:
        if log_z is None:
            return 0.0
        if t >= log_z.shape[0] or depth < 0 or depth > self.m:
            return _NEG_INF
        return float(log_z[t, depth])

    def _category_log_probs(
        self, t: int, depth: int, lengths: Lengths | None, log_z: np.ndarray | None
    ) -> tuple[float, float, float]:
        """Conditioned ``(log p(END), log p(each open), log p(close top))`` at ``(t, depth)``."""
        l_end, l_open, l_close = self._base_log_probs(t, depth, lengths)
        if log_z is None:
            return l_end, l_open, l_close
        here = self._log_z_at(log_z, t, depth)
        if here == _NEG_INF:
            raise ValueError(f"no string of {self} with lengths in {lengths} continues from position {t}")
        end_in = lengths[0] <= t + 1 <= lengths[1]
        return (
            l_end - here if end_in else _NEG_INF,
            l_open + self._log_z_at(log_z, t + 1, depth + 1) - here,
            l_close + self._log_z_at(log_z, t + 1, depth - 1) - here,
        )

    def next_log_probs(self, prefix: Sequence[int], lengths: Lengths | None = None) -> np.ndarray:
        """Exact ``log p(· | prefix)`` over all ``2k + 1`` ids, ``[2k + 1]``."""
        lengths = self._check_lengths(lengths)
        state = self.run(prefix)
        if not isinstance(state, tuple):
            raise ValueError(f"prefix {self.decode(prefix)!r} is not a prefix of any string of {self}")
        out = np.full(self.num_symbols, _NEG_INF)
        l_end, l_open, l_close = self._category_log_probs(
            len(prefix), len(state), lengths, self._log_z(lengths)
        )
        out[: self.k] = l_open
        if state:
            out[self.k + state[-1]] = l_close
        else:
            out[self.end_id] = l_end
        return out

    def token_log_probs(self, ids: Sequence[int], lengths: Lengths | None = None) -> np.ndarray:
        """Exact ``log p(w_t | w_<t)`` for each token (``-inf`` from the first impossible one)."""
        ids = self.check_ids(ids)
        lengths = self._check_lengths(lengths)
        log_z = self._log_z(lengths)
        if log_z is not None and log_z[0, 0] == _NEG_INF:
            raise ValueError(f"{self} has no string with length in {lengths}")
        out = np.full(len(ids), _NEG_INF)
        state: State = ()
        for t, tok in enumerate(ids):
            if not isinstance(state, tuple):
                break
            l_end, l_open, l_close = self._category_log_probs(t, len(state), lengths, log_z)
            if tok == self.end_id:
                lp = l_end if not state else _NEG_INF
            elif self.is_open(tok):
                lp = l_open
            else:
                lp = l_close if state and state[-1] == tok - self.k else _NEG_INF
            out[t] = lp
            if lp == _NEG_INF:
                break
            state = self.transition(state, tok)
        return out

    def length_log_probs(self, max_length: int) -> np.ndarray:
        """``log P(|w| = n)`` under H.1 (``END`` counted), ``n = 0..max_length``: a forward pass
        over the depth distribution."""
        if max_length < 0:
            raise ValueError(f"max_length must be >= 0, got {max_length}")
        check_table_cost(self, max_length, self._table_cost, "its length distribution")
        out = np.full(max_length + 1, _NEG_INF)
        dist = np.zeros(self.m + 1)
        dist[0] = 1.0
        for n in range(1, max_length + 1):
            if dist[0] > 0:
                out[n] = math.log(0.5 * dist[0])
            new = np.zeros_like(dist)
            new[1] += 0.5 * dist[0]
            for d in range(1, self.m + 1):
                if d < self.m:
                    new[d + 1] += 0.5 * dist[d]
                    new[d - 1] += 0.5 * dist[d]
                else:
                    new[d - 1] += dist[d]
            dist = new
        return out

    def _given_length_twin(self) -> DyckKM:
        # p(w | |w| = n) is H.1 conditioned on the length, i.e. the rejection truncation
        return self if self.truncation == "rejection" else DyckKM(self.k, self.m, "rejection")

    def sample_given_length(self, rng: np.random.Generator, length: int) -> list[int]:
        """One string of exactly ``length`` tokens from H.1 conditioned on its length."""
        return self._given_length_twin().sample(rng, (length, length))

    def log_prob_given_length(self, ids: Sequence[int]) -> float:
        return self._given_length_twin().log_prob(ids, (len(ids), len(ids)))

    def reference_log_probs(self, ids, lengths=None, length_sampling="natural") -> np.ndarray:
        if length_sampling == "uniform":
            return self._given_length_twin().token_log_probs(ids, (len(ids), len(ids)))
        return super().reference_log_probs(ids, lengths, length_sampling)

    def sample(self, rng: np.random.Generator, lengths: Lengths | None = None) -> list[int]:
        """One string from H.1 (restricted to ``lengths`` by ``truncation``), exactly, without
        rejection loops."""
        lengths = self._check_lengths(lengths)
        log_z = self._log_z(lengths)
        if log_z is not None and log_z[0, 0] == _NEG_INF:
            raise ValueError(f"{self} has no string with length in {lengths}")
        stack: list[int] = []
        out: list[int] = []
        while True:
            l_end, l_open, l_close = self._category_log_probs(len(out), len(stack), lengths, log_z)
            p = np.exp([l_end, l_open + math.log(self.k), l_close])
            choice = rng.choice(3, p=p / p.sum())
            if choice == 0:
                out.append(self.end_id)
                return out
            if choice == 1:
                i = int(rng.integers(self.k))
                stack.append(i)
                out.append(i)
            else:
                out.append(self.k + stack.pop())


@lru_cache(maxsize=64)
def _log_z_table(k: int, m: int, truncation: str, lo: int, hi: int) -> np.ndarray:
    """``log Z[t, d]``: log-probability that a string at position ``t`` (tokens emitted) with
    depth ``d`` ends with total length (``END`` counted) in ``[lo, hi]``; ``[hi, m + 1]``.

    Backward recursion: ``Z[t, 0] = p_end·[lo ≤ t+1 ≤ hi] + k·p_open·Z[t+1, 1]``,
    ``Z[t, d] = k·p_open·Z[t+1, d+1] + p_close·Z[t+1, d−1]``, ``Z[t, m] = Z[t+1, m−1]``, and
    ``Z[t, ·] = 0`` for ``t ≥ hi`` (any end would be too long).
    """
    lang = DyckKM(k, m, truncation)  # type: ignore[arg-type]
    table = np.full((hi + 1, m + 1), _NEG_INF)
    for t in range(hi - 1, -1, -1):
        for d in range(m + 1):
            l_end, l_open, l_close = lang._base_log_probs(t, d, (lo, hi))
            terms = []
            if lo <= t + 1 <= hi:
                terms.append(l_end)
            if d < m:
                terms.append(l_open + math.log(k) + table[t + 1, d + 1])
            if d > 0:
                terms.append(l_close + table[t + 1, d - 1])
            table[t, d] = _logsumexp(terms)
    return table


def _logsumexp(values: list[float]) -> float:
    finite = [v for v in values if v != _NEG_INF]
    if not finite:
        return _NEG_INF
    top = max(finite)
    return top + math.log(sum(math.exp(v - top) for v in finite))
