"""StackActions: an nnPDA's learned actions against the language's PDA, and the extracted PDA;
the one-hot embedding and the PDA-initialized layer that configs use."""

import csv
import functools

import lightning as L
import pytest
import torch

from memrnn.constructions import PDAInitializedNNPDA
from memrnn.data import AcceptorDataModule
from memrnn.languages import DyckN
from memrnn.languages.counting import AnBn
from memrnn.layers import NNPDA
from memrnn.lit import SequenceModule, StackActions


def validate(tmp_path, language, layer):
    dm = AcceptorDataModule(
        language, train_size=0, val_size=40, test_size=0, train_lengths=(3, 21), eval_batch_size=20
    )
    model = SequenceModule(
        layer,
        language.input_vocab_size,
        language.num_symbols,
        embedding="one_hot",
        objectives={"acceptor_end": 1.0},
    )
    cb = StackActions(num_strings=16, lengths=(3, 21))
    t = L.Trainer(
        default_root_dir=tmp_path,
        logger=False,
        callbacks=[cb],
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    t.validate(model, dm, verbose=False)
    return cb, model


@pytest.mark.parametrize("language", [AnBn(), DyckN(2)], ids=str)
def test_pda_initialized_layer_matches_the_pda_exactly(tmp_path, language):
    cb, model = validate(tmp_path, language, functools.partial(PDAInitializedNNPDA, language=language))
    m = cb.results["val"].metrics
    assert m["action_acc"] == 1.0 and m["push_acc"] == 1.0 and m["pop_acc"] == 1.0 and m["noop_acc"] == 1.0
    assert m["symbol_acc"] == 1.0
    pda = language.pda()
    assert m["extracted_states"] == len(pda.states)
    ext = cb.extracted
    for w in (
        (["a", "b", "END"], ["a", "a", "b", "b", "END"], ["a", "b", "b"])
        if isinstance(language, AnBn)
        else (
            ["(", "[", "]", ")", "END"],
            ["(", "]", "END"],
        )
    ):
        assert (len(ext.run(w)) == len(w)) == (len(pda.run(w)) == len(w))
    with open(tmp_path / "extracted_pda_val.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == len(ext.delta) and {r["op"] for r in rows} >= {"pop", "noop"}
    assert next(tmp_path.glob("figures/val_trace_heatmap_step*.png")).stat().st_size > 1000
    # the embedding is a frozen identity
    assert torch.equal(model.embedding.weight, torch.eye(language.input_vocab_size))
    assert not model.embedding.weight.requires_grad


def test_random_nnpda_disagrees_and_errors_are_clear(tmp_path):
    torch.manual_seed(0)
    language = AnBn()
    layer = functools.partial(NNPDA, num_states=3, stack_symbols=1, action="sigmoid", one_hot_input=True)
    cb, _ = validate(tmp_path, language, layer)
    assert cb.results["val"].metrics["action_acc"] < 1.0
    with pytest.raises(ValueError, match="input_size must be 4"):
        PDAInitializedNNPDA(5, language=language)
    with pytest.raises(ValueError, match="embedding_dim=8 would be ignored"):
        SequenceModule(layer, 4, 3, embedding="one_hot", embedding_dim=8)
    with pytest.raises(ValueError, match="unknown embedding 'onehot'"):
        SequenceModule(layer, 4, 3, embedding="onehot")


def test_learned_sensitivity_survives_the_initialization():
    layer = PDAInitializedNNPDA(4, language=AnBn(), sensitivity=7.0, learn_sensitivity=True, extra_states=1)
    assert float(layer.sensitivity) == 7.0 and layer.num_states == 4
    assert (layer.weight_q[3] == 0).all() and (layer.weight_q[:, 3] == 0).all()


def test_noise_perturbs_every_weight_reproducibly():
    a = PDAInitializedNNPDA(4, language=AnBn(), noise=0.1, seed=3)
    b = PDAInitializedNNPDA(4, language=AnBn(), noise=0.1, seed=3)
    exact = PDAInitializedNNPDA(4, language=AnBn())
    for name, p in a.named_parameters():
        assert torch.equal(p, dict(b.named_parameters())[name])
        d = (p - dict(exact.named_parameters())[name]).abs()
        assert 0 < d.max() <= 0.1 and (d > 0).float().mean() > 0.9
