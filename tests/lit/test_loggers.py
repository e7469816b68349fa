"""W&B logger: offline without an account; checkpoints become model artifacts when online."""

from __future__ import annotations

import functools
import types

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from memrnn.data import AcceptorDataModule
from memrnn.languages import AnBn
from memrnn.layers import LSTMLayer
from memrnn.lit import SequenceModule, WandbLogger


@pytest.fixture
def no_account(monkeypatch, tmp_path):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    (tmp_path / "netrc").write_text("")
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))


def test_offline_without_an_account_switches_checkpoint_upload_off(no_account, tmp_path):
    logger = WandbLogger(save_dir=str(tmp_path), log_model=True)
    assert logger._offline is True and logger._log_model is False


def test_online_keeps_log_model_and_bad_values_are_named(no_account, tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "online")
    logger = WandbLogger(save_dir=str(tmp_path), log_model="all")
    assert logger._offline is False and logger._log_model == "all"
    with pytest.raises(ValueError, match="log_model must be true, false or 'all', got 'best'"):
        WandbLogger(save_dir=str(tmp_path), log_model="best")


def test_online_run_uploads_best_and_last_checkpoints_as_model_artifacts(tmp_path):
    """The upload path, with the W&B run replaced by a recorder (no network in tests)."""
    torch.manual_seed(0)
    dm = AcceptorDataModule(
        AnBn(), train_size=32, val_size=16, test_size=0, train_lengths=(3, 21), batch_size=8
    )
    model = SequenceModule(functools.partial(LSTMLayer, hidden_size=4), dm.vocab_size, dm.num_symbols,
                           objectives={"acceptor_end": 1.0})  # fmt: skip
    ckpt = ModelCheckpoint(dirpath=tmp_path / "ckpt", monitor="val/loss", save_last=True)
    trainer = L.Trainer(max_epochs=2, logger=False, callbacks=[ckpt], enable_progress_bar=False,
                        enable_model_summary=False, default_root_dir=tmp_path)  # fmt: skip
    trainer.fit(model, datamodule=dm)
    logger = WandbLogger(save_dir=str(tmp_path), offline=False, log_model=True)
    logged = []
    logger._experiment = types.SimpleNamespace(
        id="run0", log_artifact=lambda a, aliases: logged.append((a, aliases))
    )
    logger.after_save_checkpoint(ckpt)  # log_model=True: remembered, uploaded when the run ends
    assert logged == []
    logger.finalize("success")
    assert {a.name for a, _ in logged} == {"model-run0"} and all(a.type == "model" for a, _ in logged)
    assert ["latest", "best"] in [al for _, al in logged]
    files = {a.metadata["original_filename"] for a, _ in logged}
    assert files == {p.name for p in (tmp_path / "ckpt").glob("*.ckpt")}
