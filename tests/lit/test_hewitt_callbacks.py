"""HewittInit (start from the construction) and HewittComparison (learned vs constructed)."""

import functools

import lightning as L
import pytest
import torch

from memrnn.data import FormalLanguageDataModule
from memrnn.languages import DyckKM, DyckN
from memrnn.layers import LSTMLayer
from memrnn.lit import HewittComparison, HewittInit, SequenceModule


def run(tmp_path, language, hidden, callbacks, fit=False, **model_args):
    dm = FormalLanguageDataModule(
        language,
        train_size=40,
        val_size=40,
        test_size=0,
        train_lengths=(3, 31),
        batch_size=10,
        eval_batch_size=20,
    )
    torch.manual_seed(0)
    model = SequenceModule(
        functools.partial(LSTMLayer, hidden_size=hidden),
        language.input_vocab_size,
        language.num_symbols,
        embedding_dim=2 * language.bracket_types + 10,
        lr=0.0,
        bracket_types=language.bracket_types,
        **model_args,
    )
    t = L.Trainer(
        default_root_dir=tmp_path,
        logger=False,
        callbacks=callbacks,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        max_epochs=1,
    )
    if fit:
        t.fit(model, dm)
    else:
        t.validate(model, dm, verbose=False)
    return t, model


def test_the_construction_matches_itself(tmp_path):
    """HewittInit at scale 1, then zero learning rate: the comparison sees the construction."""
    lang = DyckKM(3, 2)
    cmp = HewittComparison(num_strings=16, lengths=(5, 31))
    t, _ = run(tmp_path, lang, 10, [HewittInit(), cmp], fit=True)
    m = cmp.results["val"].metrics
    assert m["slot_c_acc"] == 1.0 and m["slot1_c_acc"] == 1.0 and m["slot2_c_acc"] == 1.0
    for g in ("i", "f", "o"):
        assert m[f"saturation_{g}"] > 0.999
        assert m[f"match_{g}"] > 0.999
    assert m["match_c"] > 0.999
    assert float(t.callback_metrics["val/closing"]) == 1.0
    assert "gate_correlation" in cmp.results["val"].figures
    assert list((tmp_path).rglob("val_gate_correlation_step*.png"))


def test_a_random_lstm_is_far_from_the_construction(tmp_path):
    lang = DyckKM(3, 2)
    cmp = HewittComparison(num_strings=16, lengths=(5, 31), figures=False)
    run(tmp_path, lang, 10, [cmp])
    m = cmp.results["val"].metrics
    assert all(0 <= v <= 1 for v in m.values())
    assert m["saturation_f"] < 0.5 and m["match_f"] < 0.9


def test_clear_errors(tmp_path):
    with pytest.raises(ValueError, match="Dyck-\\(k,m\\) language"):
        run(tmp_path, DyckN(2), 6, [HewittComparison(num_strings=4, lengths=(3, 11))])
    with pytest.raises(ValueError, match="needs 10 hidden units in a lstm; the module has 4"):
        run(tmp_path, DyckKM(3, 2), 4, [HewittInit()], fit=True)
    # its readout weights are for the layer's outputs, not for Delétang et al.'s relu of them
    with pytest.raises(ValueError, match="readout_activation='relu'"):
        run(tmp_path, DyckKM(3, 2), 10, [HewittInit()], fit=True, readout_activation="relu")
    # a layer that reads w without BOS would be traced one step off the construction's references
    with pytest.raises(ValueError, match="initial_output=True"):
        run(
            tmp_path, DyckKM(3, 2), 6, [HewittComparison(num_strings=4, lengths=(3, 11))], initial_output=True
        )
