"""The other ways to serve a language: acceptor tasks (a label per prefix or at each string's own
end, with negatives) and transduction tasks (the copy and repeat copy of Paaßen et al. 2021; reversal).

Generator tasks (next token, next-allowed sets) are :class:`FormalLanguageDataModule`'s.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, Literal

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import Dataset

from memrnn.core.checks import nonnegative_int, positive_int
from memrnn.core.serialization import allow_in_checkpoints
from memrnn.data.datamodule import SPLITS, LanguageDataModule, SplitDataModule, bos_inputs, resolve_splits
from memrnn.data.presets import get_preset
from memrnn.languages.base import Language, Lengths, LengthSampling, check_window


class ListDataset(Dataset):
    """A list of ready items."""

    def __init__(self, items: list[dict[str, Any]]) -> None:
        self.items = items

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return self.items[i]


def collate_acceptor(items: Sequence[dict[str, Any]], bos_id: int) -> dict[str, Tensor]:
    """Right-pad a batch for acceptance.

    Returns ``input [B, T]`` (``BOS`` then the symbols, no ``END``), ``mask [B, T]``,
    ``prefix_label [B, T]`` float (position t: is the prefix of t symbols in the language; 0 at
    padding), ``label [B]`` float (the whole string; read the model at ``lengths − 1``, the
    string's own end, not the padded end) and ``lengths [B]`` (symbols + 1).
    """
    inp, mask, lengths = bos_inputs([it["body"] for it in items], bos_id)
    prefix = torch.zeros(inp.shape)
    for b, it in enumerate(items):
        prefix[b, : len(it["body"]) + 1] = torch.as_tensor(it["prefix_label"], dtype=torch.float32)
    label = torch.tensor([float(it["label"]) for it in items])
    return {"input": inp, "mask": mask, "prefix_label": prefix, "label": label, "lengths": lengths}


class AcceptorDataModule(LanguageDataModule):
    """Positive and negative strings of ``language`` with acceptance labels.

    Args:
        language: any :class:`~memrnn.languages.base.Language`.
        train_size, val_size, test_size, train_lengths, test_lengths, preset, length_sampling:
            as for :class:`~memrnn.data.FormalLanguageDataModule` (windows count ``END``).
        negative_fraction: share of negatives (the language's ``sample_negative``: Weiss et
            al.'s for counting languages, uniform rejected strings otherwise).
        test_set: ``"sampled"`` (like train) or ``"near_miss"`` (Weiss et al.'s recipe, for
            counting languages; ``test_size`` strings).

    Batches come from :func:`collate_acceptor`; both the per-prefix labels (``y_t`` of Paaßen et al.
    2021, the latch task's output) and the whole-string label are always present, so one
    data module serves both objectives.
    """

    def __init__(
        self,
        language: Language,
        train_size: int | None = None,
        val_size: int | None = None,
        test_size: int | None = None,
        train_lengths: tuple[int, int] | None = None,
        test_lengths: tuple[int, int] | None = None,
        preset: str | None = None,
        length_sampling: LengthSampling | None = None,
        negative_fraction: float = 0.5,
        test_set: Literal["sampled", "near_miss"] | None = None,
        batch_size: int = 32,
        eval_batch_size: int | None = None,
        seed: int = 0,
        num_workers: int = 0,
    ) -> None:
        super().__init__(batch_size, eval_batch_size, seed, num_workers)
        if not 0 <= negative_fraction <= 1:
            raise ValueError(f"negative_fraction must be in [0, 1], got {negative_fraction}")
        sizes = {"train": train_size, "val": val_size, "test": test_size}
        if preset is not None and test_size is None and not get_preset(preset).test_size:
            sizes["test"] = 1000  # a preset counted per length (dusell): a fixed-size acceptor test set
        p, self.sizes, self.windows, self.length_sampling = resolve_splits(
            language, preset, sizes, train_lengths, test_lengths, length_sampling
        )
        self.language, self.negative_fraction = language, negative_fraction
        default_test_set = p.extra.get("test_set", "sampled") if p else "sampled"
        self.test_set = default_test_set if test_set is None else test_set
        if self.test_set not in ("sampled", "near_miss"):
            raise ValueError(f"test_set must be 'sampled' or 'near_miss', got {self.test_set!r}")
        if self.test_set == "near_miss" and not hasattr(language, "near_miss_test_set"):
            raise ValueError(f"test_set='near_miss' needs a counting language, got {language}")
        self.save_hyperparameters()

    @property
    def bracket_types(self) -> int | None:
        return None  # no next-token predictions to score

    def _item(self, w: list[int]) -> dict[str, Any]:
        lang = self.language
        body = [t for t in w if t != lang.end_id]
        prefix = lang.accepts_prefixes(body)
        return {"body": body, "prefix_label": prefix, "label": prefix[-1]}

    def build_split(self, split: str) -> ListDataset:
        rng = np.random.default_rng([self.seed, SPLITS.index(split), 1])
        lang, window, n = self.language, self.windows[split], self.sizes[split]
        if split == "test" and self.test_set == "near_miss":
            strings, _ = lang.near_miss_test_set(rng, n)  # type: ignore[attr-defined]
            return ListDataset([self._item(w) for w in strings])
        n_neg = round(n * self.negative_fraction)
        pos = lang.sample_many(n - n_neg, rng, window, self.length_sampling)
        neg = [lang.sample_negative(rng, window) for _ in range(n_neg)]
        order = rng.permutation(n)
        items = [self._item(w) for w in pos + neg]
        return ListDataset([items[i] for i in order])

    def collate_fn(self) -> Callable[[Sequence[Any]], dict[str, Tensor]]:
        return partial(collate_acceptor, bos_id=self.language.bos_id)


# -- transduction ---------------------------------------------------------------------------------
class CopyTask:
    """Paaßen et al.'s (2021) copy task: ``n`` (1..max_length) steps of ``bits`` random bits, with an extra
    channel that is −1 during the input; one end-of-sequence step (extra channel +1); then ``n``
    steps where the output is the input again (inputs 0).  ``T = 2n + 1``, input dim
    ``bits + 1``, output dim ``bits``; the loss mask covers the copy phase.

    RepeatCopy (``repeats``): after the input, ``r`` copies, each announced by an EOS step."""

    def __init__(self, bits: int = 8, max_length: int = 20, min_length: int = 1) -> None:
        for name, v in (("bits", bits), ("max_length", max_length), ("min_length", min_length)):
            positive_int(name, v)
        if not min_length <= max_length:
            raise ValueError(f"min_length must be <= max_length, got {min_length} > {max_length}")
        self.bits, self.min_length, self.max_length = bits, min_length, max_length

    @property
    def input_size(self) -> int:
        return self.bits + 1

    @property
    def output_size(self) -> int:
        return self.bits

    def _repeats(self, rng: np.random.Generator, split: str) -> int:
        return 1

    def sample(self, rng: np.random.Generator, split: str) -> dict[str, np.ndarray]:
        n = int(rng.integers(self.min_length, self.max_length + 1))
        r = self._repeats(rng, split)
        seq = rng.integers(0, 2, size=(n, self.bits)).astype(np.float32)
        steps = n + r * (n + 1)
        x = np.zeros((steps, self.bits + 1), np.float32)
        y = np.zeros((steps, self.bits), np.float32)
        m = np.zeros(steps, bool)
        x[:n, : self.bits], x[:n, self.bits] = seq, -1.0
        for k in range(r):
            start = n + k * (n + 1)
            x[start, self.bits] = 1.0
            y[start + 1 : start + 1 + n] = seq
            m[start + 1 : start + 1 + n] = True
        return {"input": x, "target": y, "loss_mask": m}


class RepeatCopyTask(CopyTask):
    """Paaßen et al.'s (2021) repeat copy: input up to 10 steps, the end-of-sequence token (and with it a
    copy) up to ``max_repeats`` times (``test_max_repeats`` in the test split)."""

    def __init__(
        self, bits: int = 8, max_length: int = 10, max_repeats: int = 10, test_max_repeats: int = 20
    ) -> None:
        super().__init__(bits, max_length)
        positive_int("max_repeats", max_repeats)
        positive_int("test_max_repeats", test_max_repeats)
        if not max_repeats <= test_max_repeats:
            raise ValueError(
                f"max_repeats must be <= test_max_repeats, got {max_repeats} > {test_max_repeats}"
            )
        self.max_repeats, self.test_max_repeats = max_repeats, test_max_repeats

    def _repeats(self, rng: np.random.Generator, split: str) -> int:
        hi = self.test_max_repeats if split == "test" else self.max_repeats
        return int(rng.integers(1, hi + 1))


class ReversalTask:
    """Token transduction: read a string of ``language`` (without ``END``), a separator, then
    emit it reversed (``direction="reverse"``) or again (``"copy"``).  Input ids: symbols,
    ``SEP = num_symbols``, ``BLANK = num_symbols + 1`` during the output phase; targets on the
    output phase only."""

    def __init__(self, language: Language, direction: Literal["reverse", "copy"] = "reverse") -> None:
        if not isinstance(language, Language):
            raise ValueError(
                f"ReversalTask reads the strings of a Language (e.g. ReversalTask(MarkedReversal())), "
                f"got {type(language).__name__} {language!r}"
            )
        if direction not in ("reverse", "copy"):
            raise ValueError(f"direction must be 'reverse' or 'copy', got {direction!r}")
        self.language, self.direction = language, direction
        self.sep, self.blank = language.num_symbols, language.num_symbols + 1

    @property
    def vocab_size(self) -> int:
        return self.language.num_symbols + 2

    def sample(self, rng: np.random.Generator, split: str, lengths: Lengths) -> dict[str, np.ndarray]:
        body = [t for t in self.language.sample(rng, lengths) if t != self.language.end_id]
        out = body[::-1] if self.direction == "reverse" else body
        n = len(body)
        x = np.array([*body, self.sep, *[self.blank] * n], dtype=np.int64)
        y = np.array([-100] * (n + 1) + out, dtype=np.int64)
        return {"input": x, "target": y, "loss_mask": y >= 0}


def collate_transduction(items: Sequence[dict[str, np.ndarray]]) -> dict[str, Tensor]:
    """Right-pad ``input [B, T, ...]``, ``target [B, T, ...]``, ``loss_mask [B, T]``; adds
    ``mask [B, T]`` and ``lengths [B]``."""
    lengths = torch.tensor([len(it["input"]) for it in items], dtype=torch.long)
    steps = int(lengths.max()) if items else 0
    out: dict[str, Tensor] = {"lengths": lengths, "mask": torch.arange(steps)[None, :] < lengths[:, None]}
    for key in ("input", "target", "loss_mask"):
        first = torch.as_tensor(items[0][key])
        fill = -100 if key == "target" and first.dtype == torch.long else 0
        buf = torch.full((len(items), steps, *first.shape[1:]), fill, dtype=first.dtype)
        for b, it in enumerate(items):
            v = torch.as_tensor(it[key])
            buf[b, : len(v)] = v
        out[key] = buf
    return out


#: the transduction tasks :class:`TransductionDataModule` builds by name, with Paaßen et al.'s
#: (2021) sizes (the class defaults)
TRANSDUCTION_TASKS: dict[str, type[CopyTask]] = {"copy": CopyTask, "repeat_copy": RepeatCopyTask}


def transduction_task(task: Any) -> Any:
    """``task`` itself (a :class:`CopyTask`, :class:`RepeatCopyTask`, :class:`ReversalTask` or any
    object with ``sample(rng, split)``), or the task named ``"copy"`` / ``"repeat_copy"``; any
    other value is a ``ValueError`` naming it and what is accepted."""
    accepted = (
        f"give a task object (CopyTask(), RepeatCopyTask(), ReversalTask(language), or one with "
        f"sample(rng, split)) or a name: {', '.join(map(repr, TRANSDUCTION_TASKS))}"
    )
    if isinstance(task, str):
        if task not in TRANSDUCTION_TASKS:
            raise ValueError(f"unknown transduction task {task!r}; {accepted}")
        return TRANSDUCTION_TASKS[task]()
    if not callable(getattr(task, "sample", None)):
        raise ValueError(f"task must be a transduction task, got {type(task).__name__} {task!r}; {accepted}")
    return task


class TransductionDataModule(SplitDataModule):
    """Train/val/test sequences of a transduction task (:class:`CopyTask`,
    :class:`RepeatCopyTask`, :class:`ReversalTask`, or ``"copy"`` / ``"repeat_copy"`` by name:
    :func:`transduction_task`); Paaßen et al.'s (2021) protocol is 100 + 100."""

    def __init__(
        self,
        task: CopyTask | ReversalTask | Literal["copy", "repeat_copy"],
        train_size: int = 100,
        val_size: int = 100,
        test_size: int = 100,
        train_lengths: tuple[int, int] | None = None,
        test_lengths: tuple[int, int] | None = None,
        batch_size: int = 16,
        eval_batch_size: int | None = None,
        seed: int = 0,
        num_workers: int = 0,
    ) -> None:
        super().__init__(batch_size, eval_batch_size, seed, num_workers)
        self.task = transduction_task(task)
        self.sizes = {"train": train_size, "val": val_size, "test": test_size}
        for split, n in self.sizes.items():
            nonnegative_int(f"{split}_size", n)
        lang = getattr(self.task, "language", None)
        given = {"train": train_lengths, "test": test_lengths}
        self.windows = {
            split: check_window(window, f"{split}_lengths")
            if window is not None
            else (lang.default_lengths(split) if lang else (0, 0))
            for split, window in given.items()
        }
        self.windows["val"] = self.windows["train"]
        self.save_hyperparameters()

    def build_split(self, split: str) -> ListDataset:
        rng = np.random.default_rng([self.seed, SPLITS.index(split), 2])
        if isinstance(self.task, ReversalTask):
            sample = partial(self.task.sample, lengths=self.windows[split])
        else:
            sample = self.task.sample
        return ListDataset([sample(rng, split) for _ in range(self.sizes[split])])

    def collate_fn(self) -> Callable[[Sequence[Any]], dict[str, Tensor]]:
        return collate_transduction


for _cls in (CopyTask, RepeatCopyTask, ReversalTask):
    allow_in_checkpoints(_cls)  # data modules save their task in checkpoints
