"""scripts/dusell_table.py as the suite configs/suites/dusell.yaml: the wrapper's commands, the
suite's data shared across architectures, the length floors and tables by length and by epoch
(:mod:`memrnn.suite.tables`), and the published table (``docs/results/dusell.md``) as the committed
results collect."""

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from memrnn.suite import Suite, collect
from memrnn.suite import tables as T
from memrnn.suite.runner import by_epoch, clock_by_epoch, run_cells, started_stamp

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "dusell_table.py"
DUSELL = ROOT / "configs" / "suites" / "dusell.yaml"
TINY = {"trainer.max_epochs": 1, "data.init_args.train_size": 48, "data.init_args.val_size": 16,
        "data.init_args.test_per_length": 1, "trainer.logger.init_args.offline": True}  # fmt: skip


def _script():
    import importlib.util

    spec = importlib.util.spec_from_file_location("dusell_table", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_script_prints_and_runs_the_suites_commands(tmp_path):
    cmds, _ = _script().commands(["--models", "lstm", "rns", "--tasks", "dyck", "--seeds", "0", "2", "--jobs",
                                  "2", "--out", "runs/x", "--by-epoch", "--", "--trainer.max_epochs=40"])  # fmt: skip
    cells = ["--out", "runs/x", "--arch", "lstm", "rns", "--task", "dyck", "--seed", "0", "2"]
    assert cmds[0][1:] == ["-m", "memrnn.suite", "run", str(DUSELL), *cells, "--jobs", "2", "--",
                           "--trainer.max_epochs=40"]  # fmt: skip
    assert cmds[1][1:] == ["-m", "memrnn.suite", "collect", str(DUSELL), *cells, "--by-epoch"]
    (only,), _ = _script().commands(["--table-only", "--by-length"])
    assert only[3] == "collect" and only[-2:] == ["--by-length", "--partial"]


@pytest.mark.parametrize(("args", "message"), [(["--models", "gru"], "unknown model 'gru'"),
                                               (["--tasks", "copy"], "unknown task 'copy'"),
                                               (["--jobs", "0"], "--jobs must be >= 1, got 0")])  # fmt: skip
def test_bad_arguments_are_named(tmp_path, args, message):
    done = subprocess.run(
        [sys.executable, str(SCRIPT), *args, "--out", str(tmp_path)], capture_output=True, text=True
    )
    assert done.returncode == 2 and message in done.stderr


def _tiny_suite(tmp_path: Path, **more) -> Suite:
    raw = yaml.safe_load(DUSELL.read_text())
    raw["architectures"] = {a: str((DUSELL.parent / raw["architectures"][a]).resolve())
                            for a in ("lstm", "superposition")}  # fmt: skip
    raw.update(defaults=str(ROOT / "configs" / "defaults.yaml"), tasks={"marked_reversal": {}}, seeds=[0],
               args=TINY, **more)  # fmt: skip
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(raw))
    return Suite.load(path, out=tmp_path / "runs")


def test_architectures_share_one_data_module_and_must_draw_the_same_data(tmp_path, monkeypatch):
    """``share_data``: the cells of one (task, seed) train on the first one's data module, set up
    once; an architecture whose config resolves to another data section fails, naming it; a cell
    a live process of this machine is training is left to it."""
    from memrnn.data.datamodule import LanguageDataModule

    setups = []
    real = LanguageDataModule.setup
    monkeypatch.setattr(
        LanguageDataModule, "setup", lambda self, stage=None: setups.append(id(self)) or real(self, stage)
    )
    suite = _tiny_suite(tmp_path)
    suite.architectures["superposition"].args.append("--data.init_args.train_size=40")
    cells = suite.cells()
    assert [suite.cell_dir(c) for c in cells] == [tmp_path / "runs" / f"{a}_marked_reversal" / "seed0"
                                                  for a in ("lstm", "superposition")]  # fmt: skip
    assert run_cells(suite, cells) == 1
    assert (
        "another data section than lstm/marked_reversal/seed0's"
        in (suite.cell_dir(cells[1]) / "FAILED").read_text()
    )
    assert len(set(setups)) == 1  # one data module set up, for both
    result = json.loads((suite.cell_dir(cells[0]) / "result.json").read_text())
    assert 0 < result["score"] < 5 and len(result["val_by_epoch"]["val/ce_gap"]) == 1
    assert list(result["clock_by_epoch"]) == ["time"]  # one model: no members
    assert len(result["clock_by_epoch"]["time"]) == 1
    # a live process of this machine names the failed cell: not started again
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (suite.cell_dir(cells[1]) / "STARTED").write_text(
            json.dumps(started_stamp(cells[1].name) | {"pid": other.pid})
        )
        assert run_cells(_tiny_suite(tmp_path), cells) == 0
        assert not (suite.cell_dir(cells[1]) / "result.json").exists()
    finally:
        other.kill()
        other.wait()
    # the table: median / max / min beside the floor, under the script's labels; by epoch
    results = collect(_tiny_suite(tmp_path))
    row = next(line for line in results.table().splitlines() if line.startswith("| Marked"))
    gap = result["score"]
    assert row.split("|")[2:4] == [f" {math.log(20) / 61:.3f} ", f" {gap:.3f} / {gap:.3f} / {gap:.3f} (1) "]
    (line,) = T.by_epoch(results).splitlines()
    assert (
        line
        == f"Marked reversal, LSTM, seed 0 (epochs 1-1; tested on epoch 1): {result['val_by_epoch']['val/ce_gap'][0]:.3f}"
    )
    assert T.by_length(results).startswith("Marked reversal (END counted; training lengths 42-80, K = 20):")


def test_length_groups_split_at_the_edge_of_the_training_lengths_and_weigh_tokens():
    """Hand-worked: lengths 48, 50, 52 (END counted) trained, 54 not; groups of 10 are 41-50 and
    51-60, the second split at the edge; the gap of a group weighs each length by its tokens."""
    groups = T.length_bins([54, 48, 52, 50], trained={48, 50, 52})
    assert groups == [("48-50", [48, 50]), ("52", [52]), ("54", [54])]
    curve = {48: (2.0, 0.1), 50: (1.0, 0.4), 52: (3.0, 0.2), 54: (1.0, 0.5)}
    assert T.binned(curve, [48, 50]) == pytest.approx(29.6 / 146)  # (2·48·0.1 + 1·50·0.4) / (2·48 + 50)
    assert T.binned(curve, [54]) == pytest.approx(0.5)
    assert T.binned(curve, [48, 50], log_k=math.log(4)) == pytest.approx(3 * math.log(4) / 146)


def test_epochs_of_a_continued_cell_merge_in_run_order():
    """A killed cell's record continues: an epoch validated again takes the later value."""
    epochs = [{"epoch": 0, "metrics": {"val/ce_gap": 0.5, "other": 1.0}}, {"epoch": 1, "metrics": {"val/ce_gap": 0.4}},
              {"epoch": 1, "metrics": {"val/ce_gap": 0.35}}, {"epoch": 3, "metrics": {"val/ce_gap": 0.3}}]  # fmt: skip
    assert by_epoch(epochs) == {"val/ce_gap": [0.5, 0.35, None, 0.3]}
    assert by_epoch([]) == {}
    # the clock likewise; a record written before memrnn kept it (no "time") leaves a None
    clocked = [{**e, "time": 100.0 + i, "members": 4, "stopped": i // 2} for i, e in enumerate(epochs)]
    clocked[0] = {k: v for k, v in clocked[0].items() if k not in ("time", "members", "stopped")}
    assert clock_by_epoch(clocked) == {
        "time": [None, 102.0, None, 103.0], "members": [None, 4, None, 4], "stopped": [None, 1, None, 1]}  # fmt: skip
    assert clock_by_epoch(epochs) == {}


def test_the_published_20_epoch_table_is_the_committed_results(tmp_path):
    """Every cell of the 20-epoch DuSell table on ``docs/results/dusell.md`` is what ``collect``
    computes from the committed results of the former script (``benchmarks/results/dusell/``),
    floors included, and the page's command prints the same rows."""
    archs = ["lstm", "superposition", "stratification", "ns", "rns"]
    suite = Suite.load(DUSELL, out=ROOT / "benchmarks" / "results" / "dusell").subset(arch=archs)
    page = (ROOT / "docs" / "results" / "dusell.md").read_text().splitlines()
    results = collect(suite)
    assert not results.missing and not any(r["off_suite"] for r in results.rows)
    rows = [line for line in results.table().splitlines() if line.startswith("| ")]
    assert rows[0] == "| task | length floor | LSTM | Superposition | Stratification | NS-RNN | RNS-RNN |"
    start = page.index(rows[0])
    assert page[start + 2 : start + 7] == rows[1:]
    # the 40-epoch runs are marked: they ran with another max_epochs than the suite's
    e40 = collect(
        Suite.load(DUSELL, out=ROOT / "benchmarks/results/dusell-e40").subset(
            arch=["rns"], task=["unmarked_reversal"], seed=[0, 1]
        )
    )
    assert all(
        r["off_suite"] == ["--trainer.max_epochs=40 (the suite now: --trainer.max_epochs=20)"]
        for r in e40.rows
    )


def test_the_records_40_epoch_unmarked_reversal_numbers_are_the_committed_results():
    """The record's sentence (``benchmarks/results/dusell-cpu-2core.md``, moved there from the
    README) on the RNS-RNN's unmarked reversal continued to 40 epochs quotes each seed's test gap
    and its best validation gap at 20 and 40 epochs; they are what the committed
    ``benchmarks/results/dusell-e40/`` files hold."""
    text = " ".join((ROOT / "benchmarks" / "results" / "dusell-cpu-2core.md").read_text().split())
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


GRID = ROOT / "configs" / "suites" / "dusell_grid.yaml"
GRID_RESULTS = ROOT / "benchmarks" / "results" / "dusell_grid"
GRID_TASKS = ["marked_reversal", "unmarked_reversal", "padded_reversal", "dyck", "hardest_cfl"]
GRID_COLUMNS = ["lstm", "superposition_w20", "stratification_w20"]  # the columns of the page's tables
E20_ARCH = {"lstm": "lstm", "superposition_w20": "superposition", "stratification_w20": "stratification"}


def test_the_papers_protocol_rows_are_the_committed_results():
    """The columns at DuSell & Chiang's protocol on ``docs/results/dusell.md`` (the grid's 20
    runs per task as members, ``configs/suites/dusell_grid.yaml``) are what ``collect`` computes
    from the committed results (``benchmarks/results/dusell_grid/``): the selected run's rows and
    the median / max / min rows, every run of each committed (architecture, task) there (the LSTM's
    five tasks; the stacks' as their groups finish, the others "—"), and each column's summary table
    beside the 20-epoch table's same model."""
    suite = Suite.load(GRID, out=GRID_RESULTS).subset(arch=GRID_COLUMNS, task=GRID_TASKS)
    committed = {(a, t) for a in GRID_COLUMNS for t in GRID_TASKS if (GRID_RESULTS / a / t).is_dir()}
    assert {("lstm", t) for t in GRID_TASKS} <= committed and len(committed) > len(GRID_TASKS)
    page = (ROOT / "docs" / "results" / "dusell.md").read_text()
    section = page[page.index("## At the papers' protocol") : page.index("## Per length")]
    lines = section.splitlines()
    labels = " | ".join(suite.label("arch", a) for a in GRID_COLUMNS)
    for select in ("suite", None):
        results = collect(suite, select=select)
        groups = results.groups()
        assert set(groups) == committed and all(len(rows) == 20 for rows in groups.values())
        assert all(tuple(name.split("/")[:2]) not in committed for name in results.missing)
        rows = [line for line in results.table().splitlines() if line.startswith("| ")]
        assert rows[0] == f"| task | length floor | {labels} |" and len(rows) == 2 + len(GRID_TASKS)
        start = [i for i, line in enumerate(lines) if line == rows[1]]  # the parameters row, in both tables
        assert any(lines[i : i + len(rows) - 1] == rows[1:] for i in start), (select, rows)
    # each column's side-by-side table: the selected run, median / max over the 20 runs, and the
    # 20-epoch table's same model (median / max over its 3 seeds, from its own committed results)
    grid_summary = collect(suite).summary()
    e20 = collect(Suite.load(DUSELL, out=ROOT / "benchmarks" / "results" / "dusell")).summary()
    for arch, task in sorted(committed):
        v, old = grid_summary[arch, task], e20[E20_ARCH[arch], task]
        row = (
            f"| {suite.label('task', task)} | {v['selected_score']:.3f}; {v['median']:.3f} / {v['max']:.3f} | "
            f"{old['median']:.3f} / {old['max']:.3f} |"
        )
        assert row in lines, (arch, row)


def test_the_readmes_protocol_row_is_the_committed_results():
    """The README's DuSell & Chiang row at the papers' protocol quotes each task's selected run per
    column as ``collect`` computes it from the committed results ("—" where not committed)."""
    suite = Suite.load(GRID, out=GRID_RESULTS).subset(arch=GRID_COLUMNS, task=GRID_TASKS)
    summary = collect(suite).summary()
    (row,) = [line for line in (ROOT / "README.md").read_text().splitlines()
              if line.startswith("| DuSell & Chiang 2020, 2022, at their protocol |")]  # fmt: skip
    for task in GRID_TASKS:
        cells = [
            f"{summary[a, task]['selected_score']:.3f}" if (a, task) in summary else "—" for a in GRID_COLUMNS
        ]
        assert f"{suite.label('task', task)} {' / '.join(cells)}" in row, (task, cells)


def test_each_committed_grid_run_reports_its_own_epochs():
    """A member that early stopping stopped reports the epochs and steps it trained and the
    validations it ran (its single run's), not its group's: stopped ``patience`` (10) epochs
    after its best validation, its record ending there; the others ran to the 200-epoch limit.
    ``scripts/member_stops.py`` (which rewrote the results written before memrnn recorded the
    stop) finds nothing to change."""
    runs = [json.loads(p.read_text()) for p in sorted(GRID_RESULTS.rglob("result.json"))]
    assert len(runs) >= 100
    for r in runs:
        assert not r["diverged"], r["cell"]
        epochs = r["val_epoch"] + 1 + 10 if r["stopped"] else 200
        assert (r["epochs"], r["steps"]) == (epochs, 1000 * epochs), r["cell"]
        assert {len(v) for v in r["val_by_epoch"].values()} == {epochs}, r["cell"]
    assert sum(r["stopped"] for r in runs) > len(runs) // 2
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "member_stops.py"), str(GRID_RESULTS), "--patience", "10",
         "--check"], capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0 and "0 result(s) to rewrite" in done.stdout, done.stdout + done.stderr


def test_the_frozen_members_share_counts_each_part_to_its_last_stop():
    """``scripts/member_stops.py --report``: a part of a group ends at the last epoch a member it
    writes trained, and each member it writes is computed to then."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("member_stops", ROOT / "scripts" / "member_stops.py")
    stops = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(stops)
    runs = [{"arch": "a", "task": "t", "group": g, "epochs": e} for g, e in (("p1", 30), ("p1", 40), ("p2", 200),
                                                                            ("p2", 150))]  # fmt: skip
    assert stops.frozen_share(runs) == {("a", "t"): (40 + 40 + 200 + 200, 30 + 40 + 200 + 150)}
    done = subprocess.run([sys.executable, str(spec.origin), str(GRID_RESULTS), "--report"], capture_output=True,
                          text=True)  # fmt: skip
    rows = [line for line in done.stdout.splitlines() if line.startswith("| lstm |")]
    assert done.returncode == 0 and len(rows) == 5, done.stdout + done.stderr
