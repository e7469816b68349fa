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
