"""scripts/dusell_table.py: trains every model of a (task, seed) on one shared data module, writes
one result per cell, re-runs only what is missing or failed, and tabulates median / max / min."""

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "dusell_table.py"
TINY = ["--trainer.max_epochs=1", "--data.init_args.train_size=48", "--data.init_args.val_size=16",
        "--data.init_args.test_per_length=1", "--trainer.logger.init_args.offline=true"]  # fmt: skip


def table(out: Path, *args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    cmd = [sys.executable, str(SCRIPT), "--tasks", "marked_reversal", "--models", "lstm", "superposition",
           "--seeds", "0", "1", "--jobs", "2", "--out", str(out), *args, "--", *TINY]  # fmt: skip
    return subprocess.run(cmd, cwd=out.parent, capture_output=True, text=True, timeout=timeout)


def test_every_cell_is_trained_tested_tabulated_and_only_missing_ones_rerun(tmp_path):
    out = tmp_path / "dusell"
    done = table(out, "--table", str(tmp_path / "table.md"), "--by-length", "--by-epoch")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    results = {}
    for model in ("lstm", "superposition"):
        for seed in (0, 1):
            cell = out / f"{model}_marked_reversal" / f"seed{seed}"
            r = json.loads((cell / "result.json").read_text())
            assert (r["model"], r["task"], r["seed"], r["epochs"]) == (model, "marked_reversal", seed, 1)
            assert 0 < r["test_ce_gap"] < 5 and Path(r["checkpoint"]).exists()
            assert list(cell.glob("wandb/offline-run-*/run-*.wandb"))  # one W&B run per cell
            assert json.loads((cell / "STARTED").read_text())["cell"] == f"{model}_marked_reversal/seed{seed}"
            results[model, seed] = r["test_ce_gap"]
    assert results["lstm", 0] != results["lstm", 1]  # the seeds differ
    # one log per worker, named for its models, task and seed
    assert {p.name for p in (out / "logs").iterdir()} == {
        "lstm-superposition_marked_reversal_seed0.log",
        "lstm-superposition_marked_reversal_seed1.log",
    }
    row = next(
        line for line in (tmp_path / "table.md").read_text().splitlines() if line.startswith("| Marked")
    )
    lstm = sorted([results["lstm", 0], results["lstm", 1]])
    assert row.split("|")[3].strip() == f"{sum(lstm) / 2:.3f} / {lstm[1]:.3f} / {lstm[0]:.3f} (2)"
    assert row.split("|")[2].strip() == f"{math.log(20) / 61:.3f}"  # 20 odd lengths, mean 61 with END
    # --by-length: every seed's test curve, a row per group of lengths (floor on training lengths)
    by_length = (tmp_path / "table.md").read_text().split("test/ce_gap by string length")[1]
    groups = [
        line.split("|") for line in by_length.splitlines() if line.startswith("| ") and "floor" not in line
    ]
    assert groups and all(g[3].strip().endswith("(2)") and g[4].strip().endswith("(2)") for g in groups)
    assert groups[0][2].strip() != "—" and groups[-1][2].strip() == "—"  # 42-50 trained, 100 not
    # --by-epoch: each cell's one validation epoch, as its W&B run logged it
    from memrnn.lit.wandb_files import read_offline_run

    epochs = (tmp_path / "table.md").read_text().split("val/ce_gap by epoch:")[1].strip().splitlines()
    assert len(epochs) == 4
    for model, name in (("lstm", "LSTM"), ("superposition", "Superposition")):
        for seed in (0, 1):
            cell = out / f"{model}_marked_reversal" / f"seed{seed}"
            (run_file,) = cell.glob("wandb/offline-run-*/run-*.wandb")
            (gap,) = [
                r["val/ce_gap"] for r in read_offline_run(run_file, wait=30)["history"] if "val/ce_gap" in r
            ]
            assert (
                f"Marked reversal, {name}, seed {seed} (epochs 1-1; tested on epoch 1): {gap:.3f}" in epochs
            )
            # the result keeps the curve and the tested checkpoint's epoch (from 1), so a copy of
            # result.json alone (as the committed results are) prints the same line
            r = json.loads((cell / "result.json").read_text())
            assert r["val_ce_gap_by_epoch"] == [pytest.approx(gap)] and r["checkpoint_epoch"] == 1
            kept = tmp_path / "kept" / cell.relative_to(out)
            kept.mkdir(parents=True)
            (kept / "result.json").write_text(json.dumps(r))
    dusell = _script()
    copied = dusell.by_epoch(tmp_path / "kept", ["lstm", "superposition"], ["marked_reversal"], [0, 1])
    assert copied.splitlines() == epochs
    # --record-epochs adds both to a result written before they were kept, and leaves others be
    older = out / "lstm_marked_reversal" / "seed1" / "result.json"
    r = json.loads(older.read_text())
    bare = {k: v for k, v in r.items() if k not in ("val_ce_gap_by_epoch", "checkpoint_epoch")}
    older.write_text(json.dumps(bare))
    other = out / "lstm_marked_reversal" / "seed0" / "result.json"
    untouched = other.read_text()
    assert dusell.record_epochs(out, ["lstm", "superposition"], ["marked_reversal"], [0, 1]) == [
        "lstm_marked_reversal seed 1"
    ]
    assert json.loads(older.read_text()) == r and other.read_text() == untouched
    code = json.loads((out / "lstm_marked_reversal" / "seed0" / "result.json").read_text())["code"]
    assert code["commit"] is None or f"Code: {code['commit'][:7]}" in (tmp_path / "table.md").read_text()

    # a killed cell (no result, a stale FAILED) is run again from its latest checkpoint (here its
    # only epoch, so it is tested without training further); finished cells are left alone
    kept = out / "lstm_marked_reversal" / "seed0" / "result.json"
    stamp = kept.stat().st_mtime_ns
    redo = out / "superposition_marked_reversal" / "seed1"
    before = json.loads((redo / "result.json").read_text())
    (run,) = (redo / "memrnn").iterdir()
    (redo / "result.json").unlink()
    (redo / "FAILED").write_text("killed")
    again = table(out)
    assert again.returncode == 0, again.stderr[-3000:]
    assert (
        kept.stat().st_mtime_ns == stamp
        and (redo / "result.json").exists()
        and not (redo / "FAILED").exists()
    )
    assert (
        "start marked_reversal seed 1" in again.stdout and "start marked_reversal seed 0" not in again.stdout
    )
    after = json.loads((redo / "result.json").read_text())
    assert after["continued_from"] == str(run / "checkpoints" / "last.ckpt")
    assert after["continued_code"] == after["code"] == code  # the checkpoint recorded its code
    assert after["steps"] == before["steps"] and list((redo / "memrnn").iterdir()) == [run]
    assert after["test_ce_gap"] == pytest.approx(before["test_ce_gap"], rel=1e-5)  # the same weights


def test_a_failing_cell_is_reported_and_the_command_fails(tmp_path):
    out = tmp_path / "dusell"
    cmd = [sys.executable, str(SCRIPT), "--tasks", "dyck", "--models", "lstm", "--seeds", "0", "--out", str(out),
           "--", *TINY, "--model.init_args.lr=-1"]  # fmt: skip
    done = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1
    assert "dyck seed 0: FAILED" in done.stdout
    failed = out / "lstm_dyck" / "seed0" / "FAILED"
    assert f"missing (1):\n  lstm_dyck seed 0: failed: see {failed}" in done.stderr, done.stderr[-2000:]
    assert (out / "lstm_dyck" / "seed0" / "FAILED").read_text().strip()


@pytest.mark.parametrize(("args", "message"), [(["--models", "gru"], "unknown model 'gru'"),
                                               (["--tasks", "copy"], "unknown task 'copy'"),
                                               (["--jobs", "0"], "--jobs must be >= 1, got 0")])  # fmt: skip
def test_bad_arguments_are_named(tmp_path, args, message):
    done = subprocess.run(
        [sys.executable, str(SCRIPT), *args, "--out", str(tmp_path)], capture_output=True, text=True
    )
    assert done.returncode == 2 and message in done.stderr


def test_a_cell_that_a_live_process_is_training_is_left_to_it(tmp_path):
    """Two invocations on one ``--out``: a cell whose ``STARTED`` names a live process of this
    machine is not trained again (no checkpoint, no result, the process named); once that
    process has ended, the stamp no longer holds the cell."""
    from memrnn.suite.runner import live_owner, started_stamp

    out = tmp_path / "dusell"
    cell = out / "lstm_marked_reversal" / "seed0"
    cell.mkdir(parents=True)
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        (cell / "STARTED").write_text(
            json.dumps(started_stamp("lstm_marked_reversal/seed0") | {"pid": other.pid})
        )
        assert live_owner(cell) == other.pid
        cmd = [sys.executable, str(SCRIPT), "--worker", "marked_reversal", "0", "--models", "lstm",
               "--out", str(out), "--", *TINY]  # fmt: skip
        done = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        assert (
            f"lstm_marked_reversal seed 0: running in process {other.pid}; not started again" in done.stdout
        )
        assert sorted(p.name for p in cell.iterdir()) == ["STARTED"]
    finally:
        other.kill()
        other.wait()
    assert live_owner(cell) is None


def _script():
    import importlib.util

    spec = importlib.util.spec_from_file_location("dusell_table", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_length_groups_split_at_the_edge_of_the_training_lengths_and_weigh_tokens():
    """Hand-worked: lengths 48, 50, 52 (END counted) trained, 54 not; groups of 10 are 41-50 and
    51-60, the second split at the edge; the gap of a group weighs each length by its tokens."""
    dusell = _script()
    groups = dusell.length_bins([54, 48, 52, 50], trained={48, 50, 52})
    assert groups == [("48-50", [48, 50]), ("52", [52]), ("54", [54])]
    curve = {48: (2.0, 0.1), 50: (1.0, 0.4), 52: (3.0, 0.2), 54: (1.0, 0.5)}
    # (2·48·0.1 + 1·50·0.4) / (2·48 + 50) = 29.6 / 146
    assert dusell.binned(curve, [48, 50]) == pytest.approx(29.6 / 146)
    assert dusell.binned(curve, [54]) == pytest.approx(0.5)
    # the floor: every string pays log K; 3 strings, 146 tokens
    assert dusell.binned(curve, [48, 50], log_k=math.log(4)) == pytest.approx(3 * math.log(4) / 146)


def test_by_length_reads_every_seeds_curve_and_puts_the_floor_on_training_lengths_only(tmp_path):
    """Two seeds' ``length_curves_test.csv`` (as ``LengthCurves`` writes them) on marked reversal
    (training lengths 42-80 END counted, even, K = 20): the table's median / max per group, the
    floor ``log 20 / n`` on the training lengths and none beyond."""
    dusell = _script()
    gaps = {0: {50: 0.06, 90: 0.1}, 1: {50: 0.08, 90: 0.3}}
    for seed, curve in gaps.items():
        run = tmp_path / "rns_marked_reversal" / f"seed{seed}" / "memrnn" / "abc"
        run.mkdir(parents=True)
        rows = "".join(f"{n},4,1.0,{g},0.9\n" for n, g in curve.items())
        (run / "length_curves_test.csv").write_text("length,count,ce,ce_gap,acc\n" + rows)
    text = dusell.by_length(tmp_path, ["lstm", "rns"], ["marked_reversal"], [0, 1, 2])
    assert "training lengths 42-80, K = 20" in text
    rows = {line.split("|")[1].strip(): line for line in text.splitlines() if line.startswith("| ")}
    assert rows["50"].split("|")[2].strip() == f"{math.log(20) / 50:.3f}"
    assert rows["50"].split("|")[3].strip() == "—"  # no LSTM curve
    assert rows["50"].split("|")[4].strip() == "0.070 / 0.080 (2)"
    assert rows["90"].split("|")[2].strip() == "—" and rows["90"].split("|")[4].strip() == "0.200 / 0.300 (2)"


def test_epochs_of_a_continued_cell_merge_in_run_order():
    """A killed cell continues in a new offline run: its epochs join the earlier run's, and an
    epoch that ran again after the kill takes the later value."""
    dusell = _script()
    first = [
        {"epoch": 0, "val/ce_gap": 0.5},
        {"epoch": 0, "train/loss": 2.0},
        {"epoch": 1, "val/ce_gap": 0.4},
    ]
    second = [{"epoch": 1, "val/ce_gap": 0.35}, {"epoch": 2, "val/ce_gap": 0.3}, {"test/ce_gap": 0.2}]
    assert dusell.merge_epochs([first, second]) == {0: 0.5, 1: 0.35, 2: 0.3}
    assert dusell.merge_epochs([first, second], "train/loss") == {0: 2.0}
    assert dusell.merge_epochs([]) == {}


def test_missing_cells_say_where_they_stand(tmp_path):
    """``progress``: not started; a checkpoint's epochs and best validation loss, then running
    (a live process of this machine in ``STARTED``), failed or stopped."""
    import os

    import torch

    from memrnn.suite.runner import started_stamp

    progress = _script().progress
    cell = tmp_path / "rns_dyck" / "seed0"
    assert progress(cell) == "not started"
    cell.mkdir(parents=True)
    (cell / "STARTED").write_text(json.dumps(started_stamp("rns_dyck/seed0") | {"pid": 2**22 + 1}))
    assert progress(cell) == "stopped"  # started, no checkpoint yet, its process gone
    ckpt = cell / "memrnn" / "abc" / "checkpoints" / "last.ckpt"
    ckpt.parent.mkdir(parents=True)
    monitor = "ModelCheckpoint{'monitor': 'val/loss', 'mode': 'min'}"
    state = {"monitor": "val/loss", "best_model_score": torch.tensor(0.52891)}
    torch.save({"epoch": 6, "callbacks": {monitor: state}}, ckpt)
    assert progress(cell) == "7 epochs done, best val/loss 0.5289, stopped"
    (cell / "FAILED").write_text("Traceback ...")
    assert progress(cell) == f"7 epochs done, best val/loss 0.5289, failed: see {cell / 'FAILED'}"
    # a live process of this machine (this one's parent) names the cell: it is running
    (cell / "STARTED").write_text(json.dumps(started_stamp("rns_dyck/seed0") | {"pid": os.getppid()}))
    torch.save({"epoch": 0, "callbacks": {}}, ckpt)
    assert progress(cell) == f"1 epoch done, running in process {os.getppid()}"
    ckpt.write_bytes(b"cut off mid-write")  # a checkpoint torch cannot read: named, not a crash
    assert progress(cell).startswith(f"checkpoint {ckpt} unreadable (")


def test_the_dusell_suite_runs_the_scripts_cells_one_config_per_model_and_task(tmp_path):
    """``configs/suites/dusell.yaml`` (the table as a suite, for a cluster) starts each cell from
    ``configs/dusell/<model>_<task>.yaml`` through ``{task}`` in its architectures' configs, and a
    cell resolves to the script's config for the same model, task and seed, 20 epochs (the logger
    aside: the suite names its runs)."""
    from memrnn.lit.cli import build_cli
    from memrnn.suite import Suite

    dusell = _script()
    suite = Suite.load(ROOT / "configs" / "suites" / "dusell.yaml", out=tmp_path / "suite")
    assert set(suite.architectures) == {"lstm", "superposition", "stratification", "ns", "rns"}
    assert list(suite.tasks) == list(dusell.TASKS) and suite.seeds == [0, 1, 2]
    assert (suite.metric, suite.mode) == ("test/ce_gap", "min")
    cells = suite.cells()
    assert len(cells) == 5 * 5 * 3
    for cell in cells:
        args = suite.cli_args(cell)
        assert args[:2] == ["--config", str(dusell.CONFIGS / f"{cell.arch}_{cell.task}.yaml")], cell.name
    defaults = [ROOT / "configs" / "defaults.yaml"]
    for arch, task, seed in (("lstm", "dyck", 1), ("ns", "hardest_cfl", 2)):
        cell = suite.cell(arch=arch, task=task, seed=seed)
        ours = build_cli(
            [*suite.cli_args(cell), "--trainer.logger=false"], run=False, default_config_files=defaults
        )
        save = tmp_path / "script"
        theirs = dusell.cli_args(
            arch, task, seed, save, ["--trainer.max_epochs=20", "--trainer.logger=false"]
        )
        theirs = build_cli(theirs, run=False, default_config_files=defaults)
        assert ours.config.as_dict() == theirs.config.as_dict(), cell.name
        assert ours.trainer.max_epochs == 20 and ours.config.seed_everything == seed


def test_the_readmes_20_epoch_table_is_the_committed_results():
    """Every cell of the README's 20-epoch DuSell table whose three seeds have committed result files
    (``benchmarks/results/dusell/``) is what ``collect`` computes from them, floors included, so
    the README cannot keep cells of an older run."""
    dusell = _script()
    models = ["lstm", "superposition", "stratification", "ns", "rns"]
    readme = (ROOT / "README.md").read_text().splitlines()
    head = "| task | length floor | " + " | ".join(dusell.MODELS[m] for m in models) + " |"
    assert readme.count(head) == 1
    start = readme.index(head) + 2
    ours = {row.split("|")[1].strip(): row.split("|")[2:-1] for row in readme[start : start + 5]}
    assert list(ours) == list(dusell.TASKS.values())
    results = ROOT / "benchmarks" / "results" / "dusell"

    def complete(model: str, task: str) -> bool:
        return all((dusell.cell_dir(results, model, task, s) / "result.json").exists() for s in (0, 1, 2))

    checked = 0
    for model in models:
        tasks = [t for t in dusell.TASKS if complete(model, t)]
        if not tasks:
            continue
        table, missing = dusell.collect(results, [model], tasks, [0, 1, 2])
        assert not missing
        for line in table.splitlines()[2 : 2 + len(tasks)]:
            task, floor, cell = (c.strip() for c in line.split("|")[1:4])
            assert ours[task][0].strip() == floor, task
            assert ours[task][1 + models.index(model)].strip() == cell, (model, task)
            checked += 1
    assert checked >= 25  # LSTM, superposition, stratification, NS-RNN: every task; RNS-RNN: every task


def test_the_readmes_40_epoch_unmarked_reversal_numbers_are_the_committed_results():
    """The README's sentence on the RNS-RNN's unmarked reversal continued to 40 epochs quotes each
    seed's test gap and its best validation gap at 20 and 40 epochs; they are what the committed
    ``benchmarks/results/dusell-e40/`` files hold."""
    text = " ".join((ROOT / "README.md").read_text().split())
    start = text.index("Trained 20 epochs more (seeds 0 and 1")
    sentence = text[start : text.index("The miss is", start)]
    for seed in (0, 1):
        r = json.loads(
            (ROOT / f"benchmarks/results/dusell-e40/rns_unmarked_reversal/seed{seed}/result.json").read_text()
        )
        assert r["epochs"] == 40 and len(r["val_ce_gap_by_epoch"]) == 40 and r["continued_from"]
        gaps = r["val_ce_gap_by_epoch"]
        assert f"{r['test_ce_gap']:.3f}" in sentence, seed
        assert f"{min(gaps[:20]):.3f} → {min(gaps):.3f}" in sentence, seed
