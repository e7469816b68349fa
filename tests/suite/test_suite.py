"""memrnn.suite: a suite's grid, its cells run here (N at a time, resumed after failures), as a
SLURM array through a fake ``sbatch``, as a W&B sweep through W&B's own grid and command
expansion, and the collector's table, curves and plot."""

from __future__ import annotations

import csv
import json
import math
import os
import socket
import stat
import subprocess
import sys
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import yaml

from memrnn.languages.chomsky import chomsky_task
from memrnn.lit.cli import build_cli
from memrnn.ops.native import HEAP_MALLOC_ENV
from memrnn.suite import (
    Suite,
    cell_status,
    collect,
    collect_wandb,
    run_cell,
    run_local,
    runner,
    running_elsewhere,
    slurm_script,
    wandb_sweep,
)
from memrnn.suite.__main__ import main
from memrnn.suite.runner import (
    _parameters,
    fit_budget,
    interrupted_checkpoint,
    off_suite,
    suite_args,
    worker_env,
)

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "configs"
#: the tests share the ``ran`` suite's folder and build on each other's cells, in file order: one
#: test worker runs them all (``--dist loadgroup``, scripts/dev.sh)
pytestmark = pytest.mark.xdist_group("suite_folder")
#: a Chomsky-hierarchy cell small enough for seconds on a CPU
TINY = {
    "model.init_args.layer.init_args.hidden_size": 8,
    "data.init_args.train_size": 32,
    "data.init_args.val_size": 8,
    "data.init_args.test_per_length": 2,
    "data.init_args.train_lengths": [1, 3],
    "data.init_args.test_lengths": [4, 6],
    "data.init_args.batch_size": 16,
    "trainer.max_steps": 2,
    "trainer.max_epochs": -1,
}


def write_suite(folder: Path, **changes) -> Path:
    spec = {
        "name": "tiny",
        "defaults": str(CONFIGS / "defaults.yaml"),
        "architectures": {"lstm": str(CONFIGS / "chomsky/lstm.yaml")},
        "tasks": {
            "parity_check": {"data.init_args.task": "parity_check"},
            "reverse_string": ["--data.init_args.task=reverse_string"],
        },
        "seeds": [0, 1],
        "args": TINY,
        "metric": "test/acc_mean_over_lengths",
        "out": str(folder / "runs"),
    }
    spec.update(changes)
    path = folder / "suite.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


# -- the grid ------------------------------------------------------------------------------------
def test_cells_are_the_grid_in_a_fixed_order(tmp_path):
    suite = Suite.load(write_suite(tmp_path, lrs=[0.001, 0.0003], seeds=[3, 1]))
    cells = suite.cells()
    assert len(cells) == 1 * 2 * 2 * 2
    assert [c.index for c in cells] == list(range(8))
    assert cells[0].name == "lstm/parity_check/lr0.001/seed3"
    assert cells[-1].name == "lstm/reverse_string/lr0.0003/seed1"
    assert suite.cell("lstm/reverse_string/lr0.0003/seed3") == cells[6]
    assert suite.cell(arch="lstm", task="reverse_string", seed="3", lr="0.0003") == cells[6]
    assert suite.cell_dir(cells[6]) == tmp_path / "runs/lstm/reverse_string/lr0.0003/seed3"
    no_lr = Suite.load(write_suite(tmp_path)).cells()
    assert no_lr[0].name == "lstm/parity_check/seed0" and no_lr[0].lr is None


def test_cell_arguments_go_in_order_so_later_overrides_win(tmp_path):
    path = write_suite(tmp_path, lrs=[0.01], architectures={
        "lstm": {"config": str(CONFIGS / "chomsky/lstm.yaml"),
                 "args": {"model.init_args.layer.init_args.hidden_size": 5}}})  # fmt: skip
    suite = Suite.load(path)
    cell = suite.cell(arch="lstm", task="parity_check", seed=1, lr=0.01)
    args = suite.cli_args(cell)
    assert args[:2] == ["--config", str(CONFIGS / "chomsky/lstm.yaml")]
    assert args.index("--data.init_args.task=parity_check") > args.index("--trainer.max_steps=2")
    assert "--data.init_args.test_lengths=[4, 6]" in args
    cli = build_cli(
        [*args, "--trainer.logger=false"], run=False, default_config_files=[CONFIGS / "defaults.yaml"]
    )
    assert cli.model.layer.hidden_size == 5  # the architecture's override beats the suite's 8
    assert cli.datamodule.task.name == "parity_check"
    assert cli.config.seed_everything == 1 and cli.datamodule.hparams.seed == 1
    assert math.isclose(cli.model.hparams.lr, 0.01)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"seed": [0]}, "unknown suite key(s) ['seed']"),
        (
            {"architectures": {"lstm": "nowhere.yaml"}},
            "architecture 'lstm''s config 'nowhere.yaml' does not exist",
        ),
        (
            {"architectures": {"lstm": str(CONFIGS / "chomsky" / "{task}.yaml")}},
            "architecture 'lstm''s config for 'parity_check'",
        ),
        ({"seeds": [0, 0]}, "a seed is listed twice"),
        ({"seeds": [-1]}, "'seeds' must be a non-empty list of integers >= 0"),
        ({"lrs": [0.1, -1]}, "'lrs' must be a list of positive numbers"),
        ({"mode": "best"}, "'mode' must be 'max' or 'min', got 'best'"),
        ({"tasks": {"a/b": {}}}, "'a/b' cannot name an architecture or a task"),
        ({"tasks": {"t": "--x"}}, "task 't': expected a mapping of overrides"),
        ({"metric": None}, None),
    ],
)
def test_bad_suites_are_named(tmp_path, change, message):
    spec = write_suite(tmp_path, **change)
    if message is None:  # a missing key
        raw = yaml.safe_load(spec.read_text())
        del raw["metric"]
        spec.write_text(yaml.safe_dump(raw))
        message = "the suite has no 'metric'"
    with pytest.raises((ValueError, FileNotFoundError)) as e:
        Suite.load(spec)
    assert message in str(e.value)


def test_sampled_hyper_parameters_are_each_cells_own_and_always_the_same(tmp_path):
    """``sample``: each cell draws its overrides from the named distributions, the same ones each
    time the suite is read, others for other seeds (independent trials), within bounds, and they
    go into the cell's command line after the architecture's overrides."""
    sample = {"model.init_args.lr": {"loguniform": [1e-4, 1e-2]},
              "data.init_args.batch_size": {"int_uniform": [8, 64]},
              "trainer.gradient_clip_val": {"choice": [1.0, 5.0]}}  # fmt: skip
    suite = Suite.load(write_suite(tmp_path, sample=sample, seeds=list(range(20))))
    again = Suite.load(write_suite(tmp_path, sample=sample, seeds=list(range(20))))
    draws = [suite.sampled(c) for c in suite.cells()]
    assert draws == [again.sampled(c) for c in again.cells()]
    lrs = [d["model.init_args.lr"] for d in draws]
    assert all(1e-4 <= x <= 1e-2 for x in lrs) and len(set(lrs)) == len(lrs)
    assert min(lrs) < 1e-3 < max(lrs)  # log-uniform: a decade either side of 1e-3
    assert {d["data.init_args.batch_size"] for d in draws} <= set(range(8, 65))
    assert {d["trainer.gradient_clip_val"] for d in draws} == {1.0, 5.0}
    cell = suite.cells()[3]
    args = suite.cli_args(cell)
    drawn = suite.sampled(cell)
    assert f"--data.init_args.batch_size={drawn['data.init_args.batch_size']}" in args
    assert args.index(f"--seed_everything={cell.seed}") > max(
        i for i, a in enumerate(args) if a.startswith("--model.init_args.lr=")
    )
    # an architecture's own draws add to the suite's: the LSTM with the recognizer paper's
    # auxiliary losses draws their coefficients, the plain LSTM does not
    archs = {"lstm": str(CONFIGS / "chomsky/lstm.yaml"),
             "aux": {"config": str(CONFIGS / "flare/lstm_lm_ns.yaml"),
                     "sample": {"model.init_args.objectives.generator": {"loguniform": [0.01, 10]}}}}  # fmt: skip
    mixed = Suite.load(write_suite(tmp_path, architectures=archs, sample=sample))
    for c in mixed.cells():
        drawn = mixed.sampled(c)
        extra = {"model.init_args.objectives.generator"} if c.arch == "aux" else set()
        assert set(drawn) == set(sample) | extra
        assert all(0.01 <= drawn[k] <= 10 for k in extra)
    for bad, message in (
        (
            {"lr": {"loguniform": [0, 1]}},
            r"sample 'lr': loguniform takes \[low, high\], 0 < low < high; got \[0, 1\]",
        ),
        ({"lr": {"normal": [0, 1]}}, r"sample 'lr': expected one of \{loguniform"),
        ({"k": {"int_uniform": [1.5, 3]}}, r"int_uniform takes \[low, high\] integers"),
        ({"k": {"choice": []}}, r"choice takes a non-empty list"),
    ):
        with pytest.raises(ValueError, match=message):
            Suite.load(write_suite(tmp_path, sample=bad))


def test_unknown_cells_are_named(tmp_path):
    suite = Suite.load(write_suite(tmp_path, lrs=[0.001]))
    with pytest.raises(KeyError, match="no cell 'lstm/parity_check/seed0'"):
        suite.cell("lstm/parity_check/seed0")
    with pytest.raises(KeyError, match="no task 'parity'"):
        suite.cell(arch="lstm", task="parity", seed=0, lr=0.001)
    with pytest.raises(KeyError, match="no seed 7"):
        suite.cell(arch="lstm", task="parity_check", seed=7, lr=0.001)
    with pytest.raises(KeyError, match=r"no learning rate 0\.002"):
        suite.cell(arch="lstm", task="parity_check", seed=0, lr=0.002)
    assert main(["cell", str(suite.path), "--cell", "lstm/nope/seed0"]) == 2


def test_help_and_argument_errors_import_no_lightning():
    """``python -m memrnn.suite --help`` (and a command line it refuses) imports neither Lightning
    nor matplotlib: they were most of the 4.7 s a ``--help`` took, and only running or collecting
    cells needs them."""
    code = (
        "import sys\n"
        "from memrnn.suite.__main__ import main\n"
        "for argv in (['--help'], ['run', '--help'], ['run'], ['nonsense']):\n"
        "    try:\n"
        "        main(argv)\n"
        "    except SystemExit:\n"
        "        pass\n"
        "print(sorted(m for m in ('lightning', 'matplotlib', 'memrnn.lit', 'wandb') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "usage: python -m memrnn.suite" in out.stdout and "invalid choice: 'nonsense'" in out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[]"


@pytest.mark.parametrize("name", sorted(p.name for p in (CONFIGS / "suites").glob("*.yaml")))
def test_committed_suites_resolve(name):
    """Every architecture and every task of each committed suite builds (model, data, trainer)."""
    suite = Suite.load(CONFIGS / "suites" / name)
    cells = suite.cells()
    first = cells[0]
    picked = {c.arch: c for c in cells if c.task == first.task} | {
        c.task: c for c in cells if c.arch == first.arch
    }
    for cell in picked.values():
        args = [*suite.cli_args(cell), "--trainer.accelerator=cpu", "--trainer.logger=false"]
        cli = build_cli(args, run=False, default_config_files=[suite.defaults])
        for arg in suite.tasks[cell.task]:  # the task's overrides reached the resolved config
            key, value = arg.removeprefix("--").split("=", 1)
            got = cli.config[key]
            assert (list(got) if isinstance(got, tuple) else got) == yaml.safe_load(value), (cell.name, key)
        if cell.lr is not None:
            assert math.isclose(cli.model.hparams.lr, cell.lr)


def _git_head() -> str | None:
    """This checkout's commit, or None when it is no git checkout."""
    out = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True)
    return out.stdout.strip() if out.returncode == 0 else None


def test_code_version_names_the_commit_or_says_there_is_none(monkeypatch):
    from memrnn.lit import runs

    code = runs.code_version.__wrapped__()
    assert code["commit"] == _git_head() and code["torch"] == torch.__version__
    assert isinstance(code["dirty"], bool) or code["commit"] is None

    def no_git(*args, **kwargs):
        raise FileNotFoundError("git")

    monkeypatch.setattr(runs.subprocess, "run", no_git)
    assert runs.code_version.__wrapped__() == {"commit": None, "dirty": None, "memrnn": code["memrnn"],
                                               "torch": torch.__version__}  # fmt: skip
    assert runs.code_label({"commit": "0123456789abcdef", "dirty": True}) == "0123456+changes"
    assert runs.code_label({"commit": "0123456789abcdef", "dirty": False}) == "0123456"
    assert runs.code_label({"commit": None, "memrnn": "0.1.0"}) == "memrnn 0.1.0 (no git)"
    assert runs.code_label(None) == "unrecorded"
    a, b = {"commit": "a" * 40, "dirty": False}, {"commit": "b" * 40, "dirty": True}
    assert (
        runs.code_line([a, b, a, None])
        == "Code: aaaaaaa (2 runs), bbbbbbb+changes (1 run), unrecorded (1 run)"
    )
    assert runs.code_line([]) == ""
    assert (
        runs.code_fields({"code": b})["continued_code"] == b
        and runs.code_fields(None)["continued_code"] is None
    )
    # every code that trained the continued checkpoint, oldest first (a record before `codes`: its code)
    assert runs.code_fields({"code": b})["continued_codes"] == [b]
    assert runs.code_fields({"code": b, "codes": [a, b]})["continued_codes"] == [a, b]
    assert runs.code_fields(None)["continued_codes"] == []


# -- running: here, resumed, on SLURM, as a W&B sweep ---------------------------------------------
@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    """Four good cells and one that fails (a config key that does not exist), run 2 at a time."""
    folder = tmp_path_factory.mktemp("suite")
    archs = {
        "lstm": str(CONFIGS / "chomsky/lstm.yaml"),
        "broken": {"config": str(CONFIGS / "chomsky/lstm.yaml"), "args": {"model.init_args.no_such_key": 1}},
    }
    suite = Suite.load(write_suite(folder, architectures=archs, tasks={
        "parity_check": {"data.init_args.task": "parity_check"}, "reverse_string": {"data.init_args.task": "reverse_string"}}))  # fmt: skip
    lines: list[str] = []
    report = run_local(
        suite, jobs=2, cells=[c for c in suite.cells() if c.arch == "lstm" or c.seed == 0], log=lines.append
    )
    return SimpleNamespace(folder=folder, suite=suite, report=report, lines=lines, archs=archs)


def test_run_local_runs_every_cell_and_reports_the_failed(ran):
    suite, report = ran.suite, ran.report
    assert sorted(report) == sorted(
        [c.name for c in suite.cells() if c.arch == "lstm"]
        + ["broken/parity_check/seed0", "broken/reverse_string/seed0"]
    )
    assert [k for k, v in report.items() if v != "done"] == [
        "broken/parity_check/seed0",
        "broken/reverse_string/seed0",
    ]
    assert "no_such_key" in (suite.cell_dir(suite.cell("broken/parity_check/seed0")) / "FAILED").read_text()
    assert any("FAILED" in line and "no_such_key" in line for line in ran.lines)
    for cell in suite.cells():
        if cell.arch != "lstm":
            continue
        result = json.loads((suite.cell_dir(cell) / "result.json").read_text())
        assert (result["arch"], result["task"], result["seed"]) == (cell.arch, cell.task, cell.seed)
        assert result["steps"] == 2 and result["parameters"] > 0
        # the metric is Delétang et al.'s: the per-length accuracies' mean, each length weighing 1
        assert result["curves"]["length"] == [4, 5, 6]
        assert result["score"] == pytest.approx(sum(result["curves"]["acc"]) / 3, abs=1e-6)
        assert result["metrics"]["test/acc_mean_over_lengths"] == result["score"]
        chance = 1 / len(chomsky_task(cell.task).output_symbols)  # Grazzi et al.'s scaled accuracy
        scaled = (result["score"] - chance) / (1 - chance)
        assert result["metrics"]["test/acc_scaled_mean_over_lengths"] == pytest.approx(scaled, abs=1e-6)
        # its own W&B run, offline, finished with exit code 0
        from memrnn.lit.wandb_files import read_offline_run

        (run_file,) = suite.cell_dir(cell).glob("wandb/offline-run-*/run-*.wandb")
        run = read_offline_run(run_file, wait=30)
        assert run["exit_code"] == 0
        assert any("test/acc_mean_over_lengths" in row for row in run["history"])


def test_collect_reports_the_missing_and_the_table(ran):
    suite = ran.suite
    (suite.cell_dir(suite.cell("broken/reverse_string/seed1")) / "STARTED").parent.mkdir(
        parents=True, exist_ok=True
    )
    (suite.cell_dir(suite.cell("broken/reverse_string/seed1")) / "STARTED").write_text("{}")
    results = collect(suite)
    assert len(results.rows) == 4
    assert results.missing == {"broken/parity_check/seed0": "failed", "broken/parity_check/seed1": "pending",
                               "broken/reverse_string/seed0": "failed", "broken/reverse_string/seed1": "killed"}  # fmt: skip
    summary = results.summary()
    scores = [r["score"] for r in results.rows if r["task"] == "parity_check"]
    assert summary["lstm", "parity_check"]["median"] == pytest.approx(sum(scores) / 2)
    assert (
        summary["lstm", "parity_check"]["best"] == max(scores) and summary["lstm", "parity_check"]["n"] == 2
    )
    table = results.table()
    assert "| parity_check | " in table and "—" in table  # the broken architecture has no result
    assert "Not done (4)" in table and "broken/reverse_string/seed1 (killed)" in table
    # a cell whose STARTED names a live process of this machine (a group's, say) is running
    started = suite.cell_dir(suite.cell("broken/reverse_string/seed1")) / "STARTED"
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        started.write_text(json.dumps({"cell": "broken/reverse_string/seed1", "host": socket.gethostname(),
                                       "pid": proc.pid}))  # fmt: skip
        running = collect(suite).missing["broken/reverse_string/seed1"]
        assert running == f"running in process {proc.pid}"
    finally:
        proc.kill()
        proc.wait()
        started.write_text("{}")
    paths = results.write(ran.folder / "results")
    assert {p.name for p in paths.values()} == {"table.md", "results.csv", "curves.csv", "curves.png"}
    assert len(paths["results"].read_text().strip().splitlines()) == 1 + 4
    # every result names its code: the commit of this checkout (the cells import memrnn from it)
    head = _git_head()
    for row in results.rows:
        assert row["code"]["commit"] == head and row["code"]["torch"] == torch.__version__
    if head is not None:
        assert f"Code: {head[:7]}" in table
        assert all(
            line.split(",")[-1].startswith(head[:7]) for line in paths["results"].read_text().splitlines()[1:]
        )
    curves = paths["curves"].read_text().strip().splitlines()
    assert curves[0] == "arch,task,curve,length,median,min,max,runs" and len(curves) == 1 + 2 * 3
    assert paths["plot"].stat().st_size > 1000


def test_running_again_reruns_only_what_is_not_done(ran, tmp_path):
    suite = ran.suite
    done = {
        c.name: (suite.cell_dir(c) / "result.json").stat().st_mtime_ns
        for c in suite.cells()
        if c.arch == "lstm"
    }
    fixed = dict(ran.archs, broken=str(CONFIGS / "chomsky/lstm.yaml"))
    suite = Suite.load(write_suite(ran.folder, architectures=fixed, tasks={
        "parity_check": {"data.init_args.task": "parity_check"}, "reverse_string": {"data.init_args.task": "reverse_string"}}))  # fmt: skip
    report = run_local(
        suite,
        jobs=2,
        cells=[c for c in suite.cells() if c.arch == "lstm" or c.task == "reverse_string"],
        log=lambda _: None,
    )
    assert sorted(report) == ["broken/reverse_string/seed0", "broken/reverse_string/seed1"]  # failed, killed
    assert set(report.values()) == {"done"}
    assert {c: (suite.cell_dir(suite.cell(c)) / "result.json").stat().st_mtime_ns for c in done} == done
    assert not (suite.cell_dir(suite.cell("broken/reverse_string/seed0")) / "FAILED").exists()
    assert cell_status(suite, suite.cell("broken/parity_check/seed0")) == "failed"  # not selected


def test_a_cell_another_process_of_this_machine_is_running_is_not_started_again(ran, capsys):
    """Two runners sharing a suite's folder: a cell whose ``STARTED`` names this host and a live
    process is skipped (reported, never launched); once that process is gone it is killed and
    runs again."""
    import socket
    import subprocess as sp

    suite = ran.suite
    cell = suite.cell("broken/parity_check/seed1")  # never run: pending
    folder = suite.cell_dir(cell)
    folder.mkdir(parents=True, exist_ok=True)
    other = sp.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (folder / "STARTED").write_text(json.dumps({"host": socket.gethostname(), "pid": other.pid}))
        assert running_elsewhere(suite, cell) == other.pid
        lines: list[str] = []
        report = run_local(suite, cells=[cell], log=lines.append)
        assert report == {cell.name: f"running in process {other.pid}"}
        assert any(f"running in process {other.pid}; not started again" in line for line in lines)
        assert (
            not (folder / "result.json").exists()
            and not (suite.out / "logs" / "broken_parity_check_seed1.log").exists()
        )
        main(["list", str(suite.path), "--out", str(suite.out), "--arch", "broken", "--seed", "1"])
        listed = capsys.readouterr().out
        assert f"running  broken/parity_check/seed1  (process {other.pid})" in listed, listed
    finally:
        other.kill()
        other.wait()
    assert running_elsewhere(suite, cell) is None and cell_status(suite, cell) == "killed"
    (folder / "STARTED").write_text(json.dumps({"host": "elsewhere", "pid": other.pid}))
    assert running_elsewhere(suite, cell) is None  # another machine's: no way to tell, runs again
    (folder / "STARTED").unlink()


def test_slurm_array_through_a_fake_sbatch(ran, tmp_path):
    """``slurm --submit`` writes a script that a fake sbatch checks (the array covers the cells
    not done, one per task) and runs as SLURM would run its task 0: that cell gets done."""
    # the broken architecture fixed (as test_running_again_reruns_only_what_is_not_done does):
    # whichever cell is first not done, it must run
    fixed = dict(ran.archs, broken=str(CONFIGS / "chomsky/lstm.yaml"))
    suite = Suite.load(write_suite(ran.folder, architectures=fixed, tasks={
        "parity_check": {"data.init_args.task": "parity_check"}, "reverse_string": {"data.init_args.task": "reverse_string"}}))  # fmt: skip
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    sbatch = bin_ / "sbatch"
    sbatch.write_text(f"""#!{sys.executable}
import os, re, subprocess, sys
text = open(sys.argv[1]).read()
array = re.search(r"^#SBATCH --array=0-(\\d+)$", text, re.M)
cells = re.search(r"^CELLS=\\(\\n(.*?)\\n\\)$", text, re.S | re.M).group(1).split()
assert array and int(array.group(1)) + 1 == len(cells), (array, cells)
assert text.startswith("#!/bin/bash") and "#SBATCH --time=00:05:00" in text
env = dict(os.environ, SLURM_ARRAY_TASK_ID="0", SLURM_ARRAY_JOB_ID="77", SLURM_JOB_ID="78", SLURM_CPUS_PER_TASK="1")
done = subprocess.run(["bash", sys.argv[1]], env=env)
print("Submitted batch job 77")
sys.exit(done.returncode)
""")
    sbatch.chmod(sbatch.stat().st_mode | stat.S_IEXEC)
    todo = [c for c in suite.cells() if cell_status(suite, c) != "done"]
    assert todo, "the earlier tests leave a cell not done"
    env = dict(os.environ, PATH=f"{bin_}{os.pathsep}{os.environ['PATH']}")
    out = subprocess.run(
        [sys.executable, "-m", "memrnn.suite", "slurm", str(suite.path), "--option", "time=00:05:00", "--submit"],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    assert "Submitted batch job 77" in out.stdout
    assert cell_status(suite, todo[0]) == "done"
    started = json.loads((suite.cell_dir(todo[0]) / "STARTED").read_text())
    assert started["SLURM_ARRAY_TASK_ID"] == "0" and started["SLURM_ARRAY_JOB_ID"] == "77"
    assert all(cell_status(suite, c) != "done" for c in todo[1:])


def test_slurm_tasks_share_cells_past_the_array_limit(tmp_path):
    suite = Suite.load(write_suite(tmp_path, seeds=[0, 1, 2]))  # 6 cells
    script = tmp_path / "s.sbatch"
    script.write_text(
        slurm_script(suite, max_array_size=4, parallel=2, python="echo", extra=["--trainer.max_steps=9"])
    )
    text = script.read_text()
    assert "#SBATCH --array=0-3%2" in text
    ran = [
        subprocess.run(["bash", str(script)], env=dict(os.environ, SLURM_ARRAY_TASK_ID=str(i)), capture_output=True,
                       text=True, check=True).stdout.split("\n")[:-1]
        for i in range(4)
    ]  # fmt: skip
    cells = [line.split("--cell ")[1].split()[0] for task in ran for line in task]
    assert sorted(cells) == sorted(c.name for c in suite.cells())  # every cell once
    assert [len(t) for t in ran] == [2, 2, 1, 1]
    assert all(line.endswith("-- --trainer.max_steps=9") for t in ran for line in t)
    with pytest.raises(ValueError, match="do not set 'array'"):
        slurm_script(suite, options={"array": "0-1"})


def test_slurm_script_without_members_is_pinned(tmp_path):
    """The ungrouped array script, byte for byte (``slurm --members`` added a grouped one beside
    it and left this one as it was)."""
    suite = Suite.load(write_suite(tmp_path, lrs=[0.01], slurm={"time": "1:00:00"}))
    text = slurm_script(suite, parallel=2, python="py", workdir=tmp_path, extra=["--trainer.max_steps=9"],
                        options={"mem": "4G"})  # fmt: skip
    want = """#!/bin/bash
# memrnn suite 'tiny': 4 cell(s) not done when this was written, in a job array.
# Written by `python -m memrnn.suite slurm {d}/suite.yaml`; submit with `sbatch <this file>`.
#SBATCH --array=0-3%2
#SBATCH --job-name=memrnn-tiny
#SBATCH --output={d}/runs/logs/slurm-%A_%a.log
#SBATCH --cpus-per-task=1
#SBATCH --time=1:00:00
#SBATCH --mem=4G
set -euo pipefail
mkdir -p {d}/runs/logs
cd {d}
CELLS=(
  lstm/parity_check/lr0.01/seed0
  lstm/parity_check/lr0.01/seed1
  lstm/reverse_string/lr0.01/seed0
  lstm/reverse_string/lr0.01/seed1
)
export OMP_NUM_THREADS="${{SLURM_CPUS_PER_TASK:-1}}"
status=0
for ((i = SLURM_ARRAY_TASK_ID; i < ${{#CELLS[@]}}; i += 4)); do
  py -m memrnn.suite cell {d}/suite.yaml --out {d}/runs --cell "${{CELLS[$i]}}" -- --trainer.max_steps=9 || status=$?
done
exit $status
"""
    assert text == want.format(d=tmp_path.resolve())


def test_wandb_sweep_is_valid_and_its_agent_command_runs_a_cell(ran, tmp_path):
    """The sweep configuration passes W&B's own schema check (the ``sweeps`` package that
    ``wandb sweep``'s local controller uses); W&B's grid gives exactly the suite's cells; the
    command an agent builds for one of them (W&B's own expansion) runs that cell."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import sweeps

    suite = Suite.load(write_suite(ran.folder, lrs=[0.003], seeds=[5]))
    config = wandb_sweep(suite)
    assert sweeps.schema_violations_from_proposed_config(config) == []
    grid = [
        {k: v["value"] for k, v in run.config.items()} for run in sweeps.next_runs(config, [], n=100) if run
    ]
    assert sorted(suite.cell(**p).name for p in grid) == sorted(c.name for c in suite.cells())
    assert main(["sweep", str(suite.path), "--config", str(tmp_path / "sweep.yaml")]) == 0
    assert yaml.safe_load((tmp_path / "sweep.yaml").read_text()) == config

    from wandb.sdk.launch.sweeps import utils as sweep_utils

    command = sweep_utils.create_sweep_command(list(config["command"]))
    values = sweep_utils.create_sweep_command_args({"args": {k: {"value": v} for k, v in grid[0].items()}})
    values |= {"env": ["/usr/bin/env"], "interpreter": [sys.executable]}
    argv = [part for c in command for part in (values[c[2:-1]] if c.startswith("${") else [c])]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    cell = suite.cell(**grid[0])
    assert cell_status(suite, cell) == "done"
    again = subprocess.run(argv, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert again.returncode == 0 and "is done" in again.stdout  # an agent re-running a done cell skips it


def test_off_suite_names_overrides_and_what_the_suite_file_changed_since(tmp_path):
    """What a cell ran with beyond the suite's arguments (its recorded ``overrides``), and what the
    suite file changed since it ran; nothing for a cell run as the suite says, wherever the runs'
    folder is; results written before ``overrides`` was recorded are read from their ``args``."""
    suite = Suite.load(write_suite(tmp_path))
    cell = suite.cell("lstm/parity_check/seed0")

    def result(extra=(), of=suite):
        return {"args": [*of.cli_args(cell), *extra], "suite_args": suite_args(of, cell), "overrides": list(extra),
                "budget": None}  # fmt: skip

    assert off_suite(suite, cell, result()) == []
    assert off_suite(Suite.load(suite.path, out=tmp_path / "elsewhere"), cell, result()) == []
    shortened = result(["--trainer.max_steps=1", "--trainer.accelerator=cpu"])
    assert off_suite(suite, cell, shortened) == ["--trainer.max_steps=1", "--trainer.accelerator=cpu"]
    older = {k: v for k, v in shortened.items() if k not in ("suite_args", "overrides")}
    assert off_suite(suite, cell, older) == ["--trainer.max_steps=1", "--trainer.accelerator=cpu"]
    assert off_suite(suite, cell, {"args": suite.cli_args(cell), "budget": None}) == []
    # the suite file edited after the cell ran: longer runs, one more override, a budget
    edited = dict(TINY, **{"trainer.max_steps": 3, "trainer.gradient_clip_val": 1.0})
    v2 = Suite.load(write_suite(tmp_path, args=edited))
    assert off_suite(v2, cell, result()) == [
        "--trainer.max_steps=2 (the suite now: --trainer.max_steps=3)",
        "without --trainer.gradient_clip_val=1.0",
    ]
    assert off_suite(v2, cell, result(of=v2)) == []
    v3 = Suite.load(write_suite(tmp_path, budget={"parameters": 500}))
    assert off_suite(v3, cell, result(of=v3)) == [
        "budget None (the suite now: {'max': 4096, 'parameters': 500})"
    ]


def test_collect_marks_a_cell_run_with_overrides(tmp_path, monkeypatch, capsys):
    """A cell run shortened (``-- --trainer.max_steps=1``) records its overrides and is done, but
    the table marks it and names them; ``--exclude-overrides`` leaves it out, as not done."""
    monkeypatch.setenv("WANDB_MODE", "offline")
    suite = Suite.load(write_suite(tmp_path, tasks={"parity_check": {"data.init_args.task": "parity_check"}}))
    plain, short = suite.cells()
    done = run_cell(suite, plain)
    assert done["overrides"] == [] and done["data_seed"] == plain.seed == 0
    # the validation metrics of the tested checkpoint, which collect's selection on validation reads
    assert done["val_metrics"]["val/loss"] == done["best_score"] and done["val_epoch"] == 0
    assert all(k.startswith("val/") for k in done["val_metrics"]) and "val/acc" in done["val_metrics"]
    result = run_cell(suite, short, ["--trainer.max_steps=1"])
    assert result["steps"] == 1 and result["overrides"] == ["--trainer.max_steps=1"]
    saved = json.loads((suite.cell_dir(short) / "result.json").read_text())
    assert saved["overrides"] == ["--trainer.max_steps=1"] and saved["suite_args"] == suite_args(suite, short)
    assert cell_status(suite, short) == "done"  # done, not the suite's run

    results = collect(suite)
    assert [r["off_suite"] for r in results.rows] == [[], ["--trainer.max_steps=1"]]
    table = results.table()
    assert "| parity_check | " in table and " (2, 1*) |" in table, table
    assert "*: 1 run ran with other arguments than the suite gives it" in table
    assert "- `--trainer.max_steps=1`: lstm/parity_check/seed1" in table
    with results.write(tmp_path / "results")["results"].open() as fh:
        assert [r["off_suite"] for r in csv.DictReader(fh)] == ["", "--trainer.max_steps=1"]

    strict = collect(suite, exclude_overrides=True)
    assert [r["cell"] for r in strict.rows] == [plain.name]
    assert strict.missing == {short.name: "other arguments: --trainer.max_steps=1"}
    assert " (1) |" in strict.table() and "other arguments than the suite gives" not in strict.table()
    out = tmp_path / "collected"
    assert main(["collect", str(suite.path), "--to", str(out)]) == 0
    assert main(["collect", str(suite.path), "--to", str(out), "--exclude-overrides"]) == 1
    capsys.readouterr()
    main(["list", str(suite.path)])
    listed = capsys.readouterr().out
    assert f"done     {plain.name}\n" in listed
    assert f"done*    {short.name}  (ran with --trainer.max_steps=1)" in listed
    assert main(["cell", str(suite.path), "--cell", short.name]) == 0  # done: not run again without --force
    said = capsys.readouterr().out
    assert "is done" in said and "ran with --trainer.max_steps=1); --force runs it again" in said


def test_collect_wandb_reads_a_sweeps_runs(tmp_path):
    suite = Suite.load(write_suite(tmp_path, lrs=[0.001]))

    def run(rid, state, score=None, **cfg):
        summary = {} if score is None else {suite.metric: score, "trainer/global_step": 10}
        return SimpleNamespace(
            id=rid, state=state, config={k: {"value": v} for k, v in cfg.items()}, summary=summary
        )

    runs = [
        run("a", "finished", 0.9, arch="lstm", task="parity_check", seed=0, lr=0.001),
        run("b", "crashed", None, arch="lstm", task="parity_check", seed=1, lr=0.001),
        run("c", "finished", 0.7, arch="lstm", task="reverse_string", seed=0, lr=0.001),
        run("d", "finished", 0.5, arch="gru", task="parity_check", seed=0, lr=0.001),  # another grid
        run("e", "running", None, arch="lstm", task="reverse_string", seed=1, lr=0.001),
    ]
    api = SimpleNamespace(sweep=lambda path: SimpleNamespace(runs=runs) if path == "me/memrnn/abc" else None)
    results = collect_wandb(suite, "me/memrnn/abc", api=api)
    assert [(r["cell"], r["score"], r["run"]) for r in results.rows] == [
        ("lstm/parity_check/lr0.001/seed0", 0.9, "a"), ("lstm/reverse_string/lr0.001/seed0", 0.7, "c")]  # fmt: skip
    assert results.missing == {"lstm/parity_check/lr0.001/seed1": "crashed",
                               "lstm/reverse_string/lr0.001/seed1": "running"}  # fmt: skip


# -- a matched parameter budget -------------------------------------------------------------------
def test_budget_sets_each_architecture_to_the_largest_size_that_fits(tmp_path):
    archs = {
        "lstm": str(CONFIGS / "chomsky/lstm.yaml"),
        "nnpda": {
            "config": str(CONFIGS / "chomsky/nnpda.yaml"),
            "budget_key": "model.init_args.layer.init_args.num_states",
        },
    }
    args = {k: v for k, v in TINY.items() if "hidden_size" not in k}
    suite = Suite.load(
        write_suite(tmp_path, architectures=archs, args=args, budget={"parameters": 3000, "max": 64})
    )
    defaults = [suite.defaults]
    for arch, key in (("lstm", "hidden_size"), ("nnpda", "num_states")):
        cell = suite.cell(arch=arch, task="parity_check", seed=0)
        size = fit_budget(suite, cell, defaults)
        full = f"--model.init_args.layer.init_args.{key}"
        at = _parameters([*suite.cli_args(cell), f"{full}={size}"], defaults)
        above = _parameters([*suite.cli_args(cell), f"{full}={size + 1}"], defaults)
        assert at <= 3000 < above, (arch, size, at, above)
        saved = json.loads((suite.out / "budget" / f"{arch}__parity_check.json").read_text())
        assert saved["value"] == size and saved["count"] == at
    # a cell runs at that size and records it
    cell = suite.cell(arch="lstm", task="parity_check", seed=1)
    result = run_cell(suite, cell)
    assert result["budget"] == {"parameters": 3000, "max": 64, "value": size_of(suite, "lstm")}
    assert result["parameters"] <= 3000
    (tmp_path / "x").mkdir()
    (tmp_path / "y").mkdir()
    with pytest.raises(ValueError, match="over the budget 10"):
        fit_budget(Suite.load(write_suite(tmp_path / "x", budget={"parameters": 10})), cell, defaults)
    with pytest.raises(ValueError, match="'budget' must be"):
        Suite.load(write_suite(tmp_path / "y", budget={"params": 10}))


def size_of(suite: Suite, arch: str) -> int:
    return json.loads((suite.out / "budget" / f"{arch}__parity_check.json").read_text())["value"]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "task"), [("chomsky_matched.yaml", "reverse_string"), ("flare.yaml", "marked_reversal")]
)
def test_every_architecture_of_the_matched_suites_fits_its_budget(tmp_path, name, task):
    suite = Suite.load(CONFIGS / "suites" / name, out=tmp_path)
    extra = ["--trainer.accelerator=cpu"]
    sizes = {}
    for arch, spec in suite.architectures.items():
        cell = suite.cell(arch=arch, task=task, seed=0, lr=suite.lrs[0] if suite.lrs else None)
        if not spec.budget_key:  # the authors' own formula sized it (FLaRe's get_architecture_args.py)
            count = _parameters([*suite.cli_args(cell), *extra], [suite.defaults])
            assert 0.95 * suite.budget["parameters"] < count < 1.05 * suite.budget["parameters"], (
                arch,
                count,
            )
            continue
        sizes[arch] = fit_budget(suite, cell, [suite.defaults], extra)
        saved = json.loads((tmp_path / "budget" / f"{arch}__{task}.json").read_text())
        assert 0.8 * suite.budget["parameters"] < saved["count"] <= suite.budget["parameters"], (arch, saved)
    if "rnn" in sizes:
        assert sizes["lstm"] < sizes["rnn"]  # an LSTM unit costs about 4 Elman units


def test_cell_processes_get_their_threads_and_glibcs_heap_kept(monkeypatch):
    for key in ("MALLOC_MMAP_MAX_", "MALLOC_TRIM_THRESHOLD_"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("MEMRNN_TEST_MARK", "kept")
    env = worker_env(3)
    assert env["OMP_NUM_THREADS"] == env["MKL_NUM_THREADS"] == "3"
    assert env["MEMRNN_TEST_MARK"] == "kept"  # this process's environment, added to
    if sys.platform == "linux":
        assert {k: env[k] for k in HEAP_MALLOC_ENV} == {
            "MALLOC_MMAP_MAX_": "0",
            "MALLOC_TRIM_THRESHOLD_": str(2**36),
        }
    else:  # glibc's variables mean nothing elsewhere
        assert not set(HEAP_MALLOC_ENV) & set(env)
    monkeypatch.setenv("MALLOC_MMAP_MAX_", "65536")  # the user's own setting wins
    assert worker_env(1)["MALLOC_MMAP_MAX_"] == "65536"
    with pytest.raises(ValueError, match="threads must be >= 1, got 0"):
        worker_env(0)


def test_run_local_starts_each_cell_with_worker_env(tmp_path, monkeypatch):
    """What :func:`run_local` hands each cell process (no cell is run: ``Popen`` records it)."""
    started = []

    class Exited:  # a cell process that failed at once
        returncode = 1

        def __init__(self, cmd, **kwargs):
            started.append(kwargs["env"])

        def poll(self):
            return 1

    monkeypatch.setattr(runner.subprocess, "Popen", Exited)
    monkeypatch.setattr(runner, "worker_env", lambda threads: {"THREADS": str(threads)})
    suite = Suite.load(write_suite(tmp_path))
    report = run_local(suite, jobs=2, threads=2, cells=suite.cells()[:2], log=lambda line: None)
    assert started == [{"THREADS": "2"}] * 2
    assert all(status.startswith("failed (exit 1") for status in report.values()), report


def test_a_killed_cell_continues_from_its_latest_epoch(tmp_path, monkeypatch, capsys):
    """A cell whose run was killed after a checkpoint continues it (same W&B run, folder and
    best-checkpoint tracking); --fresh, --force or another model start a new run."""
    monkeypatch.setenv("WANDB_MODE", "offline")
    args = dict(TINY, **{"trainer.max_steps": -1, "trainer.max_epochs": 1})
    suite = Suite.load(write_suite(tmp_path, args=args, seeds=[0]))
    cell = suite.cell("lstm/parity_check/seed0")
    folder = suite.cell_dir(cell)
    first = run_cell(suite, cell)
    assert first["continued_from"] is None and first["epochs"] == 1
    per_epoch = first["steps"]
    (run,) = (folder / "memrnn").iterdir()

    (folder / "result.json").unlink()  # killed after its first epoch (STARTED, a checkpoint, no result)
    assert cell_status(suite, cell) == "killed"
    last = interrupted_checkpoint(suite, cell)
    assert last == run / "checkpoints" / "last.ckpt"
    main(["list", str(suite.path), "--out", str(suite.out)])
    assert "killed   lstm/parity_check/seed0  (continues after epoch 1)" in capsys.readouterr().out
    again = run_cell(suite, cell, ["--trainer.max_epochs=3"])
    assert again["continued_from"] == str(last)
    assert again["continued_code"] == again["code"] == first["code"]  # the checkpoint recorded its code
    assert again["continued_codes"] == [first["code"]] and first["continued_codes"] == []
    assert (again["epochs"], again["steps"]) == (3, 3 * per_epoch)  # two more epochs, not three
    # the tested checkpoint's validation, found among all three epochs (the first one's kept in last.ckpt)
    assert again["val_metrics"]["val/loss"] == again["best_score"] and again["val_epoch"] in (0, 1, 2)
    assert first["val_metrics"]["val/loss"] == first["best_score"] and first["val_epoch"] == 0
    assert list((folder / "memrnn").iterdir()) == [run]  # the same run
    assert sorted(p.name for p in run.glob("config*.yaml")) == ["config.fit-1.yaml", "config.yaml"]
    assert torch.load(last, weights_only=True)["epoch"] == 2
    assert Path(again["checkpoint"]).parent == run / "checkpoints"

    (folder / "result.json").unlink()  # killed again: the run's third process names both earlier ones
    third = run_cell(suite, cell, ["--trainer.max_epochs=4"])
    assert third["continued_from"] == str(last) and third["epochs"] == 4
    assert third["continued_codes"] == [first["code"], again["code"]]
    assert torch.load(last, weights_only=True)["memrnn_run"]["codes"] == [first["code"]] * 3

    (folder / "result.json").unlink()
    with pytest.warns(UserWarning, match="not continuing .*hidden_size"):
        other = run_cell(
            suite, cell, ["--trainer.max_epochs=1", "--model.init_args.layer.init_args.hidden_size=4"]
        )
    assert other["continued_from"] is None and other["steps"] == per_epoch
    assert len(list((folder / "memrnn").iterdir())) == 2

    (folder / "result.json").unlink()
    fresh = run_cell(suite, cell, resume=False)
    assert fresh["continued_from"] is None and fresh["steps"] == per_epoch
    assert len(list((folder / "memrnn").iterdir())) == 3
    assert interrupted_checkpoint(suite, cell) is None  # done: nothing to continue


def test_a_terminated_runner_stops_its_cells(tmp_path):
    """SIGTERM to `python -m memrnn.suite run` (kill, a scheduler's time limit) stops the cells
    it started instead of leaving them running as orphans; they count as not done."""
    import signal
    import time

    args = dict(TINY, **{"trainer.max_steps": 10**6})  # a cell that would run for hours
    suite = Suite.load(write_suite(tmp_path, args=args, seeds=[0], tasks={"parity_check": {}}))
    cell = suite.cell("lstm/parity_check/seed0")
    runner = subprocess.Popen(
        [sys.executable, "-m", "memrnn.suite", "run", str(suite.path), "--out", str(suite.out)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "WANDB_MODE": "offline"},
    )
    try:
        started = suite.cell_dir(cell) / "STARTED"
        deadline = time.monotonic() + 120
        while not started.exists() and time.monotonic() < deadline:
            time.sleep(0.5)
        assert started.exists(), "the cell never started"
        pid = json.loads(started.read_text())["pid"]
        runner.send_signal(signal.SIGTERM)
        assert runner.wait(timeout=60) == 128 + signal.SIGTERM
    finally:
        runner.kill()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.5)
    else:
        os.kill(pid, signal.SIGKILL)
        raise AssertionError(f"the cell's process {pid} outlived its runner")
    assert cell_status(suite, cell) in ("killed", "failed")
