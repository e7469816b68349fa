"""The benchmark entry point runs end to end on a tiny grid and writes what it promises (no
timing is asserted: speed targets live in benchmarks/results, not in tests)."""

from __future__ import annotations

import csv
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import run
from memrnn.ops.dispatch import triton_available


def test_tiny_benchmark_writes_tables_csvs_and_plot(tmp_path, capsys):
    run.main(["--layers", "elman", "counter_lstm", "nnpda", "--devices", "cpu", "--sizes", "16",
              "--batches", "2", "--lengths", "8", "--scaling-lengths", "8", "16", "--out", str(tmp_path)])  # fmt: skip
    out = capsys.readouterr().out
    assert "| counter_lstm | 16 | 2 | 8 |" in out and "slope" in out
    with open(tmp_path / "throughput.csv") as f:
        rows = list(csv.DictReader(f))
    assert [r["layer"] for r in rows] == ["elman", "counter_lstm", "nnpda"]
    for r in rows:
        assert float(r["fwdbwd_tok_s"]) > 0 and float(r["fwdbwd_ratio"]) > 0
    with open(tmp_path / "scaling.csv") as f:
        scaling = list(csv.DictReader(f))
    assert {r["layer"] for r in scaling} == {"nn.LSTM", "elman", "counter_lstm", "nnpda"}
    # a fitted slope on a loaded machine can be anything (seen: -2.4 to 4.1 at these tiny sizes):
    # only that it was computed
    assert all(math.isfinite(float(r["slope"])) for r in scaling)
    assert (tmp_path / "scaling.png").stat().st_size > 0


def test_unknown_layer_is_named():
    with pytest.raises(SystemExit, match="no_such_layer"):
        run.main(["--layers", "no_such_layer", "--quick"])


def test_allocator_setting_is_reported(monkeypatch):
    for k, v in run.HEAP_MALLOC_ENV.items():
        monkeypatch.setenv(k, v)
    assert run.allocator().startswith("glibc heap without mmap")
    run._reexec_with_heap_malloc()  # already set: returns instead of re-executing
    monkeypatch.delenv("MALLOC_MMAP_MAX_")
    assert run.allocator() == "system malloc"


def test_train_loop_benchmark_prints_every_row(capsys):
    """``benchmarks/train_loop.py`` on a few batches of the default job: every loop's row, each
    with a positive rate and a ratio to the bare loop (no timing asserted)."""
    from benchmarks import train_loop

    rows = train_loop.main(["--batches", "4", "--warmup", "1", "--skip-job"])
    assert [r["row"] for r in rows] == [
        "bare torch", "module, plain loop", "bare torch, Lightning", "module, Lightning",
    ]  # fmt: skip
    assert all(r["steps_per_s"] > 0 and r["tokens_per_s"] > 0 for r in rows)
    out = capsys.readouterr().out
    assert "| module, Lightning |" in out and "× bare torch" in out


def test_scratch_buffers_benchmark_prints_every_row(capsys):
    """``benchmarks/scratch_buffers.py`` at a tiny size: a row per memory, T and depth with both
    settings' times (no timing asserted), and the setting restored."""
    from benchmarks import scratch_buffers

    before = os.environ.get("MEMRNN_SCRATCH_MIB")
    rows = scratch_buffers.main(["--lengths", "12", "--depths", "12", "4", "--memories", "superposition",
                                 "stratification", "--calls", "2", "--batch", "2", "--size", "4"])  # fmt: skip
    assert [(r["memory"], r["depth"]) for r in rows] == [
        ("superposition", 12), ("superposition", 4), ("stratification", 12), ("stratification", 4),
    ]  # fmt: skip
    assert all(r[k]["median"] > 0 and r[k]["faults"] >= 0 for r in rows for k in ("with", "without"))
    assert os.environ.get("MEMRNN_SCRATCH_MIB") == before
    assert "superposition    12    12 |" in capsys.readouterr().out


def test_stack_rnn_benchmark_prints_every_row(capsys):
    """``benchmarks/stack_rnn_speed.py`` at a tiny size: a row per memory, controller, length and
    depth, each with a positive ratio to nn.LSTM (no timing asserted)."""
    from benchmarks import stack_rnn_speed

    rows = stack_rnn_speed.main(
        ["--lengths", "8", "40", "--batch", "2", "--size", "4", "--width", "2", "--repeats", "1"]
    )
    assert len(rows) == 4 * 2 * 3  # T 8: depth 8 only; T 40: depths 32 and 40
    assert all(r["ratio"] > 0 for r in rows)
    assert "| superposition | lstm | 40 | 40 |" in capsys.readouterr().out


def test_stack_rnn_breakdown_refuses_bad_rows_per_program_and_a_cpu_only_machine(capsys):
    """``benchmarks/stack_rnn_breakdown.py`` (a GPU timing): ``--block-b`` must be a power of 2 of
    at least 16 (``tl.dot``'s rows), named in the error; without CUDA it says it needs a GPU;
    neither error patches the stack kernels' module."""
    import torch

    from benchmarks import stack_rnn_breakdown
    from memrnn.ops.stack_rnn import triton as kernels

    block = kernels.BLOCK_B
    with pytest.raises(SystemExit):
        stack_rnn_breakdown.main(["--block-b", "24"])
    assert "not 24" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        stack_rnn_breakdown.main(["--warps", "3"])
    assert "--warps takes a power of 2 of at least 1 (warps per program), not 3" in capsys.readouterr().err
    if not torch.cuda.is_available():
        with pytest.raises(SystemExit):
            stack_rnn_breakdown.main(["--block-b", "32"])
        assert "needs a GPU" in capsys.readouterr().err
    assert block == kernels.BLOCK_B


def test_stack_rnn_benchmark_sweeps_the_kernels_warps(capsys, monkeypatch):
    """``--warps 4 8``: one table per warp count, each launch of the stack kernels with that many
    warps (recorded here under Triton's interpreter, which runs them on CPU); the layer's own
    choice comes back afterwards."""
    pytest.importorskip("triton")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    from benchmarks import stack_rnn_speed
    from memrnn.ops.stack_rnn import triton as kernels

    seen, chosen, launch = [], kernels._stack_warps, kernels._stack_fwd.run

    def record(*args, **kwargs):
        seen.append(kwargs["num_warps"])
        return launch(*args, **kwargs)

    monkeypatch.setattr(kernels._stack_fwd, "run", record)
    args = ["--lengths", "4", "--batch", "2", "--size", "4", "--width", "2", "--repeats", "1",
            "--memories", "superposition", "--controllers", "lstm", "--impls", "triton"]  # fmt: skip
    rows = stack_rnn_speed.main([*args, "--warps", "4", "8"])
    assert len(rows) == 2 and sorted(set(seen)) == [4, 8] and seen[0] == 4 and seen[-1] == 8
    out = capsys.readouterr().out
    assert (
        out.index("num_warps 4") < out.index("num_warps 8") and out.count("| superposition | lstm | 4 |") == 2
    )
    assert kernels._stack_warps is chosen
    with pytest.raises(SystemExit):
        stack_rnn_speed.main([*args, "--warps", "3"])


def test_nondeterministic_scaling_prints_rows_and_exponents(capsys):
    """``benchmarks/nondeterministic_scaling.py`` at a tiny size: the unlimited stack up to
    ``--max-unlimited``, the limited one at every length, and a fitted exponent for each."""
    from benchmarks import nondeterministic_scaling

    rows = nondeterministic_scaling.main(
        ["--lengths", "4", "8", "12", "--window", "4", "--max-unlimited", "8", "--batch", "2", "--hidden", "4",
         "--repeats", "1"]
    )  # fmt: skip
    assert [(r["stack"], r["T"]) for r in rows] == [
        ("unlimited", 4), ("limited", 4), ("unlimited", 8), ("limited", 8), ("limited", 12)
    ]  # fmt: skip
    assert all(r["ms"] > 0 and r["mib"] > 0 for r in rows)
    out = capsys.readouterr().out
    assert "unlimited: time ∝ T^" in out and "limited: time ∝ T^" in out
    rows = nondeterministic_scaling.main(
        ["--lengths", "4", "8", "--window", "4", "--max-unlimited", "4", "--batch", "2", "--hidden", "4",
         "--repeats", "1", "--vector-size", "2"]
    )  # fmt: skip
    assert [(r["stack"], r["T"]) for r in rows] == [("unlimited", 4), ("limited", 4), ("limited", 8)]
    assert "vectors of 2 units (vector RNS-RNN)" in capsys.readouterr().out


@pytest.mark.skipif(not triton_available(), reason="needs Triton (pip install triton)")
def test_the_triton_run_launches_three_kernels_forward_and_six_backward_per_step(capsys):
    """``benchmarks/nondeterministic_launches.py`` at a tiny size: the nondeterministic stack's
    Triton run launches 3 kernels per step forward and 6 backward (4 kernels and the two sums of
    the replace and pop weights' partial gradients), whatever the depth, where the torch step
    launches dozens; plain and vector stacks."""
    from benchmarks import nondeterministic_launches

    for vector in ("0", "3"):
        rows = nondeterministic_launches.main(
            ["--lengths", "3", "5", "--depth", "2", "--batch", "2", "--vector-size", vector]
        )
        stack = {r["impl"]: r for r in rows if r["what"] == "the stack alone"}
        assert (stack["Triton run"]["forward"], stack["Triton run"]["backward"]) == (3, 6)
        assert stack["torch step"]["forward"] > 20 and stack["torch step"]["backward"] > 40
    assert "fewer launches per step with the Triton run" in capsys.readouterr().out


@pytest.mark.skipif(not triton_available(), reason="needs Triton (pip install triton)")
def test_kernel_precision_puts_each_kernel_beside_torchs_float32(capsys):
    """Under Triton's interpreter (the default test run) the stack kernels' float32 errors
    against float64 are of the order of torch's own (on an H200 they were 300-3,900 times it
    while Triton 3.6 made their head product a TF32 dot)."""
    from benchmarks import kernel_precision

    rows, bad = kernel_precision.main(["--device", "cpu", "--layers", "superposition_elman", "deque_lstm"])
    out = capsys.readouterr().out
    assert [r["layer"] for r in rows] == ["superposition_elman", "deque_lstm"] and not bad, out
    for r in rows:
        assert 0 < r["torch cpu"] < 1e-5 and r["kernel"] < 5 * r["torch cpu"], r
    assert "| superposition_elman |" in out


def test_gpu_checks_script_runs_each_part_it_is_given_and_names_an_unknown_one(tmp_path):
    """``scripts/gpu_checks.sh`` (the GPU session's one command) with a stand-in interpreter that
    says it has CUDA and records what it is asked to run: ``breakdown`` runs the breakdown script
    and its three variants, one process each; an unknown part is named and the exit status is 2;
    ``device.txt`` names the commit the caller gave."""
    root = Path(__file__).resolve().parents[1]
    calls = tmp_path / "calls.txt"
    fake = tmp_path / "python"
    fake.write_text(f'#!/bin/sh\necho "$*" >> {calls}\n')
    fake.chmod(0o755)
    out = tmp_path / "out"
    env = {**os.environ, "PYTHON": str(fake), "MEMRNN_COMMIT": "abc1234"}
    done = subprocess.run(
        ["bash", str(root / "scripts" / "gpu_checks.sh"), str(out), "breakdown", "bogus"],
        cwd=root, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    assert "unknown part 'bogus'" in done.stderr
    runs = [line for line in calls.read_text().splitlines() if "stack_rnn_breakdown.py" in line]
    assert runs == [
        "benchmarks/stack_rnn_breakdown.py",
        "benchmarks/stack_rnn_breakdown.py --batches 64 --memories superposition --no-baselines --no-preload",
        "benchmarks/stack_rnn_breakdown.py --batches 64 --memories superposition --no-baselines --block-b 32",
        "benchmarks/stack_rnn_breakdown.py --batches 64 --memories superposition --no-baselines --precision tf32",
    ]
    assert "commit: abc1234" in (out / "device.txt").read_text()
    assert (out / "breakdown.md").exists()


def test_memory_scaling_prints_times_and_peaks(capsys):
    """``benchmarks/memory_scaling.py`` at T 8: nn.LSTM's row and each depth's row of the memory, each
    with positive times; the peak-memory measurement (a child process's, per row) run here in this
    process on one row (its numbers are a machine's measurement: only that they are numbers >= 0)."""
    from benchmarks import memory_scaling

    rows = memory_scaling.main(
        ["--lengths", "8", "--memories", "superposition", "--repeats", "1", "--no-memory"]
    )
    assert [(r["impl"], r["depth"]) for r in rows] == [("nn.LSTM", "-"), ("memrnn", 4), ("memrnn", 8)]
    assert all(r["fwd"] > 0 and r["train"] > 0 and r["state_mib"] > 0 for r in rows)
    assert "| memrnn | superposition | 8 | 4 |" in capsys.readouterr().out
    fwd, train = memory_scaling._peaks("memrnn", "superposition", 8, 8)
    assert fwd >= 0 and train >= 0


def test_deletang_forward_smoke():
    """``benchmarks/deletang_forward.py --smoke``: one tiny row per configuration (Delétang et al.'s
    Stack-RNN and Tape-RNN), the plain per-step loop checked equal to memrnn's outputs and final
    memory (the torch.compile column is left out here: it compiles for 20-40 s)."""
    from benchmarks import deletang_forward

    rows = deletang_forward.main(["--smoke", "--no-compile"])
    assert [r["config"] for r in rows] == ["stack_rnn", "tape_rnn"]
    assert all(r["err_loop"] <= 1e-5 for r in rows)


def test_member_threads_times_one_and_two_threads_alternately(capsys):
    import torch

    from benchmarks import member_threads

    before = torch.get_num_threads()
    try:
        ms = member_threads.main(["--members", "2", "--rounds", "1", "--batches", "2"])
    finally:
        torch.set_num_threads(before)
    assert set(ms) == {1, 2} and all(len(v) == 1 and v[0] > 0 for v in ms.values())
    out = capsys.readouterr().out
    assert "1 thread(s):" in out and "2 thread(s):" in out and "1 thread / 2 threads:" in out


def test_members_shed_runs_a_group_both_ways_and_compares_each_member(capsys):
    from benchmarks import members_shed

    got = members_shed.main(["--lrs", "0.01", "1e-12", "--seeds", "0", "--train-size", "40", "--val-size", "10",
                             "--test-per-length", "1", "--patience", "1", "--max-epochs", "4"])  # fmt: skip
    (shed,) = got["shed"]
    assert got["members"] == shed["equal"] == 2 and shed["parts"] == 2  # the 1e-12 member stopped at epoch 2
    out = capsys.readouterr().out
    assert "| lstm/marked_reversal/lr1e-12/seed0 | 2 | 2 | " in out and "## shed at 0.5" in out
    assert out.count("| 0 | none |") == 2 and "seconds at its end (shed)" in out
    assert "| one group to the end | 1 | " in out and "| shed at 0.5 | 2 | " in out and "| 2 of 2 |" in out


def test_members_kernels_prints_a_row_per_layer_and_member_count(tmp_path, capsys):
    """``benchmarks/members_kernels.py`` at a tiny size: a row per layer and member count, each
    layer on its member path (never the loop), the ratio the members' tokens/s over the LSTM's,
    and the table written to ``--out``."""
    from benchmarks import members_kernels

    out = tmp_path / "table.md"
    rows = members_kernels.main(
        ["--members", "1", "2", "--batch", "2", "--length", "3", "--size", "4", "--width", "2", "--depth", "3",
         "--repeats", "1", "--layers", "lstm", "superposition_lstm", "--out", str(out)]
    )  # fmt: skip
    assert [(r["layer"], r["members"]) for r in rows] == [
        ("lstm", 1), ("lstm", 2), ("superposition_lstm", 1), ("superposition_lstm", 2)
    ]  # fmt: skip
    for r in rows:
        assert r["path"].endswith("(members batched)")
        assert r["ratio"] == pytest.approx(r["members"] * r["lstm_ms"] / r["ms"])
    printed = capsys.readouterr().out
    assert "| superposition_lstm | 2 |" in printed and out.read_text().count("\n| ") == 5


def test_member_overheads_prints_the_three_costs_both_ways(capsys):
    """``benchmarks/member_overheads.py`` at a tiny size: its three rows (collation, the initial
    state and output, the loss), each way checked equal inside the script before it is timed."""
    from benchmarks import member_overheads

    rows = member_overheads.main(["--members", "2", "--batch", "3", "--lengths", "2", "5", "--repeats", "1"])
    assert [r["what"] for r in rows] == ["collate", "initial state + output", "loss (fwd+bwd)"]
    assert all(r["before_ms"] > 0 and r["now_ms"] > 0 for r in rows)
    assert "| collate |" in capsys.readouterr().out


def test_member_products_benchmark_prints_every_row(capsys):
    """``benchmarks/member_products.py`` at a tiny size: a row per product, both orientations
    where there are two (no timing asserted), the fused LSTM cell's rows where the C++ loops are
    built."""
    from benchmarks import member_products
    from memrnn.ops.native import load

    rows = member_products.main(["--members", "2", "--rows", "12", "--batch", "3", "--hidden", "4",
                                 "--vocab", "3", "--embedding", "5", "--calls", "2", "--repeats", "1"])  # fmt: skip
    names = [r["product"] for r in rows]
    assert names[:5] == [
        "head forward",
        "head weight grad",
        "head input grad",
        "LSTM weight grads",
        "LSTM input grad",
    ]
    assert names[5:] == (["fused LSTM forward", "fused LSTM backward"] if load() is not None else [])
    assert all(r["memrnn_us"] > 0 and (r["torch_us"] is None or r["ratio"] > 0) for r in rows)
    assert "| head weight grad |" in capsys.readouterr().out
