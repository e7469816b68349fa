"""The languages of Butoi et al.'s (2025) benchmark that count, stack or rearrange their symbols
(:mod:`memrnn.languages.recognizers`): majority, stack manipulation, reversals, copies, odds first,
bucket sort and the missing duplicate."""

from __future__ import annotations

import itertools
import math
from abc import abstractmethod
from collections.abc import Sequence
from typing import ClassVar

import numpy as np

from memrnn.languages.definitions import (
    bucket_sort,
)
from memrnn.languages.recognizers.base import (
    RecognitionLanguage,
)


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
