"""RSMModule / RSMDataModule: Paaßen et al.'s (2021) reservoir stack machine fitted in closed form through a
Lightning Trainer and through ``train.py``."""

import lightning as L
import pytest
import torch

from memrnn.lit.wandb_files import read_offline_run
from memrnn.rsm import RSMDataModule, RSMModule
from memrnn.rsm.experiment import (
    make_esn,
    make_machine,
    make_reservoir,
    predictions_error,
    task_data,
    task_items,
)
from tests.test_configs import ROOT, run_train


def trainer(tmp_path, **kw):
    return L.Trainer(
        max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, default_root_dir=tmp_path, **kw,
    )  # fmt: skip


def test_fit_then_test_in_one_trainer(tmp_path):
    dm = RSMDataModule("dyck1", train_size=100, val_size=10, test_size=10)
    model = RSMModule("dyck1", "crj", units=64)
    tr = trainer(tmp_path, num_sanity_val_steps=2)  # the sanity check runs before the fit
    tr.fit(model, dm)
    assert model.fitted
    assert tr.callback_metrics["val/mae"] == tr.callback_metrics["val/loss"]
    assert float(tr.callback_metrics["val/mae"]) < 0.01
    assert float(tr.callback_metrics["train/pairs"]) > 40  # one pair per Algorithm 4 step at least
    (res,) = tr.test(model, dm, verbose=False)
    assert res["test/mae"] < 0.01 and res["test/inner_limit_hits"] == 0
    # the logged error is predictions_error on the test batch
    batch = next(iter(dm.test_dataloader()))
    direct = predictions_error("dyck1", model.machine.run(batch["x"], batch["lengths"]).outputs, batch)
    assert res["test/mae"] == pytest.approx(direct["mae"])


def test_validation_draws_from_the_test_distribution():
    import numpy as np

    rng = np.random.default_rng(0)
    val = task_items("dyck2", "val", 50, rng)
    train = task_items("dyck2", "train", 50, rng)
    assert min(map(len, val)) >= 50 and max(map(len, train)) <= 50
    with pytest.raises(ValueError, match="'dev'"):
        task_items("dyck2", "dev", 5, rng)


def test_checkpoint_round_trip_with_torch_and_sklearn_classifiers(tmp_path):
    pytest.importorskip("sklearn")
    batch = task_data("anbn", "test", 10, seed=3)
    for classifier in ("default", "svm"):
        dm = RSMDataModule("anbn", train_size=30, val_size=5, test_size=5)
        model = RSMModule("anbn", "rand", units=32, classifier=classifier)
        tr = trainer(tmp_path, num_sanity_val_steps=0)
        tr.fit(model, dm)
        path = tmp_path / f"{classifier}.ckpt"
        tr.save_checkpoint(path)
        loaded = RSMModule.load_from_checkpoint(path)
        assert loaded.fitted
        a = model.machine.run(batch["x"], batch["lengths"]).outputs
        b = loaded.machine.run(batch["x"], batch["lengths"]).outputs
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_clear_errors(tmp_path):
    with pytest.raises(ValueError, match="'dyck4'"):
        RSMModule("dyck4")
    with pytest.raises(ValueError, match="vocab_size=3"):
        RSMModule("dyck2", vocab_size=3)
    with pytest.raises(ValueError, match="train_size must be a positive integer, got 0"):
        RSMDataModule("dyck2", train_size=0)
    with pytest.raises(ValueError, match="task 'dyck2' but the data module serves 'anbn'"):
        trainer(tmp_path).fit(RSMModule("dyck2", units=16), RSMDataModule("anbn", train_size=5))
    with pytest.raises(RuntimeError, match="val before any training batch"):
        trainer(tmp_path).validate(RSMModule("dyck1", units=16), RSMDataModule("dyck1", val_size=2))


def test_make_machine_refuses_zero_units_and_unknown_names_instead_of_defaults():
    """``units=0`` used to give 256 units (``units or default``); a zero input size the task's own."""
    with pytest.raises(ValueError, match="units must be a positive integer, got 0"):
        make_machine("dyck2", "crj", units=0)
    with pytest.raises(ValueError, match="units must be a positive integer, got 0"):
        make_esn("dyck2", "crj", units=0)
    with pytest.raises(ValueError, match="input_size must be a positive integer, got 0"):
        make_reservoir("dyck2", "crj", input_size=0)
    with pytest.raises(ValueError, match=r"unknown reservoir kind 'esn'; choose rand, crj, ldn"):
        make_machine("dyck2", "esn")
    with pytest.raises(ValueError, match=r"unknown classifier 'svn'; choose default, svm, ridge, logistic"):
        make_machine("dyck2", "crj", units=8, classifier="svn")
    with pytest.raises(ValueError, match=r"make_reservoir has no argument 'thetaa'; it takes .*theta"):
        make_machine("dyck2", "ldn", units=8, thetaa=3.0)
    with pytest.raises(ValueError, match=r"seed must be a non-negative integer, got 1\.5"):
        make_machine("dyck2", "rand", units=8, seed=1.5)
    assert make_machine("dyck2", "crj").reservoir.units == 256  # None is the default
    assert make_machine("dyck2", "crj", units=8).reservoir.units == 8


def test_task_data_names_a_bad_split_size_or_seed():
    with pytest.raises(ValueError, match=r"unknown split 'trian'; choose train, val, test"):
        task_data("dyck2", "trian", 5, seed=0)
    with pytest.raises(ValueError, match="size must be a positive integer, got 0"):
        task_data("dyck2", "train", 0, seed=0)
    with pytest.raises(ValueError, match="seed must be a non-negative integer, got -1"):
        task_data("dyck2", "train", 5, seed=-1)
    with pytest.raises(ValueError, match="'dyck9'"):
        task_data("dyck9", "train", 5, seed=0)
    with pytest.raises(ValueError, match="seed must be a non-negative integer, got -1"):
        RSMDataModule("dyck2", seed=-1)


def test_train_py_fits_an_rsm_config_and_logs_the_error(tmp_path):
    out = run_train(
        "fit", "--config", str(ROOT / "configs/rsm/crj_dyck2.yaml"), "--data.init_args.train_size=100",
        "--data.init_args.val_size=10", "--model.init_args.units=64",
        f"--trainer.logger.init_args.save_dir={tmp_path / 'runs'}", cwd=tmp_path,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    assert "epoch 1/1: val/mae 0" in out.stdout, out.stdout[-2000:]
    (run_file,) = (tmp_path / "runs" / "wandb").rglob("*.wandb")
    run = read_offline_run(run_file, wait=30)
    val = [h for h in run["history"] if "val/mae" in h]
    assert len(val) == 1 and val[0]["val/mae"] < 0.01 and val[0]["val/inner_limit_hits"] == 0
    assert run["config"]["cli"]["model"]["init_args"]["reservoir"] == "crj"
    assert len(list((tmp_path / "runs").rglob("last.ckpt"))) == 1


def test_near_misses_and_word_accuracy():
    import numpy as np

    from memrnn.languages.lr import table1_automaton
    from memrnn.rsm.experiment import near_misses, sample_words, task_language

    rng = np.random.default_rng(1)
    for task in ("dyck2", "anbn", "palindrome", "json"):
        auto = table1_automaton(task)
        words = sample_words(task_language(task), rng, 20, (1, 30))
        misses = near_misses(task, words, rng)
        for w, v in zip(words, misses, strict=True):
            assert auto.accepts(w) and not auto.accepts(v) and len(v) == len(w)
            assert sum(a != b for a, b in zip(w, v, strict=True)) == 1
    data = task_data("anbn", "test", 10, seed=0, negative_fraction=0.3)
    auto = table1_automaton("anbn")
    verdicts = data["outputs"][torch.arange(10), data["lengths"]].tolist()
    assert verdicts.count(0) == 3 and verdicts.count(1) == 7
    assert all(auto.parse(["ab"[i] for i in data["x"][b, : data["lengths"][b]].tolist()]).accepted == bool(verdicts[b]) for b in range(10))  # fmt: skip
    # a predictor that only fires on the end step: zero error on words, wrong on every near miss
    end_only = torch.zeros(data["outputs"].shape)
    end_only[torch.arange(10), data["lengths"]] = 1
    err = predictions_error("anbn", end_only, data)
    assert err["word_accuracy"] == pytest.approx(0.7)
    words_only = task_data("anbn", "test", 10, seed=0)
    end_only = torch.zeros(words_only["outputs"].shape)
    end_only[torch.arange(10), words_only["lengths"]] = 1
    assert predictions_error("anbn", end_only, words_only) == {"mae": 0.0, "word_accuracy": 1.0}
    with pytest.raises(ValueError, match=r"negative_fraction must be in \[0, 1\], got 1.5"):
        task_data("anbn", "train", 5, seed=0, negative_fraction=1.5)
    with pytest.raises(ValueError, match=r"needs a language task .* got 'copy'"):
        RSMDataModule("copy", negative_fraction=0.5)
