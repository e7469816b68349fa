"""The progress bar: live metrics on a terminal, one line per epoch elsewhere."""

from __future__ import annotations

import functools

import lightning as L
import torch

from memrnn.data import AcceptorDataModule
from memrnn.languages import AnBn
from memrnn.layers import LSTMLayer
from memrnn.lit import ProgressBar, SequenceModule


def fit(tmp_path, bar):
    torch.manual_seed(0)
    dm = AcceptorDataModule(
        AnBn(), train_size=32, val_size=16, test_size=0, train_lengths=(3, 21), batch_size=8
    )
    model = SequenceModule(functools.partial(LSTMLayer, hidden_size=4), dm.vocab_size, dm.num_symbols,
                           objectives={"acceptor_end": 1.0})  # fmt: skip
    trainer = L.Trainer(max_epochs=2, logger=False, callbacks=[bar], enable_model_summary=False,
                        enable_checkpointing=False, default_root_dir=tmp_path)  # fmt: skip
    trainer.fit(model, datamodule=dm)
    return trainer


def test_one_line_per_epoch_with_the_live_metrics(tmp_path, capsys):
    fit(tmp_path, ProgressBar(lines=True))
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("epoch ")]
    assert [ln.split(":")[0] for ln in lines] == ["epoch 1/2", "epoch 2/2"]
    for ln in lines:
        assert "train/loss " in ln and "val/accept_end " in ln and "val/loss" not in ln.split(",")[0]


def test_bars_on_a_terminal(tmp_path, capsys):
    bar = ProgressBar(lines=False)
    trainer = fit(tmp_path, bar)
    assert not bar.is_disabled and trainer.progress_bar_callback is bar
    out = capsys.readouterr()
    assert not any(ln.startswith("epoch 1/2:") for ln in out.out.splitlines())
    assert "train/loss=" in out.out  # the bar shows the live metrics
