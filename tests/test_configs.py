"""Every YAML in configs/ parses and instantiates through the real CLI; train.py's CLI works."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from memrnn.core import MemoryLayer
from memrnn.data.datamodule import SplitDataModule
from memrnn.lit import SequenceModule
from memrnn.lit.cli import build_cli

ROOT = Path(__file__).resolve().parents[1]
DEFAULTS = ROOT / "configs" / "defaults.yaml"
CONFIGS = sorted(p for p in (ROOT / "configs").rglob("*.yaml") if p != DEFAULTS)


def run_train(*args, cwd, timeout=300):
    env = {**os.environ, "WANDB_MODE": "offline", "PYTHONUNBUFFERED": "1"}
    return subprocess.run(
        [sys.executable, str(ROOT / "train.py"), *args], cwd=cwd, env=env, capture_output=True, text=True,
        timeout=timeout,
    )  # fmt: skip


def test_there_are_experiment_configs():
    assert any(p.name == "lstm_k2_m3.yaml" for p in CONFIGS)


RSM_CONFIGS = [p for p in CONFIGS if p.parent.name == "rsm"]
SEQUENCE_CONFIGS = [p for p in CONFIGS if p.parent.name != "rsm"]


@pytest.mark.parametrize("path", SEQUENCE_CONFIGS, ids=lambda p: str(p.relative_to(ROOT)))
def test_config_instantiates_through_the_cli(path, tmp_path):
    cli = build_cli(
        ["--config", str(path), f"--trainer.logger.init_args.save_dir={tmp_path}"],
        run=False,
        default_config_files=[DEFAULTS],
    )
    assert isinstance(cli.model, SequenceModule) and isinstance(cli.model.layer, MemoryLayer)
    assert isinstance(cli.datamodule, SplitDataModule)
    assert cli.model.vocab_size == cli.datamodule.vocab_size  # linked, not typed by the user
    assert cli.model.num_symbols == cli.datamodule.num_symbols
    assert cli.model.hparams.bracket_types == cli.datamodule.bracket_types
    # experiment configs add callbacks with `callbacks+:`; a plain `callbacks:` would drop the defaults'
    names = {type(c).__name__ for c in cli.trainer.callbacks}
    assert {"ModelCheckpoint", "LengthCurves", "CrossEntropyReport"} <= names, names


@pytest.mark.parametrize("path", RSM_CONFIGS, ids=lambda p: str(p.relative_to(ROOT)))
def test_rsm_config_instantiates_through_the_cli(path, tmp_path):
    """Paaßen et al.'s (2021) configs: a closed-form RSMModule; the task of model and data agree; plain
    ``callbacks:`` (no optimizer, so no LearningRateMonitor) and no gradient clipping."""
    from memrnn.rsm import RSMDataModule, RSMModule

    cli = build_cli(
        ["--config", str(path), f"--trainer.logger.init_args.save_dir={tmp_path}"],
        run=False,
        default_config_files=[DEFAULTS],
    )
    assert isinstance(cli.model, RSMModule) and isinstance(cli.datamodule, RSMDataModule)
    assert cli.model.task == cli.datamodule.task and path.stem.endswith(cli.model.task)
    assert path.stem.startswith(cli.model.hparams.reservoir)
    assert cli.model.hparams.vocab_size == cli.datamodule.vocab_size
    names = {type(c).__name__ for c in cli.trainer.callbacks}
    assert "ModelCheckpoint" in names and "LearningRateMonitor" not in names, names
    assert cli.trainer.gradient_clip_val is None and cli.trainer.max_epochs == 1


def test_print_config_shows_the_resolved_layer(tmp_path):
    out = run_train(
        "fit", "--config", str(ROOT / "configs/dyck/lstm_k2_m3.yaml"), "--print_config", cwd=tmp_path
    )
    assert out.returncode == 0, out.stderr
    assert "memrnn.layers.LSTMLayer" in out.stdout and "hidden_size: 16" in out.stdout
    assert "memrnn.languages.DyckKM" in out.stdout and "memrnn.lit.WandbLogger" in out.stdout


def test_unknown_config_key_is_named(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        (ROOT / "configs/dyck/lstm_k2_m3.yaml").read_text().replace("hidden_size: 16", "hiden_size: 16")
    )
    out = run_train("fit", "--config", str(bad), "--print_config", cwd=tmp_path)
    assert out.returncode != 0
    assert "hiden_size" in out.stderr


def test_train_py_runs_two_process_ddp_on_cpu(tmp_path):
    """``train.py`` with Lightning's ``ddp`` strategy (gloo, 2 processes) as a subprocess, the
    way docs/ecosystem.md says DDP must be tested."""
    out = run_train(
        "fit", "--config", str(ROOT / "configs/dyck/lstm_k2_m3.yaml"), "--trainer.strategy=ddp",
        "--trainer.devices=2", "--trainer.accelerator=cpu", "--trainer.max_epochs=1",
        "--data.init_args.train_size=64", "--data.init_args.val_size=32",
        f"--trainer.logger.init_args.save_dir={tmp_path / 'runs'}", cwd=tmp_path, timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    assert "difference" in out.stdout + out.stderr  # the report, printed once by rank 0
    assert len(list((tmp_path / "runs").rglob("last.ckpt"))) == 1
