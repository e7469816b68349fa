"""Presets, next-set targets, acceptor and transduction data modules."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from memrnn.data import (
    PRESETS,
    AcceptorDataModule,
    CopyTask,
    FormalLanguageDataModule,
    RepeatCopyTask,
    ReversalTask,
    TransductionDataModule,
)
from memrnn.languages import AnBn, DyckKM, DyckN, Latch, MarkedReversal, table1_automaton


def test_suzgun_preset_with_next_sets():
    dm = FormalLanguageDataModule(
        DyckN(2), preset="suzgun", train_size=40, val_size=8, test_size=8, next_sets=True, batch_size=8
    )
    assert dm.windows == {"train": (3, 51), "val": (3, 51), "test": (53, 101)}
    dm.setup("fit")
    batch = next(iter(dm.train_dataloader()))
    sets, tgt, mask = batch["next_set"], batch["target"], batch["mask"]
    assert sets.shape == (*tgt.shape, 5) and sets.dtype == torch.bool
    # the true next token is always in its allowed set; padding has empty sets
    assert sets.gather(2, tgt.clamp(min=0)[..., None])[..., 0][mask].all()
    assert not sets[~mask].any()
    # after an open bracket both opens and that bracket's close are allowed, nothing else
    lang = dm.language
    first = batch["target"][0, 0].item()
    assert set(torch.nonzero(sets[0, 1]).flatten().tolist()) == {0, 1, lang.n + first}


def test_dusell_preset_scores_given_length_and_covers_every_test_length():
    lang = MarkedReversal()
    dm = FormalLanguageDataModule(lang, preset="dusell", train_size=30, val_size=5, test_per_length=2)
    assert dm.length_sampling == "uniform" and dm.windows["test"] == (41, 101)
    test = dm.build_split("test")
    lengths = sorted({len(s) for s in test.strings})
    assert lengths == list(range(42, 101, 2)) and len(test) == 2 * len(lengths)  # w # w^R END: even
    for s, ref in zip(test.strings, test.ref_logprobs, strict=True):
        assert ref.sum() == pytest.approx(lang.log_prob_given_length(s))
        # w # w^R of length 2k + 1 given its length: each of the 2^k halves is equally likely
        assert ref.sum() == pytest.approx(-((len(s) - 2) // 2) * math.log(2))


def test_presets_resolve_and_explicit_arguments_win():
    dm = FormalLanguageDataModule(DyckKM(2, 3), preset="hewitt", train_size=7)
    assert dm.sizes["train"] == 7 and dm.windows["train"] == (1, 84)
    with pytest.raises(ValueError, match="unknown split preset 'nope'"):
        FormalLanguageDataModule(DyckKM(2, 3), preset="nope")
    assert set(PRESETS) == {"hewitt", "suzgun", "rsm", "dusell", "weiss"}


def test_acceptor_prefix_labels_match_the_lr_automaton_output():
    lang = DyckN(1)
    dm = AcceptorDataModule(lang, preset="rsm", batch_size=100)
    assert dm.sizes == {"train": 100, "val": 100, "test": 100}
    dm.setup("fit")
    batch = next(iter(dm.train_dataloader()))
    assert 30 <= batch["label"].sum() <= 70
    auto = table1_automaton("dyck1")
    for b in range(8):
        n = int(batch["lengths"][b])
        ids = batch["input"][b, 1:n].tolist()
        out = auto.parse([lang.symbols[i] for i in ids]).output  # y_t for prefixes ids[:t]
        for t in range(1, n):  # Table 1 automata reject ε, Dyck-n contains it: skip t = 0
            if t == n - 1 or ids[t] in lang.allowed_next(ids[:t]):  # lookahead keeps it viable
                assert out[t] == batch["prefix_label"][b, t]
        assert batch["label"][b] == batch["prefix_label"][b, n - 1]
    assert not batch["prefix_label"][~batch["mask"]].any()


def test_weiss_preset_uses_near_miss_tests_and_weiss_negatives():
    dm = AcceptorDataModule(AnBn(), preset="weiss", train_size=200, val_size=10, test_size=300)
    assert dm.windows["train"] == (3, 201) and dm.length_sampling == "uniform"
    train, test = dm.build_split("train"), dm.build_split("test")
    labels = [it["label"] for it in train.items]
    assert sum(labels) == 100
    for it in train.items:
        a, b = it["body"].count(0), it["body"].count(1)
        assert it["label"] == (a == b >= 1) and a <= 100 and b <= 100
    assert max(len(it["body"]) for it in test.items) > 300  # n up to 200


def test_latch_task_is_per_prefix_parity():
    dm = AcceptorDataModule(Latch(), preset="rsm", negative_fraction=0.0, train_size=20)
    for it in dm.build_split("train").items:
        parity = np.cumsum([0, *[t == 1 for t in it["body"]]]) % 2
        assert it["prefix_label"] == [bool(p) for p in parity]


def test_copy_and_repeat_copy_tasks():
    rng = np.random.default_rng(0)
    item = CopyTask().sample(rng, "train")
    x, y, m = item["input"], item["target"], item["loss_mask"]
    n = (x[:, 8] == -1).sum()
    assert (
        x.shape == (2 * n + 1, 9) and x[n, 8] == 1 and np.array_equal(y[n + 1 :], x[:n, :8]) and m.sum() == n
    )
    rep = RepeatCopyTask()
    reps = [int((rep.sample(rng, "test")["input"][:, 8] == 1).sum()) for _ in range(200)]
    assert max(reps) > 10 and max(reps) <= 20 and min(reps) >= 1
    dm = TransductionDataModule(RepeatCopyTask(), batch_size=4)
    batch = next(iter(dm.train_dataloader()))
    assert batch["input"].shape[:2] == batch["mask"].shape and batch["target"].shape[-1] == 8


def test_reversal_task():
    dm = TransductionDataModule(ReversalTask(MarkedReversal()), batch_size=3, train_lengths=(5, 11))
    batch = next(iter(dm.train_dataloader()))
    for b in range(3):
        n = int(batch["lengths"][b]) // 2
        body = batch["input"][b, :n]
        assert torch.equal(batch["target"][b, n + 1 : 2 * n + 1], body.flip(0))
        assert (batch["target"][b, : n + 1] == -100).all()


def test_transduction_task_is_checked_at_construction_and_named():
    """``TransductionDataModule(task="nonexistent")`` was accepted and failed at set-up with
    "'str' object has no attribute 'sample'"."""
    with pytest.raises(ValueError, match=r"unknown transduction task 'nonexistent'; .*'copy', 'repeat_copy'"):
        TransductionDataModule(task="nonexistent")
    with pytest.raises(ValueError, match=r"task must be a transduction task, got int 3; give a task object"):
        TransductionDataModule(task=3)
    with pytest.raises(ValueError, match=r"ReversalTask reads the strings of a Language .*got str 'marked'"):
        ReversalTask("marked")
    # Paaßen et al.'s tasks by name, with their sizes (the class defaults)
    dm = TransductionDataModule("repeat_copy", train_size=2, val_size=1, test_size=1, batch_size=2)
    assert (
        isinstance(dm.task, RepeatCopyTask) and dm.task.max_repeats == 10 and dm.hparams.task == "repeat_copy"
    )
    assert next(iter(dm.train_dataloader()))["target"].shape[-1] == 8
    assert type(TransductionDataModule("copy").task) is CopyTask


def test_transduction_sizes_and_windows_are_checked():
    with pytest.raises(ValueError, match="train_size must be a non-negative integer, got -1"):
        TransductionDataModule("copy", train_size=-1)
    with pytest.raises(ValueError, match=r"train_lengths must satisfy 0 <= min <= max, got \(5, 2\)"):
        TransductionDataModule(ReversalTask(MarkedReversal()), train_lengths=(5, 2))
    with pytest.raises(ValueError, match=r"bits must be a positive integer, got 2\.5"):
        CopyTask(bits=2.5)
    with pytest.raises(ValueError, match="max_repeats must be a positive integer, got 0"):
        RepeatCopyTask(max_repeats=0)
    # an explicit empty test_set is refused, not replaced by the default
    with pytest.raises(ValueError, match="test_set must be 'sampled' or 'near_miss', got ''"):
        AcceptorDataModule(AnBn(), test_set="")
    assert AcceptorDataModule(AnBn()).hparams.test_set is None  # the default stays None in hparams
