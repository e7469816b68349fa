"""CounterProbe: counting dimensions of a trained layer against the reference counters (Weiss et al. 2018
Figure 1), and the analysis functions under it."""

import functools

import lightning as L
import numpy as np
import pytest
import torch

from memrnn.analysis.counting import probe_string, reference_counters, unit_correlations
from memrnn.data import AcceptorDataModule
from memrnn.languages import AnBn, AnBnCn, DyckN
from memrnn.layers import GRULayer, LSTMLayer
from memrnn.lit import CounterProbe, SequenceModule


def test_reference_counters_and_probe_strings():
    ab, abc = AnBn(), AnBnCn()
    s = probe_string(ab, 3)
    assert s == [0, 0, 0, 1, 1, 1, ab.end_id]
    assert reference_counters(ab, s)["a-b"].tolist() == [0, 1, 2, 3, 2, 1, 0]
    r = reference_counters(abc, probe_string(abc, 2))
    assert r["a-b"].tolist() == [0, 1, 2, 1, 0, 0, 0]
    assert r["b-c"].tolist() == [0, 0, 0, 1, 2, 1, 0]
    assert r["a-c"].tolist() == [0, 1, 2, 2, 2, 1, 0]
    assert len(probe_string(ab)) == 2001 and len(probe_string(abc)) == 301
    dyck = DyckN(2)
    w = [0, 1, 3, 2, dyck.end_id]  # ( [ ] )
    assert reference_counters(dyck, w)["depth"].tolist() == [0, 1, 2, 1, 0]


def test_unit_correlations():
    t = np.arange(10.0)
    units = np.stack([2 * t + 1, -t, np.ones(10), (t % 2)], 1)
    r = unit_correlations(units, {"t": t, "const": np.zeros(10)})
    assert r.shape == (4, 2)
    np.testing.assert_allclose(r[:, 0][:3], [1.0, -1.0, 0.0])
    assert (r[:, 1] == 0).all()
    with pytest.raises(ValueError, match="10 positions of units but 3"):
        unit_correlations(units, {"t": np.zeros(3)})


def counting_lstm(language):
    """A 10-unit LSTM acceptor whose unit 0 is Weiss's counter: i = f = 1, c̃ = +1 on a, −1 on b."""
    torch.manual_seed(0)
    model = SequenceModule(
        functools.partial(LSTMLayer, hidden_size=10),
        language.input_vocab_size,
        language.num_symbols,
        embedding="one_hot",
        objectives={"acceptor_end": 1.0},
    )
    rnn = model.layer.rnn
    h = 10
    with torch.no_grad():
        for name in ("weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0"):
            getattr(rnn, name).mul_(0.1)
        rnn.weight_hh_l0[:, 0] = 0.0
        rnn.weight_hh_l0[[0, h, 2 * h, 3 * h]] = 0.0
        rnn.weight_ih_l0[[0, h, 2 * h, 3 * h]] = 0.0
        rnn.bias_ih_l0[[0, h, 3 * h]] = 30.0  # i = f = o = 1
        rnn.weight_ih_l0[2 * h, 0], rnn.weight_ih_l0[2 * h, 1] = 30.0, -30.0  # c̃ = ±1
    return model


def test_probe_finds_the_hand_made_counter_and_matches_the_construction():
    lang = AnBn()
    probe = CounterProbe()
    res, raw = probe.analyse(counting_lstm(lang), lang)
    m = res.metrics
    assert m["best_abs_r_a-b"] > 0.9999 and m["units_a-b"] >= 1
    assert m["construction_abs_r_a-b"] > 0.999
    assert res.tables["counter_correlations"]["key"].count("state.c") == 10
    c = raw["units"]["state.c"][:, 0]
    assert c[1000] == pytest.approx(1000, abs=0.1) and c[2000] == pytest.approx(0, abs=0.1)
    fig = probe.figure(lang, raw)
    assert len(fig.axes) == 2


def test_probe_in_training_logs_numbers_tables_and_figures(tmp_path):
    lang = AnBnCn()
    dm = AcceptorDataModule(lang, preset="weiss", batch_size=16, eval_batch_size=64, seed=0,
                            train_size=32, val_size=32, test_size=32)  # fmt: skip
    torch.manual_seed(0)
    model = SequenceModule(functools.partial(GRULayer, hidden_size=6), lang.input_vocab_size, lang.num_symbols,
                           embedding_dim=4, objectives={"acceptor_end": 1.0})  # fmt: skip
    probe = CounterProbe(n=20, splits=("val", "test"))
    t = L.Trainer(default_root_dir=tmp_path, logger=False, callbacks=[probe], enable_progress_bar=False,
                  enable_model_summary=False, enable_checkpointing=False, max_epochs=1)  # fmt: skip
    t.fit(model, dm)
    t.test(model, dm, verbose=False)
    for split in ("val", "test"):
        m = probe.results[split].metrics
        assert set(m) >= {"best_abs_r_a-b", "best_abs_r_b-c", "units_a-c", "construction_abs_r_a-c"}
        assert 0 <= m["best_abs_r_a-b"] <= 1
        assert m["construction_abs_r_a-c"] > 0.99
    assert list(tmp_path.rglob("counter_correlations_val.csv"))
    assert list(tmp_path.rglob("test_activations_step*.png"))


def test_bad_arguments():
    with pytest.raises(ValueError, match="threshold must lie in"):
        CounterProbe(threshold=1.5)
    with pytest.raises(ValueError, match="n must be a positive integer"):
        CounterProbe(n=0)
    lang = AnBn()
    with pytest.raises(ValueError, match=r"keys \['state.q'\] not in the layer's trace"):
        CounterProbe(keys=["state.q"]).analyse(counting_lstm(lang), lang)
