"""Every YAML in configs/ parses and instantiates through the real CLI; train.py's CLI works."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from torch.optim.lr_scheduler import ReduceLROnPlateau

from memrnn.core import MemoryLayer
from memrnn.data.datamodule import SplitDataModule
from memrnn.lit import SequenceModule
from memrnn.lit.cli import build_cli, config_chain, expand_config_bases

ROOT = Path(__file__).resolve().parents[1]
DEFAULTS = ROOT / "configs" / "defaults.yaml"
SUITES = ROOT / "configs" / "suites"  # suite files (memrnn.suite; tests/suite checks them)
#: the experiment configs (``_*.yaml`` are the bases they overlay, not experiments of their own)
CONFIGS = sorted(
    p
    for p in (ROOT / "configs").rglob("*.yaml")
    if p != DEFAULTS and not p.name.startswith("_") and SUITES not in p.parents
)
BASES = sorted((ROOT / "configs").rglob("_*.yaml"))


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
        (ROOT / "configs/dyck/lstm_k2_m3.yaml")
        .read_text()
        .replace("hidden_size: 16", "hiden_size: 16")
        .replace("base: _base.yaml", f"base: {ROOT / 'configs/dyck/_base.yaml'}")
    )
    out = run_train("fit", "--config", str(bad), "--print_config", cwd=tmp_path)
    assert out.returncode != 0
    assert "hiden_size" in out.stderr


def code_lines(path: Path) -> list[str]:
    return [ln for ln in path.read_text().splitlines() if ln.strip() and not ln.lstrip().startswith("#")]


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: str(p.relative_to(ROOT)))
def test_experiment_configs_are_small_overlays_of_a_base(path):
    """Each experiment names the base it overlays (its paper's ``_base.yaml``, directly or through
    another overlay) and adds at most 15 lines of its own; every base is used."""
    chain = config_chain(path)
    assert len(chain) >= 2 and chain[0][0].name == "_base.yaml" and chain[0][0].parent == path.parent, chain
    assert len(code_lines(path)) <= 15, f"{path.name}: {len(code_lines(path))} lines"


def test_every_base_is_used():
    used = {file for p in CONFIGS for file, _ in config_chain(p)[:-1]}
    assert set(BASES) <= used, sorted(set(BASES) - used)


def test_an_overlay_merges_into_its_base_chain(tmp_path):
    """``lstm_k8_m3_hewitt_init.yaml`` overlays ``lstm_k8_m3.yaml`` overlays ``_base.yaml``: the
    resolved config has every level's values, and the callbacks of all three plus the defaults'."""
    cli = build_cli(
        ["--config", str(ROOT / "configs/hewitt/lstm_k8_m3_hewitt_init.yaml"),
         f"--trainer.logger.init_args.save_dir={tmp_path}"],
        run=False,
        default_config_files=[DEFAULTS],
    )  # fmt: skip
    assert cli.model.hparams.lr == 0.001 and cli.model.hparams.embedding_dim == 26  # overlay, middle
    assert cli.model.layer.hidden_size == 24 and cli.datamodule.language.k == 8  # middle
    assert cli.trainer.max_epochs == 100 and cli.datamodule.hparams.batch_size == 10  # base
    assert isinstance(cli.model.lr_scheduler(torch.optim.SGD([torch.zeros(1)], lr=1)), ReduceLROnPlateau)
    names = [type(c).__name__ for c in cli.trainer.callbacks]
    for name in ("ModelCheckpoint", "LengthCurves", "EarlyStopping", "HewittComparison", "HewittInit"):
        assert name in names, names
    # the command line still wins over every config
    cli = build_cli(
        ["--config", str(ROOT / "configs/hewitt/lstm_k8_m3.yaml"), "--model.init_args.lr=0.5",
         "--data.init_args.language.init_args.m=5", f"--trainer.logger.init_args.save_dir={tmp_path}"],
        run=False,
        default_config_files=[DEFAULTS],
    )  # fmt: skip
    assert cli.model.hparams.lr == 0.5 and cli.datamodule.language.m == 5 and cli.datamodule.language.k == 8


def test_config_bases_missing_or_cyclic_are_named(tmp_path):
    (tmp_path / "a.yaml").write_text("base: b.yaml\nseed_everything: 1\n")
    (tmp_path / "b.yaml").write_text("base: a.yaml\n")
    with pytest.raises(ValueError, match=r"config bases form a cycle: .*a.yaml -> .*b.yaml -> .*a.yaml"):
        config_chain(tmp_path / "a.yaml")
    (tmp_path / "c.yaml").write_text("base: nowhere.yaml\n")
    with pytest.raises(ValueError, match=r"nowhere.yaml \(the base named by .*c.yaml\): no such file"):
        expand_config_bases(["fit", "--config", str(tmp_path / "c.yaml")])
    (tmp_path / "d.yaml").write_text("base: {x: y.yaml}\n")
    with pytest.raises(
        ValueError, match=r"d.yaml: base must be a path or a non-empty list of paths, got \{'x'"
    ):
        config_chain(tmp_path / "d.yaml")
    out = run_train("fit", "--config", str(tmp_path / "c.yaml"), cwd=tmp_path)
    assert out.returncode == 2 and out.stderr.strip().splitlines()[-1].startswith("error: config ")


def test_expansion_leaves_other_arguments_alone(tmp_path):
    (tmp_path / "root.yaml").write_text("seed_everything: 3\n")
    (tmp_path / "top.yaml").write_text("base: root.yaml\ntrainer:\n  max_epochs: 2\n")
    args = ["fit", "--config=" + str(tmp_path / "top.yaml"), "--trainer.max_epochs=5", "--config", "x"]
    assert expand_config_bases(args) == [
        "fit", "--config", str(tmp_path / "root.yaml"), "--config", "trainer:\n  max_epochs: 2\n",
        "--trainer.max_epochs=5", "--config", "x",
    ]  # fmt: skip
    assert expand_config_bases(["fit", "--config", str(tmp_path / "root.yaml")]) == [
        "fit", "--config", str(tmp_path / "root.yaml")
    ]  # fmt: skip


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


def _layer_weights(cli) -> dict[str, torch.Tensor]:
    return {k: v for k, v in cli.model.layer.state_dict().items()}


def test_stack_rnn_by_class_path_is_the_named_model_and_round_trips(tmp_path):
    """``configs/chomsky/stack_rnn_class_path.yaml`` gives StackRNN its memory and controller by
    ``class_path``/``init_args``: the model ``stack_rnn.yaml`` builds by names (same modules, same
    weights from the same seed), and ``train.py fit --print_config``'s output, fed back (without
    fit's ``ckpt_path`` and ``weights_only``), builds it again."""
    from memrnn.layers import ElmanRNN, SuperpositionStack

    def build(path):
        return build_cli(
            ["--config", str(path), f"--trainer.logger.init_args.save_dir={tmp_path}"],
            run=False,
            default_config_files=[DEFAULTS],
        )

    named = build(ROOT / "configs/chomsky/stack_rnn.yaml")
    composed = build(ROOT / "configs/chomsky/stack_rnn_class_path.yaml")
    layer = composed.model.layer
    assert isinstance(layer.memory, SuperpositionStack) and isinstance(layer.controller, ElmanRNN)
    assert (layer.memory.width, layer.memory.depth, layer.memory.value_activation) == (8, 30, "identity")
    assert layer.controller.activation == "relu" and layer.hidden_size == 256
    assert repr(layer) == repr(named.model.layer)
    a, b = _layer_weights(named), _layer_weights(composed)
    assert {k: v.shape for k, v in a.items()} == {k: v.shape for k, v in b.items()}
    assert all(torch.equal(a[k], b[k]) for k in a)

    out = run_train(
        "fit", "--config", str(ROOT / "configs/chomsky/stack_rnn_class_path.yaml"), "--print_config",
        cwd=tmp_path,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "class_path: memrnn.layers.SuperpositionStack" in out.stdout
    assert "class_path: memrnn.layers.ElmanRNN" in out.stdout
    # fit's own arguments go: the CLI without a subcommand (run=False) has none
    config = {k: v for k, v in yaml.safe_load(out.stdout).items() if k not in ("ckpt_path", "weights_only")}
    printed = tmp_path / "printed.yaml"
    printed.write_text(yaml.safe_dump(config))
    again = build_cli(
        ["--config", str(printed), f"--trainer.logger.init_args.save_dir={tmp_path}"], run=False
    )
    assert repr(again.model.layer) == repr(layer)
    c = _layer_weights(again)
    assert all(torch.equal(b[k], c[k]) for k in b) and set(b) == set(c)
