"""The arithmetic languages of Butoi et al.'s (2025) benchmark (:mod:`memrnn.languages.recognizers`):
binary addition and multiplication and the square root, ``x op y = z`` in little-endian binary."""

from __future__ import annotations

import itertools
import math
from abc import abstractmethod
from typing import ClassVar

import numpy as np

from memrnn.languages.definitions import (
    binary_addition,
    binary_multiplication,
    little_endian,
    little_endian_value,
)
from memrnn.languages.recognizers.base import (
    SQRTS,
    RecognitionLanguage,
    uniform_int,
)


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
