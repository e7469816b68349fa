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
from memrnn.data.datamodule import IGNORE_INDEX, SPLITS, SplitDataModule, bos_inputs
from memrnn.data.tasks import ListDataset
from memrnn.languages.base import check_window
from memrnn.languages.recognizers import FLARE_SPLITS, RecognitionLanguage, flare_language, sample_labelled

__all__ = ["RecognizerDataModule", "collate_recognizer"]


#: the auxiliary targets a recognizer data module can add (module docstring)
AUXILIARY = ("language_modelling", "next_symbols")


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
        next_symbols_convention: ``"language"`` (the language's next-symbol sets) or ``"public"``
            (the public code's; they differ for ``stack_manipulation`` only).
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
        next_symbols_convention: Literal["language", "public"] = "language",
        batch_size: int = 32,
        eval_batch_size: int | None = None,
        seed: int = 0,
        num_workers: int = 0,
    ) -> None:
        super().__init__(batch_size, eval_batch_size, seed, num_workers)
        self.language = flare_language(language)
        train_size, val_size = positive_int("train_size", train_size), positive_int("val_size", val_size)
        test_per_length = positive_int("test_per_length", test_per_length)
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
        self.auxiliary, self.convention = tuple(auxiliary), next_symbols_convention
        self.windows = {
            "train": check_window(train_lengths, "train_lengths"),
            "test": check_window(test_lengths, "test_lengths"),
        }
        if val_lengths is not None:
            self.windows["val"] = check_window(val_lengths, "val_lengths")
        elif validation == "short":
            self.windows["val"] = self.windows["train"]
        else:
            self.windows["val"] = FLARE_SPLITS["val_long"][1]
        lo, hi = self.windows["test"]
        self.sizes = {"train": train_size, "val": val_size, "test": test_per_length * (hi - lo + 1)}
        self.perturbation_probability = perturbation_probability
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

    def build_split(self, split: str) -> ListDataset:
        rng = np.random.default_rng([self.seed, SPLITS.index(split), 4])
        pairs = sample_labelled(
            self.language, rng, self.sizes[split], self.windows[split], self.perturbation_probability
        )
        return ListDataset([{"body": list(s), "label": bool(y)} for s, y in pairs])

    def collate_fn(self) -> Callable[[Sequence[Any]], dict[str, Tensor]]:
        return partial(
            collate_recognizer,
            bos_id=self.language.num_symbols,
            language=self.language,
            auxiliary=self.auxiliary,
            convention=self.convention,
        )
