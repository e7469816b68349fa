"""Reversal languages: marked ``w#w^R`` (and the palindromes ``w$w^R`` of Paaßen et al. 2021), unmarked ``ww^R``
and padded ``w x^p w^R`` (DuSell & Chiang's benchmark, ``docs/references.md``)."""

from __future__ import annotations

from collections.abc import Sequence

from memrnn.languages.automata import DPDA, EMPTY, NOOP, POP, push
from memrnn.languages.grammar import GrammarLanguage, Root, StackOracle
from memrnn.languages.pcfg import PCFG, cont


class MarkedReversal(StackOracle, GrammarLanguage):
    """``w # w^R`` over ``a, b``: ``S → a S a | b S b`` (``cont(mean_length)/2`` each) ``| #``.
    With ``marker="$"`` and the default train window this is Paaßen et al.'s (2021) palindrome language."""

    train_lengths = (41, 81)
    test_lengths = (41, 101)

    def __init__(
        self, mean_length: float = 60.0, marker: str = "#", alphabet: Sequence[str] = ("a", "b")
    ) -> None:
        c = cont(mean_length)
        self.mean_length, self.marker, self.alphabet = mean_length, marker, tuple(alphabet)
        rules = [("S", (x, "S", x), c / len(self.alphabet)) for x in self.alphabet] + [
            ("S", (marker,), 1 - c)
        ]
        super().__init__(PCFG(rules, "S", [*self.alphabet, marker]))

    def __repr__(self) -> str:
        return f"{type(self).__name__}(mean_length={self.mean_length})"

    __str__ = __repr__

    def pda(self) -> DPDA:
        """The DPDA: push the first half, switch at the marker, pop matching symbols."""
        t = [("P", x, "*", "P", push(x)) for x in self.alphabet]
        t.append(("P", self.marker, "*", "Q", NOOP))
        t += [("Q", x, x, "Q", POP) for x in self.alphabet]
        t.append(("Q", "END", EMPTY, "acc", NOOP))
        return DPDA(["P", "Q", "acc"], self.symbols, self.alphabet, t, "P", ["acc"])

    def _start(self):
        return ((), False)

    def _step(self, st, sym):
        stack, second = st
        if not second:
            return (
                ((*stack, sym), False)
                if sym in self.alphabet
                else (stack, True)
                if sym == self.marker
                else None
            )
        return (stack[:-1], True) if stack and stack[-1] == sym else None

    def _options(self, st):
        stack, second = st
        if not second:
            return {*self.alphabet, self.marker}, False
        return ({stack[-1]} if stack else set()), not stack


class Palindrome(MarkedReversal):
    """Paaßen et al.'s (2021) palindromes ``w $ w^R`` over ``a, b`` (Equation 4), sampled from the PCFG
    ``S → a S a | b S b | $``; windows: up to 50 symbols for training, 50–100 for testing."""

    train_lengths = (2, 51)
    test_lengths = (51, 101)

    def __init__(self, mean_length: float = 20.0) -> None:
        super().__init__(mean_length, marker="$")


class UnmarkedReversal(GrammarLanguage):
    """``w w^R`` over ``a, b``: ``S → a S a | b S b`` (``cont(mean_length)/2`` each) ``| ε``
    (nondeterministic: the oracle is Earley's).  ``root="public"`` conditions on ``w ≠ ε``."""

    train_lengths = (41, 81)
    test_lengths = (41, 101)

    def __init__(self, mean_length: float = 60.0, root: Root = "paper") -> None:
        c = cont(mean_length)
        self.mean_length, self.root = mean_length, root
        rules = [("S", ("a", "S", "a"), c / 2), ("S", ("b", "S", "b"), c / 2), ("S", (), 1 - c)]
        super().__init__(PCFG(rules, "S", ["a", "b"], root=root))

    def __repr__(self) -> str:
        return f"UnmarkedReversal(mean_length={self.mean_length}, root={self.root!r})"

    __str__ = __repr__


class PaddedReversal(GrammarLanguage):
    """``w x^p w^R`` over ``a, b``: ``S → x S x`` (``cont(mean_content_length)/2`` each)
    ``| T_x`` (``(1 − cont)/2`` each), ``T_x → x T_x (cont(mean_padding_length)) | ε``."""

    train_lengths = (41, 81)
    test_lengths = (41, 101)

    def __init__(
        self, mean_content_length: float = 60.0, mean_padding_length: float = 30.0, root: Root = "paper"
    ) -> None:
        c, d = cont(mean_content_length), cont(mean_padding_length)
        self.mean_content_length, self.mean_padding_length, self.root = (
            mean_content_length,
            mean_padding_length,
            root,
        )
        rules = []
        for x in ("a", "b"):
            rules += [("S", (x, "S", x), c / 2), ("S", (f"T_{x}",), (1 - c) / 2)]
            rules += [(f"T_{x}", (x, f"T_{x}"), d), (f"T_{x}", (), 1 - d)]
        super().__init__(PCFG(rules, "S", ["a", "b"], root=root))

    def __repr__(self) -> str:
        return f"PaddedReversal({self.mean_content_length}, {self.mean_padding_length}, root={self.root!r})"

    __str__ = __repr__
