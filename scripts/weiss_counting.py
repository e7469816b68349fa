"""The counting experiment of Weiss, Goldberg & Yahav 2018 (section 5), end to end: train each
``configs/weiss`` acceptor, test the checkpoint with the lowest validation loss on the 1,000 near
misses, and find its counting units with ``CounterProbe`` on a^1000 b^1000 (a^100 b^100 c^100).

    python scripts/weiss_counting.py [--configs lstm_anbn gru_anbn lstm_anbncn gru_anbncn] [--seed 0]

(the paper's protocol; ``--configs lstm_anbn_prefix …`` runs memrnn's per-prefix variant)

Prints one row per config: test accuracy, the paper's, and the best |r| of a unit with each
reference counter.  Runs go to ``runs/weiss_counting/<config>/seed<S>``.
"""

from __future__ import annotations

import argparse
import importlib
import subprocess
import sys
from pathlib import Path

import torch
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from memrnn.lit import CounterProbe, SequenceModule  # noqa: E402
from memrnn.lit.wandb_files import read_offline_run  # noqa: E402

PAPER = {"lstm_anbn": "100%", "gru_anbn": "87.0%", "lstm_anbncn": "98.6%", "gru_anbncn": "86.9%"}


def language_of(run: Path):
    """The language of the fit under ``run``, from the resolved config its run folder keeps
    (the experiment configs are overlays; this file has every key)."""
    config = next(p for p in sorted(run.rglob("config.yaml")) if "test" not in p.relative_to(run).parts)
    spec = yaml.safe_load(config.read_text())["data"]["init_args"]["language"]
    module, _, name = spec["class_path"].rpartition(".")
    return getattr(importlib.import_module(module), name)(**spec.get("init_args", {}))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--configs", nargs="+", default=list(PAPER))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="runs/weiss_counting")
    args = p.parse_args(argv)
    rows = []
    for stem in args.configs:
        config = ROOT / "configs" / "weiss" / f"{stem}.yaml"
        save = Path(args.out) / stem / f"seed{args.seed}"
        common = [
            "--config",
            str(config),
            f"--seed_everything={args.seed}",
            f"--data.init_args.seed={args.seed}",
        ]
        fit = [
            sys.executable,
            str(ROOT / "train.py"),
            "fit",
            *common,
            f"--trainer.logger.init_args.save_dir={save}",
        ]
        print(f"[weiss] {stem}: fit", flush=True)
        done = subprocess.run(fit, capture_output=True, text=True)
        if done.returncode:
            print(done.stderr[-4000:], file=sys.stderr)
            return done.returncode
        ckpts = [c for c in save.rglob("epoch*.ckpt")]
        best = min(ckpts, key=lambda c: float(c.stem.rsplit("loss", 1)[1]))
        test = [sys.executable, str(ROOT / "train.py"), "test", *common, f"--ckpt_path={best}",
                f"--trainer.logger.init_args.save_dir={save / 'test'}"]  # fmt: skip
        print(f"[weiss] {stem}: test {best.name}", flush=True)
        done = subprocess.run(test, capture_output=True, text=True)
        if done.returncode:
            print(done.stderr[-4000:], file=sys.stderr)
            return done.returncode
        run = read_offline_run(sorted((save / "test").glob("wandb/*run-*/run-*.wandb"))[-1], wait=30)
        acc = next(r["test/accept_end"] for r in run["history"] if "test/accept_end" in r)
        model = SequenceModule.load_from_checkpoint(best, map_location="cpu").eval()
        with torch.no_grad():
            result, _ = CounterProbe().analyse(model, language_of(save))
        corr = {
            k.removeprefix("best_abs_r_"): v for k, v in result.metrics.items() if k.startswith("best_abs_r_")
        }
        rows.append((stem, acc, corr))
        print(
            f"[weiss] {stem}: test accuracy {acc:.1%} (paper {PAPER.get(stem.removesuffix('_prefix'), '?')}), best |r| {corr}",
            flush=True,
        )
    print("\n| config | test accuracy | Weiss et al. | best abs r per reference counter |")
    print("| --- | --- | --- | --- |")
    for stem, acc, corr in rows:
        cells = ", ".join(f"{k}: {v:.4f}" for k, v in corr.items())
        print(f"| {stem} | {acc:.1%} | {PAPER.get(stem.removesuffix('_prefix'), '?')} | {cells} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
