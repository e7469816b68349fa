"""Checkpoints written when SequenceModule took ``optimizer: "adam"`` and ``lr_decay``/``lr_patience``
(and ``memrnn.lit.GeneratorModule`` existed) convert with ``python -m memrnn.lit.upgrade``."""

import functools
import subprocess
import sys

import lightning as L
import pytest
import torch

from memrnn.layers import LSTMLayer
from memrnn.lit import SequenceModule
from memrnn.lit.upgrade import upgrade_hparams


def legacy_checkpoint(tmp_path):
    torch.manual_seed(0)
    model = SequenceModule(functools.partial(LSTMLayer, hidden_size=4), vocab_size=6, num_symbols=5)
    trainer = L.Trainer(logger=False, enable_progress_bar=False, enable_model_summary=False, max_epochs=0)
    trainer.strategy.connect(model)
    path = tmp_path / "old.ckpt"
    trainer.save_checkpoint(path)
    ckpt = torch.load(path, weights_only=True)
    hp = ckpt["hyper_parameters"]
    for key in ("optimizer", "optimizer_args", "lr_scheduler"):
        hp.pop(key)
    hp.update(optimizer="sgd", lr_decay=0.5, lr_patience=2, lr=0.3)  # the old spelling
    torch.save(ckpt, path)
    return path, model


def test_legacy_checkpoint_is_refused_by_name_then_upgraded(tmp_path):
    path, model = legacy_checkpoint(tmp_path)
    with pytest.raises(ValueError, match=r"optimizer=.sgd.: give the class .*python -m memrnn.lit.upgrade"):
        SequenceModule.load_from_checkpoint(path)
    out = subprocess.run(
        [sys.executable, "-m", "memrnn.lit.upgrade", str(path), str(tmp_path / "new.ckpt")],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert "optimizer: 'sgd' -> torch.optim.SGD" in out.stdout
    assert "lr_decay=0.5, lr_patience=2 -> lr_scheduler ReduceLROnPlateau" in out.stdout
    loaded = SequenceModule.load_from_checkpoint(tmp_path / "new.ckpt")
    for p, q in zip(model.parameters(), loaded.parameters(), strict=True):
        torch.testing.assert_close(p, q, atol=0, rtol=0)
    conf = loaded.configure_optimizers()
    assert type(conf["optimizer"]) is torch.optim.SGD and conf["optimizer"].defaults["lr"] == 0.3
    sched = conf["lr_scheduler"]["scheduler"]
    assert isinstance(sched, torch.optim.lr_scheduler.ReduceLROnPlateau) and (
        sched.factor,
        sched.patience,
    ) == (0.5, 2)
    again = subprocess.run(
        [sys.executable, "-m", "memrnn.lit.upgrade", str(tmp_path / "new.ckpt")],
        capture_output=True,
        text=True,
    )
    assert again.returncode == 0 and "already current" in again.stdout


def test_cli_checkpoints_get_import_paths():
    """A checkpoint written by train.py keeps the config (import paths, class_path dicts)."""
    hp = {"_instantiator": "lightning.pytorch.cli.instantiate_module", "_class_path": "memrnn.lit.GeneratorModule",
          "optimizer": "adam", "lr_decay": None, "lr_patience": 0, "lr": 0.01}  # fmt: skip
    new, changes = upgrade_hparams(hp)
    assert new["_class_path"] == "memrnn.lit.SequenceModule" and new["optimizer"] == "torch.optim.Adam"
    assert new["lr_scheduler"] is None and "lr_decay" not in new and len(changes) == 3
    new, _ = upgrade_hparams({**hp, "lr_decay": 0.5})
    assert new["lr_scheduler"] == {
        "class_path": "torch.optim.lr_scheduler.ReduceLROnPlateau", "init_args": {"factor": 0.5, "patience": 0}
    }  # fmt: skip


def test_checkpoints_with_removed_implementation_flags_load_after_upgrade(tmp_path):
    """A layer saved with ``bptt=True`` or ``fused=False`` (removed: one implementation switch) is
    refused on loading with the flag, its replacement and this command named; the upgrade drops
    the flags with a note and the checkpoint loads with the same weights."""
    from memrnn.layers import GRULayer

    torch.manual_seed(0)
    model = SequenceModule(functools.partial(GRULayer, hidden_size=4), vocab_size=6, num_symbols=5)
    trainer = L.Trainer(logger=False, enable_progress_bar=False, enable_model_summary=False, max_epochs=0)
    trainer.strategy.connect(model)
    path = tmp_path / "old.ckpt"
    trainer.save_checkpoint(path)
    ckpt = torch.load(path, weights_only=True)
    ckpt["hyper_parameters"]["layer"] = functools.partial(GRULayer, hidden_size=4, bptt=True, fused=True)
    torch.save(ckpt, path)
    with pytest.raises(TypeError, match=r"bptt= was removed.*implementation\('bptt'\).*memrnn.lit.upgrade"):
        SequenceModule.load_from_checkpoint(path)
    out = subprocess.run(
        [sys.executable, "-m", "memrnn.lit.upgrade", str(path), str(tmp_path / "new.ckpt")],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert "layer: memrnn.layers.gated.GRULayer(bptt=True) dropped" in out.stdout
    assert "layer: memrnn.layers.gated.GRULayer(fused=True) dropped" in out.stdout
    loaded = SequenceModule.load_from_checkpoint(tmp_path / "new.ckpt")
    for p, q in zip(model.parameters(), loaded.parameters(), strict=True):
        torch.testing.assert_close(p, q, atol=0, rtol=0)


def test_cli_configs_lose_removed_flags_of_memrnn_classes_only():
    """In a CLI checkpoint's ``class_path``/``init_args`` (nested too) ``fused``/``bptt`` go from
    the memrnn layers; an optimizer's own ``fused`` (``torch.optim.Adam``) stays."""
    hp = {
        "layer": {"class_path": "memrnn.layers.ElmanRNN", "init_args": {"hidden_size": 8, "fused": False}},
        "optimizer": {"class_path": "torch.optim.Adam", "init_args": {"fused": True}},
        "extra": [{"class_path": "memrnn.layers.GRULayer", "init_args": {"bptt": True}}],
    }
    new, changes = upgrade_hparams(hp)
    assert new["layer"]["init_args"] == {"hidden_size": 8}
    assert new["optimizer"]["init_args"] == {"fused": True}
    assert new["extra"][0]["init_args"] == {}
    assert len(changes) == 2 and "layer: memrnn.layers.ElmanRNN(fused=False) dropped" in changes[0]
    assert upgrade_hparams(new)[1] == []
