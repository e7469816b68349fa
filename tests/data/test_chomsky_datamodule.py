"""The Chomsky-hierarchy data module: sequences are the task's input then blanks, targets only on
the scored output positions, lazily drawn and deterministic; a CPU run of train.py on one task."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from memrnn.data import ChomskyDataModule
from memrnn.data.datamodule import IGNORE_INDEX
from memrnn.languages.chomsky import chomsky_task

ROOT = Path(__file__).resolve().parents[2]


def test_batches_hold_the_input_then_blanks_and_the_scored_outputs():
    dm = ChomskyDataModule("stack_manipulation", train_size=64, val_size=8, test_per_length=3,
                           train_lengths=(1, 6), test_lengths=(7, 9), batch_size=16)  # fmt: skip
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
    assert batch["ref_logprob"].abs().sum() == 0
    dm.setup("test")
    test = dm.datasets["test"]
    assert len(test) == 9 and [test[i]["input_length"] for i in range(9)] == [7, 7, 7, 8, 8, 8, 9, 9, 9]
    # deterministic: a fresh module draws the same sequences
    again = ChomskyDataModule("stack_manipulation", train_size=64, train_lengths=(1, 6), test_lengths=(7, 9))
    again.setup("fit")
    assert all(
        (dm.datasets["train"][i]["input"] == again.datasets["train"][i]["input"]).all() for i in range(64)
    )


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="unknown transduction task 'reverse'"):
        ChomskyDataModule("reverse")
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
