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
(and selects its checkpoint) on.  The paper also adds language-modelling and next-symbol losses;
here the recognition loss is the objective (its "recognition only" setting).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, Literal

import numpy as np
import torch
from torch import Tensor

from memrnn.core.checks import positive_int
from memrnn.data.datamodule import SPLITS, SplitDataModule, bos_inputs
from memrnn.data.tasks import ListDataset
from memrnn.languages.base import check_window
from memrnn.languages.recognizers import FLARE_SPLITS, flare_language, sample_labelled

__all__ = ["RecognizerDataModule", "collate_recognizer"]


def collate_recognizer(items: Sequence[dict[str, Any]], bos_id: int) -> dict[str, Tensor]:
    """Right-pad a batch of labelled strings: ``input [B, T]`` (``BOS`` then the symbols),
    ``mask [B, T]``, ``label [B]`` float and ``lengths [B]`` (symbols + 1; the acceptor is read
    at ``lengths − 1``)."""
    inp, mask, lengths = bos_inputs([it["body"] for it in items], bos_id)
    label = torch.tensor([float(it["label"]) for it in items])
    return {"input": inp, "mask": mask, "label": label, "lengths": lengths}


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
        """The language's symbols (the size of a generator head, unused by recognition)."""
        return self.language.num_symbols

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
        return partial(collate_recognizer, bos_id=self.language.num_symbols)
