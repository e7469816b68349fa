from pathlib import Path

import numpy as np
import pytest
import torch

from memrnn.data import IGNORE_INDEX, EpochShuffleSampler, FormalLanguageDataModule, collate_generator
from memrnn.languages import DyckKM


def make_dm(**kw):
    args = {"language": DyckKM(2, 3), "train_size": 60, "val_size": 20, "test_size": 10, "batch_size": 8}
    return FormalLanguageDataModule(**{**args, **kw})


def test_splits_are_deterministic_independent_and_in_their_windows():
    a, b = make_dm(seed=3), make_dm(seed=3, val_size=35)
    a.setup("fit")
    b.setup("fit")
    assert a.datasets["train"].strings == b.datasets["train"].strings  # val_size does not move train
    assert make_dm(seed=4).build_split("train").strings != a.datasets["train"].strings
    a.setup("test")
    lang = a.language
    for split, (lo, hi) in (("train", (1, 84)), ("val", (1, 84)), ("test", (85, 168))):
        ds = a.datasets[split]
        assert ds.lengths == (lo, hi)
        assert all(lo <= len(s) <= hi and lang.accepts(s) for s in ds.strings)
        for s, ref in zip(ds.strings, ds.ref_logprobs, strict=True):
            np.testing.assert_allclose(ref, lang.token_log_probs(s, (lo, hi)))
    assert a.vocab_size == 6 and a.num_symbols == 5


def test_collate_right_pads_with_bos_and_ignore_index():
    lang = DyckKM(2, 2)
    items = [
        {"ids": lang.encode("(0 (1 1) 0) END"), "ref_logprob": np.arange(5.0)},
        {"ids": lang.encode("END"), "ref_logprob": np.array([-0.5])},
    ]
    batch = collate_generator(items, lang.bos_id)
    assert batch["input"].tolist() == [[5, 0, 1, 3, 2], [5, 0, 0, 0, 0]]
    assert batch["target"].tolist() == [[0, 1, 3, 2, 4], [4, *[IGNORE_INDEX] * 4]]
    assert batch["mask"].tolist() == [[True] * 5, [True, False, False, False, False]]
    assert batch["ref_logprob"][1].tolist() == [-0.5, 0, 0, 0, 0]
    assert batch["lengths"].tolist() == [5, 1]


def test_loaders_batch_and_mask():
    dm = make_dm()
    dm.setup("fit")
    batch = next(iter(dm.train_dataloader()))
    assert batch["input"].shape[0] == 8
    assert (batch["mask"].sum(1) == batch["lengths"]).all()
    assert (batch["target"][~batch["mask"]] == IGNORE_INDEX).all()
    assert len(dm.val_dataloader().dataset) == 20


def test_training_batches_carry_no_reference_and_the_train_scores_are_computed_on_demand():
    """Nothing reads a training split's exact scores, so they are computed only when asked
    for (a PCFG language's inside pass per string was most of a DuSell run's set-up), and then
    equal the eager ones; evaluation batches keep theirs."""
    from memrnn.data.datamodule import StringDataset
    from memrnn.languages import MarkedReversal

    dm = make_dm(language=MarkedReversal(mean_length=6), train_size=12, length_sampling="uniform")
    dm.setup("fit")
    train = dm.datasets["train"]
    assert train._refs is None and not train.with_reference
    batch = next(iter(dm.train_dataloader()))
    assert "ref_logprob" not in batch and batch["target"].shape[0] == 8
    assert "ref_logprob" in next(iter(dm.val_dataloader()))
    assert train._refs is None  # still not computed
    eager = dm.language.reference_log_probs_many(train.strings, train.lengths, "uniform")
    for got, want in zip(train.ref_logprobs, eager, strict=True):
        np.testing.assert_array_equal(got, want)
    assert all(np.isfinite(r[-1]) and r[-1] < 0 for r in train.ref_logprobs)
    with pytest.raises(ValueError, match="the scorer gave 1 reference rows for 2 strings"):
        _ = StringDataset([[0], [1]], lambda: [np.zeros(1)], (1, 1)).ref_logprobs


def test_epoch_shuffle_is_a_function_of_seed_and_epoch():
    s = EpochShuffleSampler(50, seed=1)
    s.set_epoch(2)
    first = list(s)
    assert sorted(first) == list(range(50))
    s.set_epoch(3)
    assert list(s) != first
    t = EpochShuffleSampler(50, seed=1)
    t.set_epoch(2)
    assert list(t) == first


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"train_size": -1}, "train_size must be a non-negative integer, got -1"),
        ({"batch_size": 0}, "batch_size must be a positive integer, got 0"),
        ({"eval_batch_size": 0}, "eval_batch_size must be a positive integer, got 0"),
        ({"seed": 1.5}, "seed must be an int, got 1.5"),
        ({"num_workers": -1}, "num_workers must be a non-negative integer, got -1"),
        ({"train_lengths": (1, 40.5)}, r"train_lengths bounds must be integers .*40\.5"),
        ({"test_lengths": (50, 10)}, r"test_lengths must satisfy 0 <= min <= max, got \(50, 10\)"),
        ({"language": "dyck"}, "must be a memrnn.languages.Language, got str"),
        ({"val_tokens": 0}, "val_tokens must be a positive integer, got 0"),
    ],
)
def test_bad_arguments(kw, match):
    with pytest.raises(ValueError, match=match):
        make_dm(**kw)


def test_explicit_windows_override_the_language_defaults():
    dm = make_dm(train_lengths=(5, 21), test_lengths=(41, 61))
    assert all(5 <= len(s) <= 21 for s in dm.build_split("train").strings)
    assert all(41 <= len(s) <= 61 for s in dm.build_split("test").strings)
    assert torch.is_tensor(collate_generator([dm.build_split("val")[0]], 5)["input"])


def test_epoch_shuffle_shards_across_ranks_under_lightnings_wrapper():
    from lightning.fabric.utilities.distributed import DistributedSamplerWrapper

    shards = []
    for rank in range(2):
        wrapped = DistributedSamplerWrapper(
            EpochShuffleSampler(10, seed=5), num_replicas=2, rank=rank, shuffle=False
        )
        wrapped.set_epoch(3)
        shards.append(list(wrapped))
    whole = EpochShuffleSampler(10, seed=5)
    whole.set_epoch(3)
    assert sorted(shards[0] + shards[1]) == list(range(10))
    assert shards[0] == list(whole)[0::2] and shards[1] == list(whole)[1::2]


def test_empty_split_is_built_once():
    dm = make_dm(test_size=0)
    first = dm.test_dataloader().dataset
    assert len(first) == 0 and dm.test_dataloader().dataset is first


def test_token_budgets_size_splits_in_tokens_as_hewitt_does():
    dm = make_dm(train_tokens=2000, test_tokens=500, seed=5)
    train, test = dm.build_split("train"), dm.build_split("test")
    lengths = [len(w) for w in train.strings]
    assert sum(lengths) >= 2000 and sum(lengths) - lengths[-1] < 2000  # the first string past the budget
    assert sum(len(w) for w in test.strings) >= 500 and all(85 <= len(w) <= 168 for w in test.strings)
    assert len(dm.build_split("val").strings) == 20  # no budget: the string count
    assert make_dm(train_tokens=2000, seed=5).build_split("train").strings == train.strings


def test_bos_inputs_is_the_shared_input_layout():
    from memrnn.data import bos_inputs

    inp, mask, lengths = bos_inputs([[0, 1], []], bos_id=5)
    assert inp.tolist() == [[5, 0, 1], [5, 0, 0]] and lengths.tolist() == [3, 1]
    assert mask.tolist() == [[True, True, True], [True, False, False]]


def test_collate_equals_padding_row_by_row():
    """:func:`memrnn.data.datamodule.right_padded` (one flat copy under a boolean mask) pads every
    field as a copy per row would: ragged ids (an empty body among them), float64 scores, the
    bracket annotations (bools included), and an empty batch."""
    from memrnn.data.datamodule import right_padded

    rng = np.random.default_rng(0)
    items = []
    for n in (7, 1, 12, 3, 12):
        ids = rng.integers(0, 5, n).tolist()
        items.append({"ids": ids, "ref_logprob": rng.normal(size=n), "distance": rng.integers(0, 9, n).tolist(),
                      "depth": rng.integers(0, 4, n).tolist(), "full": (rng.random(n) < 0.5).tolist()})  # fmt: skip
    batch = collate_generator(items, 5)
    T = 12
    for key, fill, dtype, offset in [("target", IGNORE_INDEX, torch.long, 0), ("ref_logprob", 0.0, torch.float64, 0),
                                     ("distance", 0, torch.long, 0), ("depth", -1, torch.long, 0),
                                     ("full", False, torch.bool, 0), ("input", 0, torch.long, 1)]:  # fmt: skip
        want = torch.full((len(items), T), fill, dtype=dtype)
        for b, it in enumerate(items):
            row = it["ref_logprob" if key == "ref_logprob" else "ids" if key in ("target", "input") else key]
            row = row[:-1] if key == "input" else row
            want[b, offset : offset + len(row)] = torch.as_tensor(row, dtype=dtype)
            if key == "input":
                want[b, 0] = 5
        assert batch[key].dtype == dtype and torch.equal(batch[key], want), key
    empty = collate_generator([], 5)
    assert empty["input"].shape == empty["target"].shape == empty["ref_logprob"].shape == (0, 0)
    assert right_padded([[1, 2], []], 4, -1, torch.long, offset=1).tolist() == [
        [-1, 1, 2, -1],
        [-1, -1, -1, -1],
    ]


class SlowDyck(DyckKM):
    """Dyck-(2,3) whose exact scores take ``seconds`` per string on a fake clock (``clock[0]``)."""

    def __init__(self, seconds: float) -> None:
        super().__init__(2, 3)
        self.seconds, self.clock = seconds, [0.0]

    def reference_log_probs_many(self, strings, lengths=None, length_sampling="natural"):
        self.clock[0] += self.seconds * len(strings)
        return super().reference_log_probs_many(strings, lengths, length_sampling)


def scored(monkeypatch, seconds, **kw):
    """A data module of :class:`SlowDyck` whose progress lines are collected (and its clock)."""
    from memrnn.data import datamodule

    lines: list[str] = []
    lang = SlowDyck(seconds)
    monkeypatch.setattr(datamodule, "rank_zero_info", lines.append)
    monkeypatch.setattr(datamodule, "_clock", lambda: lang.clock[0])
    return make_dm(language=lang, **kw), lines


def test_slow_exact_scores_say_how_far_they_got(monkeypatch):
    """A split whose exact scores take long (a PCFG's inside pass: DuSell & Chiang's hardest-CFL
    test split took 94 s) reports its progress every few seconds and when done, on Lightning's
    rank-zero log; the scores are those of one call over all strings."""
    import re

    dm, lines = scored(monkeypatch, 0.1, test_size=300)
    test = dm.build_split("test")  # 300 strings: 30 fake seconds
    what = "[data] test split of DyckKM(k=2, m=3, truncation='hewitt'): exact log-probabilities of "
    assert len(lines) >= 5 and all(line.startswith(what) for line in lines), lines
    steps = [re.fullmatch(r"(\d+)/300 strings, (\d+) s", line.removeprefix(what)) for line in lines[:-1]]
    assert all(steps), lines
    done, seconds = ([int(m.group(k)) for m in steps] for k in (1, 2))
    assert done == sorted(done) and done[0] > 0 and done[-1] < 300
    assert all(b - a >= 5 for a, b in zip([0, *seconds], seconds, strict=False))  # every 5 fake seconds
    assert lines[-1] == what + "300 strings, done in 30 s"
    expected = DyckKM(2, 3).reference_log_probs_many(test.strings, test.lengths, "natural")
    for got, want in zip(test.ref_logprobs, expected, strict=True):
        np.testing.assert_array_equal(got, want)
    # the training split's scores, computed on demand, report the same way
    lines.clear()
    train = dm.build_split("train")
    assert not lines
    assert len(train.ref_logprobs) == 60
    assert lines[-1] == what.replace("test", "train") + "60 strings, done in 6 s"


def test_quick_set_up_says_nothing(monkeypatch):
    dm, lines = scored(monkeypatch, 0.001, test_size=300)  # 0.3 fake seconds
    dm.setup("fit")
    dm.setup("test")
    assert len(dm.datasets["test"].ref_logprobs) == 300 and lines == []


# -- DuSell & Chiang's batches of one length, a fixed test seed ----------------------------------
def per_batch(**kw):
    """Dyck-(2,3) strings of 1–29 tokens (the odd lengths), uniform over lengths, one per batch."""
    return make_dm(train_lengths=(1, 29), length_sampling="uniform", batch_lengths="per_batch", **kw)


def lengths_of(batch) -> list[int]:
    return batch["lengths"].tolist()


def test_per_batch_training_batches_have_one_length_and_are_drawn_once_then_reshuffled():
    """``generate_batches`` + ``RandomShuffling``: every batch one length, uniform over the
    window's possible lengths, the last one the rest of ``train_size``; the batches drawn once
    (the same every epoch, and from a new module of the same seed), only their order new."""
    dm = per_batch(seed=3)
    dm.setup("fit")
    loader = dm.train_dataloader()
    assert len(loader) == 8
    first = list(loader)
    assert sorted(len(lengths_of(b)) for b in first) == [4] + [8] * 7
    assert all(len(set(lengths_of(b))) == 1 for b in first)
    possible = set(dm.language.lengths_in((1, 29)))
    assert {lengths_of(b)[0] for b in first} <= possible and len({lengths_of(b)[0] for b in first}) > 3
    assert dm.datasets["train"].strings == [w for b in dm.datasets["train"].batches for w in
                                            (dm.datasets["train"].strings[i] for i in b)]  # fmt: skip
    loader.sampler.set_epoch(1)  # Lightning calls it every epoch
    second = list(loader)
    key = [str(b["input"].tolist()) for b in first]
    assert sorted(key) == sorted(str(b["input"].tolist()) for b in second)  # the same batches
    assert key != [str(b["input"].tolist()) for b in second]  # in another order
    # a resumed run (a new module, the epoch set) sees epoch 1's order again
    again = per_batch(seed=3)
    again.setup("fit")
    resumed = again.train_dataloader()
    resumed.sampler.set_epoch(1)
    assert [str(b["input"].tolist()) for b in resumed] == [str(b["input"].tolist()) for b in second]
    assert per_batch(seed=4).build_split("train").strings != dm.datasets["train"].strings
    # per sequence (the default without a preset): the rows of a batch have their own lengths
    mixed = make_dm(train_lengths=(1, 29), length_sampling="uniform", seed=3)
    assert mixed.batch_lengths == "per_sequence" and mixed.build_split("train").batches is None
    assert len(set(lengths_of(next(iter(mixed.train_dataloader()))))) > 1


def test_per_batch_validation_strings_come_in_groups_of_one_length():
    """Their validation set is ``generate_batches`` too (``--valid-batch-size 10``, the training
    batch size): groups of ``batch_size`` strings of one length, evaluated ``eval_batch_size`` at
    a time; the test split is unchanged."""
    dm = per_batch(val_size=20, eval_batch_size=20)
    val = dm.build_split("val")
    groups = [val.strings[i : i + 8] for i in range(0, 20, 8)]
    assert [len(g) for g in groups] == [8, 8, 4] and all(len({len(w) for w in g}) == 1 for g in groups)
    assert val.batches is None and len(next(iter(dm.val_dataloader()))["lengths"]) == 20
    same = make_dm(train_lengths=(1, 29), length_sampling="uniform")
    assert dm.build_split("test").strings == same.build_split("test").strings


def test_per_batch_with_a_token_budget_stops_once_it_has_them():
    dm = per_batch(train_tokens=500)
    train = dm.build_split("train")
    total = sum(len(w) for w in train.strings)
    last = [train.strings[i] for i in train.batches[-1]]
    assert total >= 500 and total - len(last[0]) < 500  # the last batch as short as the budget allows
    assert all(len({len(train.strings[i]) for i in b}) == 1 for b in train.batches)


def test_per_batch_under_lightnings_ddp_sampler():
    """Lightning's DDP sampler replacement (``DistributedSamplerWrapper`` around the loader's
    sampler, the loader rebuilt by ``_update_dataloader``): the two ranks share out the epoch's
    batches, each batch whole and of one length, and ``set_epoch`` reaches the batch order."""
    from lightning.fabric.utilities.distributed import DistributedSamplerWrapper
    from lightning.pytorch.utilities.data import _update_dataloader

    dm = per_batch(train_size=64)
    dm.setup("fit")
    loader = dm.train_dataloader()
    whole = [str(b["input"].tolist()) for b in loader]
    seen = []
    for rank in (0, 1):
        wrapped = DistributedSamplerWrapper(loader.sampler, num_replicas=2, rank=rank, shuffle=True, seed=0)
        ranked = _update_dataloader(loader, wrapped)
        ranked.sampler.set_epoch(0)
        batches = list(ranked)
        assert len(batches) == 4
        assert all(len(set(lengths_of(b))) == 1 and len(lengths_of(b)) == 8 for b in batches)
        seen += [str(b["input"].tolist()) for b in batches]
    assert sorted(seen) == sorted(whole)  # each batch on one rank, none lost
    wrapped.set_epoch(3)
    assert loader.sampler.epoch == 3


def test_the_dusell_preset_draws_batches_of_one_length_unless_told_otherwise():
    from memrnn.languages import MarkedReversal

    lang = MarkedReversal(mean_length=60)
    dm = FormalLanguageDataModule(lang, preset="dusell", train_size=30, val_size=5, test_per_length=1)
    assert dm.batch_lengths == "per_batch"
    assert FormalLanguageDataModule(lang, preset="dusell", batch_lengths="per_sequence").batch_lengths == (
        "per_sequence"
    )
    assert make_dm(preset="hewitt").batch_lengths == "per_sequence"


def test_a_test_seed_gives_every_run_the_same_test_set():
    """``--test-data-seed 0``: one test set per task for every run; training and validation
    follow the run's seed; ``test_seed=s`` is the test set of a run with ``seed=s``."""
    runs = [make_dm(seed=s, test_seed=0) for s in (0, 1)]
    assert runs[0].build_split("test").strings == runs[1].build_split("test").strings
    assert runs[0].build_split("train").strings != runs[1].build_split("train").strings
    assert runs[0].build_split("val").strings != runs[1].build_split("val").strings
    assert make_dm(seed=1).build_split("test").strings != runs[1].build_split("test").strings
    assert (
        make_dm(seed=5, test_seed=2).build_split("test").strings
        == make_dm(seed=2).build_split("test").strings
    )
    per_length = [make_dm(seed=s, test_seed=7, test_per_length=2) for s in (0, 1)]
    assert per_length[0].build_split("test").strings == per_length[1].build_split("test").strings


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"batch_lengths": "batch"}, "batch_lengths must be one of 'per_sequence', 'per_batch', got 'batch'"),
        ({"test_seed": 1.5}, "test_seed must be an int or None, got 1.5"),
        ({"test_seed": True}, "test_seed must be an int or None, got True"),
    ],
)
def test_bad_batching_and_test_seeds_are_named(kw, match):
    with pytest.raises(ValueError, match=match):
        make_dm(**kw)


def test_the_options_are_reachable_from_yaml(tmp_path):
    """``data.init_args.batch_lengths`` and ``data.init_args.test_seed`` through the real CLI."""
    from memrnn.lit.cli import build_cli

    root = Path(__file__).resolve().parents[2]
    cli = build_cli(
        ["--config", str(root / "configs/dusell/lstm_marked_reversal.yaml"), "--trainer.logger=false",
         "--data.init_args.batch_lengths=per_sequence", "--data.init_args.test_seed=0",
         f"--trainer.default_root_dir={tmp_path}"],
        run=False, default_config_files=[root / "configs/defaults.yaml"],
    )  # fmt: skip
    assert cli.datamodule.batch_lengths == "per_sequence" and cli.datamodule.test_seed == 0
