"""A LightningDataModule for formal languages: deterministic splits, right padding, a bool mask."""

from __future__ import annotations

import itertools
import time
from abc import ABC, abstractmethod
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from typing import Any, Literal

import lightning as L
import numpy as np
import torch
from lightning.pytorch.utilities import rank_zero_info
from torch import Tensor
from torch.utils.data import DataLoader, Dataset, Sampler

from memrnn.core.checks import nonnegative_int, positive_int
from memrnn.data.presets import SplitPreset, get_preset
from memrnn.languages.base import Language, Lengths, LengthSampling, bracket_annotations, check_window

IGNORE_INDEX = -100
SPLITS = ("train", "val", "test")
#: seconds a split's exact scores may take before their progress is reported, and between reports
PROGRESS_EVERY = 5.0
#: strings of equal length scored at a time (a PCFG's inside pass takes up to 64 at once)
SCORE_CHUNK = 64
#: the clock of the progress reports (tests replace it)
_clock = time.monotonic
#: ``batch_lengths``: whether a training batch mixes lengths or has one (each data module says how
#: it draws them: :class:`FormalLanguageDataModule`, :class:`memrnn.data.ChomskyDataModule`)
BatchLengths = Literal["per_sequence", "per_batch"]


def check_choice(name: str, value: Any, choices: Sequence[str]) -> str:
    """``value`` if it is one of ``choices``, else a ``ValueError`` naming ``name``, the choices
    and the value."""
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}, got {value!r}")
    return value


def check_seed(name: str, value: Any, *, optional: bool = False) -> int | None:
    """``value`` if it is an int (a bool is not), or None when ``optional``; else a
    ``ValueError`` naming ``name`` and the value."""
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an int{' or None' if optional else ''}, got {value!r}")
    return value


def reference_log_probs(
    language: Language,
    strings: Sequence[Sequence[int]],
    lengths: Lengths | None,
    length_sampling: LengthSampling,
    what: str = "strings",
) -> list[np.ndarray]:
    """``language.reference_log_probs_many(strings, lengths, length_sampling)``, in chunks of at
    most :data:`SCORE_CHUNK` strings of equal length, saying how far it got when it takes long:
    after :data:`PROGRESS_EVERY` seconds and every as many since, a line ``[data] <what>: exact
    log-probabilities of 1,280/6,100 strings, 12 s`` on Lightning's rank-zero log (stderr unless
    logging is configured otherwise), and a last one when done.  Quiet when it is quick.  (The
    exact scores of a PCFG language cost an inside pass per string: DuSell & Chiang's test split
    of the hardest CFL took 94 s, without a word before.)"""
    by_length: dict[int, list[int]] = defaultdict(list)
    for j, w in enumerate(strings):
        by_length[len(w)].append(j)
    chunks = [
        rows[i : i + SCORE_CHUNK]
        for _, rows in sorted(by_length.items())
        for i in range(0, len(rows), SCORE_CHUNK)
    ]
    out: list[np.ndarray | None] = [None] * len(strings)
    start = last = _clock()
    done = 0
    for idx in chunks:
        scores = language.reference_log_probs_many([strings[j] for j in idx], lengths, length_sampling)
        if len(scores) != len(idx):
            raise ValueError(
                f"{language}: the scorer gave {len(scores)} reference rows for {len(idx)} strings"
            )
        for j, row in zip(idx, scores, strict=True):
            out[j] = row
        done += len(idx)
        now = _clock()
        if now - last >= PROGRESS_EVERY and done < len(strings):
            rank_zero_info(
                f"[data] {what}: exact log-probabilities of {done:,}/{len(strings):,} strings, {now - start:.0f} s"
            )
            last = now
    if (took := _clock() - start) >= PROGRESS_EVERY:
        rank_zero_info(
            f"[data] {what}: exact log-probabilities of {len(strings):,} strings, done in {took:.0f} s"
        )
    return out  # type: ignore[return-value]


class StringDataset(Dataset):
    """Complete strings of a language with the exact per-token log-probabilities of the
    distribution they were drawn from (``ref_logprob``, natural log, one per token) and,
    optionally, the set of allowed next symbols at every position (``next_sets``) and bracket
    annotations (``annotations``: ``distance``, ``depth``, ``full`` per token).

    ``ref_logprobs`` may be a zero-argument callable: it is called the first time the
    ``ref_logprobs`` attribute is read (exact scores of a PCFG language cost an inside pass per
    string, and nothing reads a training split's).  With ``with_reference=False`` items carry no
    ``ref_logprob`` and batches have none: the training split's form.

    ``batches`` (optional) fixes the split's batches: lists of string indices, each a batch that
    the training loader serves whole (:class:`FixedBatches`), in an order reshuffled every epoch;
    ``None`` (the default) lets the loader batch the shuffled strings."""

    def __init__(
        self,
        strings: list[list[int]],
        ref_logprobs: list[np.ndarray] | Callable[[], list[np.ndarray]],
        lengths: Lengths,
        next_sets: list[list[frozenset[int]]] | None = None,
        annotations: list[dict[str, np.ndarray]] | None = None,
        *,
        with_reference: bool = True,
        batches: list[list[int]] | None = None,
    ) -> None:
        self.strings, self.lengths = strings, lengths
        self._refs, self._score = (None, ref_logprobs) if callable(ref_logprobs) else (ref_logprobs, None)
        self.next_sets, self.annotations = next_sets, annotations
        self.with_reference = bool(with_reference)
        if batches is not None and sorted(i for b in batches for i in b) != list(range(len(strings))):
            raise ValueError(f"batches must hold every one of the {len(strings)} strings once")
        self.batches = batches

    @property
    def ref_logprobs(self) -> list[np.ndarray]:
        """``log p(w_t | w_<t)`` of every token of every string (computed on first use)."""
        if self._refs is None:
            refs = self._score()
            if len(refs) != len(self.strings):
                raise ValueError(
                    f"the scorer gave {len(refs)} reference rows for {len(self.strings)} strings"
                )
            self._refs, self._score = refs, None
        return self._refs

    def __len__(self) -> int:
        return len(self.strings)

    def __getitem__(self, i: int) -> dict[str, Any]:
        item: dict[str, Any] = {"ids": self.strings[i]}
        if self.with_reference:
            item["ref_logprob"] = self.ref_logprobs[i]
        if self.next_sets is not None:
            item["next_set"] = self.next_sets[i]
        if self.annotations is not None:
            item.update(self.annotations[i])
        return item

    @property
    def num_tokens(self) -> int:
        return sum(len(s) for s in self.strings)


def right_padded(
    rows: Sequence[Sequence[Any]], steps: int, fill: Any, dtype: torch.dtype, offset: int = 0
) -> Tensor:
    """``rows`` (sequences of numbers: lists or arrays) right-padded with ``fill`` into ``[B,
    steps]`` of ``dtype``, row ``b``'s values at columns ``[offset, offset + len(rows[b]))``.  One
    flat copy: the rows' concatenation is the filled cells in row-major order, so a boolean mask
    places it (a batch of 200 strings of 40-80 symbols: a copy per row was about a tenth of a
    DuSell & Chiang group's training step)."""
    np_dtype = torch.empty(0, dtype=dtype).numpy().dtype
    lens = np.fromiter(map(len, rows), dtype=np.int64, count=len(rows))
    out = np.full((len(rows), steps), fill, dtype=np_dtype)
    total = int(lens.sum())
    if total:
        if isinstance(rows[0], np.ndarray):
            flat = np.concatenate(rows).astype(np_dtype, copy=False)
        else:
            flat = np.fromiter(itertools.chain.from_iterable(rows), dtype=np_dtype, count=total)
        out[:, offset:][np.arange(steps - offset)[None, :] < lens[:, None]] = flat
    return torch.from_numpy(out)


def bos_inputs(bodies: Sequence[Sequence[int]], bos_id: int) -> tuple[Tensor, Tensor, Tensor]:
    """The model's input for strings ``w_1 .. w_n`` (without ``END``): ``BOS w_1 .. w_n``,
    right-padded with 0.  Returns ``input [B, T]``, ``mask [B, T]`` bool and ``lengths [B]``
    (``n + 1``, i.e. ``END`` counted); ``T`` is the longest."""
    lengths = torch.tensor([len(w) + 1 for w in bodies], dtype=torch.long)
    steps = int(lengths.max()) if len(bodies) else 0
    inp = right_padded(bodies, steps, 0, torch.long, offset=1)
    if len(bodies):
        inp[:, 0] = bos_id
    mask = torch.arange(steps)[None, :] < lengths[:, None]
    return inp, mask, lengths


def collate_generator(
    items: Sequence[dict[str, Any]], bos_id: int, num_symbols: int | None = None
) -> dict[str, Tensor]:
    """Right-pad a batch for next-token prediction.

    Returns ``input [B, T]`` (``BOS`` then the string without its ``END``), ``target [B, T]``
    (the string, ``END`` last; ``-100`` at padding), ``mask [B, T]`` bool, ``ref_logprob [B, T]``
    float64 (0 at padding; only when the items carry it: evaluation splits) and ``lengths [B]``; ``T`` is the longest string, ``END`` counted.
    With next sets in the items (and ``num_symbols``), also ``next_set [B, T, num_symbols]``
    bool: Suzgun et al.'s multi-hot targets (all False at padding).  With bracket annotations
    (:func:`memrnn.languages.bracket_annotations`), also ``distance``, ``depth`` (−1 at
    padding) and ``full``, each ``[B, T]``.
    """
    inp, mask, lengths = bos_inputs([it["ids"][:-1] for it in items], bos_id)
    batch, steps = inp.shape
    tgt = right_padded([it["ids"] for it in items], steps, IGNORE_INDEX, torch.long)
    scored = bool(items) and "ref_logprob" in items[0]
    out = {"input": inp, "target": tgt, "mask": mask, "lengths": lengths}
    if scored:
        out["ref_logprob"] = right_padded([it["ref_logprob"] for it in items], steps, 0.0, torch.float64)
    elif not items:
        out["ref_logprob"] = torch.zeros(batch, steps, dtype=torch.float64)
    for key, fill, dtype in (
        ("distance", 0, torch.long),
        ("depth", -1, torch.long),
        ("full", False, torch.bool),
    ):
        if items and key in items[0]:  # bracket annotations for Hewitt's metric, [B, T]
            out[key] = right_padded([it[key] for it in items], steps, fill, dtype)
    if items and "next_set" in items[0]:
        if num_symbols is None:
            raise ValueError("collating next sets needs num_symbols")
        sets = torch.zeros(batch, steps, num_symbols, dtype=torch.bool)
        for b, it in enumerate(items):
            for t, allowed in enumerate(it["next_set"]):
                sets[b, t, list(allowed)] = True
        out["next_set"] = sets
    return out


class EpochShuffleSampler(Sampler[int]):
    """Random order that depends only on ``(seed, epoch)``, so a resumed run sees the same
    batches as an uninterrupted one (Lightning calls ``set_epoch`` every epoch).  Under DDP,
    Lightning wraps it in ``DistributedSamplerWrapper``, which forwards ``set_epoch`` and gives
    each rank its shard of this same permutation (every rank draws it from the same seed)."""

    def __init__(self, n: int, seed: int) -> None:
        self.n, self.seed, self.epoch = n, seed, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self) -> Iterator[int]:
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + self.epoch)
        return iter(torch.randperm(self.n, generator=g).tolist())

    def __len__(self) -> int:
        return self.n


class FixedBatches(Dataset):
    """The fixed batches of a dataset with a ``batches`` attribute (lists of item indices), one
    item per batch: item ``g`` is the list of the items of batch ``g``, for a ``DataLoader`` with
    ``batch_size=None`` whose ``collate_fn`` collates it (and whose sampler orders the batches)."""

    def __init__(self, data: Dataset, batches: Sequence[Sequence[int]]) -> None:
        self.data, self.batches = data, batches

    def __len__(self) -> int:
        return len(self.batches)

    def __getitem__(self, g: int) -> list[Any]:
        return [self.data[i] for i in self.batches[g]]


def draw_length_batches(
    language: Language,
    rng: np.random.Generator,
    window: Lengths,
    length_sampling: LengthSampling,
    batch_size: int,
    *,
    size: int | None = None,
    tokens: int | None = None,
) -> list[list[list[int]]]:
    """Batches of strings of one length each, as DuSell & Chiang's ``generate_batches``
    (``utils/cfl_data_util.py``, tag ``iclr2022`` of ``bdusell/nondeterministic-stack-rnn``)
    makes them: every batch draws its length (``END`` counted) uniformly over the window's
    possible lengths (``length_sampling="uniform"``, their ``generator.choice(valid_lengths)``;
    ``"natural"``: from the language's length law restricted to the window), then that many
    strings from ``p(w | length)``.  Batches hold ``batch_size`` strings until ``size`` strings
    are drawn (the last one the rest: their ``compute_batch_sizes``) or, with ``tokens``, until
    the strings' lengths add up to at least ``tokens`` (the last batch as short as that allows)."""
    if (size is None) == (tokens is None):
        raise ValueError("give exactly one of size and tokens")
    options = language.lengths_in(window) if length_sampling == "uniform" else None
    if options is not None and not options:
        raise ValueError(f"{language} has no string with a length in {tuple(window)}")
    batches: list[list[list[int]]] = []
    count = total = 0
    while (count < size) if size is not None else (total < tokens):
        if options is not None:
            n = int(options[rng.integers(len(options))])
        else:
            n = language.sample_length(rng, window)
        if size is not None:
            rows = min(batch_size, size - count)
        else:
            rows = min(batch_size, -(-(tokens - total) // max(n, 1)))
        batches.append([language.sample_given_length(rng, n) for _ in range(rows)])
        count, total = count + rows, total + rows * n
    return batches


class SplitDataModule(L.LightningDataModule, ABC):
    """Train/val/test splits built once, each deterministic in ``(seed, split)``, with the
    shared loader plumbing: an epoch-seeded shuffle for training (exact resumes; DDP shards
    it), plain order for evaluation.  Subclasses build a split and name their collate."""

    #: the seed of the test split when it is not ``seed`` (:meth:`split_seed`); set by subclasses
    test_seed: int | None = None

    def __init__(self, batch_size: int, eval_batch_size: int | None, seed: int, num_workers: int) -> None:
        super().__init__()
        positive_int("batch_size", batch_size)
        if eval_batch_size is not None:
            positive_int("eval_batch_size", eval_batch_size)
        check_seed("seed", seed)
        nonnegative_int("num_workers", num_workers)
        self.batch_size = batch_size
        self.eval_batch_size = batch_size if eval_batch_size is None else eval_batch_size
        self.seed, self.num_workers = seed, num_workers
        self.datasets: dict[str, Dataset] = {}

    @abstractmethod
    def build_split(self, split: str) -> Dataset:
        """Sample one split (deterministic in ``seed``)."""

    def split_seed(self, split: str) -> int:
        """The seed :meth:`build_split` draws ``split`` from: ``seed``, or ``test_seed`` for the
        test split of a module that sets one (DuSell & Chiang's one test set per task).  Two
        copies of one module that differ only in ``seed`` draw a split identically when their
        ``split_seed`` agree (:class:`memrnn.data.MemberData` then draws it once)."""
        return self.test_seed if split == "test" and self.test_seed is not None else self.seed

    @abstractmethod
    def collate_fn(self) -> Callable[[Sequence[Any]], dict[str, Tensor]]:
        """The (picklable) function that turns a list of items into a batch."""

    def setup(self, stage: str | None = None) -> None:
        wanted = {"fit": ("train", "val"), "validate": ("val",), "test": ("test",), "predict": ("test",)}
        for split in wanted.get(stage, SPLITS) if stage else SPLITS:
            if split not in self.datasets:
                self.datasets[split] = self.build_split(split)

    def _loader(self, split: str, *, train: bool) -> DataLoader:
        """The split's loader; a training split with fixed ``batches`` (:class:`StringDataset`)
        is served a batch at a time, the batches in an epoch-seeded order."""
        if split not in self.datasets:  # an empty split is a valid, falsy dataset
            self.datasets[split] = self.build_split(split)
        ds = self.datasets[split]
        batches = getattr(ds, "batches", None)
        if train and batches is not None:
            return self.batch_loader(FixedBatches(ds, batches), EpochShuffleSampler(len(batches), self.seed))
        return DataLoader(
            ds,
            batch_size=self.batch_size if train else self.eval_batch_size,
            sampler=EpochShuffleSampler(len(ds), self.seed) if train else None,
            collate_fn=self.collate_fn(),
            num_workers=self.num_workers,
            persistent_workers=self.num_workers > 0,
        )

    def batch_loader(self, batches: Dataset, sampler: Sampler[int]) -> DataLoader:
        """A loader over a dataset whose items are whole batches (lists of items), in
        ``sampler``'s order (``batch_size=None``: each item is collated as one batch).  Under DDP,
        Lightning wraps ``sampler`` in ``DistributedSamplerWrapper``, which forwards
        ``set_epoch`` and deals the batches out to the ranks, each batch whole."""
        return DataLoader(
            batches,
            batch_size=None,
            sampler=sampler,
            collate_fn=self.collate_fn(),
            num_workers=self.num_workers,
            persistent_workers=self.num_workers > 0,
        )

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", train=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader("val", train=False)

    def test_dataloader(self) -> DataLoader:
        return self._loader("test", train=False)


class LanguageDataModule(SplitDataModule):
    """A split data module over ``self.language``: the vocabulary sizes and the bracket count
    that ``train.py`` links into the model."""

    language: Language

    @property
    def vocab_size(self) -> int:
        """Input ids: the language's symbols and ``BOS``."""
        return self.language.input_vocab_size

    @property
    def num_symbols(self) -> int:
        """Output classes: the language's symbols, ``END`` included."""
        return self.language.num_symbols

    @property
    def bracket_types(self) -> int | None:
        """``k`` of a bracket language, else None (linked into the model's metrics)."""
        return self.language.bracket_types


def resolve_splits(
    language: Language,
    preset: str | None,
    sizes: dict[str, int | None],
    train_lengths: Lengths | None,
    test_lengths: Lengths | None,
    length_sampling: str | None,
) -> tuple[SplitPreset | None, dict[str, int], dict[str, Lengths], str]:
    """Explicit arguments, else the preset's, else the defaults (2000/500/500 strings, the
    language's windows, natural length sampling).  Returns ``(preset, sizes, windows, mode)``."""
    if not isinstance(language, Language):
        raise ValueError(f"language must be a memrnn.languages.Language, got {type(language).__name__}")
    p = get_preset(preset) if preset is not None else None
    fallback = {"train": 2000, "val": 500, "test": 500}
    out = {}
    for split in SPLITS:
        v = sizes[split]
        v = v if v is not None else getattr(p, f"{split}_size") if p else fallback[split]
        nonnegative_int(f"{split}_size", v)
        out[split] = v
    p_train, p_test = p.windows(language) if p else (None, None)
    windows: dict[str, Lengths] = {
        "train": check_window(train_lengths or p_train or language.default_lengths("train"), "train_lengths"),
        "test": check_window(test_lengths or p_test or language.default_lengths("test"), "test_lengths"),
    }
    windows["val"] = windows["train"]
    mode = length_sampling or (p.length_sampling if p else "natural")
    if mode not in ("natural", "uniform"):
        raise ValueError(f"length_sampling must be 'natural' or 'uniform', got {mode!r}")
    return p, out, windows, mode


class FormalLanguageDataModule(LanguageDataModule):
    """Train/val/test strings of ``language``, sampled deterministically from ``seed``.

    Args:
        language: a ``memrnn.languages.Language`` (in YAML: ``class_path`` + ``init_args``).
        train_size, val_size, test_size: number of strings per split (None: the preset's, else
            2000, 500, 500).
        train_lengths: ``(min, max)`` lengths (``END`` counted) of train and val strings; None
            takes the preset's, else the language's default (Dyck-(k,m): Hewitt et al. 2020 Table 2).
        test_lengths: the length-generalization window of the test split; None takes the
            preset's, else the language's default (longer than training).
        preset: a named split from :mod:`memrnn.data.presets` (``hewitt``, ``suzgun``, ``rsm``,
            ``dusell``, ``weiss``); it fills the arguments left at None.
        length_sampling: ``"natural"`` (the distribution restricted to the window) or
            ``"uniform"`` (length uniform over the window, then the string given its length,
            scored against ``log p(w | length)``).
        test_per_length: draw this many test strings for every possible length of the test
            window instead of ``test_size`` strings (DuSell & Chiang's 100 per length).
        batch_lengths: ``"per_sequence"`` (each training string its own length; batches of the
            shuffled strings) or ``"per_batch"``: DuSell & Chiang's (2020, 2022, 2023) batches of one
            length, as their code makes them (``generate_batches`` in ``utils/cfl_data_util.py``,
            ``RandomShuffling`` in ``nsrnn/pytorch_tools/curriculum.py``): each training batch of
            ``batch_size`` strings draws one length, uniformly over the window's possible lengths
            (``length_sampling="uniform"``; with ``"natural"`` from the language's length law),
            the batches are drawn *once* from ``seed`` and only their order is reshuffled every
            epoch (from ``(seed, epoch)``: a resumed run sees the same order); the validation
            strings are drawn in groups of ``batch_size`` of one length each too, as their
            validation batches (``--valid-batch-size 10``, the training batch size), and
            evaluated ``eval_batch_size`` at a time (the per-token sums do not depend on it).
            None takes the preset's (``dusell``: per batch), else ``"per_sequence"``.  Unlike
            Delétang et al.'s trainer (:class:`memrnn.data.ChomskyDataModule`), no batch is new.
        test_seed: draw the test split from this seed instead of ``seed``, so that one test set
            serves every run whatever its data seed: DuSell & Chiang generate one test set per
            task (``generate_test_data.py --test-data-seed 0``) and draw each run's training and
            validation data from its own ``--data-seed``.  ``test_seed=s`` is the test set a run
            with ``seed=s`` draws; None (default): the run's ``seed``.  Validation follows
            ``seed`` (theirs comes from the training data's generator).
        next_sets: add Suzgun et al.'s multi-hot ``next_set`` targets to every batch.
        train_tokens, val_tokens, test_tokens: size a split in tokens instead (Hewitt et al.
            count data in tokens, ``END`` included: 2e3 … 2e7 train, 20k dev, 300k test):
            strings are drawn until their lengths add up to at least this many; overrides the
            split's string count.
        batch_size: strings per training batch; eval_batch_size for val/test (default: same).
        seed: every split is drawn from its own stream ``(seed, split)``, so changing one
            split's size never changes another split.

    Batches are dicts from ``collate_generator``.  ``vocab_size`` (inputs, ``BOS`` included) and
    ``num_symbols`` (outputs) are linked into the model by ``train.py``.
    """

    def __init__(
        self,
        language: Language,
        train_size: int | None = None,
        val_size: int | None = None,
        test_size: int | None = None,
        train_lengths: tuple[int, int] | None = None,
        test_lengths: tuple[int, int] | None = None,
        batch_size: int = 32,
        eval_batch_size: int | None = None,
        seed: int = 0,
        num_workers: int = 0,
        preset: str | None = None,
        length_sampling: LengthSampling | None = None,
        test_per_length: int | None = None,
        next_sets: bool = False,
        train_tokens: int | None = None,
        val_tokens: int | None = None,
        test_tokens: int | None = None,
        batch_lengths: BatchLengths | None = None,
        test_seed: int | None = None,
    ) -> None:
        super().__init__(batch_size, eval_batch_size, seed, num_workers)
        self.test_seed = check_seed("test_seed", test_seed, optional=True)
        self.tokens = {
            split: n
            for split, n in zip(SPLITS, (train_tokens, val_tokens, test_tokens), strict=True)
            if n is not None
        }
        for split, n in self.tokens.items():
            positive_int(f"{split}_tokens", n)
        sizes = {"train": train_size, "val": val_size, "test": test_size}
        p, self.sizes, self.windows, self.length_sampling = resolve_splits(
            language, preset, sizes, train_lengths, test_lengths, length_sampling
        )
        self.test_per_length = (
            test_per_length if test_per_length is not None else (p.test_per_length if p else None)
        )
        if self.test_per_length is not None:
            positive_int("test_per_length", self.test_per_length)
        if batch_lengths is None:
            batch_lengths = p.batch_lengths if p else "per_sequence"
        self.batch_lengths = check_choice("batch_lengths", batch_lengths, ("per_sequence", "per_batch"))
        self.save_hyperparameters()
        self.language, self.next_sets = language, next_sets

    def build_split(self, split: str) -> StringDataset:
        """Sample one split, from its own stream ``(seed, split)`` (the test split from
        ``(test_seed, split)`` when ``test_seed`` is set); with ``batch_lengths="per_batch"``
        the training split keeps its batches (``StringDataset.batches``)."""
        rng = np.random.default_rng([self.split_seed(split), SPLITS.index(split)])
        window, lang, mode = self.windows[split], self.language, self.length_sampling
        batches = None
        if split != "test" and self.batch_lengths == "per_batch":
            count = {"tokens": self.tokens[split]} if split in self.tokens else {"size": self.sizes[split]}
            drawn = draw_length_batches(lang, rng, window, mode, self.batch_size, **count)
            strings = [w for b in drawn for w in b]
            if split == "train":
                starts = np.cumsum([0, *map(len, drawn)]).tolist()
                batches = [list(range(a, b)) for a, b in itertools.pairwise(starts)]
        elif split == "test" and self.test_per_length:
            strings = [
                lang.sample_given_length(rng, n)
                for n in lang.lengths_in(window)
                for _ in range(self.test_per_length)
            ]
            mode = "uniform"  # each string is scored given its length
        elif split in self.tokens:
            strings, total = [], 0
            while total < self.tokens[split]:
                for w in lang.sample_many(256, rng, window, mode):
                    if total >= self.tokens[split]:
                        break
                    strings.append(w)
                    total += len(w)
        else:
            strings = lang.sample_many(self.sizes[split], rng, window, mode)
        score = partial(reference_log_probs, lang, strings, window, mode, f"{split} split of {lang}")
        sets = [lang.allowed_next_all(s) for s in strings] if self.next_sets else None
        ann = [bracket_annotations(lang, s) for s in strings] if lang.bracket_types is not None else None
        if split == "train":  # training never reads the exact scores: computed only if asked for
            return StringDataset(strings, score, window, sets, ann, with_reference=False, batches=batches)
        return StringDataset(strings, score(), window, sets, ann)

    def collate_fn(self) -> Callable[[Sequence[Any]], dict[str, Tensor]]:
        return partial(collate_generator, bos_id=self.language.bos_id, num_symbols=self.language.num_symbols)
