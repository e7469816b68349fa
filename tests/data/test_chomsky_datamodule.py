"""The Chomsky-hierarchy data module: sequences are the task's input then blanks, targets only on
the scored output positions, the loss target on every output position, training batches of one
length (or one length per sequence), lazily drawn and deterministic; a CPU run of train.py on one
task."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from memrnn.data import ChomskyDataModule
from memrnn.data.chomsky import transduction_batch
from memrnn.data.datamodule import IGNORE_INDEX
from memrnn.languages.chomsky import chomsky_task

ROOT = Path(__file__).resolve().parents[2]


def test_batches_hold_the_input_then_blanks_and_the_scored_outputs():
    dm = ChomskyDataModule("stack_manipulation", train_size=64, val_size=8, test_per_length=3,
                           train_lengths=(1, 6), test_lengths=(7, 9), batch_size=16,
                           batch_lengths="per_sequence")  # fmt: skip
    dm.setup("fit")
    task = chomsky_task("stack_manipulation")
    assert dm.vocab_size == 6 and dm.num_symbols == 3 and dm.bracket_types is None
    batch = next(iter(dm.train_dataloader()))
    for b in range(16):
        n = int(batch["input_lengths"][b])
        L = task.output_length(n)
        assert 1 <= n <= 6 and int(batch["lengths"][b]) == n + L
        x = batch["input"][b, :n].tolist()
        assert (batch["input"][b, n : n + L] == 5).all()  # the blank
        y = task.transduce(x)
        scored = task.scored(y)
        tgt = batch["target"][b, : n + L].tolist()
        assert tgt[:n] == [IGNORE_INDEX] * n
        assert tgt[n:] == [t if s else IGNORE_INDEX for t, s in zip(y, scored, strict=True)]
        assert (batch["target"][b, n + L :] == IGNORE_INDEX).all()
        # the loss target: every output position, the zeros after the termination token included
        assert batch["loss_target"][b, : n + L].tolist() == [IGNORE_INDEX] * n + y
        assert (batch["loss_target"][b, n + L :] == IGNORE_INDEX).all()
    assert batch["ref_logprob"].abs().sum() == 0
    dm.setup("test")
    test = dm.datasets["test"]
    assert len(test) == 9 and [test[i]["input_length"] for i in range(9)] == [7, 7, 7, 8, 8, 8, 9, 9, 9]
    # deterministic: a fresh module draws the same sequences
    again = ChomskyDataModule("stack_manipulation", train_size=64, train_lengths=(1, 6), test_lengths=(7, 9),
                              batch_lengths="per_sequence")  # fmt: skip
    again.setup("fit")
    assert all(
        (dm.datasets["train"][i]["input"] == again.datasets["train"][i]["input"]).all() for i in range(64)
    )


def test_scored_loss_positions_give_no_loss_target():
    """``loss_positions="scored"``: no ``loss_target`` (the generator trains on ``target``); the
    targets themselves are the same as with ``"outputs"``."""
    outputs = transduction_batch("binary_addition", 9, 16, seed=3)
    scored = transduction_batch("binary_addition", 9, 16, seed=3, loss_positions="scored")
    assert "loss_target" not in scored
    assert torch.equal(outputs["target"], scored["target"]) and torch.equal(outputs["input"], scored["input"])
    unscored = (outputs["target"] == IGNORE_INDEX) & (outputs["loss_target"] != IGNORE_INDEX)
    assert unscored.any()  # the zeros after the termination token: in the loss, not in the accuracy
    assert (outputs["loss_target"][unscored] == 0).all()


def test_training_batches_have_one_length_each_and_are_fresh_every_epoch():
    """``batch_lengths="per_batch"`` (the public code's trainer): every row of a training batch has
    the batch's input length, the lengths spread over the window, the epoch's last batch holds
    the rest of ``train_size``, a new module draws the same batches, and the next epoch new ones."""
    kw = dict(train_size=100, val_size=4, test_per_length=1, train_lengths=(1, 12), test_lengths=(13, 13),
              batch_size=8)  # fmt: skip
    dm = ChomskyDataModule("binary_addition", **kw)
    dm.setup("fit")
    loader = dm.train_dataloader()
    assert len(loader) == 13
    first = list(loader)
    assert [len(b["input_lengths"]) for b in first] == [8] * 12 + [4]
    lengths = [int(b["input_lengths"][0]) for b in first]
    assert all((b["input_lengths"] == n).all() for b, n in zip(first, lengths, strict=True))
    assert all((b["lengths"] == n + n + 1).all() for b, n in zip(first, lengths, strict=True))  # n + L
    assert len(set(lengths)) > 4 and min(lengths) >= 1 and max(lengths) <= 12
    again = ChomskyDataModule("binary_addition", **kw)
    again.setup("fit")
    assert all(
        torch.equal(a["input"], b["input"]) for a, b in zip(first, again.train_dataloader(), strict=True)
    )
    loader.sampler.set_epoch(1)  # Lightning calls it every epoch
    second = list(loader)
    assert not any(torch.equal(a["input"], b["input"]) for a, b in zip(first, second, strict=True))
    # per sequence (memrnn's earlier batches): the rows of one batch have their own lengths
    mixed = ChomskyDataModule("binary_addition", **kw, batch_lengths="per_sequence")
    mixed.setup("fit")
    assert len(set(next(iter(mixed.train_dataloader()))["input_lengths"].tolist())) > 1


def test_one_length_per_batch_under_lightnings_ddp_sampler():
    """Lightning's DDP sampler replacement (``DistributedSamplerWrapper`` around the loader's
    sampler, the loader rebuilt by ``_update_dataloader``): the two ranks share out the epoch's
    batches, each batch still of one length, and ``set_epoch`` reaches the batch sampler."""
    from lightning.fabric.utilities.distributed import DistributedSamplerWrapper
    from lightning.pytorch.utilities.data import _update_dataloader

    dm = ChomskyDataModule("reverse_string", train_size=64, val_size=4, test_per_length=1,
                           train_lengths=(1, 20), test_lengths=(21, 21), batch_size=8)  # fmt: skip
    dm.setup("fit")
    loader = dm.train_dataloader()
    whole = [b["input"] for b in loader]
    seen = []
    for rank in (0, 1):
        wrapped = DistributedSamplerWrapper(loader.sampler, num_replicas=2, rank=rank, shuffle=True, seed=0)
        ranked = _update_dataloader(loader, wrapped)
        ranked.sampler.set_epoch(0)
        batches = list(ranked)
        assert len(batches) == 4
        for b in batches:
            assert len(set(b["input_lengths"].tolist())) == 1 and len(b["input_lengths"]) == 8
        seen += [b["input"] for b in batches]
    assert sorted(map(str, seen)) == sorted(map(str, whole))  # each batch on one rank, none lost
    wrapped.set_epoch(3)
    assert loader.sampler.epoch == 3


def test_a_test_seed_gives_every_run_the_same_test_set():
    """``range_evaluation`` reseeds with a constant 1 before the test batches: one test set for
    every run; training and validation follow the run's seed; ``test_seed=s`` is the test set of
    a run with ``seed=s``."""
    kw = dict(train_size=16, val_size=4, test_per_length=3, train_lengths=(1, 5), test_lengths=(6, 8),
              batch_size=8)  # fmt: skip

    def inputs(dm, split):
        ds = dm.build_split(split)
        return [ds[i]["input"].tolist() for i in range(len(ds))]

    runs = [ChomskyDataModule("reverse_string", seed=s, test_seed=1, **kw) for s in (0, 5)]
    assert inputs(runs[0], "test") == inputs(runs[1], "test")
    assert inputs(runs[0], "val") != inputs(runs[1], "val")
    assert str(runs[0].build_split("train")[0]) != str(runs[1].build_split("train")[0])
    assert inputs(ChomskyDataModule("reverse_string", seed=1, **kw), "test") == inputs(runs[1], "test")
    assert inputs(ChomskyDataModule("reverse_string", seed=5, **kw), "test") != inputs(runs[1], "test")
    with pytest.raises(ValueError, match="test_seed must be an int or None, got '1'"):
        ChomskyDataModule(test_seed="1")


def test_the_public_codes_task_name_is_accepted():
    """``missing_duplicate_string`` is the public code's registry name for ``missing_duplicate``."""
    dm = ChomskyDataModule("missing_duplicate_string", train_size=8, test_lengths=(42, 42), test_per_length=1)
    assert dm.task.name == "missing_duplicate"


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="unknown transduction task 'reverse'"):
        ChomskyDataModule("reverse")
    with pytest.raises(ValueError, match="loss_positions must be one of 'outputs', 'scored', got 'all'"):
        ChomskyDataModule(loss_positions="all")
    with pytest.raises(
        ValueError, match="batch_lengths must be one of 'per_batch', 'per_sequence', got 'batch'"
    ):
        ChomskyDataModule(batch_lengths="batch")
    with pytest.raises(ValueError, match="train_size must be a positive int, got 0"):
        ChomskyDataModule(train_size=0)
    with pytest.raises(ValueError, match="train lengths must start at 1 or more"):
        ChomskyDataModule(train_lengths=(0, 4))


def test_a_sequence_module_learns_reverse_string_through_train_py(tmp_path):
    """``train.py`` with the chomsky configs on a CPU: a small LSTM fits the short reversals."""
    env = {**os.environ, "WANDB_MODE": "offline", "PYTHONUNBUFFERED": "1"}
    args = [
        "fit", "--config", str(ROOT / "configs/chomsky/lstm.yaml"),
        "--model.init_args.layer.init_args.hidden_size=32", "--model.init_args.lr=0.01",
        "--data.init_args.train_size=2048", "--data.init_args.val_size=64",
        "--data.init_args.train_lengths=[1, 5]", "--data.init_args.val_lengths=[1, 5]",
        "--data.init_args.batch_size=32", "--trainer.max_steps=-1", "--trainer.max_epochs=6",
        f"--trainer.logger.init_args.save_dir={tmp_path}",
    ]  # fmt: skip
    out = subprocess.run([sys.executable, str(ROOT / "train.py"), *args], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=600)  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    curves = sorted(tmp_path.rglob("length_curves_val.csv"))
    assert curves, out.stdout[-2000:]
    rows = curves[-1].read_text().splitlines()
    head = rows[0].split(",")
    acc = [float(r.split(",")[head.index("acc")]) for r in rows[1:]]
    lengths = [int(float(r.split(",")[head.index("length")])) for r in rows[1:]]
    assert lengths == [1, 2, 3, 4, 5]  # by input length
    assert min(acc) > 0.9, acc
