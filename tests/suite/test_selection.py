"""Fast unit tests of the suite options that reproduce the authors' protocols: one data seed for
every cell (Hewitt et al. 2020: one data set per (k, m, size) for the three model seeds), the
validation metrics a cell records of its tested checkpoint, and ``collect``'s selection on
validation (DuSell & Chiang's ``print_best.py``).  No cell is trained here: results are written
by hand (tests/suite/test_suite.py runs real cells)."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from memrnn.suite import Suite, collect, collect_wandb
from memrnn.suite.__main__ import main
from memrnn.suite.runner import suite_args

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "configs"


def suite_file(folder: Path, **changes) -> Path:
    spec = {
        "name": "picky",
        "defaults": str(CONFIGS / "defaults.yaml"),
        "architectures": {
            "lstm": str(CONFIGS / "chomsky/lstm.yaml"),
            "rnn": str(CONFIGS / "chomsky/rnn.yaml"),
        },
        "tasks": {"parity_check": {"data.init_args.task": "parity_check"}},
        "seeds": [0, 1, 2],
        "lrs": [0.01, 0.001],
        "metric": "test/ce_gap",
        "mode": "min",
        "out": str(folder / "runs"),
    }
    spec.update(changes)
    path = folder / "suite.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def finish(suite: Suite, name: str, score: float, val: dict[str, float] | None, curve=None) -> None:
    """Write the ``result.json`` of a finished cell (as ``run_cell`` does, without training)."""
    cell = suite.cell(name)
    folder = suite.cell_dir(cell)
    folder.mkdir(parents=True, exist_ok=True)
    result = {**cell.params, "cell": cell.name, "score": score, "metrics": {suite.metric: score},
              "curves": curve or {}, "parameters": 10, "args": suite.cli_args(cell),
              "suite_args": suite_args(suite, cell), "overrides": [], "budget": None,
              "data_seed": suite.data_seed_of(cell), "val_metrics": val}  # fmt: skip
    (folder / "result.json").write_text(json.dumps(result))


# -- one data seed for every cell ------------------------------------------------------------------
def test_a_suite_data_seed_gives_every_cell_the_same_data():
    """``data_seed``: every cell's ``--data.init_args.seed`` is the suite's while the model's seed
    (``--seed_everything``) stays the cell's; without it each cell draws its own data."""
    suite = Suite.load(CONFIGS / "suites" / "hewitt_fig3.yaml")
    suite.data_seed = None  # (the committed suite has data_seed: 0)
    fixed = Suite.load(CONFIGS / "suites" / "hewitt_fig3.yaml")
    fixed.data_seed = 0
    for cell in suite.cells()[:6]:
        assert f"--data.init_args.seed={cell.seed}" in suite.cli_args(cell)
        args = fixed.cli_args(cell)
        assert "--data.init_args.seed=0" in args and f"--seed_everything={cell.seed}" in args
        assert sum(a.startswith("--data.init_args.seed=") for a in args) == 1
        assert fixed.data_seed_of(cell) == 0 and suite.data_seed_of(cell) == cell.seed


def test_the_data_seed_key_is_read_and_checked(tmp_path):
    suite = Suite.load(suite_file(tmp_path, data_seed=7))
    assert suite.data_seed == 7
    assert {a for c in suite.cells() for a in suite.cli_args(c) if a.startswith("--data.init_args.seed")} == {
        "--data.init_args.seed=7"
    }
    for bad in (-1, 1.5, True, "0"):
        with pytest.raises(
            ValueError, match=f"'data_seed' must be an integer >= 0 \\(or absent\\), got {bad!r}"
        ):
            Suite.load(suite_file(tmp_path, data_seed=bad))


# -- the validation metrics of the tested checkpoint ---------------------------------------------
def test_the_record_gives_the_tested_checkpoints_validation_and_survives_a_resume(tmp_path):
    """:class:`ValidationRecord` keeps every validation's metrics in the checkpoints; after a run
    continued from ``last.ckpt`` it still finds the best epoch, which came before the break."""
    import lightning as L
    from lightning.pytorch.callbacks import ModelCheckpoint
    from lightning.pytorch.demos.boring_classes import BoringModel

    from memrnn.suite.validation import ValidationRecord

    losses = [3.0, 1.0, 2.0, 4.0]

    class Scripted(BoringModel):
        def validation_step(self, batch, batch_idx):
            self.log("val/loss", losses[self.current_epoch])
            self.log("val/acc", 1.0 - losses[self.current_epoch] / 8)
            self.log("other", 5.0)

    def fit(epochs, record, ckpt_path=None):
        ckpt = ModelCheckpoint(dirpath=tmp_path / "ckpt", monitor="val/loss", mode="min", save_last=True)
        trainer = L.Trainer(max_epochs=epochs, limit_train_batches=1, limit_val_batches=1, logger=False,
                            enable_progress_bar=False, enable_model_summary=False, callbacks=[record, ckpt],
                            default_root_dir=tmp_path)  # fmt: skip
        trainer.fit(Scripted(), ckpt_path=ckpt_path)
        return ckpt

    first = ValidationRecord()
    ckpt = fit(2, first)
    assert [e["epoch"] for e in first.epochs] == [0, 1]  # not the sanity check
    assert first.tested(ckpt, ckpt.best_model_path)["metrics"] == {"val/loss": 1.0, "val/acc": 0.875}
    assert first.tested(ckpt, "")["epoch"] == 1  # no checkpoint: the last weights, the last validation

    resumed = ValidationRecord()
    ckpt = fit(4, resumed, ckpt_path=tmp_path / "ckpt" / "last.ckpt")
    assert [e["epoch"] for e in resumed.epochs] == [0, 1, 2, 3]
    tested = resumed.tested(ckpt, ckpt.best_model_path)
    assert tested["epoch"] == 1 and tested["metrics"]["val/loss"] == 1.0
    assert ValidationRecord().tested(ckpt, ckpt.best_model_path) is None  # nothing recorded


# -- selection on validation -----------------------------------------------------------------------
def test_collect_reports_the_test_score_of_the_run_with_the_best_validation(tmp_path):
    """``print_best.py``: per model and task, the run (learning rates × restarts) with the lowest
    validation metric, tested; not the lowest test score.  Ties go to the first run in the
    suite's order, a NaN is never chosen, and the table says which rule it used."""
    suite = Suite.load(suite_file(tmp_path, select={"metric": "val/ce_gap", "mode": "min"}))
    assert suite.select == {"metric": "val/ce_gap", "mode": "min"}
    curve = {"length": [4, 5], "ce_gap": [0.5, 0.7]}
    finish(suite, "lstm/parity_check/lr0.01/seed0", 0.10, {"val/ce_gap": 0.30, "val/loss": 1.0})
    finish(suite, "lstm/parity_check/lr0.01/seed1", 0.40, {"val/ce_gap": 0.05, "val/loss": 2.0}, curve)
    finish(suite, "lstm/parity_check/lr0.001/seed0", 0.20, {"val/ce_gap": math.nan, "val/loss": 0.1})
    finish(suite, "rnn/parity_check/lr0.01/seed2", 0.50, {"val/ce_gap": 0.2, "val/loss": 1.0})
    finish(suite, "rnn/parity_check/lr0.001/seed0", 0.60, {"val/ce_gap": 0.2, "val/loss": 3.0})

    results = collect(suite)
    chosen = results.selected()
    assert chosen["lstm", "parity_check"]["cell"] == "lstm/parity_check/lr0.01/seed1"  # its test: 0.40
    assert chosen["rnn", "parity_check"]["cell"] == "rnn/parity_check/lr0.01/seed2"  # the first of a tie
    summary = results.summary()["lstm", "parity_check"]
    assert (summary["selected_score"], summary["selected_val"], summary["best"]) == (0.40, 0.05, 0.10)
    table = results.table()
    assert "`test/ce_gap` of the run with the lowest `val/ce_gap` over seeds and learning rates" in table
    assert "| parity_check | 0.400 (lr0.01/seed1: 0.050; 3) | 0.500 (lr0.01/seed2: 0.200; 2) |" in table
    # on another metric, or highest-first
    loss = collect(suite, select={"metric": "val/loss", "mode": "min"}).selected()
    assert loss["lstm", "parity_check"]["cell"] == "lstm/parity_check/lr0.001/seed0"
    most = collect(suite, select={"metric": "val/loss", "mode": "max"})
    assert most.selected()["rnn", "parity_check"]["cell"] == "rnn/parity_check/lr0.001/seed0"
    assert "the run with the highest `val/loss`" in most.table()
    # the files: the selected run's curve alone; every run's validation metric and whether chosen
    paths = results.write(tmp_path / "results")
    rows = list(csv.DictReader(paths["curves"].open()))
    assert [(r["arch"], r["length"], r["median"], r["runs"]) for r in rows] == [
        ("lstm", "4", "0.5", "1"), ("lstm", "5", "0.7", "1")]  # fmt: skip
    runs = {r["cell"]: r for r in csv.DictReader(paths["results"].open())}
    assert runs["lstm/parity_check/lr0.01/seed1"]["selected"] == "True"
    assert runs["lstm/parity_check/lr0.01/seed0"]["val/ce_gap"] == "0.3"
    assert list(runs["lstm/parity_check/lr0.01/seed0"])[-1] == "commit"


def test_without_a_selection_the_table_is_mean_median_best(tmp_path):
    """Delétang et al.'s max over seeds × learning rates (and Hewitt et al.'s median): the rule
    without ``select``, unchanged, and what ``select=None`` (``--select-on none``) gives back."""
    suite = Suite.load(suite_file(tmp_path, mode="max", metric="test/acc"))
    assert suite.select is None
    finish(suite, "lstm/parity_check/lr0.01/seed0", 0.7, None)
    finish(suite, "lstm/parity_check/lr0.001/seed1", 0.9, None)
    results = collect(suite)
    assert results.select is None
    table = results.table()
    assert "`test/acc`: mean / median / max over seeds and learning rates (runs)" in table
    assert "| parity_check | 0.800 / 0.800 / 0.900 (2) | — |" in table
    picky = Suite.load(suite_file(tmp_path, select={"metric": "val/loss", "mode": "min"}))
    assert collect(picky, select=None).select is None and collect(picky, select="none").select is None


def test_a_run_without_the_validation_metric_is_named(tmp_path):
    suite = Suite.load(suite_file(tmp_path))
    finish(suite, "lstm/parity_check/lr0.01/seed0", 0.1, {"val/loss": 1.0})
    finish(suite, "lstm/parity_check/lr0.01/seed1", 0.2, None)  # a result from before the record
    results = collect(suite, select={"metric": "val/ce_gap", "mode": "min"})
    with pytest.raises(ValueError, match="cannot select on 'val/ce_gap': 2 run") as err:
        results.table()
    assert "lstm/parity_check/lr0.01/seed0 (it has val/loss)" in str(err.value)
    assert "lstm/parity_check/lr0.01/seed1 (no validation metrics recorded" in str(err.value)


@pytest.mark.parametrize(
    ("select", "message"),
    [
        ({"metric": "val/loss", "mode": "lowest"}, "select's mode must be 'max' or 'min', got 'lowest'"),
        ({"metric": "test/acc", "mode": "max"}, "select's metric must be a validation metric 'val/...'"),
        ({"metric": "val/loss"}, "'select' must be {metric: <val/...>, mode: min|max}"),
        ("val/loss", "'select' must be {metric: <val/...>, mode: min|max}, got 'val/loss'"),
    ],
)
def test_bad_selections_are_named(tmp_path, select, message):
    with pytest.raises(ValueError, match=message.replace("{", r"\{").replace("(", r"\(").replace("|", r"\|")):
        Suite.load(suite_file(tmp_path, select=select))
    suite = Suite.load(suite_file(tmp_path))
    if isinstance(select, dict):
        with pytest.raises(ValueError, match="select"):
            collect(suite, select=select)


def test_collect_selects_from_the_command_line(tmp_path, capsys):
    suite = Suite.load(suite_file(tmp_path))
    finish(suite, "lstm/parity_check/lr0.01/seed0", 0.1, {"val/loss": 2.0})
    finish(suite, "lstm/parity_check/lr0.01/seed1", 0.3, {"val/loss": 1.0})
    out = str(tmp_path / "collected")
    assert main(["collect", str(suite.path), "--to", out, "--partial", "--select-on", "val/loss",
                 "--select-mode", "min"]) == 0  # fmt: skip
    assert "| parity_check | 0.300 (lr0.01/seed1: 1.000; 2) |" in capsys.readouterr().out
    assert main(["collect", str(suite.path), "--to", out, "--partial"]) == 0
    assert "mean / median / min" in capsys.readouterr().out
    assert main(["collect", str(suite.path), "--to", out, "--select-on", "val/loss"]) == 2
    assert "--select-on needs --select-mode min or max" in capsys.readouterr().err
    assert (
        main(["collect", str(suite.path), "--to", out, "--select-on", "val/acc", "--select-mode", "max"]) == 2
    )
    assert "cannot select on 'val/acc'" in capsys.readouterr().err


def test_collect_wandb_selects_on_the_tested_checkpoints_validation(tmp_path):
    """A sweep's runs carry the tested checkpoint's validation metrics in their summary
    (``tested_checkpoint/val/…``, written by ``run_cell``), which the selection reads."""
    suite = Suite.load(
        suite_file(tmp_path, lrs=[0.01], seeds=[0, 1], select={"metric": "val/loss", "mode": "min"})
    )

    def run(rid, score, val, **cfg):
        summary = {suite.metric: score, "val/loss": 0.0, "tested_checkpoint/val/loss": val}
        return SimpleNamespace(id=rid, state="finished", config={k: {"value": v} for k, v in cfg.items()},
                               summary=summary)  # fmt: skip

    runs = [run("a", 0.1, 2.0, arch="lstm", task="parity_check", seed=0, lr=0.01),
            run("b", 0.3, 1.0, arch="lstm", task="parity_check", seed=1, lr=0.01)]  # fmt: skip
    api = SimpleNamespace(sweep=lambda path: SimpleNamespace(runs=runs))
    results = collect_wandb(suite, "me/memrnn/abc", api=api)
    assert results.rows[0]["val_metrics"] == {"val/loss": 2.0}
    assert results.selected()["lstm", "parity_check"]["run"] == "b"
