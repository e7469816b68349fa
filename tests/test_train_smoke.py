"""train.py end to end on a CPU: the report it prints and the offline W&B run it leaves."""

import re
from pathlib import Path

import pytest

from memrnn.lit.wandb_files import iter_records, read_offline_run
from tests.test_configs import ROOT, run_train

REPORT = re.compile(
    r"\[(val|test)\] cross-entropy per token \(nats\): model ([\d.]+) \| exact generating distribution "
    r"([\d.]+) \| difference (-?[\d.]+)"
)


def parse_report(text):
    return {m.group(1): tuple(float(g) for g in m.groups()[1:]) for m in REPORT.finditer(text)}


def test_tiny_training_run_prints_the_report_and_writes_an_offline_wandb_run(tmp_path):
    out = run_train(
        "fit", "--config", str(ROOT / "configs/dyck/lstm_k2_m3.yaml"),
        "--data.init_args.train_size=200", "--data.init_args.val_size=100", "--trainer.max_epochs=2",
        f"--trainer.logger.init_args.save_dir={tmp_path / 'runs'}",
        cwd=tmp_path,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    report = parse_report(out.stdout + out.stderr)
    ce, exact, gap = report["val"]
    assert gap == pytest.approx(ce - exact, abs=2e-4)
    assert 0.7 < exact < 1.0  # Dyck-(2,3), Table 2 training window: about 0.85 nats per token

    run_files = list((tmp_path / "runs" / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(run_files) == 1
    run = read_offline_run(run_files[0], wait=30)
    logged = set().union(*run["history"])
    assert {"train/loss", "val/ce", "val/ce_exact", "val/ce_gap", "val/acc", "val/ppl", "epoch"} <= logged
    last = [h for h in run["history"] if "val/ce_gap" in h][-1]
    assert last["val/ce_gap"] == pytest.approx(gap, abs=1e-4)
    assert run["config"]["layer"] and run["config"]["train_size"] == 200
    cli = run["config"]["cli"]  # the whole resolved config, as train.py ran it
    assert cli["trainer"]["max_epochs"] == 2 and cli["data"]["init_args"]["train_size"] == 200
    assert cli["model"]["init_args"]["layer"]["class_path"] == "memrnn.layers.LSTMLayer"
    assert "memrnn.lit.LinearProbe" in [c["class_path"] for c in cli["trainer"]["callbacks"]]
    # the probe ran (epoch 2) and its figure went to W&B
    assert "val/probe/stack_top_acc" in logged and "val/trace_heatmap/_type" in logged
    epochs = [ln for ln in out.stdout.splitlines() if ln.startswith("epoch ")]  # no TTY: one line each
    assert [e.split(":")[0] for e in epochs] == ["epoch 1/2", "epoch 2/2"]
    assert list((tmp_path / "runs").rglob("last.ckpt")), "a checkpoint must be saved"


def test_offline_run_reader_rejects_other_files(tmp_path):
    p = Path(tmp_path / "x.wandb")
    p.write_bytes(b"not a run file")
    with pytest.raises(ValueError, match="not a W&B run file"):
        iter_records(p)


def test_default_job_meets_the_target(tmp_path):
    """The README's default job as written: the validation cross-entropy is within 0.05 nats of
    the exact generating distribution's."""
    out = run_train(
        "fit", "--config", str(ROOT / "configs/dyck/lstm_k2_m3.yaml"),
        f"--trainer.logger.init_args.save_dir={tmp_path / 'runs'}", cwd=tmp_path, timeout=600,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    ce, exact, gap = parse_report(out.stdout + out.stderr)["val"]
    assert gap < 0.05, (ce, exact, gap)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_default_job_meets_the_target_for_other_seeds(tmp_path, seed):
    out = run_train(
        "fit", "--config", str(ROOT / "configs/dyck/lstm_k2_m3.yaml"), f"--seed_everything={seed}",
        f"--data.init_args.seed={seed}", f"--trainer.logger.init_args.save_dir={tmp_path / 'runs'}",
        cwd=tmp_path, timeout=900,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    ce, exact, gap = parse_report(out.stdout + out.stderr)["val"]
    assert gap < 0.05, (seed, ce, exact, gap)
