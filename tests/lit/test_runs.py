"""train.py's runs: one folder each (config, checkpoints, W&B run), resumes that continue the same
run, the logger switched off from the command line, failures marked, do-nothing runs warned
about, and errors that end with the line that matters (memrnn.lit.cli, memrnn.lit.runs)."""

import os
import subprocess
import sys

import pytest
import torch
import yaml

from memrnn.lit.cli import build_cli, config_chain, essential_error
from memrnn.lit.wandb_files import read_offline_run
from tests.test_configs import CONFIGS, DEFAULTS, ROOT, run_train

DYCK = str(ROOT / "configs/dyck/lstm_k2_m3.yaml")
TINY = ["--data.init_args.train_size=64", "--data.init_args.val_size=32", "--data.init_args.test_size=16"]


def run_folders(save_dir):
    return sorted(p for p in (save_dir / "memrnn").iterdir() if p.is_dir())


def offline_runs(save_dir):
    return sorted((save_dir / "wandb").glob("offline-run-*"))


def last_line(text):
    return [ln for ln in text.strip().splitlines() if ln.strip()][-1]


def test_two_runs_started_at_once_keep_separate_configs_checkpoints_and_wandb_runs(tmp_path):
    save = tmp_path / "runs"
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                str(ROOT / "train.py"),
                "fit",
                "--config",
                DYCK,
                *TINY,
                "--trainer.max_epochs=1",
                f"--seed_everything={seed}",
                f"--model.init_args.lr={lr}",
                f"--trainer.logger.init_args.save_dir={save}",
            ],
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "WANDB_MODE": "offline"},
        )
        for seed, lr in ((1, 0.01), (2, 0.02))
    ]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    folders = run_folders(save)
    assert len(folders) == 2
    lrs = set()
    for folder in folders:
        config = yaml.safe_load((folder / "config.yaml").read_text())
        lrs.add(config["model"]["init_args"]["lr"])
        assert (folder / "checkpoints" / "last.ckpt").exists()
        assert len(list(offline_runs(save)[0].parent.glob(f"offline-run-*-{folder.name}"))) == 1
    assert lrs == {0.01, 0.02}
    assert not (save / "config.yaml").exists()  # nothing shared that a run could overwrite


def test_a_resume_continues_the_same_run_folder_wandb_run_and_best_checkpoint(tmp_path):
    save = tmp_path / "runs"
    common = ["--config", DYCK, *TINY, f"--trainer.logger.init_args.save_dir={save}"]
    first = run_train("fit", *common, "--trainer.max_epochs=1", cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-2000:]
    (folder,) = run_folders(save)
    last = folder / "checkpoints" / "last.ckpt"
    assert torch.load(last, weights_only=True)["memrnn_run"]["version"] == folder.name

    again = run_train("fit", *common, "--trainer.max_epochs=2", f"--ckpt_path={last}", cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-2000:]
    assert run_folders(save) == [folder]  # no second run folder
    assert (folder / "config.yaml").exists() and (folder / "config.fit-1.yaml").exists()
    ckpt = torch.load(last, weights_only=True)
    assert ckpt["epoch"] == 1
    (state,) = [v for k, v in ckpt["callbacks"].items() if k.startswith("ModelCheckpoint")]
    best = tmp_path / state["best_model_path"]
    assert best.parent == folder / "checkpoints" and best.exists()  # tracking carried over
    runs = offline_runs(save)
    assert len(runs) == 2 and all(r.name.endswith(folder.name) for r in runs)  # one W&B run id
    epochs = [
        h["epoch"]
        for h in read_offline_run(next(runs[1].glob("run-*.wandb")), wait=30)["history"]
        if "epoch" in h
    ]
    assert max(epochs) == 1  # the resumed run logs epoch 2 (0-based 1)

    tested = run_train("test", *common, f"--ckpt_path={last}", cwd=tmp_path)
    assert tested.returncode == 0, tested.stderr[-2000:]
    assert run_folders(save) == [folder] and (folder / "config.test-1.yaml").exists()
    assert all(r.name.endswith(folder.name) for r in offline_runs(save))


def test_logger_off_works_from_the_command_line_and_keeps_runs_apart(tmp_path):
    out = run_train(
        "fit", "--config", DYCK, *TINY, "--trainer.max_epochs=1", "--trainer.logger=false", cwd=tmp_path
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "learning rates are not recorded" in out.stdout + out.stderr
    (folder,) = (tmp_path / "runs" / "no_logger").iterdir()
    assert (folder / "config.yaml").exists() and (folder / "checkpoints" / "last.ckpt").exists()
    assert not (tmp_path / "runs" / "wandb").exists()


def test_train_py_runs_two_process_ddp_with_the_logger_off(tmp_path):
    out = run_train(
        "fit", "--config", DYCK, "--trainer.strategy=ddp", "--trainer.devices=2", "--trainer.accelerator=cpu",
        "--trainer.max_epochs=1", *TINY, "--trainer.logger=false", cwd=tmp_path, timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    (folder,) = (tmp_path / "runs" / "no_logger").iterdir()  # both ranks agreed on one folder
    assert len(list(folder.rglob("last.ckpt"))) == 1 and (folder / "config.yaml").exists()


#: the vector RNS-RNN's stack at depth 104 carries 1 + 5 channels (13-23 s a config here, against
#: 4-6 s for the NS-RNN and RNS-RNN, 2-4 s for the others): slow run
TRAINED = [
    pytest.param(p, marks=pytest.mark.slow)
    if "memory: vector_nondeterministic" in "".join(f.read_text() for f, _ in config_chain(p))
    else p
    for p in CONFIGS
]


@pytest.mark.parametrize("path", TRAINED, ids=lambda p: str(getattr(p, "values", [p])[0].relative_to(ROOT)))
def test_every_config_trains_and_tests_with_the_logger_off(path, tmp_path):
    """Two training batches, one validation and one test batch of every YAML with
    ``--trainer.logger=false`` and nothing else changed but the data sizes."""
    data = ["--data.init_args.train_size=16", "--data.init_args.val_size=8", "--data.init_args.test_size=8"]
    text = "".join(f.read_text() for f, _ in config_chain(path))  # the overlay and its bases
    if "ChomskyDataModule" in text:  # test_per_length sequences at every test length, no test_size
        data = [*data[:2], "--data.init_args.test_per_length=1", "--data.init_args.test_lengths=[41, 48]"]
    if "RecognizerDataModule" in text:  # test_per_length strings per test length in number
        data = [*data[:2], "--data.init_args.test_per_length=1", "--data.init_args.test_lengths=[0, 8]"]
    if "FormalLanguageDataModule" in text:
        data += ["--data.init_args.train_tokens=null", "--data.init_args.val_tokens=null",
                 "--data.init_args.test_tokens=null"]  # fmt: skip
    if "preset: dusell" in text:  # 100 test strings per length otherwise, in batches of 256
        data += ["--data.init_args.test_per_length=1", "--data.init_args.eval_batch_size=8"]
    cli = build_cli(
        ["--config", str(path), *data, "--trainer.logger=false", f"--trainer.default_root_dir={tmp_path}",
         "--trainer.max_epochs=1", "--trainer.limit_train_batches=2", "--trainer.limit_val_batches=1",
         "--trainer.limit_test_batches=1",],
        run=False, default_config_files=[DEFAULTS],
    )  # fmt: skip
    cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    cli.trainer.test(cli.model, datamodule=cli.datamodule)
    assert not cli.trainer.loggers


def test_a_do_nothing_run_warns_last(tmp_path):
    out = run_train(
        "fit",
        "--config",
        DYCK,
        *TINY,
        "--trainer.limit_train_batches=0",
        "--trainer.logger=false",
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert last_line(out.stderr).startswith(
        "WARNING: fit ran 0 optimizer steps: nothing was trained (limit_train_batches=0"
    )
    out = run_train(
        "test",
        "--config",
        DYCK,
        *TINY,
        "--trainer.limit_test_batches=0",
        "--trainer.logger=false",
        cwd=tmp_path,
    )
    assert last_line(out.stderr).startswith("WARNING: test ran 0 batches")


def test_a_failed_run_is_marked(tmp_path):
    """A run that dies (here: a language whose training window holds no string) leaves FAILED in
    its folder and a W&B run finished with exit code 1."""
    save = tmp_path / "runs"
    out = run_train(
        "fit", "--config", DYCK, *TINY, "--data.init_args.train_lengths=[2, 2]",
        f"--trainer.logger.init_args.save_dir={save}", cwd=tmp_path,
    )  # fmt: skip
    assert out.returncode != 0
    (folder,) = run_folders(save)
    assert "ValueError" in (folder / "FAILED").read_text()
    run = read_offline_run(next(offline_runs(save)[0].glob("run-*.wandb")), wait=30)
    assert run["record_types"].get("exit")
    assert run["exit_code"] == 1


def test_continuing_a_failed_run_moves_its_failed_mark_aside(tmp_path):
    """A killed run's folder holds FAILED; training it again (a continuation) renames that to
    FAILED.earlier-1, so a run that then finishes is not marked failed, and the traceback stays."""
    args = ["--config", DYCK, *TINY, "--trainer.max_epochs=1", "--trainer.logger=false",
            "--trainer.limit_train_batches=2", "--trainer.limit_val_batches=1"]  # fmt: skip
    cli = build_cli(
        [*args, f"--trainer.default_root_dir={tmp_path}"], run=False, default_config_files=[DEFAULTS]
    )
    folder = tmp_path
    (folder / "FAILED").write_text("SIGTERMException: killed")
    (folder / "FAILED.earlier-1").write_text("an older kill")
    cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    assert not (folder / "FAILED").exists()
    assert (folder / "FAILED.earlier-2").read_text() == "SIGTERMException: killed"
    assert (folder / "FAILED.earlier-1").read_text() == "an older kill"
    cli.trainer.test(cli.model, datamodule=cli.datamodule)  # testing moves nothing
    (folder / "FAILED").write_text("a failed fit")
    cli.trainer.test(cli.model, datamodule=cli.datamodule)
    assert (folder / "FAILED").read_text() == "a failed fit"


# -- errors that end with the line that matters (in-process: no run starts) --------------------
def cli_error(args, capsys):
    with pytest.raises(SystemExit) as e:
        build_cli(args, default_config_files=[DEFAULTS])
    assert e.value.code == 2
    return capsys.readouterr().err


@pytest.fixture(scope="module")
def lstm_checkpoint(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ckpt")
    out = run_train(
        "fit", "--config", DYCK, *TINY, "--trainer.max_epochs=1", "--trainer.logger=false", cwd=tmp
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return next(tmp.rglob("last.ckpt"))


def test_testing_a_checkpoint_with_another_models_config_stops_naming_the_difference(lstm_checkpoint, capsys):
    gru = str(ROOT / "configs/dyck/gru_k2_m3.yaml")
    err = cli_error(
        ["test", "--config", gru, f"--ckpt_path={lstm_checkpoint}", "--trainer.logger=false"], capsys
    )
    assert last_line(err).startswith(
        f"error: --ckpt_path {lstm_checkpoint} holds another model than the config asks for"
    )
    assert "'memrnn.layers.GRULayer' (config) vs 'memrnn.layers.LSTMLayer' (checkpoint)" in last_line(err)
    err = cli_error(["test", "--config", DYCK, f"--ckpt_path={lstm_checkpoint}", "--model.init_args.lr=0.5",
                     "--trainer.logger=false"], capsys)  # fmt: skip
    assert "model.init_args.lr: 0.5 (config) vs 0.01 (checkpoint)" in last_line(err)


def test_files_that_are_not_checkpoints_are_named(tmp_path, capsys):
    text = tmp_path / "notes.ckpt"
    text.write_text("not a checkpoint")
    err = cli_error(["test", "--config", DYCK, f"--ckpt_path={text}"], capsys)
    assert last_line(err).startswith(f"error: --ckpt_path {text} is not a checkpoint memrnn can read")
    assert "weights_only=False" not in err
    weights = tmp_path / "weights.pt"
    torch.save({"weight": torch.zeros(2)}, weights)
    err = cli_error(["test", "--config", DYCK, f"--ckpt_path={weights}"], capsys)
    assert (
        last_line(err)
        == f"error: --ckpt_path {weights} is not a Lightning checkpoint (it holds a dict with keys ['weight'])"
    )
    err = cli_error(["test", "--config", DYCK, f"--ckpt_path={tmp_path / 'missing.ckpt'}"], capsys)
    assert last_line(err) == f"error: --ckpt_path {tmp_path / 'missing.ckpt'}: no such file"


def test_config_errors_end_with_the_line_that_matters(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        (ROOT / "configs/dyck/lstm_k2_m3.yaml")
        .read_text()
        .replace("hidden_size: 16", "hiden_size: 16")
        .replace("base: _base.yaml", f"base: {ROOT / 'configs/dyck/_base.yaml'}")
    )
    err = cli_error(["fit", "--config", str(bad)], capsys)
    assert last_line(err) == (
        "error: memrnn.layers.LSTMLayer has no argument 'hiden_size' (did you mean 'hidden_size'?); its "
        "arguments: input_size, hidden_size, num_layers, bias, forget_bias, dropout, bidirectional, "
        "learned_initial_state, extra_bias, device, dtype"
    )
    assert "usage:" not in err and len(err.splitlines()) < 20
    err = cli_error(["fit", "--config", DYCK, "--trainer.max_epochs=ten"], capsys)
    assert last_line(err) == "error: trainer.max_epochs: Expected a <class 'int'> (given: ten)"
    err = cli_error(["fit", "--config", DYCK, "--no_such_key=1"], capsys)
    assert last_line(err) == "error: unrecognized arguments: --no_such_key=1"
    # a value the class itself refuses: its message, not a chained traceback
    err = cli_error(["fit", "--config", DYCK, "--data.init_args.batch_size=-3"], capsys)
    assert last_line(err) == "error: ValueError: batch_size must be a positive integer, got -3"
    assert "datamodule.py" in err and "Traceback" not in err


def test_essential_error_picks_the_deepest_line():
    message = 'Parser key "x":\n  Does not validate against any of the Union subtypes\n  Errors:\n    - the real problem\n  Given value: 3'
    assert essential_error(message) == "x: the real problem (given: 3)"


def test_model_differences_reads_a_class_and_its_import_path_as_one():
    """A config's default optimizer is the class; a checkpoint written by train.py keeps its path."""
    from memrnn.lit.cli import model_differences

    config = {
        "class_path": "memrnn.lit.SequenceModule",
        "init_args": {"optimizer": torch.optim.Adam, "lr": 0.01},
    }
    saved = {"_class_path": "memrnn.lit.SequenceModule", "optimizer": "torch.optim.Adam", "lr": 0.01}
    assert model_differences(config, saved) == []
    diffs = model_differences(config, {**saved, "optimizer": "torch.optim.SGD"})
    assert len(diffs) == 1 and diffs[0].startswith(
        "model.init_args.optimizer: <class 'torch.optim.adam.Adam'>"
    )
    assert model_differences(config, {**saved, "optimizer": "no.such.Thing"})  # unresolvable: a difference


@pytest.mark.parametrize("cls", ["lightning", "memrnn"])
def test_last_checkpoint_is_the_latest_epoch_even_when_no_top_k_checkpoint_was_saved(tmp_path, cls):
    """Lightning 2.6 rewrites last.ckpt only in a step where a top-k checkpoint is saved; with
    every_n_epochs=2 its last.ckpt after three epochs is the second's.  memrnn's is the third's."""
    from lightning.pytorch.callbacks import ModelCheckpoint as LightningCheckpoint

    from memrnn.lit import ModelCheckpoint

    args = ["--config", DYCK, *TINY, "--trainer.max_epochs=3", "--trainer.logger=false"]
    cli = build_cli(
        [*args, f"--trainer.default_root_dir={tmp_path}"],
        run=False,
        default_config_files=[DEFAULTS],
    )
    trainer = cli.trainer
    (default,) = [cb for cb in trainer.callbacks if isinstance(cb, LightningCheckpoint)]
    assert type(default) is ModelCheckpoint  # the project's defaults use memrnn's
    kind = LightningCheckpoint if cls == "lightning" else ModelCheckpoint
    mine = kind(dirpath=tmp_path / cls, monitor="val/loss", save_last=True, every_n_epochs=2)
    trainer.callbacks.append(mine)
    trainer.fit(cli.model, datamodule=cli.datamodule)
    epoch = torch.load(tmp_path / cls / "last.ckpt", weights_only=True)["epoch"]
    assert epoch == (1 if cls == "lightning" else 2)
    assert torch.load(default.last_model_path, weights_only=True)["epoch"] == 2


def test_the_code_a_run_records_is_read_when_its_cli_is_built(tmp_path, monkeypatch):
    """``code_version`` is cached at the CLI's start, not at the first checkpoint: a two-hour run
    records the commit it imported even if the checkout moves on while it trains."""
    from memrnn.lit import runs

    runs.code_version.cache_clear()
    try:
        build_cli(["--config", DYCK, *TINY, "--trainer.logger=false", f"--trainer.default_root_dir={tmp_path}"],
                  run=False, default_config_files=[DEFAULTS])  # fmt: skip
        assert runs.code_version.cache_info().currsize == 1
        recorded = runs.code_version()
        monkeypatch.setattr(runs.subprocess, "run", lambda *a, **k: pytest.fail("git read again"))
        assert runs.code_fields(None)["code"] == recorded  # what a result and a checkpoint record
    finally:
        runs.code_version.cache_clear()
