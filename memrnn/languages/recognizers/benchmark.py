"""Butoi et al.'s (2025) benchmark (:mod:`memrnn.languages.recognizers`): its 18 languages by
name, its splits, and the samplers of its labelled strings (positives by each language's law,
negatives by random edits)."""

from __future__ import annotations

from collections.abc import Sequence
from collections.abc import Set as AbstractSet

import numpy as np

from memrnn.languages.base import check_rng, check_window
from memrnn.languages.recognizers.arithmetic import BinaryAddition, BinaryMultiplication, ComputeSqrt
from memrnn.languages.recognizers.base import (
    SAMPLINGS,
    SQRTS,
    AutomatonRecognitionLanguage,
    RecognitionLanguage,
    Window,
)
from memrnn.languages.recognizers.regular import (
    CycleNavigation,
    Dyck23,
    EvenPairs,
    First,
    ModularArithmetic,
    Parity,
    Repeat01,
)
from memrnn.languages.recognizers.words import (
    BucketSort,
    Majority,
    MarkedCopy,
    MarkedReversal,
    MissingDuplicate,
    OddsFirst,
    StackManipulation,
    UnmarkedReversal,
)

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
