"""Delétang et al.'s (2023) Chomsky-hierarchy tasks (:mod:`memrnn.languages.chomsky`) as a data
module for :class:`memrnn.lit.SequenceModule`'s ``generator`` objective.

Each sequence is the task's input ``x`` (``n`` symbols) followed by ``output_length(n)`` blank
inputs, as the public code's ``make_model_with_empty_targets``; the targets are ``-100`` on the
input and on the unscored output positions, and the output symbols elsewhere, so the generator's
masked cross-entropy is the paper's loss and its token accuracy (``val/acc``, ``test/acc``) the
paper's per-token accuracy over the scored output positions.  The output is a function of the
input, so the exact log-probability of every target is 0 (``ref_logprob``) and ``ce_gap`` equals
``ce``.  The per-length curves (``LengthCurves``) are by input length ``n``: the paper's score is
their mean accuracy over the test lengths.

Protocol (Delétang et al. 2023, section 4 and their public sweep): train on lengths uniform in
1–40, test at every length 41–500 (512 sequences per length in the paper; ``test_per_length``
here), batch 128, gradient clipping 1.  Their trainer draws a fresh batch of one length per step;
here each training sequence has its own uniform length and is drawn lazily from ``(seed, index)``
(``train_size`` sequences per epoch, nothing stored), so a large ``train_size`` is the paper's
stream of fresh samples.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import Dataset

from memrnn.data.datamodule import IGNORE_INDEX, SPLITS, SplitDataModule
from memrnn.data.tasks import collate_transduction
from memrnn.languages.base import check_window
from memrnn.languages.chomsky import TransductionTask
from memrnn.languages.state_tracking import transduction_task


def transduction_item(task: TransductionTask, x: Sequence[int], y: Sequence[int]) -> dict[str, Any]:
    """One sequence: ``input [n + L]`` (``x``, then the blank id ``len(input_symbols)``),
    ``target [n + L]`` (``-100``, then ``y`` where scored), ``loss_mask``, ``ref_logprob`` (0)
    and ``input_length`` ``n``; for an aligned task (a word problem) ``input [n]`` is ``x`` and
    ``target [n]`` is ``y``."""
    n, L = len(x), len(y)
    blank = len(task.input_symbols)
    scored = task.scored(y)
    if task.aligned:  # the output is read at the input positions: no blanks
        if n != L:
            raise ValueError(
                f"{task.name}: an aligned task needs one output per input, got {n} inputs and {L} outputs"
            )
        target_arr = np.array(
            [t if s else IGNORE_INDEX for t, s in zip(y, scored, strict=True)], dtype=np.int64
        )
        return {
            "input": np.array(x, dtype=np.int64),
            "target": target_arr,
            "loss_mask": target_arr != IGNORE_INDEX,
            "ref_logprob": np.zeros(n, dtype=np.float64),
            "input_length": n,
        }
    target = [IGNORE_INDEX] * n + [t if s else IGNORE_INDEX for t, s in zip(y, scored, strict=True)]
    target_arr = np.array(target, dtype=np.int64)
    return {
        "input": np.array([*x, *[blank] * L], dtype=np.int64),
        "target": target_arr,
        "loss_mask": target_arr != IGNORE_INDEX,
        "ref_logprob": np.zeros(n + L, dtype=np.float64),
        "input_length": n,
    }


class SampledTransductions(Dataset):
    """``size`` sequences of ``task`` with input lengths uniform in ``window`` (``per_length``:
    that many at every length of the window instead), each drawn from ``(seed, index)`` when read:
    deterministic, nothing stored."""

    def __init__(
        self,
        task: TransductionTask,
        window: tuple[int, int],
        seed: Sequence[int],
        size: int | None = None,
        per_length: int | None = None,
    ) -> None:
        if (size is None) == (per_length is None):
            raise ValueError("give exactly one of size and per_length")
        self.task, self.window, self.seed = task, window, tuple(seed)
        self.size, self.per_length = size, per_length
        self.n_lengths = window[1] - window[0] + 1

    def __len__(self) -> int:
        return self.size if self.size is not None else self.per_length * self.n_lengths

    def __getitem__(self, i: int) -> dict[str, Any]:
        if not 0 <= i < len(self):
            raise IndexError(f"index {i} out of range for {len(self)} sequences")
        rng = np.random.default_rng([*self.seed, i])
        if self.per_length is not None:
            n = self.window[0] + i // self.per_length
        else:
            n = int(rng.integers(self.window[0], self.window[1] + 1))
        return transduction_item(self.task, *self.task.sample(rng, n))


def collate_chomsky(items: Sequence[dict[str, Any]]) -> dict[str, Tensor]:
    """:func:`memrnn.data.tasks.collate_transduction` plus ``ref_logprob [B, T]`` (zeros) and
    ``input_lengths [B]``."""
    out = collate_transduction(items)
    out["ref_logprob"] = torch.zeros(out["target"].shape, dtype=torch.float64)
    out["input_lengths"] = torch.tensor([it["input_length"] for it in items], dtype=torch.long)
    return out


def transduction_batch(
    task: TransductionTask | str, length: int, count: int, seed: int = 0
) -> dict[str, Tensor]:
    """``count`` sequences of ``task`` (a task or its name, as :class:`ChomskyDataModule` takes)
    with inputs of ``length`` symbols, drawn from ``seed``, collated as a test batch
    (:func:`collate_chomsky`: ``input``, ``target``, ``mask [B, T]``, ``input_lengths [B]``, …)."""
    task = transduction_task(task) if isinstance(task, str) else task
    if isinstance(length, bool) or not isinstance(length, int) or length < 1:
        raise ValueError(f"length must be a positive int, got {length!r}")
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ValueError(f"count must be a positive int, got {count!r}")
    rng = np.random.default_rng([seed, length])
    return collate_chomsky([transduction_item(task, *task.sample(rng, length)) for _ in range(count)])


class ChomskyDataModule(SplitDataModule):
    """One Chomsky-hierarchy task (module docstring).

    Args:
        task: a name of :data:`memrnn.languages.chomsky.CHOMSKY_TASKS` (``reverse_string``, …)
            or of :data:`memrnn.languages.state_tracking.STATE_TRACKING_TASKS` (``s5``, ``a5``, …).
        train_size: training sequences per epoch (drawn lazily).
        val_size: validation sequences, lengths uniform in ``val_lengths``.
        test_per_length: test sequences at every length of ``test_lengths``.
        train_lengths, val_lengths, test_lengths: input-length windows (inclusive); validation
            defaults to the test window (length generalisation is what is selected on).
        batch_size, eval_batch_size, seed, num_workers: as every memrnn data module.
    """

    def __init__(
        self,
        task: str = "reverse_string",
        train_size: int = 12_800,
        val_size: int = 512,
        test_per_length: int = 512,
        train_lengths: tuple[int, int] = (1, 40),
        val_lengths: tuple[int, int] | None = None,
        test_lengths: tuple[int, int] = (41, 500),
        batch_size: int = 128,
        eval_batch_size: int | None = None,
        seed: int = 0,
        num_workers: int = 0,
    ) -> None:
        super().__init__(batch_size, eval_batch_size, seed, num_workers)
        self.task = transduction_task(task)
        for name, v in (
            ("train_size", train_size),
            ("val_size", val_size),
            ("test_per_length", test_per_length),
        ):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive int, got {v!r}")
        self.windows = {
            "train": check_window(train_lengths, "train_lengths"),
            "test": check_window(test_lengths, "test_lengths"),
        }
        self.windows["val"] = (
            check_window(val_lengths, "val_lengths") if val_lengths else self.windows["test"]
        )
        for split, (lo, _) in self.windows.items():
            if lo < 1:
                raise ValueError(f"{split} lengths must start at 1 or more, got {self.windows[split]}")
        self.train_size, self.val_size, self.test_per_length = train_size, val_size, test_per_length
        self.save_hyperparameters()

    @property
    def vocab_size(self) -> int:
        """Input ids: the task's input symbols and the blank read while the output is produced
        (never read by an aligned task)."""
        return len(self.task.input_symbols) + 1

    @property
    def num_symbols(self) -> int:
        """Output classes: the task's output symbols."""
        return len(self.task.output_symbols)

    @property
    def bracket_types(self) -> None:
        """No bracket-closing metric for these tasks."""
        return None

    def build_split(self, split: str) -> SampledTransductions:
        seed = (self.seed, SPLITS.index(split), 3)
        if split == "test":
            return SampledTransductions(self.task, self.windows[split], seed, per_length=self.test_per_length)
        size = self.train_size if split == "train" else self.val_size
        return SampledTransductions(self.task, self.windows[split], seed, size=size)

    def collate_fn(self) -> Callable[[Sequence[Any]], dict[str, Tensor]]:
        return collate_chomsky
