"""The regular languages of Butoi et al.'s (2025) benchmark (:mod:`memrnn.languages.recognizers`),
each as the DFA of an :class:`AutomatonRecognitionLanguage`."""

from __future__ import annotations

import itertools
from collections.abc import Callable

from memrnn.languages.recognizers.base import (
    AutomatonRecognitionLanguage,
)


def _table(num_states: int, num_symbols: int, arcs: dict[tuple[int, int], int]) -> list[list[int]]:
    delta = [[-1] * num_symbols for _ in range(num_states)]
    for (q, a), r in arcs.items():
        delta[q][a] = r
    return delta


def _modular_arithmetic_table() -> list[list[int]]:
    ops: tuple[Callable[[int, int], int], ...] = (lambda a, b: a + b, lambda a, b: a - b, lambda a, b: a * b)
    arcs = {(0, d): 1 + d for d in range(5)}
    for v in range(5):
        arcs[(1 + v, 8)] = 21 + v  # "="
        arcs[(21 + v, v)] = 26
        for o in range(3):
            arcs[(1 + v, 5 + o)] = 6 + 3 * v + o
            for d in range(5):
                arcs[(6 + 3 * v + o, d)] = 1 + ops[o](v, d) % 5
    return _table(27, 9, arcs)


def _bounded_dyck_table(k: int, m: int) -> list[list[int]]:
    """Dyck-(k, m) as a DFA: a state is the stack of open bracket types (depth <= m); symbol
    ``2b`` opens and ``2b + 1`` closes type ``b``."""
    stacks = [s for d in range(m + 1) for s in itertools.product(range(k), repeat=d)]
    index = {s: i for i, s in enumerate(stacks)}
    arcs = {}
    for i, s in enumerate(stacks):
        if len(s) < m:
            for b in range(k):
                arcs[(i, 2 * b)] = index[(*s, b)]
        if s:
            arcs[(i, 2 * s[-1] + 1)] = index[s[:-1]]
    return _table(len(stacks), 2 * k, arcs)


class EvenPairs(AutomatonRecognitionLanguage):
    """Binary strings whose numbers of ``01`` and ``10`` pairs are equal: empty or first = last."""

    name, level, alphabet = "even_pairs", "R", ("0", "1")
    # 0: start; 1/2: first was 0/1 and the last equals it; 3/4: first was 0/1, last differs
    delta = _table(5, 2, {(0, 0): 1, (0, 1): 2, (1, 0): 1, (1, 1): 3, (3, 0): 1, (3, 1): 3,
                          (2, 1): 2, (2, 0): 4, (4, 1): 2, (4, 0): 4})  # fmt: skip
    start, accept = 0, frozenset({0, 1, 2})


class Repeat01(AutomatonRecognitionLanguage):
    """``(01)*``."""

    name, level, alphabet = "repeat_01", "R", ("0", "1")
    delta = _table(2, 2, {(0, 0): 1, (1, 1): 0})
    start, accept = 0, frozenset({0})


class Parity(AutomatonRecognitionLanguage):
    """Binary strings with an odd number of 1s."""

    name, level, alphabet = "parity", "R", ("0", "1")
    delta = _table(2, 2, {(0, 0): 0, (0, 1): 1, (1, 0): 1, (1, 1): 0})
    start, accept = 0, frozenset({1})


class First(AutomatonRecognitionLanguage):
    """Binary strings that begin with 1."""

    name, level, alphabet = "first", "R", ("0", "1")
    delta = _table(2, 2, {(0, 1): 1, (1, 0): 1, (1, 1): 1})
    start, accept = 0, frozenset({1})


class CycleNavigation(AutomatonRecognitionLanguage):
    """Moves ``>`` (+1), ``<`` (−1), ``=`` (stay) on a 5-cycle starting at 0, then the digit of
    the position reached (states 0–4: the position; 5: done)."""

    name, level, alphabet = "cycle_navigation", "R", (">", "<", "=", "0", "1", "2", "3", "4")
    delta = _table(
        6,
        8,
        {
            **{(i, 0): (i + 1) % 5 for i in range(5)},
            **{(i, 1): (i - 1) % 5 for i in range(5)},
            **{(i, 2): i for i in range(5)},
            **{(i, 3 + i): 5 for i in range(5)},
        },
    )
    start, accept = 0, frozenset({5})


class ModularArithmetic(AutomatonRecognitionLanguage):
    """``d (op d)* = r`` over digits 0–4 and ``+ - *``, evaluated left to right modulo 5 (no
    precedence), ``r`` the value.  States: 0 start; 1+v value ``v``; 6 + 3v + op after ``v op``;
    21 + v after ``=`` with value ``v``; 26 done."""

    name, level, alphabet = "modular_arithmetic", "R", ("0", "1", "2", "3", "4", "+", "-", "*", "=")
    delta = _modular_arithmetic_table()
    start, accept = 0, frozenset({26})


class Dyck23(AutomatonRecognitionLanguage):
    """Dyck-(2, 3): balanced ``( )`` and ``[ ]``, nesting depth at most 3.  A state is the stack of
    open brackets (at most 3), numbered in base 3 with digits 1 = ``(``, 2 = ``[``."""

    name, level, alphabet = "dyck_2_3", "R", ("(", ")", "[", "]")
    delta = _bounded_dyck_table(2, 3)
    start, accept = 0, frozenset({0})


# -- hand-coded languages --------------------------------------------------------------------------
