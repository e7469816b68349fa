"""A suite's cells as members (``python -m memrnn.suite run SUITE --members auto``,
:mod:`memrnn.suite.groups`): cells that differ only in seed and learning rate train in one
process, each member writes its cell's ``result.json`` equal to the cell's single run, and a
killed group continues from its checkpoint."""

from __future__ import annotations

import json
import warnings

import pytest
import torch

from memrnn.lit import SequenceModule
from memrnn.suite import Suite, cell_status, collect, run_cell
from memrnn.suite.__main__ import main
from memrnn.suite.groups import run_group

from .test_suite import CONFIGS, write_suite


def _suite(tmp_path, out="runs", **changes):
    path = write_suite(tmp_path, lrs=[0.01, 0.003], seeds=[0, 1], **changes)
    return Suite.load(path, out=tmp_path / out)


def test_cells_group_by_everything_but_seed_and_learning_rate(tmp_path):
    archs = {"lstm": str(CONFIGS / "chomsky/lstm.yaml"), "stack": str(CONFIGS / "chomsky/stack_rnn.yaml")}
    suite = _suite(tmp_path, architectures=archs)
    groups = suite.member_groups(suite.cells(), "auto")
    assert [(g[0].arch, g[0].task, len(g)) for g in groups] == [
        ("lstm", "parity_check", 4), ("lstm", "reverse_string", 4),
        ("stack", "parity_check", 4), ("stack", "reverse_string", 4),
    ]  # fmt: skip
    assert [len(g) for g in suite.member_groups(suite.cells(), 3)] == [3, 1] * 4
    args = suite.group_args(groups[0])
    rows = json.loads(next(a for a in args if a.startswith("--model.init_args.members=")).split("=", 1)[1])
    assert rows == [{"seed": s, "lr": lr, "data_seed": s} for lr in (0.01, 0.003) for s in (0, 1)]
    assert "--model.init_args.member_data=independent" in args
    fixed = _suite(tmp_path, data_seed=7)  # one data set for every seed: the members share it
    args = fixed.group_args(fixed.member_groups(fixed.cells(), "auto")[0])
    assert "--model.init_args.member_data=shared" in args and "--data.init_args.seed=7" in args
    with pytest.raises(ValueError, match="members must be 'auto' or a whole number"):
        suite.member_groups(suite.cells(), 0)
    with pytest.raises(ValueError, match="differ in more than seed and learning rate"):
        suite.group_args([groups[0][0], groups[1][0]])


def test_each_member_writes_its_cells_result_equal_to_the_single_run(tmp_path):
    single, grouped = _suite(tmp_path, "single"), _suite(tmp_path, "grouped")
    cells = [c for c in single.cells() if c.task == "parity_check"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = {c.name: run_cell(single, c) for c in cells}
        got = run_group(grouped, [grouped.cell(c.name) for c in cells])
    assert sorted(got) == sorted(want)
    for name, w in want.items():
        g = got[name]
        assert json.loads((grouped.cell_dir(grouped.cell(name)) / "result.json").read_text())["cell"] == name
        assert (g["lr"], g["seed"], g["data_seed"], g["steps"], g["epochs"]) == (
            w["lr"], w["seed"], w["data_seed"], w["steps"], w["epochs"])  # fmt: skip
        assert g["score"] == pytest.approx(w["score"], abs=1e-5)
        assert g["metrics"].keys() == w["metrics"].keys()
        for key, value in w["metrics"].items():
            assert g["metrics"][key] == pytest.approx(value, abs=1e-5, rel=1e-5), (name, key)
        assert g["curves"]["length"] == w["curves"]["length"]
        torch.testing.assert_close(
            torch.tensor(g["curves"]["acc"]), torch.tensor(w["curves"]["acc"]), atol=1e-5, rtol=0
        )
        assert g["val_metrics"].keys() == w["val_metrics"].keys() and g["val_epoch"] == w["val_epoch"]
        assert g["best_score"] == pytest.approx(w["best_score"], abs=1e-5)
        assert g["parameters"] == w["parameters"] and g["member"] == list(want).index(name)
        assert not g["diverged"]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            member = SequenceModule.load_from_checkpoint(g["checkpoint"])
            alone = SequenceModule.load_from_checkpoint(w["checkpoint"])
        for key, value in alone.state_dict().items():
            torch.testing.assert_close(member.state_dict()[key], value, atol=1e-5, rtol=1e-5)
    table = collect(grouped)  # the collector reads the members' results as any cell's
    assert not [m for m in table.missing if m.startswith("lstm/parity_check")]


def test_a_killed_group_continues_and_the_cli_groups_a_suite(tmp_path, capsys):
    suite = _suite(tmp_path)
    group = [c for c in suite.cells() if c.task == "reverse_string" and c.lr == 0.01]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        run_group(suite, group)
    for c in group:  # killed after its checkpoint: STARTED and a checkpoint, no result
        (suite.cell_dir(c) / "result.json").unlink()
        assert cell_status(suite, c) == "killed"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        again = run_group(suite, group, ["--trainer.max_steps=4"])
    assert all(r["continued_from"] and r["steps"] == 4 for r in again.values())
    code = main(["run", str(suite.path), "--out", str(suite.out), "--task", "parity_check", "--lr", "0.003",
                 "--members", "auto"])  # fmt: skip
    printed = capsys.readouterr().out
    assert code == 0 and "1 process(es) of members" in printed
    for c in suite.cells():
        if c.task == "parity_check" and c.lr == 0.003:
            result = json.loads((suite.cell_dir(c) / "result.json").read_text())
            assert result["members"] == 2 and result["group"].endswith("lr0.003-seed0_lr0.003-seed1")
