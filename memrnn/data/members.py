"""Each member its own data: :class:`MemberData` (``docs/design.md``, "Members").

By default the members of a :class:`memrnn.lit.members.MemberSequenceModule` share one batch
stream (Delétang et al.'s (2023) seeds vary the initialisation only).  A protocol whose seed also
draws the data (memrnn's suites without ``data_seed``: each cell's seed is its data seed) needs
each member on its own stream: :class:`MemberData` holds one data module per member (the same
module with that member's ``seed``) and serves batches whose every tensor has the members first,
``[M, B, ...]``: member ``m``'s rows are exactly the batch its own module would have served at
that step, padded on the right to the longest string of the step over all members (padding the
model reads as padding: the mask is False there, the targets are ignored)."""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import lightning as L
from lightning.fabric.utilities.data import _set_sampler_epoch
from torch import Tensor

from memrnn.data.datamodule import SPLITS, SplitDataModule

_END = object()


def _as_items(batch: Any) -> Any:
    """The loader's item list as it comes (``collate_fn`` replaced by this: no collation)."""
    return batch


class _EpochForward:
    """``set_epoch`` for every member loader's sampler (Lightning calls it on ``loader.sampler``)."""

    def __init__(self, loaders: Sequence[Any]) -> None:
        self.loaders = loaders

    def set_epoch(self, epoch: int) -> None:
        for loader in self.loaders:
            _set_sampler_epoch(loader, epoch)


class MemberLoader:
    """The members' loaders stepped together: each step, every member's items (its loader's
    ``collate_fn`` bypassed) collated as one batch by ``collate`` (so that they are padded to
    one length) and split into the members, ``[M * B, ...] -> [M, B, ...]``.

    A step whose members' batches have different numbers of rows, or loaders of different
    lengths, is a ``ValueError`` (the members' steps must line up)."""

    def __init__(self, loaders: Sequence[Any], collate: Callable[[list[Any]], dict[str, Tensor]]) -> None:
        self.loaders = list(loaders)
        self.collate = collate
        for loader in self.loaders:
            loader.collate_fn = _as_items
        #: what Lightning looks for on a loader: ``sampler.set_epoch`` (forwarded to every member's)
        self.sampler, self.batch_sampler = _EpochForward(self.loaders), None

    def __len__(self) -> int:
        lengths = [len(loader) for loader in self.loaders]
        if len(set(lengths)) != 1:
            raise ValueError(f"the members' loaders have different numbers of batches: {lengths}")
        return lengths[0]

    def __iter__(self) -> Iterator[dict[str, Tensor]]:
        M = len(self.loaders)
        for step, items in enumerate(itertools.zip_longest(*self.loaders, fillvalue=_END)):
            if any(i is _END for i in items):
                ended = [m for m, i in enumerate(items) if i is _END]
                raise ValueError(
                    f"the members' loaders end at different steps: members {ended} ended at step {step}"
                )
            rows = [len(i) for i in items]
            if len(set(rows)) != 1:
                raise ValueError(
                    f"step {step}: the members' batches have different numbers of rows {rows}; "
                    "member_data: independent needs batches of one size per step (e.g. not DuSell & "
                    "Chiang's per_batch batches of one length)"
                )
            batch = self.collate([item for member in items for item in member])
            yield {k: _split(k, v, M, rows[0]) for k, v in batch.items()}


def _split(key: str, value: Any, members: int, rows: int) -> Any:
    if not isinstance(value, Tensor) or value.dim() == 0 or value.shape[0] != members * rows:
        raise ValueError(
            f"batch key {key!r}: expected a tensor with one row per string ({members} x {rows}), got "
            f"{tuple(value.shape) if isinstance(value, Tensor) else type(value).__name__}"
        )
    return value.view(members, rows, *value.shape[1:])


class MemberData(L.LightningDataModule):
    """One data module per member, served as one: batches ``[M, B, ...]`` (module docstring).

    ``modules``: the members' data modules, one per member, in the members' order (e.g.
    :meth:`from_seeds`).  The vocabulary sizes (``vocab_size``, ``num_symbols``,
    ``bracket_types``) are the first module's; the others must agree (``ValueError``)."""

    def __init__(self, modules: Sequence[L.LightningDataModule]) -> None:
        super().__init__()
        self.modules = list(modules)
        #: the modules are copies of one :class:`SplitDataModule` that differ in ``seed`` only
        #: (:meth:`from_seeds`), so that a split two of them draw from one seed is the same
        self.seed_copies = False
        if not self.modules:
            raise ValueError("MemberData needs one data module per member, got none")
        kinds = {type(m).__name__ for m in self.modules}
        if len(kinds) != 1:
            raise ValueError(f"the members' data modules must be of one class, got {sorted(kinds)}")
        for name in ("vocab_size", "num_symbols", "bracket_types"):
            values = [getattr(m, name, None) for m in self.modules]
            if any(v != values[0] for v in values):
                raise ValueError(f"the members' data modules differ in {name}: {values}")

    @classmethod
    def from_seeds(cls, module: SplitDataModule, seeds: Sequence[int]) -> MemberData:
        """``module`` once per member with ``seed=seeds[m]`` (a copy of ``module``, which must not
        be set up yet: memrnn's data modules draw every split from their ``seed`` when it is first
        built); members of one seed share a module (and its data)."""
        if not isinstance(module, SplitDataModule):
            raise ValueError(
                f"member_data: independent draws each member's data from a memrnn data module's seed; "
                f"{type(module).__name__} is not one (give MemberData a data module per member)"
            )
        if module.datasets or getattr(module, "_drawn", None):
            raise ValueError("MemberData.from_seeds takes a data module that is not set up yet (its splits "
                             "are drawn from its seed)")  # fmt: skip
        by_seed = {int(module.seed): module}
        for seed in seeds:
            if int(seed) not in by_seed:
                other = copy.deepcopy(module)
                other.seed = int(seed)
                if "seed" in other.hparams:
                    other.hparams["seed"] = int(seed)
                by_seed[int(seed)] = other
        out = cls([by_seed[int(seed)] for seed in seeds])
        out.seed_copies = True
        return out

    @property
    def members(self) -> int:
        return len(self.modules)

    @property
    def vocab_size(self) -> int:
        return self.modules[0].vocab_size

    @property
    def num_symbols(self) -> int:
        return self.modules[0].num_symbols

    @property
    def bracket_types(self) -> int | None:
        return getattr(self.modules[0], "bracket_types", None)

    def prepare_data(self) -> None:
        for m in dict.fromkeys(self.modules):  # a module shared by members once
            m.prepare_data()

    def setup(self, stage: str | None = None) -> None:
        """Every member's module's ``setup``.  With :attr:`seed_copies`, a split that two
        modules draw from one seed (:meth:`SplitDataModule.split_seed`: the test split of a
        module with ``test_seed``) is drawn once and the modules share it: DuSell & Chiang's test
        set of the hardest CFL costs ~80 s of exact scoring, which 5 data seeds paid 5 times."""
        drawn: dict[tuple[type, str, int], Any] = {}
        for m in dict.fromkeys(self.modules):
            if self.seed_copies:
                _give([m], drawn)
            m.setup(stage)
            if self.seed_copies:
                drawn = {**_drawn([m]), **drawn}

    def _loader(self, name: str) -> MemberLoader:
        loaders = [getattr(m, name)() for m in self.modules]
        return MemberLoader(loaders, self.modules[0].collate_fn())

    def train_dataloader(self) -> MemberLoader:
        return self._loader("train_dataloader")

    def val_dataloader(self) -> MemberLoader:
        return self._loader("val_dataloader")

    def test_dataloader(self) -> MemberLoader:
        return self._loader("test_dataloader")

    def state_dict(self) -> dict[str, Any]:
        return {str(m): module.state_dict() for m, module in enumerate(self.modules)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        for m, module in enumerate(self.modules):
            if str(m) in state_dict:
                module.load_state_dict(state_dict[str(m)])


def _split_modules(data: Any) -> list[SplitDataModule]:
    modules = list(dict.fromkeys(data.modules)) if isinstance(data, MemberData) else [data]
    return [m for m in modules if isinstance(m, SplitDataModule)]


def reuse_drawn(data: Any, drawn_by: Any) -> int:
    """Give ``data``'s modules the splits that ``drawn_by``'s modules have drawn, each from a
    module of the same class whose :meth:`SplitDataModule.split_seed` for that split agrees, so
    that ``data`` draws none of them again.  Returns the number of splits given.

    Only for two data modules (or :class:`MemberData`) built from **one data config**, seeds
    aside: the members of a group that go on after a shed (:mod:`memrnn.suite.groups`) are the
    same cells on the same data, and their splits (each training split ~10 s of PCFG sampling,
    each validation and test split an exact-scoring pass: ~80 s for DuSell & Chiang's hardest
    CFL test set) were drawn by the segment before."""
    return _give(_split_modules(data), _drawn(_split_modules(drawn_by)))


def _drawn(modules: Sequence[SplitDataModule]) -> dict[tuple[type, str, int], Any]:
    """The splits ``modules`` have drawn, by (class, split, split seed)."""
    return {(type(m), split, m.split_seed(split)): d for m in modules for split, d in m.datasets.items()}


def _give(modules: Sequence[SplitDataModule], drawn: dict[tuple[type, str, int], Any]) -> int:
    """Give each module the splits it has not drawn that ``drawn`` holds for its class and split
    seed; the number given."""
    given = 0
    for m in modules:
        for split in SPLITS:
            key = (type(m), split, m.split_seed(split))
            if split not in m.datasets and key in drawn:
                m.datasets[split] = drawn[key]
                given += 1
    return given


def member_batch(batch: dict[str, Tensor], m: int) -> dict[str, Tensor]:
    """Member ``m``'s rows of a :class:`MemberData` batch: ``{key: value[m]}``."""
    return {k: v[m] for k, v in batch.items()}
