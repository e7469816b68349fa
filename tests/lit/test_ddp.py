"""2-process DDP on CPU (gloo, ``ddp_fork`` in-process, as docs/ecosystem.md advises) gives the same
validation metrics as one process on the same data: every metric is sum-reduced."""

from __future__ import annotations

import functools

import lightning as L
import pytest
import torch

from memrnn.data import AcceptorDataModule, FormalLanguageDataModule
from memrnn.languages import AnBn, DyckKM
from memrnn.layers import LSTMLayer
from memrnn.lit import SequenceModule


def validate(model, dm, tmp_path, **kw):
    t = L.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False,
                  enable_checkpointing=False, default_root_dir=tmp_path, **kw)  # fmt: skip
    return t.validate(model, datamodule=dm, verbose=False)[0]


@pytest.mark.parametrize("task", ["generator", "acceptor"])
def test_two_process_ddp_metrics_equal_single_process(tmp_path, task):
    if task == "generator":
        # 48 strings: divisible by 2 ranks × batch 8, so DistributedSampler pads nothing
        dm = FormalLanguageDataModule(DyckKM(2, 3), train_size=8, val_size=48, test_size=0, batch_size=8,
                                      train_lengths=(1, 41), next_sets=True)  # fmt: skip
        objectives = {"generator": 1.0, "next_set": 1.0}
    else:
        dm = AcceptorDataModule(
            AnBn(), train_size=8, val_size=48, test_size=0, batch_size=8, train_lengths=(3, 41)
        )
        objectives = {"acceptor_end": 1.0, "acceptor_prefix": 1.0}
    torch.manual_seed(0)
    model = SequenceModule(functools.partial(LSTMLayer, hidden_size=8), dm.vocab_size, dm.num_symbols,
                           objectives=objectives, bracket_types=dm.bracket_types)  # fmt: skip
    single = validate(model, dm, tmp_path / "one", devices=1)
    both = validate(model, dm, tmp_path / "two", devices=2, strategy="ddp_fork")
    # val/loss (and each objective's val/loss_<name>) is Lightning's mean of per-batch means, and
    # the ranks' batches hold other strings (DistributedSampler interleaves them); the metrics are
    # sums over strings and must agree
    keys = [k for k in single if not k.startswith("val/loss")]
    assert len(keys) >= 2 and set(keys) <= set(both)
    for k in keys:
        assert both[k] == pytest.approx(single[k], rel=1e-6, abs=1e-9), k
