"""Paaßen et al.'s (2021) JSON-lite language."""

from __future__ import annotations

from memrnn.languages.automata import DPDA, EMPTY, NOOP, POP, push
from memrnn.languages.grammar import GrammarLanguage
from memrnn.languages.pcfg import PCFG


class JsonLite(GrammarLanguage):
    """Paaßen et al.'s (2021) simplified JSON: numbers ``n``, strings ``s``, keys ``k``.  PCFG:
    ``V → n | s | { } | [ ] | { O } | [ A ]`` (weights ``p_scalar/2, p_scalar/2, p_empty/2,
    p_empty/2, (1 − p_scalar − p_empty)/2`` twice), ``O → k : V , O (p_more) | k : V``,
    ``A → V , A (p_more) | V``.  (The paper's own weights live in its unreachable code; these
    are ours.)  The tests check Earley membership against the Table 1 LR(1) automaton."""

    train_lengths = (2, 51)
    test_lengths = (51, 101)

    def __init__(self, p_scalar: float = 0.5, p_empty: float = 0.2, p_more: float = 0.4) -> None:
        if not (p_scalar > 0 and p_empty >= 0 and p_scalar + p_empty < 1 and 0 <= p_more < 1):
            raise ValueError(f"bad JSON-lite weights p_scalar={p_scalar}, p_empty={p_empty}, p_more={p_more}")
        self.p_scalar, self.p_empty, self.p_more = p_scalar, p_empty, p_more
        rest = (1 - p_scalar - p_empty) / 2
        rules = [
            ("V", ("n",), p_scalar / 2),
            ("V", ("s",), p_scalar / 2),
            ("V", ("{", "}"), p_empty / 2),
            ("V", ("[", "]"), p_empty / 2),
            ("V", ("{", "O", "}"), rest),
            ("V", ("[", "A", "]"), rest),
            ("O", ("k", ":", "V", ",", "O"), p_more),
            ("O", ("k", ":", "V"), 1 - p_more),
            ("A", ("V", ",", "A"), p_more),
            ("A", ("V",), 1 - p_more),
        ]
        super().__init__(PCFG(rules, "V", ["{", "}", "[", "]", ",", ":", "n", "s", "k"]))

    def __repr__(self) -> str:
        return f"JsonLite(p_scalar={self.p_scalar}, p_empty={self.p_empty}, p_more={self.p_more})"

    def pda(self) -> DPDA:
        """A DPDA: the stack holds the open containers (``o`` object, ``a`` array); states say
        what may come next: ``V`` a value, ``VA`` a value or ``]``, ``KC`` a key or ``}``,
        ``C`` the colon, ``K`` a key, ``AFTER`` what follows a value (decided by the top)."""
        t = []
        for q in ("V", "VA"):
            t += [(q, x, "*", "AFTER", NOOP) for x in ("n", "s")]
            t += [(q, "{", "*", "KC", push("o")), (q, "[", "*", "VA", push("a"))]
        t += [("VA", "]", "a", "AFTER", POP), ("KC", "}", "o", "AFTER", POP)]
        t += [("KC", "k", "*", "C", NOOP), ("K", "k", "*", "C", NOOP), ("C", ":", "*", "V", NOOP)]
        t += [("AFTER", ",", "o", "K", NOOP), ("AFTER", ",", "a", "V", NOOP)]
        t += [("AFTER", "}", "o", "AFTER", POP), ("AFTER", "]", "a", "AFTER", POP)]
        t.append(("AFTER", "END", EMPTY, "acc", NOOP))
        states = ["V", "VA", "KC", "C", "K", "AFTER", "acc"]
        return DPDA(states, self.symbols, ["o", "a"], t, "V", ["acc"])

    __str__ = __repr__
