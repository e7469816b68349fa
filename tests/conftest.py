import os
from pathlib import Path

import pytest
import torch

os.environ.setdefault("WANDB_MODE", "offline")
# Without a GPU the Triton kernels run under Triton's interpreter (on CPU tensors); the variable
# must be set before memrnn's kernels are first imported (they are imported lazily, on first use).
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
os.environ.setdefault("WANDB_SILENT", "true")

# CUDA comparisons against CPU float32 references: TF32 matrix products (cuDNN's default on
# Ampere and later) round to 10 significand bits and put 7 of them past 1e-4; tests compare
# full float32.
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False


@pytest.fixture(autouse=True)
def _restore_environment():
    """wandb.init writes WANDB_SERVICE (its in-process service socket) and WANDB_MODE into
    os.environ; a later subprocess (train.py) would inherit them and talk to a dead service."""
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)


@pytest.fixture
def gen() -> torch.Generator:
    """A seeded generator, so each test owns its randomness."""
    return torch.Generator().manual_seed(1234)


def assert_close_tree(a, b, atol, rtol=0.0, what=""):
    from memrnn.core import state_leaves

    la, lb = state_leaves(a), state_leaves(b)
    assert len(la) == len(lb), f"{what}: {len(la)} vs {len(lb)} leaves"
    for i, (x, y) in enumerate(zip(la, lb, strict=True)):
        torch.testing.assert_close(x, y, atol=atol, rtol=rtol, msg=lambda m, i=i: f"{what} leaf {i}: {m}")


@pytest.fixture
def split_draws(monkeypatch) -> list[tuple[str, int]]:
    """The splits :class:`memrnn.data.FormalLanguageDataModule` draws during the test, as
    ``(split, split seed)`` in order (the list fills as they are drawn; clear it to count anew)."""
    from memrnn.data import FormalLanguageDataModule

    drawn: list[tuple[str, int]] = []
    build = FormalLanguageDataModule.build_split

    def counted(self, split):
        drawn.append((split, self.split_seed(split)))
        return build(self, split)

    monkeypatch.setattr(FormalLanguageDataModule, "build_split", counted)
    return drawn


CONFIGS = Path(__file__).resolve().parents[1] / "configs"


@pytest.fixture(scope="module")
def build_config(tmp_path_factory):
    """``build_config(path, *overrides)``: the LightningCLI's objects (``.model``, ``.datamodule``,
    ``.trainer``) of ``configs/<path>`` over ``configs/defaults.yaml``, the logger off, built and
    not run, once per test module and overrides (the parity tests read them)."""
    from memrnn.lit.cli import build_cli

    root, cache = tmp_path_factory.mktemp("configs"), {}

    def build(path: str, *args: str):
        key = (path, args)
        if key not in cache:
            cache[key] = build_cli(
                [
                    "--config",
                    str(CONFIGS / path),
                    "--trainer.logger=false",
                    f"--trainer.default_root_dir={root}",
                    *args,
                ],
                run=False,
                default_config_files=[CONFIGS / "defaults.yaml"],
            )
        return cache[key]

    return build
