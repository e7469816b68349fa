"""scripts/sweep.py runs a config over seeds and prints median and max of the chosen metrics."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_sweep_reports_median_and_max(tmp_path):
    out = subprocess.run(
        [sys.executable, str(ROOT / "scripts/sweep.py"), "--config", str(ROOT / "configs/dyck/lstm_k2_m3.yaml"),
         "--seeds", "0", "1", "--metric", "val/ce_gap", "--metric", "val/closing", "--out", str(tmp_path),
         "--", "--trainer.max_epochs=1", "--data.init_args.train_size=64", "--data.init_args.val_size=32"],
        cwd=tmp_path, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.strip().splitlines()
    table = {line.split()[0]: [float(x) for x in line.split()[1:]] for line in lines[-4:]}
    assert set(table) == {"0", "1", "median", "max"}
    gaps = [table["0"][0], table["1"][0]]
    assert table["median"][0] == sum(gaps) / 2 or abs(table["median"][0] - sum(gaps) / 2) < 1e-3
    assert table["max"][0] == max(gaps)
    assert gaps[0] != gaps[1]  # the seeds really differ
