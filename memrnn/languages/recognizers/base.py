"""What the recognizer languages of :mod:`memrnn.languages.recognizers` share: the
:class:`RecognitionLanguage` interface, the regular languages' :class:`AutomatonRecognitionLanguage`
(a DFA with its sampling laws), and uniform integers of any size."""

from __future__ import annotations

import bisect
import functools
import itertools
import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import ClassVar

import numpy as np

from memrnn.languages.base import check_rng, check_window

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
