"""A suite's cells as members (``python -m memrnn.suite run SUITE --members auto``,
:mod:`memrnn.suite.groups`): cells that differ only in seed and learning rate train in one
process, each member writes its cell's ``result.json`` equal to the cell's single run, and a
killed group continues from its checkpoint; ``slurm --members`` makes each group an array task."""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
import subprocess
import warnings

import pytest
import torch
import yaml

from memrnn.lit import SequenceModule
from memrnn.suite import Suite, cell_status, collect, run_cell, run_local, runner, slurm_script
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


def _task_commands(script: str, tasks: int) -> list[list[list[str]]]:
    """The commands each of the first ``tasks`` array tasks of ``script`` runs (written with
    ``python="echo"``: each prints its arguments after the interpreter)."""
    return [
        [shlex.split(line) for line in subprocess.run(
            ["bash", "-c", script], env=dict(os.environ, SLURM_ARRAY_TASK_ID=str(i)), capture_output=True,
            text=True, check=True).stdout.splitlines()]
        for i in range(tasks)
    ]  # fmt: skip


def test_slurm_members_makes_a_task_per_group_running_what_run_members_runs(tmp_path, monkeypatch, capsys):
    suite = _suite(tmp_path)  # 2 tasks x 2 lrs x 2 seeds
    extra = ["--trainer.max_steps=3"]
    started = []  # what `run --members 3` starts: a stand-in for its processes records their commands

    class Started:
        returncode = 0

        def __init__(self, command, **kwargs):
            started.append(command)

        def poll(self):
            return 0

    with monkeypatch.context() as m:
        m.setattr(runner.subprocess, "Popen", Started)
        run_local(suite, members=3, extra=extra, log=lambda _: None)
    assert [len([a for a in c if a.startswith("lstm/")]) for c in started] == [3, 1, 3, 1]
    script = slurm_script(suite, members=3, extra=extra, python="echo", parallel=2)
    assert "#SBATCH --array=0-3%2\n" in script and "in a job array of 4 group(s) of members" in script
    tasks = _task_commands(script, 4)
    assert [t for (t,) in tasks] == [c[1:] for c in started]  # the same commands, one per task
    assert "--members" in tasks[0][0] and "--members" not in tasks[1][0]  # a group of one: its cell alone
    assert tasks[0][0][-2:] == ["--", "--trainer.max_steps=3"]
    # ungrouped: a task per cell
    assert "#SBATCH --array=0-7\n" in slurm_script(suite, python="echo")
    # past the array limit the tasks share the groups
    shared = _task_commands(slurm_script(suite, members=3, extra=extra, python="echo", max_array_size=3), 3)
    assert "#SBATCH --array=0-2\n" in slurm_script(suite, members=3, python="echo", max_array_size=3)
    assert [len(t) for t in shared] == [2, 1, 1]
    assert sorted(c for t in shared for c in t) == sorted(c[1:] for c in started)
    # the cells done are left out of the groups
    done = suite.cell("lstm/parity_check/lr0.01/seed0")
    suite.cell_dir(done).mkdir(parents=True)
    (suite.cell_dir(done) / "result.json").write_text("{}")
    script = slurm_script(suite, members="auto", python="echo")
    assert "#SBATCH --array=0-1\n" in script and "8 cell(s)" not in script and "7 cell(s) not done" in script
    ((first,), (second,)) = _task_commands(script, 2)
    assert [a for a in first if a.startswith("lstm/")] == [
        "lstm/parity_check/lr0.01/seed1", "lstm/parity_check/lr0.003/seed0", "lstm/parity_check/lr0.003/seed1"]  # fmt: skip
    assert len([a for a in second if a.startswith("lstm/")]) == 4
    # the command line: filters, --parallel and --python with --members
    path = tmp_path / "members.sbatch"
    code = main(["slurm", str(suite.path), "--out", str(suite.out), "--members", "auto", "--lr", "0.003",
                 "--parallel", "2", "--python", "echo", "--script", str(path), "--", "--trainer.max_steps=3"])  # fmt: skip
    assert code == 0 and "a job array of 2 group(s) of members (4 cells)" in capsys.readouterr().out
    text = path.read_text()
    assert "#SBATCH --array=0-1%2\n" in text and "lr0.01" not in text
    for (command,), task in zip(_task_commands(text, 2), ("parity_check", "reverse_string"), strict=True):
        assert [a for a in command if a.startswith("lstm/")] == [
            f"lstm/{task}/lr0.003/seed{s}" for s in (0, 1)
        ]
        assert command[-3:] == ["--members", "--", "--trainer.max_steps=3"]
    # a suite whose cells cannot be members: run --members's own refusal
    (tmp_path / "shared").mkdir()
    shared_data = Suite.load(write_suite(tmp_path / "shared", lrs=[0.01], share_data=True))
    assert main(["slurm", str(shared_data.path), "--out", str(shared_data.out), "--members", "auto"]) == 2
    assert "shares data across architectures (share_data)" in capsys.readouterr().err
    with pytest.raises(ValueError, match="share_data"):
        slurm_script(shared_data, members=2)


def test_an_array_task_of_members_writes_its_groups_results_and_resumes(tmp_path, capsys):
    """Each task's command (run here through ``main``, as the node runs it) trains its group's
    cells as members; a cell done since the script was written is skipped; a killed group
    continues from its checkpoint when its task runs again, and a finished one does nothing."""
    suite = _suite(tmp_path)
    cells = [c for c in suite.cells() if c.lr == 0.01]
    script = slurm_script(suite, cells=cells, members="auto", python="echo")
    ((first,), (second,)) = _task_commands(script, 2)
    assert first[:3] == ["-m", "memrnn.suite", "cell"]
    elsewhere = suite.cell("lstm/reverse_string/lr0.01/seed0")  # finished elsewhere since
    suite.cell_dir(elsewhere).mkdir(parents=True)
    (suite.cell_dir(elsewhere) / "result.json").write_text('{"score": 0.5}')
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert main(first[2:]) == 0
        assert main(second[2:]) == 0
    results = {c.name: json.loads((suite.cell_dir(c) / "result.json").read_text()) for c in cells}
    assert results.pop(elsewhere.name) == {"score": 0.5}
    for name, result in results.items():
        assert result["cell"] == name and result["steps"] == 2
        assert result["members"] == (2 if "parity_check" in name else 1)  # the cells not done when it ran
        assert result["continued_from"] is None
    assert all(cell_status(suite, c) == "pending" for c in suite.cells() if c not in cells)
    group = [suite.cell(a) for a in first if a.startswith("lstm/")]
    for c in group:  # killed at its time limit: STARTED and the group's checkpoint, no results
        (suite.cell_dir(c) / "result.json").unlink()
    capsys.readouterr()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert main(first[2:]) == 0
    for c in group:
        result = json.loads((suite.cell_dir(c) / "result.json").read_text())
        assert result["continued_from"] and result["members"] == 2 and result["steps"] == 2
    stamps = [(suite.cell_dir(c) / "result.json").stat().st_mtime_ns for c in group]
    capsys.readouterr()
    assert main(first[2:]) == 0
    assert ": done; --force runs them again" in capsys.readouterr().out
    assert [(suite.cell_dir(c) / "result.json").stat().st_mtime_ns for c in group] == stamps


# -- shedding stopped members, and continuing at an epoch's end ----------------------------------
def _group_parts():
    """``scripts/group_parts.py``, imported by path."""
    spec = importlib.util.spec_from_file_location(
        "group_parts", CONFIGS.parent / "scripts" / "group_parts.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _dusell_suite(tmp_path, out: str, lrs, seeds=(0, 1), patience: int = 1, **args) -> Suite:
    """A tiny DuSell & Chiang cell (epochs, a plateau schedule, early stopping at ``patience``)."""
    config = tmp_path / "lstm.yaml"
    config.write_text(yaml.safe_dump({
        "base": str(CONFIGS / "dusell/lstm_marked_reversal.yaml"),
        "trainer": {"callbacks": [
            {"class_path": "memrnn.lit.ModelCheckpoint", "init_args": {"monitor": "val/loss", "save_last": True}},
            {"class_path": "lightning.pytorch.callbacks.EarlyStopping",
             "init_args": {"monitor": "val/loss", "mode": "min", "patience": patience}}]}}))  # fmt: skip
    spec = {"name": "shed", "defaults": str(CONFIGS / "defaults.yaml"), "architectures": {"lstm": str(config)},
            "tasks": {"marked_reversal": {}}, "seeds": list(seeds), "lrs": list(lrs), "metric": "test/ce_gap",
            "mode": "min", "args": {"data.init_args.train_size": 40, "data.init_args.val_size": 10,
                                    "data.init_args.test_per_length": 1, "trainer.max_epochs": 5,
                                    "model.init_args.layer.init_args.hidden_size": 6, **args}}  # fmt: skip
    path = tmp_path / "suite.yaml"
    path.write_text(yaml.safe_dump(spec))
    return Suite.load(path, out=tmp_path / out)


def test_a_group_sheds_its_stopped_members_and_the_others_go_on_exactly(tmp_path, split_draws):
    """``run_group(shed=0.5)``: once half the members have stopped (learning rate 1e-12: no
    improvement, early stopping at patience 1, after epoch 2), they are tested and written, and the
    other two go on as a group of their own from the epoch's checkpoint
    (:func:`memrnn.lit.members.select_members`): every member's result equals the unshed group's,
    and both report each member's own steps, epochs and validations, as its single run does (a
    stopped member is not credited with the epochs the group ran on without it).  The members that
    go on take the splits drawn before (:func:`memrnn.data.members.reuse_drawn`): the shed group
    draws each split once, as the unshed one."""
    plain, shed, single = (
        _dusell_suite(tmp_path, out, lrs=[0.01, 1e-12]) for out in ("plain", "shed", "single")
    )
    drawn = split_draws
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = run_group(plain, plain.cells())
        drawn_unshed, drawn[:] = sorted(drawn), []
        got = run_group(shed, shed.cells(), shed=0.5)
        assert sorted(drawn) == drawn_unshed
        assert drawn_unshed == [("test", 0), ("train", 0), ("train", 1), ("val", 0), ("val", 1)]
        alone = {c.name: run_cell(single, c) for c in single.cells()}
    assert sorted(got) == sorted(want) == sorted(alone)
    first = shed.group_dir(shed.cells())
    for name, w in want.items():
        g, a, stopped_early = got[name], alone[name], "lr1e-12" in name
        assert g["score"] == pytest.approx(w["score"], abs=1e-6)
        assert g["best_score"] == pytest.approx(w["best_score"])
        assert g["stopped"] == w["stopped"] == stopped_early
        assert (g["steps"], g["epochs"]) == (w["steps"], w["epochs"]) == (a["steps"], a["epochs"])
        assert g["epochs"] == (2 if stopped_early else 5)
        assert g["val_epoch"] == w["val_epoch"] == a["val_epoch"]
        for key, values in a["val_by_epoch"].items():
            assert len(values) == g["epochs"], key
            assert g["val_by_epoch"][key] == pytest.approx(values, abs=1e-5), key
            assert w["val_by_epoch"][key] == pytest.approx(values, abs=1e-5), key
        if stopped_early:
            assert (g["members"], g["shed_from"], g["group"]) == (4, [], str(first))
        else:
            assert (g["members"], g["shed_from"]) == (2, [str(first)])
            assert g["group"] == str(shed.group_dir([shed.cell(name) for name in got if "lr0.01" in name]))
            assert SequenceModule.load_from_checkpoint(g["checkpoint"]).hparams.lr == 0.01
    assert run_group(shed, shed.cells(), shed=0.5) == {}  # all done
    # scripts/group_parts.py reads the two parts' W&B runs: 4 members to epoch 2, then 2 to 5
    group_parts = _group_parts()
    parts = group_parts.parts(shed.out / "groups")
    assert [(p["members"], p["epochs"]) for p in parts] == [(4, (0, 1)), (2, (2, 4))]
    assert all(p["test_s"] >= 0 for p in parts) and parts[1]["switch_s"] > 0 and parts[0]["switch_s"] is None
    # ... and the same parts from the members' results (clock_by_epoch), with the members stopped at
    # each part's end: the two at lr 1e-12 after epoch 2; the other two run to the epoch limit
    from_results = group_parts.parts_from_results(shed.out)
    got_parts = [(p["members"], p["epochs"], p["stopped"]) for p in from_results]
    assert got_parts == [(4, (0, 1), 2), (2, (2, 4), 0)]
    for a, b in zip(parts, from_results, strict=True):
        assert (a["first"], a["last"]) == pytest.approx((b["first"], b["last"]), abs=0.2)
    assert from_results[1]["switch_s"] > 0 and from_results[0]["switch_s"] is None


def test_a_killed_group_continues_in_another_grouping(tmp_path):
    """A group of 4 killed after its second epoch and run again as two groups of 2 (another
    ``--members``): each pair continues from the 4-member ``last.ckpt`` cut to it
    (:func:`memrnn.suite.groups.regroup`), and every member's result is the one of the 4 run
    straight through (up to float rounding: a pair pads its batches to its own longest string).
    Once the pairs have trained past the 4-member checkpoint, the 4 together are refused, naming
    the pairs, instead of going back to that older epoch."""
    from memrnn.lit.runs import latest_checkpoint
    from memrnn.suite.groups import regroup

    straight, split = (
        _dusell_suite(tmp_path, out, lrs=[0.01, 0.005], patience=10) for out in ("straight", "split")
    )
    cells = split.cells()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = run_group(straight, straight.cells())
        run_group(split, cells, ["--trainer.max_epochs=2"])
        first = split.group_dir(cells)
        for c in cells:  # killed after epoch 2: its checkpoint, no results
            (split.cell_dir(c) / "result.json").unlink()
        got = {**run_group(split, cells[:2]), **run_group(split, cells[2:])}
    assert sorted(got) == sorted(want) and len(got) == 4
    for name, w in want.items():
        g = got[name]
        assert g["score"] == pytest.approx(w["score"], abs=1e-6)
        assert g["epochs"] == w["epochs"] == 5 and g["members"] == 2 and g["shed_from"] == [str(first)]
        assert g["continued_from"].endswith("regrouped/checkpoints/last.ckpt")
        for key, values in w["val_by_epoch"].items():
            assert g["val_by_epoch"][key] == pytest.approx(values, abs=1e-5), key
    # scripts/group_parts.py from the results: the 4 members' epochs 0-1, then each pair's 2-4
    parts = [(p["members"], p["epochs"]) for p in _group_parts().parts_from_results(split.out)]
    assert parts == [(4, (0, 1)), (2, (2, 4)), (2, (2, 4))]
    for c in cells:
        (split.cell_dir(c) / "result.json").unlink()
    # the 4 together: their own checkpoint is of epoch 1, the pairs' of epoch 4
    newer = r"further \(lr0\.005-seed0_lr0\.005-seed1 \(epoch 4\); lr0\.01-seed0_lr0\.01-seed1 \(epoch 4\)\)"
    with pytest.raises(ValueError, match=newer + r" and the newest that holds them all is .*\(epoch 1\)"):
        regroup(split, cells, latest_checkpoint(first))
    with pytest.raises(ValueError, match=newer):
        run_group(split, cells)
    assert not any((split.cell_dir(c) / "result.json").exists() for c in cells)


def test_select_members_keeps_the_members_state_renumbered(tmp_path):
    """A members checkpoint cut to members [3, 1]: their parameters, best parameters, buffers,
    optimizer moments and step counts, per-member learning rates, schedules and logged values
    (``…/m3`` -> ``…/m0``); a bad selection or a single run's checkpoint is named."""
    from memrnn.lit.members import select_members
    from memrnn.lit.runs import latest_checkpoint

    suite = _dusell_suite(tmp_path, "runs", lrs=[0.01, 0.005], **{"trainer.max_epochs": 2})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        run_group(suite, suite.cells())
    ckpt = torch.load(latest_checkpoint(suite.group_dir(suite.cells())), weights_only=False)
    cut = select_members(ckpt, [3, 1])
    for key, value in ckpt["state_dict"].items():
        torch.testing.assert_close(cut["state_dict"][key], value[[3, 1]], rtol=0, atol=0)
    (opt,), (new,) = ckpt["optimizer_states"], cut["optimizer_states"]
    assert new["members"] == 2 and new["frozen"].tolist() == opt["frozen"][[3, 1]].tolist()
    for p, state in opt["state"].items():
        for k, v in state.items():
            torch.testing.assert_close(new["state"][p][k], v[[3, 1]], rtol=0, atol=0)
    assert new["param_groups"][0]["member_lr"].tolist() == [0.005, 0.01]  # rows: seeds x lrs, seed-major
    assert new["param_groups"][0]["lr"] == pytest.approx(0.0075)  # what torch's group shows: their mean
    with pytest.raises(ValueError, match="schedule state 0 is of 3 members, the model of 4"):
        select_members({**ckpt, "lr_schedulers": [{**ckpt["lr_schedulers"][0], "members": 3}]}, [0])
    (sched,) = cut["lr_schedulers"]
    assert sched["members"] == 2 and sched["schedulers"] == [
        ckpt["lr_schedulers"][0]["schedulers"][k] for k in (3, 1)
    ]
    assert cut["memrnn_plateau"].tolist() == ckpt["memrnn_plateau"][[3, 1]].tolist()
    rows = ckpt["hyper_parameters"]["members"]
    assert cut["hyper_parameters"]["members"] == [rows[3], rows[1]]
    assert rows[3]["data_seed"] == rows[1]["data_seed"] == 1  # one data seed, still on the independent path
    assert cut["hyper_parameters"]["member_data"] == "independent"
    args = suite.group_args([suite.cells()[k] for k in (3, 1)], member_data="independent")
    assert "--model.init_args.member_data=independent" in args
    assert json.loads(next(a for a in args if a.startswith("--model.init_args.members=")).split("=", 1)[1]) == [
        rows[3], rows[1]]  # fmt: skip
    assert "--model.init_args.member_data=shared" in suite.group_args([suite.cells()[k] for k in (3, 1)])
    old, new_epochs = (
        ckpt["callbacks"]["ValidationRecord"]["epochs"],
        cut["callbacks"]["ValidationRecord"]["epochs"],
    )
    assert [e["metrics"]["val/loss/m0"] for e in new_epochs] == [e["metrics"]["val/loss/m3"] for e in old]
    assert not any(k.endswith(("/m2", "/m3")) for e in new_epochs for k in e["metrics"])
    assert not any(k.startswith("ModelCheckpoint") for k in cut["callbacks"])
    assert set(cut["memrnn_run"]) == {"code", "codes"} and cut["memrnn_run"]["codes"] == [
        cut["memrnn_run"]["code"]
    ]
    for keep, message in (([4], "distinct members of 0..3"), ([], "distinct members"), ([1, 1], "distinct")):
        with pytest.raises(ValueError, match=message):
            select_members(ckpt, keep)
    with pytest.raises(ValueError, match="takes a MemberSequenceModule checkpoint"):
        select_members({**ckpt, "hyper_parameters": {"lr": 0.01}}, [0])
    rest = [suite.cells()[k] for k in (1, 3)]  # seed 1's two learning rates, as a shed group writes them
    for c in rest:
        (suite.cell_dir(c) / "result.json").unlink()
    (suite.group_dir(rest) / "shed" / "checkpoints").mkdir(parents=True)
    torch.save(select_members(ckpt, [1, 3]), suite.group_dir(rest) / "shed" / "checkpoints" / "last.ckpt")
    (suite.group_dir(rest) / "shed.json").write_text(
        json.dumps({"from": ["g"], "seconds": 1.0, "member_data": "independent"})
    )
    with pytest.raises(
        ValueError, match=r"goes on from its members in g \(shed or regrouped\), but its checkpoint"
    ):
        run_group(suite, rest, ["--model.init_args.layer.init_args.hidden_size=7"])
    by_grid = {"members": None, "seeds": [0, 1], "lrs": [0.01, 0.005], "member_data": "shared"}
    grid = select_members({**ckpt, "hyper_parameters": {**ckpt["hyper_parameters"], **by_grid}}, [2])
    assert grid["hyper_parameters"]["members"] == [{"seed": 1, "lr": 0.01, "weight_decay": 0.0}]


@pytest.mark.parametrize(("grouped", "mid_epoch"), [(False, False), (True, False), (False, True)])
def test_a_run_continued_from_an_epochs_end_takes_that_epochs_plateau_step(tmp_path, grouped, mid_epoch):
    """Lightning 2.6 continues a fit from ``last.ckpt`` without the plateau schedule's step of the
    checkpoint's epoch (the LR fell one epoch late); memrnn takes it from the value the checkpoint
    keeps.  Learning rate 1e-12: the loss never improves, so at patience 0 the rate halves after
    every epoch but the first; the ``last.ckpt`` of epoch 3 (written before its step) holds it
    halved twice, straight through and when continued after epoch 2 (Lightning alone: once).
    Validating every half epoch (``mid_epoch``), ``last.ckpt`` is written at the validation's end,
    inside the epoch: Lightning then restarts the epoch to finish it (``on_train_epoch_end`` takes
    the step) instead of starting at the next (``on_train_start`` takes it)."""
    from memrnn.lit.runs import latest_checkpoint

    args = {"model.init_args.lr_scheduler.init_args.patience": 0, "model.init_args.lr_scheduler.init_args.factor":
            0.5, "model.init_args.lr_scheduler.init_args.eps": 0.0, "trainer.max_epochs": 4}  # fmt: skip
    if mid_epoch:
        args["trainer.val_check_interval"] = 0.5
    rates = [1e-12, 2e-12] if grouped else [1e-12]

    def run(suite: Suite, extra: list[str]) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if grouped:
                run_group(suite, suite.cells(), extra)
            else:
                run_cell(suite, suite.cells()[0], extra)

    lrs = {}
    for how in ("straight", "continued"):
        suite = _dusell_suite(tmp_path, how, lrs=rates, seeds=[0], patience=10, **args)
        if how == "continued":
            run(suite, ["--trainer.max_epochs=2"])
            for c in suite.cells():
                (suite.cell_dir(c) / "result.json").unlink()
        run(suite, [])
        folder = suite.group_dir(suite.cells()) if grouped else suite.cell_dir(suite.cells()[0])
        group = torch.load(latest_checkpoint(folder), weights_only=False)["optimizer_states"][0][
            "param_groups"
        ][0]
        lrs[how] = group["member_lr"].tolist() if grouped else [group["lr"]]
    assert lrs["continued"] == lrs["straight"] == pytest.approx([lr / 4 for lr in rates], rel=1e-12, abs=0)


def test_shed_goes_with_members_through_run_cell_and_slurm(tmp_path, capsys):
    """``--shed [F]`` needs ``--members``, takes a fraction in (0, 1], and reaches the command each
    group runs, here and in a SLURM array."""
    suite = _suite(tmp_path)
    assert main(["run", str(suite.path), "--out", str(suite.out), "--shed"]) == 2
    assert "--shed acts on groups of members: give --members too" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["run", str(suite.path), "--shed", "1.5", "--members", "auto"])
    assert "--shed takes a fraction in (0, 1], got '1.5'" in capsys.readouterr().err
    with pytest.raises(ValueError, match="shed acts on groups of members"):
        run_local(suite, shed=0.5)
    script = slurm_script(suite, members="auto", shed=0.25, python="echo")
    commands = _task_commands(script, 2)
    assert all(cmd[cmd.index("--shed") + 1] == "0.25" for task in commands for cmd in task)
    assert "--members auto --shed 0.25" in script
    assert runner._cell_command(suite, suite.cells()[:2], [], members=True, shed=0.5)[-2:] == [
        "--shed",
        "0.5",
    ]
    assert "--shed" not in runner._cell_command(suite, suite.cells()[:1], [], members=False, shed=0.5)
