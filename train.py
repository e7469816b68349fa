"""Train any memrnn layer on any formal language: ``python train.py fit --config configs/….yaml``.

``configs/defaults.yaml`` (trainer, W&B logger, checkpoints) is always read first.
"""

from pathlib import Path

from memrnn.lit.cli import build_cli

DEFAULTS = Path(__file__).resolve().parent / "configs" / "defaults.yaml"

if __name__ == "__main__":
    build_cli(default_config_files=[DEFAULTS])
