"""scripts/sweep.py: a one-architecture suite of a config over seeds, with the median and max of
each chosen metric's last logged value (``python -m memrnn.suite collect --last``)."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_sweep_reports_median_and_max(tmp_path):
    out = subprocess.run(
        [sys.executable, str(ROOT / "scripts/sweep.py"), "--config", str(ROOT / "configs/dyck/lstm_k2_m3.yaml"),
         "--seeds", "0", "1", "--metric", "val/ce_gap", "--metric", "val/closing", "--out", str(tmp_path),
         "--", "--trainer.max_epochs=1", "--data.init_args.train_size=64", "--data.init_args.val_size=32",
         "--data.init_args.test_size=16"],
        cwd=tmp_path, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    # the equivalent suite commands are printed before they run
    assert f"[sweep] python -m memrnn.suite run {tmp_path / 'lstm_k2_m3.suite.yaml'} -- " in out.stdout
    assert "collect" in out.stdout and "--last val/ce_gap --last val/closing" in out.stdout
    lines = out.stdout.strip().splitlines()
    head = next(i for i, line in enumerate(lines) if line.split()[:1] == ["seed"])
    table = {line.split()[0]: [float(x) for x in line.split()[1:]] for line in lines[head + 1 : head + 5]}
    assert set(table) == {"0", "1", "median", "max"}
    gaps = [table["0"][0], table["1"][0]]
    assert abs(table["median"][0] - sum(gaps) / 2) < 1e-3
    assert table["max"][0] == max(gaps)
    assert gaps[0] != gaps[1]  # the seeds really differ
    assert (tmp_path / "lstm_k2_m3" / "config" / "seed1" / "result.json").is_file()
