"""Counting languages ``a^n b^n`` and ``a^n b^n c^n`` (Weiss, Goldberg & Yahav 2018;
Paaßen et al.'s (2021) ``a^n b^n``), recognised by the real-time counter machines of
:mod:`memrnn.languages.automata`, with Weiss's negatives and test recipe.

Generating distribution: ``n − min_n`` geometric with mean ``mean_n − min_n``; restricted to a
length window, or drawn uniformly over the window's ``n`` (``length_sampling="uniform"``, as
Weiss et al. draw ``n``).  Each length has one string, so every probability is exact and the
chain rule is cheap: ``token_log_probs`` is exact.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from memrnn.core.checks import nonnegative_int
from memrnn.languages.automata import (
    DPDA,
    EMPTY,
    NOOP,
    POP,
    CounterMachine,
    anbn_counter_machine,
    anbncn_counter_machine,
    push,
)
from memrnn.languages.base import PYTHON_STEP, Language, Lengths, check_table_cost, check_window
from memrnn.languages.pcfg import cont


class CountingLanguage(Language):
    """``x_1^n x_2^n ... x_k^n`` for ``n >= min_n`` (``k = len(letters)``).

    Args:
        letters: the block symbols (``("a", "b")`` or ``("a", "b", "c")``).
        min_n: smallest ``n`` (0 or 1).
        mean_n: mean of the geometric distribution of ``n``.
        negative_min_count: smallest block count of a negative (None: ``min_n``).  0 lets
            negatives have empty blocks (``b^j``, ``a^i``, ``a^i b^j`` for ``a^n b^n c^n``), as
            the near-miss test set has; with ``min_n`` no training string starts with ``b``.
    """

    train_n: tuple[int, int] = (1, 100)
    test_n: tuple[int, int] = (101, 200)

    def __init__(
        self,
        letters: Sequence[str],
        min_n: int = 1,
        mean_n: float = 10.0,
        negative_min_count: int | None = None,
    ) -> None:
        if min_n not in (0, 1):
            raise ValueError(f"min_n must be 0 or 1, got {min_n!r}")
        if negative_min_count is not None and negative_min_count < 0:
            raise ValueError(f"negative_min_count must be >= 0, got {negative_min_count}")
        self.negative_min_count = negative_min_count
        if not mean_n > min_n:
            raise ValueError(f"mean_n must exceed min_n={min_n}, got {mean_n}")
        self.letters, self.min_n, self.mean_n = tuple(letters), min_n, float(mean_n)
        self.symbols = (*self.letters, "END")
        self.blocks = len(self.letters)
        self._c = cont(self.mean_n - min_n)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(min_n={self.min_n}, mean_n={self.mean_n})"

    __str__ = __repr__

    # -- structure -------------------------------------------------------------------------------
    def string(self, counts: Sequence[int]) -> list[int]:
        """``x_1^{c_1} ... x_k^{c_k}`` followed by ``END`` (any counts: positives and negatives)."""
        if len(counts) != self.blocks or any(c < 0 for c in counts):
            raise ValueError(f"need {self.blocks} non-negative counts, got {tuple(counts)}")
        check_table_cost(self, sum(counts) + 1, self._table_cost, "the string")
        return [i for i, c in enumerate(counts) for _ in range(c)] + [self.end_id]

    def n_of_length(self, length: int) -> int | None:
        """``n`` with ``k·n + 1 = length`` (``END`` counted), or None."""
        n, r = divmod(length - 1, self.blocks)
        return n if r == 0 and n >= self.min_n else None

    def default_lengths(self, split: str) -> Lengths:
        """Weiss et al.'s ``n`` ranges as length windows (``END`` counted)."""
        lo, hi = (
            self.train_n
            if split in ("train", "val", "validation", "dev")
            else self.test_n
            if split == "test"
            else (None, None)
        )
        if lo is None:
            raise ValueError(f"unknown split {split!r}; use 'train', 'val' or 'test'")
        return (self.blocks * lo + 1, self.blocks * hi + 1)

    @property
    def machine(self) -> CounterMachine:
        return (anbn_counter_machine if self.blocks == 2 else anbncn_counter_machine)(self.min_n)

    def pda(self) -> DPDA:
        """The DPDA of ``a^n b^n`` (two blocks only; ``a^n b^n c^n`` is not context-free)."""
        if self.blocks != 2:
            raise ValueError(f"{self} is not context-free: it has no PDA (use .machine)")
        t = [("A", "a", "*", "A", push("x")), ("A", "b", "x", "B", POP), ("B", "b", "x", "B", POP)]
        t.append(("B", "END", EMPTY, "acc", NOOP))
        if self.min_n == 0:
            t.append(("A", "END", EMPTY, "acc", NOOP))
        return DPDA(["A", "B", "acc"], self.symbols, ["x"], t, "A", ["acc"])

    def accepts(self, ids: Sequence[int]) -> bool:
        ids = self.check_ids(ids)
        if not self.is_complete(ids):
            return False
        return self.machine.accepts([self.symbols[i] for i in ids[:-1]])

    def accepts_prefixes(self, ids: Sequence[int]) -> list[bool]:
        """Linear-time per-prefix membership (one pass of the counter machine)."""
        body = [t for t in self.check_ids(ids) if t != self.end_id]
        accept = self.machine.accepting
        return [c is not None and (c[0], tuple(x == 0 for x in c[1])) in accept
                for c in self.machine.run([self.symbols[t] for t in body])]  # fmt: skip

    def _parse_prefix(self, ids: list[int]) -> tuple[int, list[int]] | None:
        """``(n, counts so far)`` for a viable prefix, or None."""
        counts = [0] * self.blocks
        block = 0
        for t in ids:
            if t == self.end_id or t < block:
                return None
            block = t
            counts[t] += 1
        n = counts[0]
        if any(c > n for c in counts[1:]) or any(counts[j] < n for j in range(1, block)):
            return None
        if block > 0 and n < max(self.min_n, 1):
            return None
        return n, counts

    def allowed_next(self, prefix: Sequence[int]) -> frozenset[int]:
        prefix = self.check_ids(prefix)
        parsed = self._parse_prefix(prefix)
        if parsed is None:
            return frozenset()
        n, counts = parsed
        block = max((i for i, c in enumerate(counts) if c), default=0)
        if block == 0:
            out = {0}
            if n >= max(self.min_n, 1):
                out.add(1)
            if n == 0 and self.min_n == 0:
                out.add(self.end_id)
            return frozenset(out)
        if counts[block] < n:
            return frozenset({block})
        return frozenset({block + 1} if block + 1 < self.blocks else {self.end_id})

    # -- distribution ----------------------------------------------------------------------------
    def _log_pn(self, n: int) -> float:
        if n < self.min_n:
            return -math.inf
        return math.log1p(-self._c) + (n - self.min_n) * math.log(self._c)

    def _ns(self, lengths: Lengths | None) -> tuple[int, int | None]:
        if lengths is None:
            return self.min_n, None
        lo, hi = self._check_window(lengths)
        n_lo = max(self.min_n, -(-(lo - 1) // self.blocks))
        n_hi = (hi - 1) // self.blocks
        if n_hi < n_lo:
            raise ValueError(f"{self} has no string with a length in {tuple(lengths)}")
        return n_lo, n_hi

    def _log_tail(self, i: int, n_lo: int, n_hi: int | None) -> float:
        """``log P(i <= n, n in [n_lo, n_hi])``."""
        a = max(i, n_lo)
        if n_hi is not None and a > n_hi:
            return -math.inf
        log_c = math.log(self._c)
        head = (a - self.min_n) * log_c
        if n_hi is None:
            return head
        return head + math.log1p(-math.exp((n_hi - a + 1) * log_c)) if self._c > 0 else head

    def _table_cost(self, length: int) -> tuple[float, float]:
        """``(bytes, operations)`` of strings up to ``length`` tokens: a float64 per length (and a
        Python float per count of the window), a Python step per count, the string's list."""
        return 40.0 * (length + 1), float(PYTHON_STEP * (length + 1))

    def length_log_probs(self, max_length: int) -> np.ndarray:
        if max_length < 0:
            raise ValueError(f"max_length must be >= 0, got {max_length}")
        check_table_cost(self, max_length, self._table_cost, "its length distribution")
        out = np.full(max_length + 1, -math.inf)
        for n in range(self.min_n, (max_length - 1) // self.blocks + 1):
            out[self.blocks * n + 1] = self._log_pn(n)
        return out

    def sample(self, rng: np.random.Generator, lengths: Lengths | None = None) -> list[int]:
        n_lo, n_hi = self._ns(lengths)
        if lengths is not None:
            check_table_cost(self, lengths[1], self._table_cost, "the window's counts and the string")
        if n_hi is None:
            n = self.min_n + int(rng.geometric(1 - self._c)) - 1
        else:
            logs = np.array([self._log_pn(n) for n in range(n_lo, n_hi + 1)])
            p = np.exp(logs - logs.max())
            n = n_lo + int(rng.choice(len(p), p=p / p.sum()))
        return self.string([n] * self.blocks)

    def token_log_probs(self, ids: Sequence[int], lengths: Lengths | None = None) -> np.ndarray:
        ids = self.check_ids(ids)
        n_lo, n_hi = self._ns(lengths)
        out = np.full(len(ids), -math.inf)
        # a member is valid throughout (one linear check); otherwise find its first bad token
        valid = (
            len(ids)
            if self.accepts(ids)
            else next((t for t in range(len(ids)) if ids[t] not in self.allowed_next(ids[:t])), len(ids))
        )
        first_block = next((t for t, tok in enumerate(ids) if tok != 0), len(ids))
        for t, tok in enumerate(ids[:valid]):
            if t > first_block:  # past the first block: determined
                out[t] = 0.0
                continue
            i = t  # a^i read so far
            here = self._log_tail(i, n_lo, n_hi)
            if tok == 0:
                out[t] = self._log_tail(i + 1, n_lo, n_hi) - here
            else:  # n = i: the first b (or END when n = 0)
                in_range = n_lo <= i and (n_hi is None or i <= n_hi)
                out[t] = self._log_pn(i) - here if in_range else -math.inf
            if out[t] == -math.inf:
                break
        return out

    # -- Weiss et al.'s negatives and test recipe --------------------------------------------------
    def sample_negative(self, rng: np.random.Generator, lengths: Lengths | None = None) -> list[int]:
        """Weiss et al.: draw the ``k`` counts independently (uniform over the window's ``n``
        range, from ``negative_min_count`` when set), redrawing until at least one differs."""
        n_lo, n_hi = self._ns(lengths) if lengths is not None else (self.min_n, self.train_n[1])
        if self.negative_min_count is not None:
            n_lo = self.negative_min_count
        n_lo = min(n_lo, n_hi)
        for _ in range(10_000):
            counts = [int(x) for x in rng.integers(n_lo, n_hi + 1, size=self.blocks)]
            if len(set(counts)) > 1:
                return self.string(counts)
        raise ValueError(f"no negative in n range {(n_lo, n_hi)}")

    def near_miss_test_set(
        self, rng: np.random.Generator, size: int, n_range: tuple[int, int] | None = None, delta: int = 2
    ) -> tuple[list[list[int]], list[bool]]:
        """Weiss et al.'s test recipe: ``x_1^{n+i_1} ... x_k^{n+i_k}`` with ``n`` uniform in
        ``n_range`` (default ``[0, 200]`` for two blocks, ``[0, 150]`` for three) and each
        ``i_j`` uniform in ``[−delta, delta]`` (exponents clipped at 0); labels from ``accepts``."""
        if n_range is None:
            n_range = (0, 200) if self.blocks == 2 else (0, 150)
        lo, hi = check_window(n_range, "n_range")
        nonnegative_int("size", size)
        nonnegative_int("delta", delta)
        strings, labels = [], []
        for _ in range(size):
            n = int(rng.integers(lo, hi + 1))
            counts = [max(0, n + int(d)) for d in rng.integers(-delta, delta + 1, size=self.blocks)]
            w = self.string(counts)
            strings.append(w)
            labels.append(self.accepts(w))
        return strings, labels


class AnBn(CountingLanguage):
    """``a^n b^n`` (Paaßen et al. 2021 Equation 3 with ``min_n = 1``; Weiss et al. train ``n <= 100``)."""

    train_n = (1, 100)
    test_n = (101, 200)

    def __init__(self, min_n: int = 1, mean_n: float = 10.0, negative_min_count: int | None = None) -> None:
        super().__init__(("a", "b"), min_n, mean_n, negative_min_count)


class AnBnCn(CountingLanguage):
    """``a^n b^n c^n`` (Weiss et al. train ``n <= 50``, test up to 150)."""

    train_n = (1, 50)
    test_n = (51, 150)

    def __init__(self, min_n: int = 1, mean_n: float = 10.0, negative_min_count: int | None = None) -> None:
        super().__init__(("a", "b", "c"), min_n, mean_n, negative_min_count)
