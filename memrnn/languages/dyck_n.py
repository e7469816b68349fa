"""Dyck-n with unbounded depth: Suzgun et al.'s PCFG (the Dyck1/2/3 of Paaßen et al. 2021) and DuSell & Chiang's
Dyck language.  Lengths count ``END``."""

from __future__ import annotations

from collections.abc import Sequence

from memrnn.core.checks import positive_int
from memrnn.languages.automata import DPDA, EMPTY, NOOP, POP, push
from memrnn.languages.grammar import GrammarLanguage, Root, StackOracle, bracket_pairs
from memrnn.languages.pcfg import PCFG, cont


class DyckN(StackOracle, GrammarLanguage):
    """Dyck-n with unbounded depth, Suzgun et al.'s PCFG: ``S → (_i S )_i`` with ``p``
    (split evenly over the ``n`` types), ``S → S S`` with ``q``, ``S → ε`` otherwise
    (p = 0.5, q = 0.25).  Default windows: Suzgun's 2–50 train and 52–100 test symbols.

    Ids: opens ``0..n-1``, closes ``n..2n-1``, ``END`` = ``2n``.
    """

    train_lengths = (3, 51)
    test_lengths = (53, 101)

    def __init__(self, n: int = 1, p: float = 0.5, q: float = 0.25) -> None:
        positive_int("n", n)
        if not (p > 0 and q >= 0 and p + q < 1):
            raise ValueError(f"need 0 < p, 0 <= q, p + q < 1; got p={p}, q={q}")
        self.n, self.p, self.q = n, p, q
        self.bracket_types = n
        self.pairs = bracket_pairs(n)
        rules = [("S", (o, "S", c), p / n) for o, c in self.pairs] + [
            ("S", ("S", "S"), q),
            ("S", (), 1 - p - q),
        ]
        super().__init__(PCFG(rules, "S", [o for o, _ in self.pairs] + [c for _, c in self.pairs]))
        self._close_of = dict(self.pairs)

    def __repr__(self) -> str:
        return f"DyckN(n={self.n}, p={self.p}, q={self.q})"

    def pda(self) -> DPDA:
        """The DPDA (input: the symbols, ``END`` included): push each open bracket, pop on its
        close, accept on ``END`` with an empty stack."""
        t = [("q", o, "*", "q", push(o)) for o, _ in self.pairs]
        t += [("q", c, o, "q", POP) for o, c in self.pairs]
        t.append(("q", "END", EMPTY, "acc", NOOP))
        return DPDA(["q", "acc"], self.symbols, [o for o, _ in self.pairs], t, "q", ["acc"])

    __str__ = __repr__

    def _start(self):
        return ()

    def _step(self, st, sym):
        if sym in self._close_of:
            return (*st, sym)
        return st[:-1] if st and self._close_of[st[-1]] == sym else None

    def _options(self, st):
        return {o for o, _ in self.pairs} | ({self._close_of[st[-1]]} if st else set()), not st


class DuSellDyck(StackOracle, GrammarLanguage):
    """DuSell & Chiang's Dyck language (2 bracket types): ``S → S T (cont(mean_bracket_splits))
    | T``; ``T → (_i S )_i`` (``cont(mean_nesting_depth − 1)``, split evenly) ``| (_i )_i``.
    Strings are non-empty.  ``root="public"`` reproduces the public code (no single top-level
    group; every log-probability ``ln 2`` higher)."""

    train_lengths = (41, 81)
    test_lengths = (41, 101)

    def __init__(
        self,
        n: int = 2,
        mean_bracket_splits: float = 1.0,
        mean_nesting_depth: float = 40.0,
        root: Root = "paper",
    ) -> None:
        positive_int("n", n)
        if not mean_nesting_depth >= 1:
            raise ValueError(
                f"mean_nesting_depth must be >= 1 (a group nests itself), got {mean_nesting_depth}"
            )
        s, t = cont(mean_bracket_splits), cont(mean_nesting_depth - 1)
        self.n, self.root = n, root
        self.bracket_types = n
        self.mean_bracket_splits, self.mean_nesting_depth = mean_bracket_splits, mean_nesting_depth
        self.pairs = bracket_pairs(n)
        rules = [("S", ("S", "T"), s), ("S", ("T",), 1 - s)]
        for o, c in self.pairs:
            rules += [("T", (o, "S", c), t / n), ("T", (o, c), (1 - t) / n)]
        super().__init__(PCFG(rules, "S", [o for o, _ in self.pairs] + [c for _, c in self.pairs], root=root))
        self._close_of = dict(self.pairs)

    def __repr__(self) -> str:
        return f"DuSellDyck(n={self.n}, {self.mean_bracket_splits}, {self.mean_nesting_depth}, root={self.root!r})"

    __str__ = __repr__

    _start = DyckN._start
    _step = DyckN._step

    def pda(self) -> DPDA:
        """As Dyck-n's, from a start state that rejects the empty string."""
        t = [(q, o, "*", "q", push(o)) for o, _ in self.pairs for q in ("q0", "q")]
        t += [("q", c, o, "q", POP) for o, c in self.pairs]
        t.append(("q", "END", EMPTY, "acc", NOOP))
        return DPDA(["q0", "q", "acc"], self.symbols, [o for o, _ in self.pairs], t, "q0", ["acc"])

    def _options(self, st):
        return {o for o, _ in self.pairs} | ({self._close_of[st[-1]]} if st else set()), st == ()

    def accepts(self, ids: Sequence[int]) -> bool:
        ids = self.check_ids(ids)
        return len(ids) > 1 and super().accepts(ids)

    def allowed_next_all(self, ids: Sequence[int]) -> list[frozenset[int]]:
        out = super().allowed_next_all(ids)
        if out:
            out[0] = out[0] - {self.end_id}
        return out

    def accepts_prefixes(self, ids: Sequence[int]) -> list[bool]:
        out = super().accepts_prefixes(ids)
        out[0] = False  # the empty string is not in this language
        return out
