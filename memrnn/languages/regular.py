"""Regular languages given by a deterministic PFSA (Cotterell et al. 2023): exact probabilities, exact
sampling given a length, and the latch language of Paaßen et al. 2021 (odd number of ``1``s)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from memrnn.languages.automata import PFSA
from memrnn.languages.base import Lengths, SymbolLanguage, check_table_cost


class PFSALanguage(SymbolLanguage):
    """The strings of a deterministic PFSA followed by ``END`` (its final probability).

    ``token_log_probs`` is exact, also within a length window (a backward table over
    (position, state) conditions each step on ending inside the window).
    """

    def __init__(self, pfsa: PFSA) -> None:
        self.pfsa = pfsa
        self.symbols = (*pfsa.alphabet, "END")

    def __repr__(self) -> str:
        return f"PFSALanguage({self.pfsa!r})"

    def _run(self, ids: Sequence[int]) -> list[str | None]:
        return self.pfsa.dfa.run([self.symbols[i] for i in ids])

    def accepts(self, ids: Sequence[int]) -> bool:
        ids = self.check_ids(ids)
        if not self.is_complete(ids):
            return False
        q = self._run(ids[:-1])[-1]
        return q is not None and self.pfsa.final.get(q, 0.0) > 0

    def allowed_next(self, prefix: Sequence[int]) -> frozenset[int]:
        prefix = self.check_ids(prefix)
        if self.end_id in prefix:
            return frozenset()
        q = self._run(prefix)[-1]
        if q is None:
            return frozenset()
        return frozenset(int(i) for i in np.flatnonzero(np.isfinite(self.pfsa.next_log_probs(q))))

    _table_name = "its backward table"

    def _table_cost(self, length: int) -> tuple[float, float]:
        return self.pfsa.table_cost(max(length - 1, 0))

    def _symbol_length_log_probs(self, max_symbols: int) -> np.ndarray:
        return self.pfsa.length_log_probs(max_symbols)

    def _sample_symbols(self, rng: np.random.Generator, n: int) -> list[int]:
        index = {s: i for i, s in enumerate(self.symbols)}
        return [index[a] for a in self.pfsa.sample_given_length(rng, n)]

    def _beta(self, lengths: Lengths) -> np.ndarray:
        """``log β[t, q]``: probability that from state q after t tokens the string ends with a
        length (``END`` counted) in the window; ``[hi + 1, |Q|]``."""
        lo, hi = self._check_window(lengths)
        check_table_cost(self, hi, self._table_cost, self._table_name)
        idx = self.pfsa.dfa.q_index
        beta = np.zeros((hi + 1, len(self.pfsa.states)))
        fin = np.array([self.pfsa.final.get(q, 0.0) for q in self.pfsa.states])
        for t in range(hi - 1, -1, -1):
            if lo <= t + 1 <= hi:
                beta[t] += fin
            for (q, a), p in self.pfsa.prob.items():
                beta[t, idx[q]] += p * beta[t + 1, idx[self.pfsa.dfa.delta[(q, a)]]]
        with np.errstate(divide="ignore"):
            return np.log(beta)

    def token_log_probs(self, ids: Sequence[int], lengths: Lengths | None = None) -> np.ndarray:
        ids = self.check_ids(ids)
        beta = self._beta(lengths) if lengths is not None else None
        idx = self.pfsa.dfa.q_index
        out = np.full(len(ids), -math.inf)
        q = self.pfsa.start
        for t, tok in enumerate(ids):
            lp = self.pfsa.next_log_probs(q)[tok]
            if beta is not None:
                if tok == self.end_id:
                    ok = lengths[0] <= t + 1 <= lengths[1]
                    lp = lp - beta[t, idx[q]] if ok else -math.inf
                else:
                    q2 = self.pfsa.dfa.delta.get((q, self.symbols[tok]))
                    nxt = beta[t + 1, idx[q2]] if q2 is not None and t + 1 < beta.shape[0] else -math.inf
                    lp = lp + nxt - beta[t, idx[q]]
            out[t] = lp
            if not np.isfinite(lp) or tok == self.end_id:
                break
            q = self.pfsa.dfa.delta[(q, self.symbols[tok])]
        return out


class Latch(PFSALanguage):
    """Paaßen et al.'s (2021) latch language: words over ``0, 1`` with an odd number of ``1`` (regular
    expression ``(0*10*)*0*10*``); the per-prefix acceptor label is the latch task's output.
    PFSA: two states (even, odd parity), each symbol ``(1 − p_end)/2``, ``END`` with ``p_end``
    in the odd state only (so every sample is in the language)."""

    def __init__(self, p_end: float = 0.05) -> None:
        if not 0 < p_end < 1:
            raise ValueError(f"p_end must be in (0, 1), got {p_end}")
        self.p_end = p_end
        h = (1 - p_end) / 2
        pfsa = PFSA(
            ["even", "odd"],
            ["0", "1"],
            [
                ("even", "0", "even", 0.5),
                ("even", "1", "odd", 0.5),
                ("odd", "0", "odd", h),
                ("odd", "1", "even", h),
            ],
            "even",
            {"odd": p_end},
        )
        super().__init__(pfsa)

    def __repr__(self) -> str:
        return f"Latch(p_end={self.p_end})"

    __str__ = __repr__
