"""The recognizer benchmark of Butoi et al. (2025), "Training neural networks as recognizers of
formal languages" (FLaRe; :mod:`memrnn.languages.recognizers`), as a data module for
:class:`memrnn.lit.SequenceModule`'s ``acceptor_end`` objective.

A model reads ``BOS w_1 … w_n`` and its acceptor head is read at the string's own last position
(``lengths − 1``); the label says whether ``w`` is in the language.  ``val/accept_end`` and
``test/accept_end`` are the benchmark's accuracy.

Protocol (section 4 of the paper): 10,000 training strings of lengths 0–40; two validation sets of
1,000 strings, "short" (0–40) and "long" (0–80); a test set of 5,010 strings (10 per length) of
lengths 0–500; every string positive or negative with probability 1/2, negatives perturbed
positives (probability 0.5) or uniform strings.  The paper's score over trials: the mean test
accuracy of the models selected on the short validation set ("inductive bias") and the max of
those selected on the long one ("expressivity"); ``validation`` picks which one a run validates
(and selects its checkpoint) on.

The defaults make the data as the public code's ``sample_dataset.py`` makes them (its strings are
drawn from another generator, so equal in law, not string for string): ``compute_sqrt`` with its
float root (``sqrt_convention="public"``), the regular languages' strings from the uniform-action
automaton conditioned on the length (``regular_sampling="pdfa"``), negatives that decide edited or
uniform on every redraw (``strict_edits=False``) and its sample-dependent next-symbol sets of
``stack_manipulation`` (``next_symbols_convention="public"``); each other choice is an option
(:mod:`memrnn.languages.recognizers` says what each changes).  ``test_set="held_out"`` tests on the
public code's fifth set, ``test-short-held-out``: 1,000 strings of lengths 0–40 of which none is a
training, short-validation or long-validation string (both validation sets are drawn for it,
whichever a run validates on); the public code skips it for a language whose draws cannot avoid
those strings in 100 tries, where memrnn raises at set-up (of the 18, only ``repeat_01``, whose 21
strings of lengths 0–40 are all training strings).  As in the public code, no other set is kept
apart from another: validation and test strings may also be training strings.

The paper's auxiliary losses (``auxiliary``): ``"language_modelling"`` adds ``target`` (each
positive string's next symbols ``w_1 … w_n EOS`` at positions ``0 … n``, nothing for negatives:
:class:`memrnn.lit.SequenceModule`'s ``generator`` objective) and ``"next_symbols"`` adds
``next_set`` (each positive string's next-symbol sets, :meth:`RecognitionLanguage.next_symbols`,
multi-hot over the symbols and ``EOS``) with ``next_set_mask`` (the positions that have one: the
``next_set`` objective).  Output ids are the language's symbols and ``EOS`` (``num_symbols`` of
them).  Without them the recognition loss is the objective (the paper's "recognition only").
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, Literal

import numpy as np
import torch
from torch import Tensor

from memrnn.core.checks import positive_int
from memrnn.data.datamodule import IGNORE_INDEX, SplitDataModule, bos_inputs
from memrnn.data.tasks import ListDataset
from memrnn.languages.base import check_window
from memrnn.languages.recognizers import (
    FLARE_SPLITS,
    SAMPLINGS,
    SQRTS,
    RecognitionLanguage,
    flare_language,
    sample_labelled,
)

__all__ = ["RecognizerDataModule", "collate_recognizer"]


#: the auxiliary targets a recognizer data module can add (module docstring)
AUXILIARY = ("language_modelling", "next_symbols")
#: what the test stage evaluates: the benchmark's test set or the public code's held-out set
TEST_SETS = ("test", "held_out")
#: each set's random stream, ``[seed, *STREAMS[name]]`` (train, val-short and test as before the
#: held-out set existed; the two validation sets are drawn independently, as the public code does)
STREAMS = {"train": (0, 4), "val_short": (1, 4), "val_long": (1, 5), "test": (2, 4), "held_out": (3, 4)}


def collate_recognizer(
    items: Sequence[dict[str, Any]],
    bos_id: int,
    language: RecognitionLanguage | None = None,
    auxiliary: Sequence[str] = (),
    convention: str = "language",
) -> dict[str, Tensor]:
    """Right-pad a batch of labelled strings: ``input [B, T]`` (``BOS`` then the symbols),
    ``mask [B, T]``, ``label [B]`` float and ``lengths [B]`` (symbols + 1; the acceptor is read
    at ``lengths − 1``); with ``auxiliary`` (and the ``language``), the positive strings'
    ``target [B, T]`` (``IGNORE_INDEX`` elsewhere) and ``next_set [B, T, V + 1]`` bool with
    ``next_set_mask [B, T]`` (module docstring)."""
    inp, mask, lengths = bos_inputs([it["body"] for it in items], bos_id)
    label = torch.tensor([float(it["label"]) for it in items])
    batch = {"input": inp, "mask": mask, "label": label, "lengths": lengths}
    if not auxiliary:
        return batch
    B, T = inp.shape
    if "language_modelling" in auxiliary:
        target = torch.full((B, T), IGNORE_INDEX, dtype=torch.long)
        for i, it in enumerate(items):
            if it["label"]:
                target[i, : len(it["body"]) + 1] = torch.tensor([*it["body"], language.eos])
        batch["target"] = target
    if "next_symbols" in auxiliary:
        next_set = torch.zeros(B, T, language.eos + 1, dtype=torch.bool)
        for i, it in enumerate(items):
            if it["label"]:
                for t, symbols in enumerate(language.next_symbols(it["body"], convention)):
                    next_set[i, t, list(symbols)] = True
        batch["next_set"], batch["next_set_mask"] = next_set, next_set.any(-1)
    return batch


def token_batches(lengths: Sequence[int], max_tokens: int) -> list[list[int]]:
    """Indices of strings of ``lengths`` grouped as the recognizer benchmark's public code groups
    them (``batching.group_into_batches`` with ``b · n <= max_tokens``): sorted by length
    (stably), each batch grown while ``strings × its longest length`` stays within
    ``max_tokens``; a string that does not fit with any other is a batch alone."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    batches: list[list[int]] = []
    batch: list[int] = []
    for i in order:
        batch.append(i)
        if len(batch) > 1 and len(batch) * lengths[i] > max_tokens:
            batch.pop()
            batches.append(batch)
            batch = [i]
    if batch:
        batches.append(batch)
    return batches


class RecognizerDataModule(SplitDataModule):
    """One language of the recognizer benchmark (module docstring).

    Args:
        language: a name of :data:`memrnn.languages.recognizers.FLARE_LANGUAGES`.
        train_size, val_size: strings in the training and validation sets (10,000 and 1,000).
        test_per_length: the test set has this many strings per length of ``test_lengths`` in
            number (10; lengths drawn by the language's own law, as the benchmark does).
        train_lengths, test_lengths: length windows, inclusive ((0, 40) and (0, 500)).
        validation: ``"short"`` (lengths of the training window) or ``"long"`` (0–80).
        val_lengths: overrides the window ``validation`` picks.
        perturbation_probability: share of negatives made by editing a positive (0.5).
        auxiliary: the targets of the paper's auxiliary losses to add to each batch, any of
            ``"language_modelling"`` and ``"next_symbols"`` (module docstring).
        next_symbols_convention: ``"public"`` (default: the public code's sets) or ``"language"``
            (the language's own; they differ for ``stack_manipulation`` only).
        sqrt_convention: ``compute_sqrt``'s root, ``"public"`` (default: the public code's
            ``floor(sqrt(x))`` in floating point) or ``"exact"`` (``math.isqrt``); membership,
            labels, positives, negatives and next-symbol sets all follow it.
        regular_sampling: how the regular languages draw a string of a given length, ``"pdfa"``
            (default: Butoi et al.'s uniform-action automaton conditioned on the length, as the
            paper and the public code) or ``"uniform"`` (uniform among that length's strings).
        strict_edits: the public code's ``--strict-num-edits-distribution`` (off by default, as
            its data were made): each negative's kind (edited or uniform) and number of edits are
            drawn once and only its string is redrawn until it is negative.
        test_set: what the test stage evaluates: ``"test"`` (the benchmark's test set) or
            ``"held_out"`` (the public code's ``test-short-held-out``, ``held_out_size`` strings of
            the training window, none a training or validation string).
        held_out_size: strings in the held-out set (1,000).
        batch_tokens: training batches by tokens, as the public code's (``--max-tokens-per-batch``,
            ``batching.group_into_batches``): the training strings sorted by length (stably) and
            cut greedily into batches whose ``strings × longest length`` stays within
            ``batch_tokens`` (a string too long alone is a batch by itself), made once and
            reshuffled every epoch; None (default): ``batch_size`` strings per batch.  The paper
            draws it per trial uniformly in 128–4,096 (``configs/suites/flare.yaml``).
        batch_size, eval_batch_size, seed, num_workers: as every memrnn data module.
    """

    def __init__(
        self,
        language: str = "even_pairs",
        train_size: int = FLARE_SPLITS["train"][0],
        val_size: int = FLARE_SPLITS["val_short"][0],
        test_per_length: int = 10,
        train_lengths: tuple[int, int] = FLARE_SPLITS["train"][1],
        test_lengths: tuple[int, int] = FLARE_SPLITS["test"][1],
        validation: Literal["short", "long"] = "short",
        val_lengths: tuple[int, int] | None = None,
        perturbation_probability: float = 0.5,
        auxiliary: Sequence[str] = (),
        next_symbols_convention: Literal["language", "public"] = "public",
        sqrt_convention: Literal["public", "exact"] = "public",
        regular_sampling: Literal["pdfa", "uniform"] = "pdfa",
        strict_edits: bool = False,
        test_set: Literal["test", "held_out"] = "test",
        held_out_size: int = FLARE_SPLITS["held_out"][0],
        batch_tokens: int | None = None,
        batch_size: int = 32,
        eval_batch_size: int | None = None,
        seed: int = 0,
        num_workers: int = 0,
    ) -> None:
        super().__init__(batch_size, eval_batch_size, seed, num_workers)
        if sqrt_convention not in SQRTS:
            raise ValueError(
                f"sqrt_convention must be one of {', '.join(map(repr, SQRTS))}, got {sqrt_convention!r}"
            )
        if regular_sampling not in SAMPLINGS:
            raise ValueError(
                f"regular_sampling must be one of {', '.join(map(repr, SAMPLINGS))}, got {regular_sampling!r}"
            )
        self.language = flare_language(language, sqrt=sqrt_convention, sampling=regular_sampling)
        train_size, val_size = positive_int("train_size", train_size), positive_int("val_size", val_size)
        test_per_length = positive_int("test_per_length", test_per_length)
        held_out_size = positive_int("held_out_size", held_out_size)
        self.batch_tokens = None if batch_tokens is None else positive_int("batch_tokens", batch_tokens)
        if validation not in ("short", "long"):
            raise ValueError(f"validation must be 'short' or 'long', got {validation!r}")
        if not 0 <= perturbation_probability <= 1:
            raise ValueError(f"perturbation_probability must be in [0, 1], got {perturbation_probability}")
        unknown = [a for a in auxiliary if a not in AUXILIARY]
        if unknown or isinstance(auxiliary, str):
            raise ValueError(f"auxiliary takes a list of {', '.join(AUXILIARY)}; got {auxiliary!r}")
        if next_symbols_convention not in ("language", "public"):
            raise ValueError(
                f"next_symbols_convention must be 'language' or 'public', got {next_symbols_convention!r}"
            )
        if not isinstance(strict_edits, bool):
            raise ValueError(f"strict_edits must be True or False, got {strict_edits!r}")
        if test_set not in TEST_SETS:
            raise ValueError(f"test_set must be one of {', '.join(map(repr, TEST_SETS))}, got {test_set!r}")
        self.auxiliary, self.convention = tuple(auxiliary), next_symbols_convention
        self.validation, self.test_set, self.strict_edits = validation, test_set, strict_edits
        self.sqrt_convention, self.regular_sampling = sqrt_convention, regular_sampling
        train, test = check_window(train_lengths, "train_lengths"), check_window(test_lengths, "test_lengths")
        #: every set this module can draw: name -> (strings, window)
        self.sets: dict[str, tuple[int, tuple[int, int]]] = {
            "train": (train_size, train),
            "val_short": (val_size, train),
            "val_long": (val_size, FLARE_SPLITS["val_long"][1]),
            "test": (test_per_length * (test[1] - test[0] + 1), test),
            "held_out": (held_out_size, train),
        }
        val = "val_" + validation
        if val_lengths is not None:
            self.sets[val] = (val_size, check_window(val_lengths, "val_lengths"))
        #: what the train/val/test stages serve
        self.split_sets = {"train": "train", "val": val, "test": test_set}
        self.windows = {split: self.sets[name][1] for split, name in self.split_sets.items()}
        self.sizes = {split: self.sets[name][0] for split, name in self.split_sets.items()}
        self.perturbation_probability = perturbation_probability
        self._drawn: dict[str, list[tuple[tuple[int, ...], bool]]] = {}
        self.save_hyperparameters()

    @property
    def vocab_size(self) -> int:
        """Input ids: the language's symbols and ``BOS``."""
        return self.language.num_symbols + 1

    @property
    def num_symbols(self) -> int:
        """Output ids: the language's symbols and ``EOS`` (the auxiliary heads' size)."""
        return self.language.num_symbols + 1

    @property
    def bracket_types(self) -> None:
        """No next-token predictions to score."""
        return None

    def draw(self, name: str) -> list[tuple[tuple[int, ...], bool]]:
        """The labelled strings of set ``name`` (a key of :attr:`sets`: ``train``, ``val_short``,
        ``val_long``, ``test``, ``held_out``), each from its own stream ``[seed, *STREAMS[name]]``
        and drawn once.  ``held_out`` draws the training and both validation sets first and keeps
        every one of their strings out of it (the public code's ``test-short-held-out``)."""
        if name not in self.sets:
            raise ValueError(f"no set {name!r}; the sets are {', '.join(self.sets)}")
        if name not in self._drawn:
            excluded = None
            if name == "held_out":
                excluded = {s for other in ("train", "val_short", "val_long") for s, _ in self.draw(other)}
            size, window = self.sets[name]
            rng = np.random.default_rng([self.seed, *STREAMS[name]])
            self._drawn[name] = sample_labelled(
                self.language,
                rng,
                size,
                window,
                self.perturbation_probability,
                strict_edits=self.strict_edits,
                excluded=excluded,
            )
        return self._drawn[name]

    def setup(self, stage: str | None = None) -> None:
        """Build the stage's splits; with ``test_set="held_out"`` the held-out set is drawn first,
        whatever the stage, so that a language without one fails before training, not after."""
        if self.test_set == "held_out":
            self.draw("held_out")
        super().setup(stage)

    def build_split(self, split: str) -> ListDataset:
        pairs = self.draw(self.split_sets[split])
        ds = ListDataset([{"body": list(s), "label": bool(y)} for s, y in pairs])
        if split == "train" and self.batch_tokens is not None:  # served as fixed batches
            ds.batches = token_batches([len(s) for s, _ in pairs], self.batch_tokens)
        return ds

    def collate_fn(self) -> Callable[[Sequence[Any]], dict[str, Tensor]]:
        return partial(
            collate_recognizer,
            bos_id=self.language.num_symbols,
            language=self.language,
            auxiliary=self.auxiliary,
            convention=self.convention,
        )
