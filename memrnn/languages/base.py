"""The protocol every formal language in memrnn follows.

A string is a sequence of integer token ids over ``symbols``; a *complete* string ends with
``END`` (Hewitt et al.'s ω), which is always the last symbol.  Models read an extra
input-only ``BOS`` id (``bos_id == num_symbols``) before the first token.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence

import numpy as np

from memrnn.core.serialization import allow_in_checkpoints

Lengths = tuple[int, int]


class Language(ABC):
    """A formal language with a generating distribution, membership and a next-token oracle.

    Subclasses set ``symbols`` (the output alphabet, ``END`` last) and implement
    ``sample``, ``accepts``, ``allowed_next``, ``token_log_probs`` and ``default_lengths``.
    """

    symbols: tuple[str, ...]

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        allow_in_checkpoints(cls)  # data modules save their language in checkpoints

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
        out = []
        for pos, tok in enumerate(ids):
            t = int(tok)
            if t != tok or not 0 <= t < self.num_symbols:
                raise ValueError(
                    f"unknown token id {tok!r} at position {pos}; {self} has ids 0..{self.num_symbols - 1} "
                    f"({', '.join(self.symbols)})"
                )
            out.append(t)
        return out

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

    @abstractmethod
    def token_log_probs(self, ids: Sequence[int], lengths: Lengths | None = None) -> np.ndarray:
        """Exact ``log p(w_t | w_<t)`` for every token of ``ids`` under the sampler's distribution
        (restricted to ``lengths`` when given), natural log, ``[len(ids)]``."""

    def log_prob(self, ids: Sequence[int], lengths: Lengths | None = None) -> float:
        """Exact log-probability of the complete string ``ids`` (``-inf`` outside the language)."""
        lp = self.token_log_probs(ids, lengths)
        return float(lp.sum()) if len(lp) else -math.inf

    def sample_many(
        self, n: int, rng: np.random.Generator, lengths: Lengths | None = None
    ) -> list[list[int]]:
        """``n`` independent samples."""
        return [self.sample(rng, lengths) for _ in range(n)]
