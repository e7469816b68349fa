"""The protocol every formal language in memrnn follows.

A string is a sequence of integer token ids over ``symbols``; a *complete* string ends with
``END`` (Hewitt et al.'s ω), which is always the last symbol.  Models read an extra
input-only ``BOS`` id (``bos_id == num_symbols``) before the first token.
"""

from __future__ import annotations

import functools
import math
import numbers
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Literal

import numpy as np

from memrnn.core.serialization import allow_in_checkpoints

Lengths = tuple[int, int]
LengthSampling = Literal["natural", "uniform"]

#: What one exact table of a sampler (or of an exact string probability) may take: memory in
#: bytes, and elementary operations (a PCFG's length tables take time quadratic in the length,
#: its inside chart memory quadratic).  A longer length is refused by :func:`check_table_cost`
#: with a ``ValueError`` before anything is allocated; raise these to sample longer strings.
TABLE_MEMORY_LIMIT = 2 << 30
TABLE_WORK_LIMIT = 10**10
#: a step of a Python loop, in those operations (a vectorized numpy operation per element is 1)
PYTHON_STEP = 100


def check_rng(rng: Any) -> np.random.Generator:
    """``rng`` if it is a ``numpy.random.Generator``, else a ``ValueError`` that says how to make
    one (an int seed is refused: a sampler re-seeded on every call returns the same string)."""
    if isinstance(rng, np.random.Generator):
        return rng
    raise ValueError(
        f"rng must be a numpy.random.Generator, got {type(rng).__name__} {rng!r}: pass "
        f"np.random.default_rng(seed) once and reuse it (memrnn's samplers draw from numpy, "
        f"not torch.Generator)"
    )


def check_window(lengths: Any, name: str = "length window") -> Lengths:
    """``(min, max)`` as two ints with ``0 <= min <= max``; a ``ValueError`` naming the window
    otherwise (a float bound like 40.5 is refused, never truncated)."""
    try:
        lo, hi = lengths
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be (min, max), got {lengths!r}") from None
    for v in (lo, hi):
        if isinstance(v, bool) or not isinstance(v, numbers.Real) or v != int(v):
            raise ValueError(f"{name} bounds must be integers (END counted), got {tuple(lengths)!r}")
    lo, hi = int(lo), int(hi)
    if lo < 0 or hi < lo:
        raise ValueError(f"{name} must satisfy 0 <= min <= max, got {(lo, hi)}")
    return lo, hi


def _bytes(n: float) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{int(n)} bytes"


def check_table_cost(
    owner: object, length: int, cost: Callable[[int], tuple[float, float]], what: str
) -> None:
    """Refuse ``length`` before anything is allocated when ``cost(length)`` (bytes of memory,
    elementary operations) is above :data:`TABLE_MEMORY_LIMIT` or :data:`TABLE_WORK_LIMIT`:
    a ``ValueError`` naming ``owner``, the length, what ``what`` would take and the longest
    length within the limits (``cost`` grows with the length).  ``UnmarkedReversal()
    .sample_given_length(rng, 10**9)`` asked numpy for 37 GiB instead."""
    length = int(length)

    def fits(n: int) -> bool:
        memory, work = cost(n)
        return memory <= TABLE_MEMORY_LIMIT and work <= TABLE_WORK_LIMIT

    if fits(length):
        return
    lo, hi = 0, length  # the longest length that fits, by bisection
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid - 1)
    memory, work = cost(length)
    need = f"{_bytes(memory)} of memory" + (f" and ~{work:.1e} operations" if work else "")
    raise ValueError(
        f"{owner}: length {length:,} is too long to sample or score exactly: {what} would take {need}; "
        f"the limits ({_bytes(TABLE_MEMORY_LIMIT)}, {TABLE_WORK_LIMIT:.0e} operations: "
        f"memrnn.languages.base.TABLE_MEMORY_LIMIT / TABLE_WORK_LIMIT) allow lengths up to {lo:,}"
    )


def _checks_rng(fn: Callable) -> Callable:
    """Wrap a sampling method whose first argument is ``rng`` with :func:`check_rng`."""

    @functools.wraps(fn)
    def wrapper(self, rng, *args, **kwargs):
        return fn(self, check_rng(rng), *args, **kwargs)

    wrapper._checks_rng = True  # type: ignore[attr-defined]
    return wrapper


_RNG_FIRST = ("sample", "sample_length", "sample_given_length", "sample_negative")


def _guard_samplers(cls: type) -> None:
    """Check the ``rng`` of every sampling method ``cls`` itself defines (:func:`check_rng`)."""
    for name in _RNG_FIRST:
        fn = cls.__dict__.get(name)
        if fn is not None and not getattr(fn, "_checks_rng", False):
            setattr(cls, name, _checks_rng(fn))


class Language(ABC):
    """A formal language with a generating distribution, membership and a next-token oracle.

    Subclasses set ``symbols`` (the output alphabet, ``END`` last) and implement
    ``sample``, ``accepts``, ``allowed_next``, ``token_log_probs`` and ``default_lengths``.
    """

    symbols: tuple[str, ...]
    #: for bracket languages (opens ``0..k-1``, closes ``k..2k-1``, ``END = 2k``): ``k``, and the
    #: depth bound (None: unbounded).  Enables :func:`bracket_annotations` and Hewitt's metric.
    bracket_types: int | None = None
    bracket_bound: int | None = None

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        allow_in_checkpoints(cls)  # data modules save their language in checkpoints
        _guard_samplers(cls)

    def __new__(cls, *args, **kwargs):
        obj = super().__new__(cls)
        obj._init_args = (args, kwargs)
        return obj

    def __getstate__(self) -> dict:
        # A language pickles as its constructor arguments, rebuilt on load: checkpoints stay
        # small and load under torch's weights_only unpickler (no grammar tables or caches).
        args, kwargs = getattr(self, "_init_args", ((), {}))
        return {"_init_args": (list(args), dict(kwargs))}

    def __setstate__(self, state: dict) -> None:
        args, kwargs = state["_init_args"]
        self._init_args = (tuple(args), kwargs)
        self.__init__(*args, **kwargs)

    @property
    def num_symbols(self) -> int:
        """Size of the output alphabet (``END`` included)."""
        return len(self.symbols)

    @property
    def end_id(self) -> int:
        """Id of ``END``."""
        return len(self.symbols) - 1

    @property
    def bos_id(self) -> int:
        """Id of the input-only beginning-of-string token."""
        return len(self.symbols)

    @property
    def input_vocab_size(self) -> int:
        """Number of input ids (symbols and ``BOS``)."""
        return len(self.symbols) + 1

    def check_ids(self, ids: Iterable[int]) -> list[int]:
        """Return ``ids`` as a list of ints, or raise ``ValueError`` naming an unknown id."""
        if isinstance(ids, str):
            raise ValueError(
                f"expected token ids, got the string {ids!r}; {self} turns symbols into ids with "
                f"encode({ids!r}) (symbols {', '.join(self.symbols)})"
            )
        out = []
        for pos, tok in enumerate(ids):
            if isinstance(tok, bool) or not (isinstance(tok, numbers.Real) or hasattr(tok, "__index__")):
                hint = f"; encode symbols first: {self}.encode(...)" if isinstance(tok, str) else ""
                raise ValueError(
                    f"expected token ids, got {type(tok).__name__} {tok!r} at position {pos}; {self} has "
                    f"ids 0..{self.num_symbols - 1} ({', '.join(self.symbols)}){hint}"
                )
            t = int(tok)
            if t != tok or not 0 <= t < self.num_symbols:
                raise ValueError(
                    f"unknown token id {tok!r} at position {pos}; {self} has ids 0..{self.num_symbols - 1} "
                    f"({', '.join(self.symbols)})"
                )
            out.append(t)
        return out

    def is_complete(self, ids: Sequence[int]) -> bool:
        """Whether checked ``ids`` end with ``END`` and contain no other ``END``."""
        return bool(ids) and ids[-1] == self.end_id and self.end_id not in ids[:-1]

    def encode(self, text: str) -> list[int]:
        """Whitespace-separated symbols -> ids."""
        index = {s: i for i, s in enumerate(self.symbols)}
        out = []
        for word in text.split():
            if word not in index:
                raise ValueError(f"unknown symbol {word!r}; {self} has symbols {', '.join(self.symbols)}")
            out.append(index[word])
        return out

    def decode(self, ids: Iterable[int]) -> str:
        """Ids -> whitespace-separated symbols."""
        return " ".join(self.symbols[i] for i in self.check_ids(ids))

    @abstractmethod
    def default_lengths(self, split: str) -> Lengths:
        """The paper's ``(min, max)`` length window (``END`` counted) for ``train`` or ``test``."""

    @abstractmethod
    def sample(self, rng: np.random.Generator, lengths: Lengths | None = None) -> list[int]:
        """One complete string (ending with ``END``) from the generating distribution, restricted
        to ``lengths`` (inclusive, ``END`` counted) when given."""

    @abstractmethod
    def accepts(self, ids: Sequence[int]) -> bool:
        """Whether ``ids`` is a complete string of the language (ending with ``END``)."""

    @abstractmethod
    def allowed_next(self, prefix: Sequence[int]) -> frozenset[int]:
        """Ids that can follow ``prefix`` in some string of the language (``END`` included);
        empty after ``END`` or after a prefix that no string of the language starts with."""

    def token_log_probs(self, ids: Sequence[int], lengths: Lengths | None = None) -> np.ndarray:
        """Exact ``log p(w_t | w_<t)`` for every token of ``ids`` under the sampler's distribution
        (restricted to ``lengths`` when given), natural log, ``[len(ids)]``.

        Languages whose generating grammar is ambiguous do not provide it (the chain rule needs
        prefix probabilities); they override :meth:`log_prob` instead."""
        raise NotImplementedError(f"{self} has no per-token probabilities; use log_prob")

    def log_prob(self, ids: Sequence[int], lengths: Lengths | None = None) -> float:
        """Exact log-probability of the complete string ``ids`` (``-inf`` outside the language),
        under the distribution restricted to ``lengths`` when given."""
        lp = self.token_log_probs(ids, lengths)
        return float(lp.sum()) if len(lp) else -math.inf

    # -- lengths --------------------------------------------------------------------------------
    def length_log_probs(self, max_length: int) -> np.ndarray:
        """``log P(|w| = n)`` (``END`` counted) for ``n = 0..max_length`` under the unrestricted
        generating distribution, ``[max_length + 1]``."""
        raise NotImplementedError(f"{self} does not provide its length distribution")

    def lengths_in(self, lengths: Lengths) -> list[int]:
        """The lengths in the inclusive window that have positive probability."""
        lo, hi = self._check_window(lengths)
        lp = self.length_log_probs(hi)
        return [n for n in range(lo, hi + 1) if np.isfinite(lp[n])]

    def _check_window(self, lengths: Lengths) -> Lengths:
        return check_window(lengths)

    def window_log_mass(self, lengths: Lengths) -> float:
        """``log P(|w| in window)`` under the unrestricted distribution."""
        lo, hi = self._check_window(lengths)
        lp = self.length_log_probs(hi)[lo:]
        finite = lp[np.isfinite(lp)]
        if not len(finite):
            raise ValueError(f"{self} has no string with a length in {tuple(lengths)}")
        top = finite.max()
        return float(top + math.log(np.exp(finite - top).sum()))

    def sample_length(self, rng: np.random.Generator, lengths: Lengths | None) -> int:
        """A length from the generating distribution's length law restricted to the window."""
        if lengths is None:
            raise ValueError(f"{self}: sampling needs a length window (lengths=(min, max), END counted)")
        lo, hi = self._check_window(lengths)
        lp = self.length_log_probs(hi)[lo:]
        if not np.isfinite(lp).any():
            raise ValueError(f"{self} has no string with a length in {tuple(lengths)}")
        p = np.exp(lp - lp[np.isfinite(lp)].max())
        return lo + int(rng.choice(len(p), p=p / p.sum()))

    def sample_given_length(self, rng: np.random.Generator, length: int) -> list[int]:
        """One string of exactly ``length`` tokens (``END`` counted) from ``p(w | |w| = length)``."""
        return self.sample(rng, (length, length))

    def log_prob_given_length(self, ids: Sequence[int]) -> float:
        """``log p(w | |w|)``: what DuSell & Chiang score models against."""
        return self.log_prob(ids, (len(ids), len(ids)))

    def sample_many(
        self,
        n: int,
        rng: np.random.Generator,
        lengths: Lengths | None = None,
        length_sampling: LengthSampling = "natural",
    ) -> list[list[int]]:
        """``n`` independent samples.  ``length_sampling="natural"``: the generating distribution
        restricted to the window; ``"uniform"``: each length drawn uniformly from the window's
        possible lengths first, then a string from ``p(w | length)`` (DuSell & Chiang)."""
        if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 0:
            raise ValueError(f"sample_many needs a number of strings n >= 0, got {n!r}")
        rng = check_rng(rng)
        if lengths is not None:
            lengths = check_window(lengths)
        if length_sampling == "natural":
            return [self.sample(rng, lengths) for _ in range(n)]
        if length_sampling != "uniform":
            raise ValueError(f"length_sampling must be 'natural' or 'uniform', got {length_sampling!r}")
        if lengths is None:
            raise ValueError("length_sampling='uniform' needs a length window")
        options = self.lengths_in(lengths)
        if not options:
            raise ValueError(f"{self} has no string with a length in {tuple(lengths)}")
        return [self.sample_given_length(rng, int(options[rng.integers(len(options))])) for _ in range(n)]

    def reference_log_probs(
        self, ids: Sequence[int], lengths: Lengths | None = None, length_sampling: LengthSampling = "natural"
    ) -> np.ndarray:
        """Per-token log-probabilities that sum to the exact ``log p(w)`` of the distribution
        ``sample_many`` drew ``ids`` from (``[len(ids)]``).  Where the language has no exact
        chain rule, the whole string's log-probability sits on the ``END`` token (sums, and
        hence cross-entropy differences, are exact; per-position values are not)."""
        uniform = length_sampling == "uniform"
        window = (len(ids), len(ids)) if uniform else lengths
        try:
            return self.token_log_probs(ids, window)
        except NotImplementedError:
            out = np.zeros(len(ids))
            out[-1] = self.log_prob_given_length(ids) if uniform else self.log_prob(ids, lengths)
            return out

    def reference_log_probs_many(
        self,
        strings: Sequence[Sequence[int]],
        lengths: Lengths | None = None,
        length_sampling: LengthSampling = "natural",
    ) -> list[np.ndarray]:
        """:meth:`reference_log_probs` of every string (what a dataset split stores); languages
        whose exact probabilities batch well (the PCFG languages' inside algorithm) override it."""
        return [self.reference_log_probs(s, lengths, length_sampling) for s in strings]

    # -- oracles for training targets -----------------------------------------------------------
    def allowed_next_all(self, ids: Sequence[int]) -> list[frozenset[int]]:
        """``allowed_next(ids[:t])`` for ``t = 0..len(ids) - 1``: the set each token was drawn
        from (Suzgun et al.'s next-set targets)."""
        ids = self.check_ids(ids)
        return [self.allowed_next(ids[:t]) for t in range(len(ids))]

    def accepts_prefixes(self, ids: Sequence[int]) -> list[bool]:
        """For ``t = 0..len(ids)``: is ``ids[:t]`` (followed by ``END``) in the language?  The
        per-prefix acceptor label of Paaßen et al. 2021 (``y_t``); ``END`` tokens in ``ids`` are skipped."""
        body = [t for t in self.check_ids(ids) if t != self.end_id]
        return [self.accepts([*body[:t], self.end_id]) for t in range(len(body) + 1)]

    def sample_negative(self, rng: np.random.Generator, lengths: Lengths | None = None) -> list[int]:
        """A string *not* in the language, ``END`` last.  Default: the length of a positive
        sample, symbols uniform over the alphabet, redrawn until rejected (50 tries per length,
        then a new length); languages override this with their papers' negatives."""
        for _ in range(200):
            n = len(self.sample(rng, lengths))
            for _ in range(50):
                w = [int(x) for x in rng.integers(0, self.end_id, size=n - 1)] + [self.end_id]
                if not self.accepts(w):
                    return w
        raise ValueError(f"{self}: no negative found in 10,000 uniform draws at sampled lengths in {lengths}")


class SymbolLanguage(Language):
    """A language whose generator emits a string of symbols and then ``END`` (a PCFG, a PFSA):
    default windows from the class attributes, the length law shifted by one for ``END``, and
    sampling within a window as "draw the length, then the string given its length".

    Subclasses give the symbol-level pieces: ``_symbol_length_log_probs(max_symbols)``
    (``log P(n symbols)``, ``[max_symbols + 1]``) and ``_sample_symbols(rng, n)`` (ids), and
    ``_table_cost(length)``, what their tables for strings of ``length`` tokens take (bytes,
    operations), which :func:`check_table_cost` holds within the limits."""

    train_lengths: Lengths = (1, 51)
    test_lengths: Lengths = (51, 101)

    def default_lengths(self, split: str) -> Lengths:
        if split in ("train", "val", "validation", "dev"):
            return self.train_lengths
        if split == "test":
            return self.test_lengths
        raise ValueError(f"unknown split {split!r}; use 'train', 'val' or 'test'")

    @abstractmethod
    def _symbol_length_log_probs(self, max_symbols: int) -> np.ndarray:
        """``log P(|w| = n)`` over symbols (no ``END``), ``n = 0..max_symbols``."""

    @abstractmethod
    def _sample_symbols(self, rng: np.random.Generator, n: int) -> list[int]:
        """``n`` symbol ids drawn from ``p(w | |w| = n)``."""

    #: what :meth:`_table_cost` describes, for the message of :func:`check_table_cost`
    _table_name = "its length tables"

    def _table_cost(self, length: int) -> tuple[float, float]:
        """``(bytes, operations)`` of the tables behind strings of ``length`` tokens (``END``
        counted); the default: one float64 and one Python step per length."""
        return 8.0 * (length + 1), float(PYTHON_STEP * length)

    def length_log_probs(self, max_length: int) -> np.ndarray:
        if max_length < 0:
            raise ValueError(f"max_length must be >= 0, got {max_length}")
        check_table_cost(self, max_length, self._table_cost, self._table_name)
        out = np.full(max_length + 1, -math.inf)
        if max_length >= 1:
            out[1:] = self._symbol_length_log_probs(max_length - 1)
        return out

    def sample(self, rng: np.random.Generator, lengths: Lengths | None = None) -> list[int]:
        return self.sample_given_length(rng, self.sample_length(rng, lengths))

    def sample_given_length(self, rng: np.random.Generator, length: int) -> list[int]:
        if isinstance(length, bool) or not isinstance(length, numbers.Integral):
            raise ValueError(f"length must be an integer (END counted), got {length!r}")
        if length < 1:
            raise ValueError(f"lengths count END, so they are >= 1; got {length}")
        check_table_cost(self, length, self._table_cost, self._table_name)
        return [*self._sample_symbols(rng, length - 1), self.end_id]


def bracket_annotations(language: Language, ids: Sequence[int]) -> dict[str, np.ndarray]:
    """Per-token facts Hewitt's bracket-closing metric needs, for a bracket language:
    ``distance[t]`` = ``t − (position of the matching open)`` at a close bracket, else 0;
    ``depth[t]`` = stack depth before token ``t``; ``full[t]`` = depth at the language's bound.
    Each ``[len(ids)]``.  Raises ``ValueError`` for non-bracket languages or unbalanced input."""
    k = language.bracket_types
    if k is None:
        raise ValueError(f"{language} is not a bracket language (bracket_types is None)")
    ids = language.check_ids(ids)
    n = len(ids)
    distance, depth = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
    stack: list[tuple[int, int]] = []
    for t, tok in enumerate(ids):
        depth[t] = len(stack)
        if tok < k:
            stack.append((tok, t))
        elif tok < 2 * k:
            if not stack or stack[-1][0] != tok - k:
                raise ValueError(f"close bracket id {tok} at position {t} does not match the stack")
            distance[t] = t - stack.pop()[1]
    bound = language.bracket_bound
    full = depth == bound if bound is not None else np.zeros(n, dtype=bool)
    return {"distance": distance, "depth": depth, "full": full}


_guard_samplers(Language)


def length_floor(language: Language, window: Lengths, lengths: Sequence[int] | None = None) -> float:
    """The smallest cross-entropy difference against ``log p(w | length)`` (nats per token,
    ``END`` counted) that a model of the training distribution reaches when the training lengths
    are drawn uniformly from the ``K`` possible lengths of ``window`` (DuSell & Chiang's protocol,
    ``length_sampling="uniform"``): such a model scores ``log p(w | length) - log K`` on every
    string of those lengths (it must predict the length; the bound is given it), so on strings of
    lengths ``n_i`` the difference is ``sum_i log K / sum_i n_i``.

    ``lengths``: the strings' lengths (default: one string per possible length of ``window``,
    the expectation of a split sampled like the training data).  Lengths outside the window
    raise ``ValueError``: there a model of the training distribution gives the string
    probability 0, and no finite floor exists."""
    possible = language.lengths_in(window)
    if not possible:
        raise ValueError(f"{language} has no string with a length in {tuple(window)}")
    lengths = list(possible if lengths is None else lengths)
    outside = sorted({int(n) for n in lengths} - set(possible))
    if outside:
        raise ValueError(
            f"length_floor: lengths {outside[:5]} are not possible lengths of {language} in the window "
            f"{tuple(window)}"
        )
    if not lengths:
        raise ValueError("length_floor needs at least one length")
    return len(lengths) * math.log(len(possible)) / sum(lengths)
