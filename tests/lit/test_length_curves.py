"""Per-length curves: consistent with the overall metrics, written as CSV and as a W&B table."""

from __future__ import annotations

import csv
import functools
import json

import lightning as L
import numpy as np
import pytest
import torch

from memrnn.data import AcceptorDataModule, FormalLanguageDataModule
from memrnn.languages import AnBn, DyckKM
from memrnn.layers import LSTMLayer
from memrnn.lit import LengthCurves, SequenceModule, WandbLogger
from memrnn.lit.wandb_files import read_offline_run


def run_test(tmp_path, dm, objectives, logger=False):
    torch.manual_seed(0)
    model = SequenceModule(functools.partial(LSTMLayer, hidden_size=8), dm.vocab_size, dm.num_symbols,
                           objectives=objectives, bracket_types=dm.bracket_types)  # fmt: skip
    cb = LengthCurves()
    t = L.Trainer(logger=logger, callbacks=[cb], enable_progress_bar=False, enable_model_summary=False,
                  enable_checkpointing=False, default_root_dir=tmp_path)  # fmt: skip
    metrics = t.test(model, datamodule=dm, verbose=False)[0]
    return metrics, cb.curves["test"], t


def test_generator_curves_add_up_to_the_overall_metrics(tmp_path):
    dm = FormalLanguageDataModule(DyckKM(2, 3), train_size=0, val_size=0, test_size=40, test_lengths=(5, 31),
                                  eval_batch_size=16)  # fmt: skip
    metrics, curves, _ = run_test(tmp_path, dm, {"generator": 1.0})
    lengths = [len(s) for s in dm.datasets["test"].strings]
    assert curves["length"] == sorted(set(lengths))
    assert curves["count"] == [lengths.count(n) for n in curves["length"]]
    tokens = np.array(curves["length"]) * np.array(curves["count"])
    assert np.dot(curves["ce_gap"], tokens) / tokens.sum() == pytest.approx(metrics["test/ce_gap"], rel=1e-5)
    assert np.dot(curves["acc"], tokens) / tokens.sum() == pytest.approx(metrics["test/acc"], rel=1e-5)
    with open(tmp_path / "length_curves_test.csv") as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["length", "count", "ce", "ce_gap", "acc"] and len(rows) == len(curves["length"]) + 1


def test_acceptor_curves_and_offline_wandb_table(tmp_path):
    dm = AcceptorDataModule(
        AnBn(), train_size=0, val_size=0, test_size=60, test_lengths=(3, 41), eval_batch_size=16
    )
    logger = WandbLogger(offline=True, save_dir=str(tmp_path), project="memrnn-test")
    metrics, curves, _ = run_test(tmp_path, dm, {"acceptor_end": 1.0}, logger=logger)
    assert np.dot(curves["accept_end"], curves["count"]) / sum(curves["count"]) == pytest.approx(
        metrics["test/accept_end"]
    )
    logger.experiment.finish()
    run_file = next((tmp_path / "wandb").glob("offline-run-*/run-*.wandb"))
    run = read_offline_run(run_file, wait=30)
    row = next(r for r in run["history"] if "test/length_curves/_type" in r)  # nested keys, "/"-joined
    assert row["test/length_curves/_type"] == "table-file" and row["test/length_curves/nrows"] == len(
        curves["length"]
    )
    assert row["test/length_plot/_type"] == "image-file"  # the length-generalization figure
    assert any(k.startswith("test/length_line") for k in row), sorted(row)  # W&B line plot
    # the run's own directory, beside its checkpoints: save_dir/<project>/<run id>
    run_dir = tmp_path / "memrnn-test" / logger.version
    assert next(run_dir.glob("figures/test_length_plot_step*.png")).stat().st_size > 1000
    assert (run_dir / "length_curves_test.csv").exists()
    assert any("test/accept_end" in r for r in run["history"])
    saved = json.loads(
        next(run_file.parent.glob("files/media/table/test/length_curves_*.table.json")).read_text()
    )
    assert saved["columns"] == ["length", "count", "accept_end"]
    assert [r[0] for r in saved["data"]] == curves["length"]
    assert [r[2] for r in saved["data"]] == pytest.approx(curves["accept_end"])
