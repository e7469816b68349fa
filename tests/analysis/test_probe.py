"""Reference features (hand-worked prefixes), linear probes (synthetic cases with known answers)
and the LinearProbe callback (an exact LSTM counter decodes perfectly; offline W&B files)."""

from __future__ import annotations

import functools

import lightning as L
import numpy as np
import pytest
import torch

from memrnn.analysis import available_features, fit_linear_probe, probe_features, reference_features
from memrnn.data import AcceptorDataModule, FormalLanguageDataModule
from memrnn.languages import AnBn, AnBnCn, DyckKM, DyckN, Latch
from memrnn.layers import LSTMLayer
from memrnn.lit import LinearProbe, SequenceModule, WandbLogger
from memrnn.lit.wandb_files import read_offline_run


def ids(language, symbols):
    return [language.symbols.index(s) for s in symbols.split()] + [language.end_id]


# -- reference features ------------------------------------------------------------------------
def test_dyck_km_stack_after_every_prefix():
    lang = DyckKM(2, 3)
    f = reference_features(lang, ids(lang, "(0 (1 (1 1) 1) 0) (1 1)"))
    # positions: start, then after each of the 8 symbols (END is never read as input)
    assert f["depth"].values.tolist() == [0, 1, 2, 3, 2, 1, 0, 1, 0]
    assert f["depth"].kind == "value" and f["stack_top"].kind == "class"
    assert f["stack_top"].labels == ("empty", "(0", "(1")
    assert f["stack_top"].values.tolist() == [0, 1, 2, 2, 2, 1, 0, 2, 0]
    assert set(available_features(lang)) == {"stack_top", "depth", "state"}


def test_dyck_km_pda_enforces_the_bound():
    lang = DyckKM(1, 2)
    assert lang.pda().accepts(["(0", "(0", "0)", "0)", "END"])
    assert not lang.pda().accepts(["(0", "(0", "(0", "0)", "0)", "0)", "END"])  # deeper than m


def test_counters_and_states():
    lang = AnBn()
    f = reference_features(lang, ids(lang, "a a a b b b"))
    assert f["counter"].values[:, 0].tolist() == [0, 1, 2, 3, 2, 1, 0]
    assert f["depth"].values.tolist() == [0, 1, 2, 3, 2, 1, 0]  # its PDA's stack: the same count
    assert available_features(lang) == ("stack_top", "depth", "state", "counter")
    lang3 = AnBnCn()
    f3 = reference_features(lang3, ids(lang3, "a a b b c c"))
    assert available_features(lang3) == ("counter", "state")
    assert f3["counter"].values.tolist() == [[0, 0], [1, 1], [2, 2], [1, 2], [0, 2], [0, 1], [0, 0]]
    assert f3["state"].values.tolist() == [0, 0, 0, 1, 1, 2, 2]
    latch = Latch()
    assert reference_features(latch, ids(latch, "0 1 1 1"))["state"].values.tolist() == [0, 0, 1, 0, 1]


def test_reference_features_reject_bad_strings():
    lang = DyckN(2)
    with pytest.raises(ValueError, match="dies"):
        reference_features(lang, ids(lang, "( ]"))
    with pytest.raises(ValueError, match="ending with END"):
        reference_features(lang, [0, 2])
    with pytest.raises(ValueError, match="unknown token id 9"):
        reference_features(lang, [9, lang.end_id])


# -- the probe itself --------------------------------------------------------------------------
def test_class_probe_decodes_a_linearly_separable_code_and_not_noise():
    g = torch.Generator().manual_seed(0)
    y = torch.randint(0, 4, (400,), generator=g)
    codes = torch.randn(4, 6, generator=g)
    x = codes[y] + 0.05 * torch.randn(400, 6, generator=g)
    r = fit_linear_probe(x[:200], y[:200], x[200:], y[200:], "class")
    assert r.accuracy == 1.0 and r.train_accuracy == 1.0 and np.isnan(r.r2)
    noise = torch.randn(400, 6, generator=g)
    r = fit_linear_probe(noise[:200], y[:200], noise[200:], y[200:], "class")
    assert r.accuracy < 0.45  # chance is 0.25


def test_value_probe_recovers_integer_counts():
    g = torch.Generator().manual_seed(1)
    v = torch.randint(0, 50, (300, 2), generator=g)
    mix = torch.randn(2, 5, generator=g)
    x = v.double() @ mix.double() + 3.0  # a linear, shifted code of two counters
    r = fit_linear_probe(x[:150], v[:150], x[150:], v[150:], "value", l2=1e-9)
    assert r.accuracy == 1.0 and r.r2 == pytest.approx(1.0, abs=1e-9)
    assert r.prediction.shape == (150, 2)
    x_bad = torch.cat([x[:, :1] * 0, torch.randn(300, 4, generator=g, dtype=torch.float64)], 1)
    r = fit_linear_probe(x_bad[:150], v[:150], x_bad[150:], v[150:], "value")
    assert r.accuracy < 0.1 and r.r2 < 0.2


def test_probe_errors_name_the_problem():
    x = torch.zeros(4, 3)
    with pytest.raises(ValueError, match="kind"):
        fit_linear_probe(x, [0, 1, 0, 1], x, [0, 1, 0, 1], "ordinal")
    with pytest.raises(ValueError, match="4/2 feature rows but 3/2"):
        fit_linear_probe(x, [0, 1, 0], x[:2], [0, 1], "class")
    feats = [reference_features(AnBn(), [0, 1, 2])] * 2
    with pytest.raises(ValueError, match="train_strings"):
        probe_features(torch.zeros(2, 3, 1), torch.ones(2, 3, dtype=torch.bool), feats, 2)
    with pytest.raises(ValueError, match="string 0: 2 real positions but 3"):
        mask = torch.tensor([[True, True, False]] * 2)
        probe_features(torch.zeros(2, 3, 1), mask, feats, 1)


# -- the callback ------------------------------------------------------------------------------
def counter_lstm_model(dm) -> SequenceModule:
    """Weiss et al.'s LSTM counter (docs/references.md): one unit with i = f = 1 and c̃ = +1 on ``a``,
    −1 on ``b``, so c_t = #a − #b exactly."""
    model = SequenceModule(
        functools.partial(LSTMLayer, hidden_size=1),
        dm.vocab_size,
        dm.num_symbols,
        embedding_dim=2,
        objectives={"acceptor_end": 1.0},
    )
    with torch.no_grad():
        emb = torch.zeros(dm.vocab_size, 2)
        emb[0, 0] = 1.0  # a
        emb[1, 1] = 1.0  # b
        model.embedding.weight.copy_(emb)
        rnn = model.layer.rnn
        for p in rnn.parameters():
            p.zero_()
        rnn.bias_ih_l0[0] = rnn.bias_ih_l0[1] = 30.0  # i, f saturated at 1
        rnn.weight_ih_l0[2] = torch.tensor([30.0, -30.0])  # c~ = tanh(±30) = ±1
    return model.double()


def test_linear_probe_reads_an_exact_counter(tmp_path):
    dm = AcceptorDataModule(AnBn(), train_size=0, val_size=8, test_size=0, train_lengths=(3, 41))
    model = counter_lstm_model(dm)
    cb = LinearProbe(representation="c", features=["counter", "depth"], num_strings=16, lengths=(3, 61))
    logger = WandbLogger(offline=True, save_dir=str(tmp_path), project="memrnn-test")
    trainer = L.Trainer(logger=logger, callbacks=[cb], enable_progress_bar=False, enable_model_summary=False,
                        enable_checkpointing=False, default_root_dir=tmp_path)  # fmt: skip
    trainer.validate(model, datamodule=dm, verbose=False)
    metrics = cb.results["val"].metrics
    assert metrics["counter_acc"] == 1.0 and metrics["counter_r2"] == pytest.approx(1.0, abs=1e-6)
    assert metrics["depth_acc"] == 1.0  # the PDA's stack height is the same count
    assert cb.probes["counter"].n_test == sum(len(s) for s in cb.probe_strings(trainer)[8:])
    logger.experiment.finish()
    run = read_offline_run(next((tmp_path / "wandb").glob("offline-run-*/run-*.wandb")), wait=30)
    row = next(r for r in run["history"] if "val/probe/counter_acc" in r)
    assert row["val/probe/counter_acc"] == 1.0
    image = next(r for r in run["history"] if "val/trace_heatmap/_type" in r)
    assert image["val/trace_heatmap/_type"] == "image-file"
    assert next(tmp_path.glob("**/figures/val_trace_heatmap_step*.png")).stat().st_size > 5000


def test_linear_probe_during_fit_on_dyck(tmp_path):
    """Runs at each validation (not the sanity check) of a real fit; a trained LSTM's state
    gives the Dyck-(2,3) stack top far above chance."""
    torch.manual_seed(0)
    dm = FormalLanguageDataModule(DyckKM(2, 3), train_size=600, val_size=50, test_size=0, batch_size=16)
    model = SequenceModule(functools.partial(LSTMLayer, hidden_size=12), dm.vocab_size, dm.num_symbols,
                           embedding_dim=8, lr=0.02)  # fmt: skip
    cb = LinearProbe(num_strings=40, heatmap_keys=["i", "f", "c"], every_n_epochs=2)
    trainer = L.Trainer(max_epochs=4, logger=False, callbacks=[cb], enable_progress_bar=False,
                        enable_model_summary=False, enable_checkpointing=False,
                        default_root_dir=tmp_path)  # fmt: skip
    trainer.fit(model, datamodule=dm)
    m = cb.results["val"].metrics
    assert set(m) == {"stack_top_acc", "stack_top_train_acc", "depth_acc", "depth_train_acc", "depth_r2",
                      "state_acc", "state_train_acc"}  # fmt: skip
    assert m["stack_top_acc"] > 0.9
    assert len(list(tmp_path.glob("figures/val_trace_heatmap_step*.png"))) == 2  # epochs 2 and 4


def test_linear_probe_config_errors(tmp_path):
    dm = AcceptorDataModule(AnBn(), train_size=0, val_size=4, test_size=0, train_lengths=(3, 21))
    model = counter_lstm_model(dm)
    for cb, match in [
        (LinearProbe(features=["stack_top", "tape"], num_strings=4), r"no reference features \['tape'\]"),
        (LinearProbe(representation="gates", num_strings=4), "representation 'gates' is not in the layer's trace"),
        (LinearProbe(heatmap_keys=["z"], num_strings=4), r"heatmap_keys \['z'\]"),
    ]:  # fmt: skip
        trainer = L.Trainer(logger=False, callbacks=[cb], enable_progress_bar=False, enable_model_summary=False,
                            default_root_dir=tmp_path)  # fmt: skip
        with pytest.raises(ValueError, match=match):
            trainer.validate(model, datamodule=dm, verbose=False)
    with pytest.raises(ValueError, match="train_fraction"):
        LinearProbe(train_fraction=1.0)
    with pytest.raises(ValueError, match="num_strings"):
        LinearProbe(num_strings=1)
