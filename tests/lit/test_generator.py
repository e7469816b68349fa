import functools
import math

import lightning as L
import pytest
import torch

from memrnn.data import FormalLanguageDataModule
from memrnn.languages import DyckKM
from memrnn.layers import ElmanRNN, LSTMLayer
from memrnn.lit import CrossEntropyGap, SequenceModule

PLATEAU = functools.partial(torch.optim.lr_scheduler.ReduceLROnPlateau, factor=0.5, patience=0)


def tiny_dm(seed=0):
    return FormalLanguageDataModule(
        DyckKM(2, 2), train_size=64, val_size=32, test_size=16, train_lengths=(1, 21), test_lengths=(23, 41),
        batch_size=8, eval_batch_size=16, seed=seed,
    )  # fmt: skip


def tiny_model(**kw):
    torch.manual_seed(0)
    return SequenceModule(functools.partial(LSTMLayer, hidden_size=8), vocab_size=6, num_symbols=5, **kw)


def trainer(tmp_path, epochs, **kw):
    return L.Trainer(
        max_epochs=epochs, logger=False, enable_progress_bar=False, enable_model_summary=False,
        default_root_dir=tmp_path, deterministic=True, **kw,
    )  # fmt: skip


def test_forward_shapes_and_bad_token_ids():
    model = tiny_model()
    logits = model(torch.tensor([[5, 0, 1], [5, 2, 0]]))
    assert logits.shape == (2, 3, 5)
    with pytest.raises(ValueError, match="unknown token id 9"):
        model(torch.tensor([[5, 9]]))
    with pytest.raises(ValueError, match="must build a memrnn MemoryLayer, got Linear"):
        SequenceModule(lambda d: torch.nn.Linear(d, 3), vocab_size=6, num_symbols=5)
    with pytest.raises(ValueError, match="num_symbols=0"):
        SequenceModule(functools.partial(ElmanRNN, hidden_size=3), vocab_size=4, num_symbols=0)
    # a transduction may have more output classes than input ids
    assert (
        SequenceModule(functools.partial(ElmanRNN, hidden_size=3), vocab_size=4, num_symbols=5).num_symbols
        == 5
    )


def test_cross_entropy_gap_by_hand():
    metric = CrossEntropyGap()
    logits = torch.zeros(2, 3, 4)  # uniform over 4 symbols: log 4 per token
    target = torch.tensor([[0, 1, 2], [3, -100, -100]])
    ref = torch.tensor([[-1.0, -1.0, -1.0], [-0.5, 0.0, 0.0]], dtype=torch.float64)
    metric.update(logits, target, ref)
    out = metric.compute()
    assert out["ce"].item() == pytest.approx(math.log(4))
    assert out["ce_exact"].item() == pytest.approx(3.5 / 4)
    assert out["ce_gap"].item() == pytest.approx(math.log(4) - 3.5 / 4)


def test_training_reduces_loss_and_validation_logs_the_gap(tmp_path):
    dm, model = tiny_dm(), tiny_model(lr=0.02)
    t = trainer(tmp_path, 1, enable_checkpointing=False)
    before = t.validate(model, datamodule=dm, verbose=False)[0]
    t = trainer(tmp_path, 4, enable_checkpointing=False)
    t.fit(model, datamodule=dm)
    after = t.validate(model, datamodule=dm, verbose=False)[0]
    assert after["val/ce"] < before["val/ce"] - 0.1
    assert after["val/ce_gap"] == pytest.approx(after["val/ce"] - after["val/ce_exact"], abs=1e-5)
    assert 0 < after["val/ce_exact"] < after["val/ce"] + 0.05
    assert {"val/acc", "val/ppl"} <= set(after)
    test = t.test(model, datamodule=dm, verbose=False)[0]
    assert {"test/ce", "test/ce_exact", "test/ce_gap"} <= set(test)


def test_checkpoint_save_load_and_resume_round_trip(tmp_path):
    """Loading a checkpoint gives the same metrics; resuming a 1-epoch run for a second epoch
    gives the same model as training 2 epochs straight."""
    straight = tiny_model(lr_scheduler=PLATEAU)
    t = trainer(tmp_path / "a", 2)
    t.fit(straight, datamodule=tiny_dm())
    want = t.validate(straight, datamodule=tiny_dm(), verbose=False)[0]
    ckpt = tmp_path / "a" / "straight.ckpt"
    t.save_checkpoint(ckpt)

    loaded = SequenceModule.load_from_checkpoint(ckpt)
    got = trainer(tmp_path / "b", 1).validate(loaded, datamodule=tiny_dm(), verbose=False)[0]
    assert got == pytest.approx(want, abs=1e-6)

    first = tiny_model(lr_scheduler=PLATEAU)
    t1 = trainer(tmp_path / "c", 1)
    t1.fit(first, datamodule=tiny_dm())
    half = tmp_path / "c" / "half.ckpt"
    t1.save_checkpoint(half)
    resumed = tiny_model(lr_scheduler=PLATEAU)
    t2 = trainer(tmp_path / "d", 2)
    t2.fit(resumed, datamodule=tiny_dm(), ckpt_path=half)
    for (name, p), q in zip(straight.named_parameters(), resumed.parameters(), strict=True):
        torch.testing.assert_close(p, q, atol=1e-6, rtol=1e-5, msg=lambda m, n=name: f"{n}: {m}")
    again = t2.validate(resumed, datamodule=tiny_dm(), verbose=False)[0]
    assert again == pytest.approx(want, abs=1e-5)
