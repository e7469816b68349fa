"""The 18 languages of FLaRe, the recognizer benchmark of Butoi, Khalighinejad, Svete, Valvoda,
Cotterell & DuSell (2025), "Training neural networks as recognizers of formal languages" (ICLR),
with its sampling protocol.

A *recognizer* reads a whole string and says whether it is in the language.  Each language here
gives membership (:meth:`RecognitionLanguage.accepts`), a sampler of positive strings in a length
window (:meth:`RecognitionLanguage.sample`, each language's own length law, below) and the
benchmark's negatives (:func:`sample_negative`).  Strings are tuples of symbol ids
``0 .. len(alphabet) - 1``; ``alphabet`` names them.

The languages (level in the Chomsky hierarchy; alphabet):

========================  =====  ===================================================================
``even_pairs``            R      {0,1}: empty, or first symbol = last symbol
``repeat_01``             R      {0,1}: (01)*
``parity``                R      {0,1}: an odd number of 1s
``cycle_navigation``      R      {>,<,=,0..4}: moves on a 5-cycle from 0, then the position reached
``modular_arithmetic``    R      {0..4,+,-,*,=}: ``d (op d)* = r``, evaluated left to right mod 5
``dyck_2_3``              R      {(,),[,]}: balanced, nesting depth at most 3
``first``                 R      {0,1}: the first symbol is 1
``majority``              DCF    {0,1}: more 1s than 0s
``stack_manipulation``    DCF    {0,1,PUSH,POP,#}: a stack (bottom first), operations ``PUSH b`` /
                                 ``POP`` (never on an empty stack), ``#``, the final stack top first
``marked_reversal``       DCF    {0,1,#}: ``w # reverse(w)``
``unmarked_reversal``     CF     {0,1}: ``w reverse(w)``
``marked_copy``           CS     {0,1,#}: ``w # w``
``missing_duplicate``     CS     {0,1,_}: ``w w`` with one 1 replaced by ``_``
``odds_first``            CS     {0,1,#}: ``w # w[0::2] w[1::2]``
``binary_addition``       CS     {0,1,+,=}: ``x + y = z``, little-endian binary, ``z = x + y``
``binary_multiplication`` CS     {0,1,×,=}: ``x × y = z``, little-endian binary, ``z = x y``
``compute_sqrt``          CS     {0,1,=}: ``x = z``, little-endian binary, ``z = floor(sqrt(x))``
``bucket_sort``           CS     {1..5,#}: ``w # sorted(w)``
========================  =====  ===================================================================

Binary numbers are written least significant bit first, any length >= 1 (zeros pad the high end).

Positive strings (the benchmark's length laws, section 4 and appendix of the paper):

* regular languages: the length uniform over the lengths in the window that have a string, then the
  string drawn from the automaton made probabilistic with uniform probabilities over each state's
  actions (its arcs, and accepting when the state is final), conditioned on that length: Butoi et
  al.'s Algorithm 1 and the public code's sampler (``sampling="pdfa"``, the default).  A string's
  probability given its length is then proportional to ``prod 1 / actions(q)`` over the states of
  its run, so for ``parity``, ``even_pairs`` and ``dyck_2_3`` the strings of a length are *not*
  equally likely (``parity`` favours the runs that stay in the even state, 2 actions against 3);
  for the other four every string of a length has the same product.  ``sampling="uniform"``
  draws the string uniformly among that length's strings instead (memrnn's law before it followed
  the code).  Both are exact (Python integers over the automaton); the public code computes the
  same law in float16 log weights, whose rounding moves each step's probability by up to about
  0.002 at length 40 and 0.02 at length 500 (``parity``);
* ``w``-based languages (reversals, copy, odds first, bucket sort): ``|w|`` uniform over what the
  window allows, symbols uniform;
* ``majority``: length ``n`` uniform in ``[max(lo, 1), hi]``, the count of 1s uniform in
  ``[n // 2 + 1, n]``, shuffled;
* ``stack_manipulation``: the initial stack size ``s`` and the number of pushes ``p`` uniform
  (``2s + 3p + 1 <= hi``), then push or pop with equal chance (pop only on a non-empty stack)
  until a push is drawn after the ``p``-th;
* arithmetic: the total length uniform, split among the operands by a Dirichlet draw (weights
  1, 1, 1 for addition; 1, 1, 2 for multiplication; 2, 1 for the square root), the numbers
  uniform among those that fit (the public code bounds multiplication's ``y`` by the float
  ``floor(max_z / x)``, which rounding can put above the exact bound memrnn uses: at most about
  one draw in ``2**53``).

``compute_sqrt``'s root (``sqrt``): the public code computes ``z`` as ``floor(sqrt(x))`` in
floating point (``math.floor(math.sqrt(x))``), which for ``x`` beyond 2**52 or so is not the
integer square root: ``x`` is rounded to 53 bits first, so ``z``'s low bits come out zero.  Its
membership test, its positives and its next-symbol sets all use that ``z``, so its language is
``x = floor(float sqrt(x))``; ``sqrt="public"`` (the default) is that language and
``sqrt="exact"`` the mathematical one (``math.isqrt``).  They agree on every ``x`` below 2**52 and
differ on about a third of the positives of lengths 0–500 (696, 729 and 742 of 2,000 exact
positives fail the public test, three seeds).  The public convention cannot read an ``x`` of 1,025 bits or more (floats end there;
the public code raises ``OverflowError``): a ``ValueError`` says so.

Negatives (:func:`sample_negative`): with probability ``perturbation_probability`` (0.5) a positive
string with ``Geometric(1/2)`` random edits (insert, replace or delete a symbol, each uniform
among those that keep the length in the window), else a uniformly random string of uniform length;
redrawn (up to 100 times) until it is not in the language.  By default, as the public code by
default, each redraw decides afresh between an edited positive and a random string and draws a new
number of edits, so the rejection favours whichever kind is more often negative.  ``strict_edits``
is the public code's ``--strict-num-edits-distribution``: the kind and the number of edits are
drawn once per negative and only the strings are redrawn, so that the negatives keep exactly the
share ``perturbation_probability`` of edited strings and the ``Geometric(1/2)`` law of edits.
:func:`sample_labelled` gives the benchmark's splits: each string positive or negative with
probability 1/2 (:data:`FLARE_SPLITS`), optionally none of them among ``excluded`` strings (the
public code's held-out test set ``test-short-held-out``: 1,000 strings of lengths 0–40, none of
them a training, short-validation or long-validation string, positives redrawn up to 100 times).

Next-symbol sets (:meth:`RecognitionLanguage.next_symbols`, the targets of the paper's
next-symbol-prediction loss): after each prefix of a string of the language, every symbol with
which the prefix can still be completed to a string of the language, and end-of-string
(:attr:`RecognitionLanguage.eos`) when the prefix is one.  The public code computes the same sets
but for ``stack_manipulation``, whose sets depend on how its sampler made the string
(``convention="public"``: ``POP`` offered on the empty initial stack, ``PUSH`` withheld after the
string's last push).

Symbol ids follow the order of ``alphabet``; the public code numbers each language's symbols by
their sorted names (e.g. ``cycle_navigation``: ``0 1 2 3 4 < = >``).  The strings are the same;
only which embedding row a symbol gets differs.  The released public code's
``cycle_navigation_dfa`` calls a function it does not define (``NameError``); memrnn's automaton
is the one its ``cycle_navigation()`` builds.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from collections.abc import Set as AbstractSet
from typing import ClassVar

import numpy as np

from memrnn.languages.base import check_rng, check_window
from memrnn.languages.definitions import (
    binary_addition,
    binary_multiplication,
    bucket_sort,
    little_endian,
    little_endian_value,
)

__all__ = [
    "FLARE_LANGUAGES",
    "FLARE_SPLITS",
    "SAMPLINGS",
    "SQRTS",
    "AutomatonRecognitionLanguage",
    "RecognitionLanguage",
    "flare_language",
    "random_edit",
    "sample_labelled",
    "sample_negative",
    "sample_negative_with_edits",
    "sample_positive",
    "uniform_int",
]

Window = tuple[int, int]

#: how the regular languages draw a string of a given length (:class:`AutomatonRecognitionLanguage`)
SAMPLINGS = ("pdfa", "uniform")
#: ``compute_sqrt``'s root: the public code's float ``floor(sqrt(x))`` or the exact ``isqrt``
SQRTS = ("public", "exact")


def uniform_int(rng: np.random.Generator, lo: int, hi: int) -> int:
    """An integer uniform in ``[lo, hi]`` for Python integers of any size (numbers of hundreds of
    bits in the arithmetic languages): 62-bit draws below, rejection over random bits above."""
    if hi < lo:
        raise ValueError(f"empty range [{lo}, {hi}]")
    span = hi - lo
    if span < 2**62:
        return lo + int(rng.integers(0, span + 1))
    bits = span.bit_length()
    while True:
        words = rng.integers(0, 2**32, size=(bits + 31) // 32, dtype=np.uint64)
        x = 0
        for w in words:
            x = (x << 32) | int(w)
        x >>= 32 * len(words) - bits
        if x <= span:
            return lo + x


class RecognitionLanguage(ABC):
    """A language of the recognizer benchmark: membership, a positive sampler and the alphabet.

    Subclasses set ``name``, ``level`` (``"R"``, ``"DCF"``, ``"CF"`` or ``"CS"``) and
    ``alphabet``, and give :meth:`accepts` and :meth:`_sample` (a positive string in the window,
    or ``None`` when the window has none)."""

    name: ClassVar[str]
    level: ClassVar[str]
    alphabet: ClassVar[tuple[str, ...]]

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"

    @property
    def num_symbols(self) -> int:
        return len(self.alphabet)

    @property
    def eos(self) -> int:
        """End-of-string in next-symbol sets: the id after the alphabet's."""
        return len(self.alphabet)

    def next_symbols(self, ids: Sequence[int], convention: str = "language") -> list[frozenset[int]]:
        """The next-symbol sets of a string of the language (Butoi et al. 2025, the
        next-symbol-prediction objective): ``len(ids) + 1`` sets; set ``i`` holds every symbol
        ``a`` such that ``ids[:i] a`` is a prefix of a string of the language, and :attr:`eos`
        when ``ids[:i]`` is in the language.  ``convention="public"``: the public code's sets
        (they differ for ``stack_manipulation`` only; module docstring).  A string outside the
        language raises."""
        if convention not in ("language", "public"):
            raise ValueError(f"convention must be 'language' or 'public', got {convention!r}")
        s = self.check_ids(ids)
        if not self._accepts(s):
            raise ValueError(
                f"{self.name}: next-symbol sets are for strings of the language; {self.decode(s)!r} is not one"
            )
        return [frozenset(x) for x in self._next_symbols(s, convention)]

    @abstractmethod
    def _next_symbols(self, s: tuple[int, ...], convention: str) -> list[set[int]]:
        """:meth:`next_symbols` of a string ``s`` of the language."""

    def check_ids(self, ids: Sequence[int]) -> tuple[int, ...]:
        """``ids`` as a tuple of ints; an id outside the alphabet raises, naming it and where."""
        out = []
        for i, t in enumerate(ids):
            if isinstance(t, bool) or not isinstance(t, (int, np.integer)) or not 0 <= t < self.num_symbols:
                raise ValueError(
                    f"{self.name}: token {t!r} at position {i} is not a symbol id "
                    f"(0..{self.num_symbols - 1}: {' '.join(self.alphabet)})"
                )
            out.append(int(t))
        return tuple(out)

    def encode(self, text: str | Sequence[str]) -> tuple[int, ...]:
        """Space-separated symbol names (or a list of names) -> ids; unknown names raise."""
        names = text.split() if isinstance(text, str) else list(text)
        index = {a: i for i, a in enumerate(self.alphabet)}
        for a in names:
            if a not in index:
                raise ValueError(
                    f"{self.name}: unknown symbol {a!r}; the alphabet is {' '.join(self.alphabet)}"
                )
        return tuple(index[a] for a in names)

    def decode(self, ids: Sequence[int]) -> str:
        return " ".join(self.alphabet[t] for t in self.check_ids(ids))

    def accepts(self, ids: Sequence[int]) -> bool:
        """Is ``ids`` in the language?"""
        return self._accepts(self.check_ids(ids))

    @abstractmethod
    def _accepts(self, s: tuple[int, ...]) -> bool: ...

    def sample(self, rng: np.random.Generator, window: Sequence[int]) -> tuple[int, ...]:
        """A positive string with ``lo <= length <= hi`` drawn by the language's length law
        (module docstring).  Raises ``ValueError`` when the window holds no string of the language."""
        rng = check_rng(rng)
        lo, hi = check_window(window)
        s = self._sample(rng, lo, hi)
        if s is None:
            raise ValueError(f"{self.name}: no string of the language has a length in [{lo}, {hi}]")
        return s

    @abstractmethod
    def _sample(self, rng: np.random.Generator, lo: int, hi: int) -> tuple[int, ...] | None: ...


# -- regular languages: exact uniform sampling over a DFA -------------------------------------------
class AutomatonRecognitionLanguage(RecognitionLanguage):
    """A regular language given by a (partial) DFA over ``alphabet``: ``delta[q][a]`` is the next
    state or ``-1`` (the dead state), ``start`` and ``accept`` states.

    Sampling (Butoi et al. 2025, Algorithm 1, and the public code's length-conditioned sampler)
    draws the length uniformly among those with a string, then walks the automaton: from state
    ``q`` with ``r`` symbols left, symbol ``a`` with probability ``W(δ(q, a), r − 1) / Σ_b
    W(δ(q, b), r − 1)``, where ``W(q, r)`` sums the weights of the accepted runs of ``r`` symbols
    from ``q``.  ``sampling="pdfa"`` (default): a run's weight is ``prod 1 / actions(q)`` over its
    states, ``actions(q)`` being ``q``'s arcs plus one if ``q`` accepts (the automaton with uniform
    probabilities over each state's actions, conditioned on the length, as the paper and the
    public code); ``sampling="uniform"``: every run weighs 1, so the string is uniform among the
    accepted strings of its length.  Weights are exact Python integers (``W`` scaled by
    ``lcm(actions)^(r + 1)``)."""

    delta: list[list[int]]
    start: int
    accept: frozenset[int]

    def __init__(self, sampling: str = "pdfa") -> None:
        if sampling not in SAMPLINGS:
            raise ValueError(f"sampling must be one of {', '.join(map(repr, SAMPLINGS))}, got {sampling!r}")
        self.sampling = sampling
        self._counts: list[list[int]] = [[int(q in self.accept) for q in range(len(self.delta))]]
        if sampling == "uniform":
            self._scale = [1] * len(self.delta)
        else:  # 1 / actions(q), times the common denominator
            lcm = math.lcm(*(self.actions(q) for q in range(len(self.delta)) if self.actions(q)))
            self._scale = [lcm // self.actions(q) if self.actions(q) else 0 for q in range(len(self.delta))]
        self._weights: list[list[int]] = [[c * m for c, m in zip(self._counts[0], self._scale, strict=True)]]
        self._windows: dict[tuple[int, int], list[int]] = {}
        self._cum: dict[tuple[int, int], list[float]] = {}

    def __repr__(self) -> str:
        return f"{type(self).__name__}(sampling={self.sampling!r})"

    def actions(self, q: int) -> int:
        """The actions of state ``q`` in the public code's probabilistic automaton: its arcs, and
        accepting if it is final (each has probability ``1 / actions(q)``)."""
        return sum(r >= 0 for r in self.delta[q]) + (q in self.accept)

    def weights(self, n: int) -> list[int]:
        """``[W(q, n) for q]``: the (scaled) weight of the accepted runs of ``n`` symbols from each
        state under ``sampling`` (:meth:`counts` for ``"uniform"``)."""
        while len(self._weights) <= n:
            prev = self._weights[-1]
            self._weights.append(
                [
                    m * sum(prev[r] for r in row if r >= 0)
                    for row, m in zip(self.delta, self._scale, strict=True)
                ]
            )
        return self._weights[n]

    def _accepts(self, s: tuple[int, ...]) -> bool:
        q = self.start
        for a in s:
            q = self.delta[q][a]
            if q < 0:
                return False
        return q in self.accept

    @functools.cached_property
    def live(self) -> frozenset[int]:
        """The states from which an accept state can be reached."""
        live = set(self.accept)
        while True:
            more = {q for q, row in enumerate(self.delta) if q not in live and any(r in live for r in row)}
            if not more:
                return frozenset(live)
            live |= more

    def _next_symbols(self, s: tuple[int, ...], convention: str) -> list[set[int]]:
        out, q = [], self.start
        for i in range(len(s) + 1):
            out.append(
                {a for a, r in enumerate(self.delta[q]) if r in self.live}
                | ({self.eos} if q in self.accept else set())
            )
            if i < len(s):
                q = self.delta[q][s[i]]
        return out

    def counts(self, n: int) -> list[int]:
        """``[count(q, n) for q]``: accepted strings of length ``n`` read from state ``q``."""
        while len(self._counts) <= n:
            prev = self._counts[-1]
            self._counts.append([sum(prev[r] for r in row if r >= 0) for row in self.delta])
        return self._counts[n]

    def count(self, n: int) -> int:
        """The number of strings of length ``n`` in the language."""
        return self.counts(n)[self.start]

    def _lengths(self, lo: int, hi: int) -> list[int]:
        key = (lo, hi)
        if key not in self._windows:
            self._windows[key] = [n for n in range(lo, hi + 1) if self.count(n) > 0]
        return self._windows[key]

    def _cumulative(self, r: int, q: int) -> list[float]:
        """Cumulative probabilities of the next symbol from state ``q`` with ``r`` symbols left."""
        key = (r, q)
        if key not in self._cum:
            below = self.weights(r - 1)
            total = sum(below[q2] for q2 in self.delta[q] if q2 >= 0)
            self._cum[key] = list(
                itertools.accumulate(below[q2] / total if q2 >= 0 else 0.0 for q2 in self.delta[q])
            )
        return self._cum[key]

    def _sample(self, rng: np.random.Generator, lo: int, hi: int) -> tuple[int, ...] | None:
        lengths = self._lengths(lo, hi)
        if not lengths:
            return None
        n = lengths[int(rng.integers(len(lengths)))]
        q, out = self.start, []
        for r, u in zip(range(n, 0, -1), rng.random(n), strict=True):
            cum = self._cumulative(r, q)
            a = min(bisect.bisect_right(cum, u * cum[-1]), len(cum) - 1)
            while self.delta[q][a] < 0 or self.counts(r - 1)[self.delta[q][a]] == 0:
                a -= 1  # rounding put u past the last live symbol
            out.append(a)
            q = self.delta[q][a]
        return tuple(out)


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
class Majority(RecognitionLanguage):
    """Binary strings with more 1s than 0s."""

    name, level, alphabet = "majority", "DCF", ("0", "1")

    def _accepts(self, s: tuple[int, ...]) -> bool:
        return 2 * sum(s) > len(s)

    def _next_symbols(self, s: tuple[int, ...], convention: str) -> list[set[int]]:
        # any prefix is completed by enough 1s
        ones = [0, *itertools.accumulate(s)]
        return [{0, 1} | ({self.eos} if 2 * ones[i] > i else set()) for i in range(len(s) + 1)]

    def _sample(self, rng: np.random.Generator, lo: int, hi: int) -> tuple[int, ...] | None:
        if hi < 1:
            return None
        n = int(rng.integers(max(lo, 1), hi + 1))
        ones = int(rng.integers(n // 2 + 1, n + 1))
        s = np.array([0] * (n - ones) + [1] * ones)
        rng.shuffle(s)
        return tuple(int(x) for x in s)


PUSH, POP, MARK = 2, 3, 4


class StackManipulation(RecognitionLanguage):
    """An initial stack (bottom first), operations ``PUSH b`` and ``POP`` (never on an empty
    stack), ``#``, then the resulting stack read from the top."""

    name, level, alphabet = "stack_manipulation", "DCF", ("0", "1", "PUSH", "POP", "#")

    def _accepts(self, s: tuple[int, ...]) -> bool:
        i, n = 0, len(s)
        stack: list[int] = []
        while i < n and s[i] < 2:
            stack.append(s[i])
            i += 1
        while i < n and s[i] in (PUSH, POP):
            if s[i] == PUSH:
                if i + 1 >= n or s[i + 1] >= 2:
                    return False
                stack.append(s[i + 1])
                i += 2
            else:
                if not stack:
                    return False
                stack.pop()
                i += 1
        if i >= n or s[i] != MARK:
            return False
        return list(s[i + 1 :]) == stack[::-1]

    def _next_symbols(self, s: tuple[int, ...], convention: str) -> list[set[int]]:
        public = convention == "public"
        pushes, done = s.count(PUSH), 0
        out: list[set[int]] = []
        stack: list[int] = []
        i, initial = 0, True  # still reading the initial stack
        while s[i] != MARK:
            if initial:  # the initial stack's bits, an operation, or the mark
                out.append({0, 1, PUSH, MARK} | ({POP} if stack or public else set()))
            else:
                out.append(
                    {MARK} | ({PUSH} if done < pushes or not public else set()) | ({POP} if stack else set())
                )
            if s[i] < 2:
                stack.append(s[i])
            else:
                initial = False
                if s[i] == POP:
                    stack.pop()
                else:  # PUSH b
                    out.append({0, 1})
                    i += 1
                    stack.append(s[i])
                    done += 1
            i += 1
        out.append({MARK} | ({PUSH} if done < pushes or not public else set()) | ({POP} if stack else set()))
        if initial:
            out[-1] = {0, 1, PUSH, MARK} | ({POP} if stack or public else set())
        return out + [{b} for b in reversed(stack)] + [{self.eos}]

    def _sample(self, rng: np.random.Generator, lo: int, hi: int) -> tuple[int, ...] | None:
        # length = 2 * stack + 3 * pushes + 1
        if hi < 1:
            return None
        size = int(rng.integers(max(0, math.ceil((lo - 1) / 2)), (hi - 1) // 2 + 1))
        pushes = int(rng.integers(max(0, math.ceil((lo - 2 * size - 1) / 3)), (hi - 2 * size - 1) // 3 + 1))
        stack = [int(x) for x in rng.integers(0, 2, size=size)]
        out, done = list(stack), 0
        while True:
            if stack and rng.integers(2):
                out.append(POP)
                stack.pop()
                continue
            if done == pushes:
                break
            b = int(rng.integers(2))
            out += [PUSH, b]
            stack.append(b)
            done += 1
        return (*out, MARK, *stack[::-1])


class _WordLanguage(RecognitionLanguage):
    """``w`` over the first ``k`` symbols, ``#`` (the last symbol) and ``f(w)``; ``|w|`` uniform
    over what the window allows (length ``2|w| + 1``)."""

    k: ClassVar[int] = 2

    @staticmethod
    @abstractmethod
    def transform(w: tuple[int, ...]) -> tuple[int, ...]: ...

    def _accepts(self, s: tuple[int, ...]) -> bool:
        mark = self.num_symbols - 1
        if s.count(mark) != 1:
            return False
        i = s.index(mark)
        return s[i + 1 :] == self.transform(s[:i])

    def _next_symbols(self, s: tuple[int, ...], convention: str) -> list[set[int]]:
        # before the mark any symbol (the mark included); after it, f(w) symbol by symbol
        i = s.index(self.num_symbols - 1)
        return [set(range(self.num_symbols))] * (i + 1) + [{a} for a in s[i + 1 :]] + [{self.eos}]

    def _sample(self, rng: np.random.Generator, lo: int, hi: int) -> tuple[int, ...] | None:
        a, b = math.ceil(max(0, lo - 1) / 2), (hi - 1) // 2
        if hi < 1 or a > b:
            return None
        w = tuple(int(x) for x in rng.integers(0, self.k, size=int(rng.integers(a, b + 1))))
        return (*w, self.num_symbols - 1, *self.transform(w))


class MarkedReversal(_WordLanguage):
    """``w # reverse(w)``, ``w`` binary."""

    name, level, alphabet = "marked_reversal", "DCF", ("0", "1", "#")

    @staticmethod
    def transform(w: tuple[int, ...]) -> tuple[int, ...]:
        return w[::-1]


class MarkedCopy(_WordLanguage):
    """``w # w``, ``w`` binary."""

    name, level, alphabet = "marked_copy", "CS", ("0", "1", "#")

    @staticmethod
    def transform(w: tuple[int, ...]) -> tuple[int, ...]:
        return w


class OddsFirst(_WordLanguage):
    """``w # w_1 w_3 w_5 … w_2 w_4 …``: the symbols at odd positions (1-based), then the even."""

    name, level, alphabet = "odds_first", "CS", ("0", "1", "#")

    @staticmethod
    def transform(w: tuple[int, ...]) -> tuple[int, ...]:
        return w[0::2] + w[1::2]


class BucketSort(_WordLanguage):
    """``w # sorted(w)``, ``w`` over 1–5."""

    name, level, alphabet, k = "bucket_sort", "CS", ("1", "2", "3", "4", "5", "#"), 5

    transform = staticmethod(bucket_sort)


class UnmarkedReversal(RecognitionLanguage):
    """``w reverse(w)``, ``w`` binary: even-length binary palindromes."""

    name, level, alphabet = "unmarked_reversal", "CF", ("0", "1")

    def _accepts(self, s: tuple[int, ...]) -> bool:
        return len(s) % 2 == 0 and s == s[::-1]

    def _next_symbols(self, s: tuple[int, ...], convention: str) -> list[set[int]]:
        # any prefix p is completed by reverse(p); p itself is in the language iff it is an
        # even-length palindrome
        ends = _palindromic_prefixes(s)
        return [{0, 1} | ({self.eos} if i % 2 == 0 and i in ends else set()) for i in range(len(s) + 1)]

    def _sample(self, rng: np.random.Generator, lo: int, hi: int) -> tuple[int, ...] | None:
        a, b = math.ceil(lo / 2), hi // 2
        if a > b:
            return None
        w = tuple(int(x) for x in rng.integers(0, 2, size=int(rng.integers(a, b + 1))))
        return w + w[::-1]


class MissingDuplicate(RecognitionLanguage):
    """``w w`` (``w`` binary, ``|w| >= 1``) with exactly one of its 1s replaced by ``_``."""

    name, level, alphabet = "missing_duplicate", "CS", ("0", "1", "_")

    def _accepts(self, s: tuple[int, ...]) -> bool:
        if len(s) % 2 or s.count(2) != 1:
            return False
        t = [1 if x == 2 else x for x in s]
        n = len(t) // 2
        return t[:n] == t[n:]

    def _next_symbols(self, s: tuple[int, ...], convention: str) -> list[set[int]]:
        # a prefix with at most one _ is completed inside a long enough w w (its _ across from a
        # 1, or a new _ across from one of its 1s or a new 1), so 0 and 1 always, _ until one was read
        gap = s.index(2)
        return [{0, 1, 2}] * (gap + 1) + [
            {0, 1} | ({self.eos} if self._accepts(s[:i]) else set()) for i in range(gap + 1, len(s) + 1)
        ]

    def _sample(self, rng: np.random.Generator, lo: int, hi: int) -> tuple[int, ...] | None:
        a, b = max(1, math.ceil(lo / 2)), hi // 2
        if a > b:
            return None
        n = int(rng.integers(a, b + 1))
        w = [int(x) for x in rng.integers(0, 2, size=n)]
        w[int(rng.integers(n))] = 1  # at least one 1 to hide
        s = w + w
        ones = [i for i, x in enumerate(s) if x == 1]
        s[ones[int(rng.integers(len(ones)))]] = 2
        return tuple(s)


def _split(rng: np.random.Generator, total: int, weights: tuple[float, ...]) -> list[int]:
    """``total`` split into ``len(weights)`` non-negative parts by a Dirichlet draw (floors of the
    scaled cumulative shares)."""
    shares = rng.dirichlet(weights)
    cuts = [0, *(math.floor(c * total) for c in np.cumsum(shares[:-1])), total]
    return [b - a for a, b in itertools.pairwise(cuts)]


def _parse_numbers(s: tuple[int, ...], separators: tuple[int, ...]) -> list[list[int]] | None:
    """``s`` as binary numbers separated, in order, by ``separators``; None if malformed."""
    parts: list[list[int]] = [[]]
    expect = list(separators)
    for x in s:
        if x < 2:
            parts[-1].append(x)
        elif expect and x == expect[0]:
            expect.pop(0)
            parts.append([])
        else:
            return None
    if expect or not all(parts):
        return None
    return parts


def _operands_then_result(
    operands: list[list[int]], separators: tuple[int, ...], z: int, n: int, eos: int
) -> list[set[int]]:
    """Next-symbol sets of ``x sep1 y sep2 … z`` of length ``n`` (little-endian binary): before
    each operand a bit, after each of its bits a bit or its separator; after the last separator
    the bits of ``z`` without padding one by one, then a padding 0 or the end."""
    out: list[set[int]] = []
    for bits, sep in zip(operands, separators, strict=True):
        out += [{0, 1}] + [{0, 1, sep} for _ in bits]
    out += [{b} for b in little_endian(z)]
    return out + [{0, eos} for _ in range(n + 1 - len(out))]


def _palindromic_prefixes(s: Sequence[int]) -> set[int]:
    """The lengths ``m`` (0 included) with ``s[:m]`` a palindrome, in ``O(len(s))``: the borders
    of ``s · sentinel · reverse(s)`` (KMP's prefix function), a border of length ``m`` being
    ``s[:m] = reverse(s[:m])``."""
    t = [*s, -1, *reversed(s)]
    pi = [0] * len(t)
    for i in range(1, len(t)):
        k = pi[i - 1]
        while k and t[i] != t[k]:
            k = pi[k - 1]
        pi[i] = k + (t[i] == t[k])
    out, k = {0}, pi[-1]
    while k:
        out.add(k)
        k = pi[k - 1]
    return out


class _BinaryOperation(RecognitionLanguage):
    """``x op y = z`` in little-endian binary with ``z = f(x, y)``."""

    level = "CS"
    weights: ClassVar[tuple[float, ...]]

    @staticmethod
    @abstractmethod
    def f(x: int, y: int) -> int: ...

    @staticmethod
    @abstractmethod
    def y_max(x: int, z_max: int) -> int | None:
        """The largest ``y`` with ``f(x, y) <= z_max`` (None: unbounded)."""

    def _accepts(self, s: tuple[int, ...]) -> bool:
        parts = _parse_numbers(s, (2, 3))
        return parts is not None and self.f(
            little_endian_value(parts[0]), little_endian_value(parts[1])
        ) == little_endian_value(parts[2])

    def _next_symbols(self, s: tuple[int, ...], convention: str) -> list[set[int]]:
        x, y, _ = _parse_numbers(s, (2, 3))
        return _operands_then_result(
            [x, y], (2, 3), self.f(little_endian_value(x), little_endian_value(y)), len(s), self.eos
        )

    def _sample(self, rng: np.random.Generator, lo: int, hi: int) -> tuple[int, ...] | None:
        if hi < 5:
            return None
        n = int(rng.integers(max(5, lo), hi + 1))
        nx, ny, nz = (p + 1 for p in _split(rng, n - 5, self.weights))
        nx, ny = min(nx, ny), max(nx, ny)
        z_max = 2**nz - 1
        x_cap = self.x_max(z_max)
        x = uniform_int(rng, 0, 2**nx - 1 if x_cap is None else min(2**nx - 1, x_cap))
        cap = self.y_max(x, z_max)
        y = uniform_int(rng, 0, 2**ny - 1 if cap is None else min(2**ny - 1, cap))
        ux, uy = little_endian(x, nx), little_endian(y, ny)
        if rng.integers(2):
            ux, uy = uy, ux
        return (*ux, 2, *uy, 3, *little_endian(self.f(x, y), nz))

    @staticmethod
    def x_max(z_max: int) -> int | None:
        """The largest ``x`` with ``f(x, 0) <= z_max`` (None: unbounded)."""
        return z_max


class BinaryAddition(_BinaryOperation):
    """``x + y = z``, ``z = x + y``."""

    name, alphabet, weights = "binary_addition", ("0", "1", "+", "="), (1.0, 1.0, 1.0)

    f = staticmethod(binary_addition)

    @staticmethod
    def y_max(x: int, z_max: int) -> int | None:
        return z_max - x


class BinaryMultiplication(_BinaryOperation):
    """``x × y = z``, ``z = x y``."""

    name, alphabet, weights = "binary_multiplication", ("0", "1", "×", "="), (1.0, 1.0, 2.0)

    f = staticmethod(binary_multiplication)

    @staticmethod
    def y_max(x: int, z_max: int) -> int | None:
        return None if x == 0 else z_max // x

    @staticmethod
    def x_max(z_max: int) -> int | None:
        return None  # x * 0 = 0 always fits


class ComputeSqrt(RecognitionLanguage):
    """``x = z`` in little-endian binary with ``z = floor(sqrt(x))``, the root as ``sqrt`` says
    (module docstring): ``"public"`` (default) the public code's ``math.floor(math.sqrt(x))`` in
    floating point, which Butoi et al.'s (2025) data were made with; ``"exact"`` ``math.isqrt``.
    Membership, the sampled positives (``z`` the root of ``x``) and the next-symbol sets all use
    that root.  An ``x`` within rounding of ``4**nz`` has a float root of ``nz + 1`` bits, which
    the public code writes one symbol longer than the length it drew (or, at the window's top,
    fails on); memrnn redraws such an ``x`` (at most about one draw in ``2**53``)."""

    name, level, alphabet = "compute_sqrt", "CS", ("0", "1", "=")

    def __init__(self, sqrt: str = "public") -> None:
        if sqrt not in SQRTS:
            raise ValueError(f"sqrt must be one of {', '.join(map(repr, SQRTS))}, got {sqrt!r}")
        self.sqrt = sqrt

    def __repr__(self) -> str:
        return f"ComputeSqrt(sqrt={self.sqrt!r})"

    def root(self, x: int) -> int:
        """``floor(sqrt(x))`` by :attr:`sqrt`'s convention: ``"exact"`` ``math.isqrt(x)``;
        ``"public"`` ``math.floor(math.sqrt(x))`` (``x`` rounded to a float first), which cannot
        take ``x >= 2**1024`` (``ValueError``)."""
        if self.sqrt == "exact":
            return math.isqrt(x)
        try:
            return math.floor(math.sqrt(x))
        except OverflowError:
            raise ValueError(
                f"compute_sqrt with sqrt='public' (the public code's float sqrt) cannot take x of "
                f"{x.bit_length()} bits (floats end at 2**1024; the public code raises OverflowError); "
                f"use sqrt='exact' for such strings"
            ) from None

    def _accepts(self, s: tuple[int, ...]) -> bool:
        parts = _parse_numbers(s, (2,))
        return parts is not None and self.root(little_endian_value(parts[0])) == little_endian_value(parts[1])

    def _next_symbols(self, s: tuple[int, ...], convention: str) -> list[set[int]]:
        x, _ = _parse_numbers(s, (2,))
        return _operands_then_result([x], (2,), self.root(little_endian_value(x)), len(s), self.eos)

    def _sample(self, rng: np.random.Generator, lo: int, hi: int) -> tuple[int, ...] | None:
        if hi < 3:
            return None
        n = int(rng.integers(max(3, lo), hi + 1))
        nx, nz = (p + 1 for p in _split(rng, n - 3, (2.0, 1.0)))
        while True:  # x < 4**nz: the exact root fits in nz bits; the float one almost always
            x = uniform_int(rng, 0, min(2**nx - 1, 2 ** (2 * nz) - 1))
            z = self.root(x)
            if z < 2**nz:
                return (*little_endian(x, nx), 2, *little_endian(z, nz))


#: name -> class, in the paper's order (regular, then deterministic context-free, context-free,
#: context-sensitive)
FLARE_LANGUAGES: dict[str, type[RecognitionLanguage]] = {
    cls.name: cls
    for cls in (
        EvenPairs,
        Repeat01,
        Parity,
        CycleNavigation,
        ModularArithmetic,
        Dyck23,
        First,
        Majority,
        StackManipulation,
        MarkedReversal,
        UnmarkedReversal,
        MarkedCopy,
        MissingDuplicate,
        OddsFirst,
        BinaryAddition,
        BinaryMultiplication,
        ComputeSqrt,
        BucketSort,
    )
}

#: the benchmark's splits: name -> (strings, length window); ``test`` is 10 strings per length of
#: its window in number, drawn like the others (lengths by each language's law); ``held_out`` is
#: the public code's ``test-short-held-out``: none of its strings is a training or validation one
FLARE_SPLITS: dict[str, tuple[int, Window]] = {
    "train": (10_000, (0, 40)),
    "val_short": (1_000, (0, 40)),
    "val_long": (1_000, (0, 80)),
    "test": (5_010, (0, 500)),
    "held_out": (1_000, (0, 40)),
}


def flare_language(name: str, *, sqrt: str = "public", sampling: str = "pdfa") -> RecognitionLanguage:
    """The language called ``name`` (a key of :data:`FLARE_LANGUAGES`), with the public code's
    conventions by default: ``sqrt`` for ``compute_sqrt`` (:data:`SQRTS`, :class:`ComputeSqrt`)
    and ``sampling`` for the regular languages (:data:`SAMPLINGS`,
    :class:`AutomatonRecognitionLanguage`); each is checked, and ignored by the languages it does
    not concern."""
    if name not in FLARE_LANGUAGES:
        raise ValueError(f"unknown recognizer language {name!r}; choose from {', '.join(FLARE_LANGUAGES)}")
    if sqrt not in SQRTS:
        raise ValueError(f"sqrt must be one of {', '.join(map(repr, SQRTS))}, got {sqrt!r}")
    if sampling not in SAMPLINGS:
        raise ValueError(f"sampling must be one of {', '.join(map(repr, SAMPLINGS))}, got {sampling!r}")
    cls = FLARE_LANGUAGES[name]
    if cls is ComputeSqrt:
        return ComputeSqrt(sqrt=sqrt)
    if issubclass(cls, AutomatonRecognitionLanguage):
        return cls(sampling=sampling)
    return cls()


def random_edit(s: list[int], window: Window, num_symbols: int, rng: np.random.Generator) -> None:
    """One random edit of ``s`` in place: insert, replace (by a different symbol) or delete, the
    kind uniform among those that keep ``len(s)`` in ``window``, the position and symbol uniform."""
    lo, hi = window
    kinds = [
        k for k, ok in (("ins", len(s) < hi), ("rep", s and num_symbols > 1), ("del", len(s) > lo)) if ok
    ]
    if not kinds:
        return
    kind = kinds[int(rng.integers(len(kinds)))]
    if kind == "ins":
        s.insert(int(rng.integers(len(s) + 1)), int(rng.integers(num_symbols)))
    elif kind == "rep":
        i = int(rng.integers(len(s)))
        new = int(rng.integers(num_symbols - 1))
        s[i] = new + (new >= s[i])
    else:
        del s[int(rng.integers(len(s)))]


def sample_negative(
    language: RecognitionLanguage,
    rng: np.random.Generator,
    window: Sequence[int],
    perturbation_probability: float = 0.5,
    tries: int = 100,
    *,
    strict_edits: bool = False,
    excluded: AbstractSet[tuple[int, ...]] | None = None,
) -> tuple[int, ...]:
    """A string *not* in ``language`` with its length in ``window`` (module docstring), redrawn up
    to ``tries`` times, then ``ValueError``: :func:`sample_negative_with_edits` without the
    number of edits."""
    return sample_negative_with_edits(
        language,
        rng,
        window,
        perturbation_probability,
        tries,
        strict_edits=strict_edits,
        excluded=excluded,
    )[0]


def sample_negative_with_edits(
    language: RecognitionLanguage,
    rng: np.random.Generator,
    window: Sequence[int],
    perturbation_probability: float = 0.5,
    tries: int = 100,
    *,
    strict_edits: bool = False,
    excluded: AbstractSet[tuple[int, ...]] | None = None,
) -> tuple[tuple[int, ...], int | None]:
    """A negative string and how it was made: the number of random edits of a positive, or None
    for a uniform string (what the public code writes to ``num-edits.txt``).

    Each draw is a perturbed positive (``Geometric(1/2)`` edits) with probability
    ``perturbation_probability``, else a uniform string, redrawn up to ``tries`` times until it is
    not in the language, then ``ValueError``.  ``strict_edits=False`` (the public code's default)
    decides the kind and the number of edits afresh on every draw; ``strict_edits=True`` (its
    ``--strict-num-edits-distribution``) decides them once and redraws only the string (the
    positive that is edited, or the uniform string).  A draw among ``excluded`` is refused like a
    positive (the public code's held-out set)."""
    rng = check_rng(rng)
    window = check_window(window)
    if not 0 <= perturbation_probability <= 1:
        raise ValueError(f"perturbation_probability must be in [0, 1], got {perturbation_probability}")
    v = language.num_symbols
    if strict_edits:
        perturb = rng.random() < perturbation_probability
        edits = int(rng.geometric(0.5)) if perturb else 0
    for _ in range(tries):
        if not strict_edits:
            perturb = rng.random() < perturbation_probability
        if perturb:
            s = list(language.sample(rng, window))
            if not strict_edits:
                edits = int(rng.geometric(0.5))
            for _ in range(edits):
                random_edit(s, window, v, rng)
        else:
            n = int(rng.integers(window[0], window[1] + 1))
            s = [int(x) for x in rng.integers(0, v, size=n)]
        t = tuple(s)
        if (excluded is None or t not in excluded) and not language._accepts(t):
            return t, (edits if perturb else None)
    kind = (f"{edits} edits of a positive" if perturb else "uniform strings") if strict_edits else "draws"
    held = " outside the excluded strings" if excluded is not None else ""
    raise ValueError(
        f"{language.name}: no negative string{held} found in {tries} {kind} with lengths in {window}"
    )


def sample_positive(
    language: RecognitionLanguage,
    rng: np.random.Generator,
    window: Sequence[int],
    excluded: AbstractSet[tuple[int, ...]] | None = None,
    tries: int = 100,
) -> tuple[int, ...]:
    """A positive string (:meth:`RecognitionLanguage.sample`); with ``excluded``, one outside it,
    redrawn up to ``tries`` times and then ``ValueError`` (the public code's held-out set)."""
    if excluded is None:
        return language.sample(rng, window)
    for _ in range(tries):
        s = language.sample(rng, window)
        if s not in excluded:
            return s
    raise ValueError(
        f"{language.name}: no positive string outside the excluded strings found in {tries} draws with "
        f"lengths in {tuple(window)} (the public code skips its held-out set for such a language)"
    )


def sample_labelled(
    language: RecognitionLanguage,
    rng: np.random.Generator,
    n: int,
    window: Sequence[int],
    perturbation_probability: float = 0.5,
    *,
    strict_edits: bool = False,
    excluded: AbstractSet[tuple[int, ...]] | None = None,
) -> list[tuple[tuple[int, ...], bool]]:
    """``n`` labelled strings with lengths in ``window``, each positive or negative with
    probability 1/2 (the benchmark's splits); negatives by :func:`sample_negative`
    (``strict_edits``); with ``excluded``, none of them among those strings (positives by
    :func:`sample_positive`: the public code's held-out set)."""
    rng = check_rng(rng)
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"n must be a non-negative int, got {n!r}")
    out = []
    for _ in range(n):
        if rng.integers(2):
            out.append((sample_positive(language, rng, window, excluded), True))
        else:
            s = sample_negative(
                language, rng, window, perturbation_probability, strict_edits=strict_edits, excluded=excluded
            )
            out.append((s, False))
    return out
