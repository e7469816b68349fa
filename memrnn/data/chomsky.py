"""Delétang et al.'s (2023) Chomsky-hierarchy tasks (:mod:`memrnn.languages.chomsky`) as a data
module for :class:`memrnn.lit.SequenceModule`'s ``generator`` objective.

Each sequence is the task's input ``x`` (``n`` symbols) followed by ``output_length(n)`` blank
inputs, as the public code's ``make_model_with_empty_targets``.  ``target`` is ``-100`` on the
input and on the unscored output positions and the output symbols elsewhere: the token accuracy
(``val/acc``, ``test/acc``) and the per-length curves (``LengthCurves``, by input length ``n``)
are the paper's per-token accuracy over the scored output positions (their ``accuracy_mask``:
up to and including the termination token).  ``loss_target`` (``loss_positions="outputs"``, the
default) has the output symbols at *every* output position, the zeros after a termination token
included, as the public code's loss (``loss_fn`` in ``experiments/example.py``: the cross-entropy
summed over classes and averaged over the batch and every output position; only the accuracy is
masked); the generator's loss reads it when a batch has it.  ``loss_positions="scored"`` trains
on the scored positions only (memrnn's earlier loss).  The output is a function of the input, so
the exact log-probability of every target is 0 (``ref_logprob``) and ``ce_gap`` equals ``ce``.

Protocol (Delétang et al. 2023, section 4, and their public code, ``experiments/``): train on
input lengths uniform in 1–40, every step a fresh batch of *one* length for all its rows
(``curriculum.UniformCurriculum``; ``batch_lengths="per_batch"``, the default: batch ``j`` of epoch
``e`` is drawn from ``(seed, e, j)``, nothing stored, nothing repeated across epochs);
``batch_lengths="per_sequence"`` gives each sequence its own uniform length instead, ``train_size``
fixed sequences (each from ``(seed, index)``) reshuffled every epoch (memrnn's earlier data).  The
paper evaluates every length up to 500 (512 sequences each; ``test_per_length``) and scores the
mean accuracy over the lengths ``> N + 1`` for training lengths up to ``N = 40``: the public code
averages ``accuracies[N + 1:]`` of lengths ``1..500``, i.e. 42–500 (the paper's text: ``N + 1`` to
500); the default test window is 42–500, so ``test/acc_mean_over_lengths`` is that score.
Batch 128, gradient clipping 1 (``configs/chomsky/_base.yaml``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any, Literal

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import DataLoader, Dataset, Sampler

from memrnn.data.datamodule import (
    IGNORE_INDEX,
    SPLITS,
    BatchLengths,
    SplitDataModule,
    check_choice,
    check_seed,
)
from memrnn.data.tasks import collate_transduction
from memrnn.languages.base import check_window
from memrnn.languages.chomsky import TransductionTask
from memrnn.languages.state_tracking import transduction_task

#: ``loss_positions``: where the generator's loss is taken (module docstring)
LossPositions = Literal["outputs", "scored"]


def transduction_item(
    task: TransductionTask, x: Sequence[int], y: Sequence[int], loss_positions: LossPositions = "outputs"
) -> dict[str, Any]:
    """One sequence: ``input [n + L]`` (``x``, then the blank id ``len(input_symbols)``),
    ``target [n + L]`` (``-100``, then ``y`` where scored), ``loss_mask``, ``ref_logprob`` (0)
    and ``input_length`` ``n``; for an aligned task (a word problem) ``input [n]`` is ``x`` and
    ``target [n]`` is ``y``.  With ``loss_positions="outputs"`` also ``loss_target [n + L]``:
    ``-100`` on the input, then ``y`` at every output position (scored or not)."""
    check_choice("loss_positions", loss_positions, ("outputs", "scored"))
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
        item = {
            "input": np.array(x, dtype=np.int64),
            "target": target_arr,
            "loss_mask": target_arr != IGNORE_INDEX,
            "ref_logprob": np.zeros(n, dtype=np.float64),
            "input_length": n,
        }
        if loss_positions == "outputs":
            item["loss_target"] = np.array(y, dtype=np.int64)
        return item
    target = [IGNORE_INDEX] * n + [t if s else IGNORE_INDEX for t, s in zip(y, scored, strict=True)]
    target_arr = np.array(target, dtype=np.int64)
    item = {
        "input": np.array([*x, *[blank] * L], dtype=np.int64),
        "target": target_arr,
        "loss_mask": target_arr != IGNORE_INDEX,
        "ref_logprob": np.zeros(n + L, dtype=np.float64),
        "input_length": n,
    }
    if loss_positions == "outputs":
        item["loss_target"] = np.array([IGNORE_INDEX] * n + list(y), dtype=np.int64)
    return item


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
        loss_positions: LossPositions = "outputs",
    ) -> None:
        if (size is None) == (per_length is None):
            raise ValueError("give exactly one of size and per_length")
        self.task, self.window, self.seed = task, window, tuple(seed)
        self.size, self.per_length = size, per_length
        self.loss_positions = check_choice("loss_positions", loss_positions, ("outputs", "scored"))
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
        return transduction_item(self.task, *self.task.sample(rng, n), self.loss_positions)


class SampledBatches(Dataset):
    """Training batches of one input length each, as the public code's trainer draws them: batch
    ``g`` (any index >= 0) has one length uniform in ``window`` and ``batch_size`` sequences of
    it (the ``size % batch_size`` rest for the last batch of an epoch), all drawn from
    ``(seed, g)`` when read: deterministic, nothing stored.  ``len`` is the batches of one epoch
    (``ceil(size / batch_size)``); :class:`FreshBatchSampler` gives epoch ``e`` the indices
    ``e · len … (e + 1) · len − 1``, so no batch repeats.  An item is the batch's list of
    sequences, for a ``DataLoader`` with ``batch_size=None`` whose ``collate_fn`` collates it."""

    def __init__(
        self,
        task: TransductionTask,
        window: tuple[int, int],
        seed: Sequence[int],
        size: int,
        batch_size: int,
        loss_positions: LossPositions = "outputs",
    ) -> None:
        self.task, self.window, self.seed = task, window, tuple(seed)
        self.size, self.batch_size = size, batch_size
        self.loss_positions = check_choice("loss_positions", loss_positions, ("outputs", "scored"))

    def __len__(self) -> int:
        return -(-self.size // self.batch_size)

    def rows(self, g: int) -> int:
        """Sequences in batch ``g``: ``batch_size``, or the epoch's rest for its last batch."""
        j = g % len(self)
        return min(self.batch_size, self.size - j * self.batch_size)

    def __getitem__(self, g: int) -> list[dict[str, Any]]:
        if isinstance(g, bool) or not isinstance(g, (int, np.integer)) or g < 0:
            raise IndexError(f"batch index must be an int >= 0, got {g!r}")
        rng = np.random.default_rng([*self.seed, int(g)])
        n = int(rng.integers(self.window[0], self.window[1] + 1))
        return [
            transduction_item(self.task, *self.task.sample(rng, n), self.loss_positions)
            for _ in range(self.rows(int(g)))
        ]


class FreshBatchSampler(Sampler[int]):
    """The batch indices of one epoch of :class:`SampledBatches`: ``epoch · n … (epoch + 1) · n − 1``
    (Lightning calls ``set_epoch`` every epoch), so every epoch draws new batches and a resumed
    run sees the same batches as an uninterrupted one.  Under DDP, Lightning wraps it in
    ``DistributedSamplerWrapper``, which forwards ``set_epoch`` and gives each rank its share of
    the epoch's batches (each rank's batch has one length; two ranks' batches of one step may
    differ)."""

    def __init__(self, n: int) -> None:
        self.n, self.epoch = n, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self) -> Iterator[int]:
        return iter(range(self.epoch * self.n, (self.epoch + 1) * self.n))

    def __len__(self) -> int:
        return self.n


def collate_chomsky(items: Sequence[dict[str, Any]]) -> dict[str, Tensor]:
    """:func:`memrnn.data.tasks.collate_transduction` plus ``ref_logprob [B, T]`` (zeros),
    ``input_lengths [B]`` and, when the items have it, ``loss_target [B, T]`` (``-100`` at
    padding)."""
    out = collate_transduction(items)
    out["ref_logprob"] = torch.zeros(out["target"].shape, dtype=torch.float64)
    out["input_lengths"] = torch.tensor([it["input_length"] for it in items], dtype=torch.long)
    if items and "loss_target" in items[0]:
        loss_target = torch.full(out["target"].shape, IGNORE_INDEX, dtype=torch.long)
        for b, it in enumerate(items):
            loss_target[b, : len(it["loss_target"])] = torch.as_tensor(it["loss_target"])
        out["loss_target"] = loss_target
    return out


def transduction_batch(
    task: TransductionTask | str,
    length: int,
    count: int,
    seed: int = 0,
    loss_positions: LossPositions = "outputs",
) -> dict[str, Tensor]:
    """``count`` sequences of ``task`` (a task or its name, as :class:`ChomskyDataModule` takes)
    with inputs of ``length`` symbols, drawn from ``seed``, collated as a test batch
    (:func:`collate_chomsky`: ``input``, ``target``, ``mask [B, T]``, ``input_lengths [B]``, and
    ``loss_target`` with ``loss_positions="outputs"``, …)."""
    task = transduction_task(task) if isinstance(task, str) else task
    if isinstance(length, bool) or not isinstance(length, int) or length < 1:
        raise ValueError(f"length must be a positive int, got {length!r}")
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ValueError(f"count must be a positive int, got {count!r}")
    rng = np.random.default_rng([seed, length])
    return collate_chomsky(
        [transduction_item(task, *task.sample(rng, length), loss_positions) for _ in range(count)]
    )


class ChomskyDataModule(SplitDataModule):
    """One Chomsky-hierarchy task (module docstring).

    Args:
        task: a name of :data:`memrnn.languages.chomsky.CHOMSKY_TASKS` (``reverse_string``, …;
            the public code's registry names too: ``missing_duplicate_string``) or of
            :data:`memrnn.languages.state_tracking.STATE_TRACKING_TASKS` (``s5``, ``a5``, …).
        train_size: training sequences per epoch (drawn lazily).
        val_size: validation sequences, lengths uniform in ``val_lengths``.
        test_per_length: test sequences at every length of ``test_lengths``.
        train_lengths, val_lengths, test_lengths: input-length windows (inclusive); validation
            defaults to the test window (length generalisation is what is selected on).  The
            default test window 42–500 is the lengths the public code's score averages.
        loss_positions: ``"outputs"`` (default, the public code's loss: every output position,
            the zeros after a termination token included; batches carry ``loss_target``) or
            ``"scored"`` (the scored positions only, as the accuracy).  Every split.
        batch_lengths: ``"per_batch"`` (default, the public code's trainer: each training batch
            has one input length, uniform in ``train_lengths``, and every epoch draws new
            batches) or ``"per_sequence"`` (each training sequence its own length, the same
            ``train_size`` sequences every epoch).  Validation and test are unaffected.
        test_seed: draw the test sequences from this seed instead of ``seed``, so that one test
            set serves every run: Delétang et al.'s ``range_evaluation`` reseeds its generators
            with a constant 1 before drawing the test batches (``experiments/range_evaluation.py``),
            whatever the run's seed (their strings come from JAX's and NumPy's generators: equal
            to memrnn's in law, not string for string).  ``test_seed=s`` is the test set a run
            with ``seed=s`` draws; None (default): the run's ``seed``.  Validation follows
            ``seed`` (their code has no validation set).
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
        test_lengths: tuple[int, int] = (42, 500),
        batch_size: int = 128,
        eval_batch_size: int | None = None,
        seed: int = 0,
        num_workers: int = 0,
        loss_positions: LossPositions = "outputs",
        batch_lengths: BatchLengths = "per_batch",
        test_seed: int | None = None,
    ) -> None:
        super().__init__(batch_size, eval_batch_size, seed, num_workers)
        self.task = transduction_task(task)
        self.loss_positions = check_choice("loss_positions", loss_positions, ("outputs", "scored"))
        self.batch_lengths = check_choice("batch_lengths", batch_lengths, ("per_batch", "per_sequence"))
        self.test_seed = check_seed("test_seed", test_seed, optional=True)
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

    def build_split(self, split: str) -> SampledTransductions | SampledBatches:
        """One split, from its own stream ``(seed, split)``; the test split from ``(test_seed,
        split)`` when ``test_seed`` is set."""
        seed = (self.split_seed(split), SPLITS.index(split), 3)
        window, loss = self.windows[split], self.loss_positions
        if split == "test":
            return SampledTransductions(
                self.task, window, seed, per_length=self.test_per_length, loss_positions=loss
            )
        if split == "train" and self.batch_lengths == "per_batch":
            return SampledBatches(self.task, window, (*seed, 1), self.train_size, self.batch_size, loss)
        size = self.train_size if split == "train" else self.val_size
        return SampledTransductions(self.task, window, seed, size=size, loss_positions=loss)

    def collate_fn(self) -> Callable[[Sequence[Any]], dict[str, Tensor]]:
        return collate_chomsky

    def train_dataloader(self) -> DataLoader:
        """Per sequence: the shared loader (an epoch-seeded shuffle of the ``train_size``
        sequences).  Per batch: one :class:`SampledBatches` item per step (``batch_size=None``),
        in :class:`FreshBatchSampler`'s order."""
        if self.batch_lengths == "per_sequence":
            return super().train_dataloader()
        if "train" not in self.datasets:
            self.datasets["train"] = self.build_split("train")
        ds = self.datasets["train"]
        return self.batch_loader(ds, FreshBatchSampler(len(ds)))
