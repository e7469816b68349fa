"""Parity with Weiss, Goldberg & Yahav (2018), section 5 and footnote 6 (docs/parity.md, Weiss et
al. rows).  No public code trained the paper's acceptors (``tech-srl/counting_dimensions`` holds a
DyNet notebook with four pretrained *token-predicting* networks), so the paper is the reference:
each test holds one row's memrnn default, building ``configs/weiss`` through the real CLI (no
training)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from lightning.pytorch.callbacks import EarlyStopping

from memrnn.data.presets import get_preset
from memrnn.languages import AnBn, AnBnCn
from memrnn.layers import GRULayer, LSTMLayer

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = [f"{arch}_{task}" for task in ("anbn", "anbncn") for arch in ("lstm", "gru")]
#: the paper's training n ranges (``n`` up to 100 for a^n b^n, up to 50 for a^n b^n c^n)
N_MAX = {"anbn": 100, "anbncn": 50}


@pytest.fixture(scope="module")
def build(build_config):
    """``build(name, *overrides)``: the CLI's objects of ``configs/weiss/<name>.yaml``."""
    return lambda name, *args: build_config(f"weiss/{name}.yaml", *args)


@pytest.mark.parametrize("name", CONFIGS)
def test_ten_unit_one_layer_acceptors_with_one_label_per_string(build, name):
    """Section 5: "We train 10-dimension, 1-layer LSTM and GRU networks to recognize a^n b^n and
    a^n b^n c^n": acceptors read at each string's own end, nothing else in the loss."""
    module = build(name).model
    kind = LSTMLayer if name.startswith("lstm") else GRULayer
    assert type(module.layer) is kind and module.layer.hidden_size == 10 and module.layer.rnn.num_layers == 1
    assert module.objectives == {"acceptor_end": 1.0} and list(module.heads) == ["acceptor"]
    # the optimizer row: the paper's "SGD" has no learning rate; memrnn's is Adam at 0.005
    assert module.optimizer_class is torch.optim.Adam and module.hparams.lr == 0.005


@pytest.mark.parametrize("name", CONFIGS)
def test_training_strings_are_the_papers(build, name):
    """Positives with ``n`` uniform up to 100 (50); negatives: the block counts drawn independently
    from the same range, at least one differing (so no negative lacks a block)."""
    task = name.split("_")[1]
    dm = build(name).datamodule
    lang = dm.language
    assert type(lang) is (AnBn if task == "anbn" else AnBnCn) and lang.negative_min_count is None
    blocks = lang.blocks
    assert dm.windows["train"] == dm.windows["val"] == (blocks + 1, blocks * N_MAX[task] + 1)
    assert dm.length_sampling == "uniform" and dm.negative_fraction == 0.5
    rng = np.random.default_rng(0)
    for _ in range(200):
        w = lang.sample_negative(rng, dm.windows["train"])
        counts = [w.count(i) for i in range(blocks)]
        assert min(counts) >= 1 and max(counts) <= N_MAX[task] and len(set(counts)) > 1, counts
        assert not lang.accepts(w)


@pytest.mark.parametrize("name", CONFIGS)
def test_training_stops_at_full_dev_accuracy(build, name):
    """Footnote 6, "train up to 100% dev set accuracy": stop once all 500 dev strings are right."""
    cli = build(name)
    stops = [c for c in cli.trainer.callbacks if isinstance(c, EarlyStopping)]
    (stop,) = [c for c in stops if c.monitor == "val/accept_end"]
    assert stop.mode == "max" and 1 - 1 / cli.datamodule.sizes["val"] < stop.stopping_threshold < 1
    assert stop.patience >= cli.trainer.max_epochs  # it stops on the threshold alone


def test_the_preset_and_the_near_miss_test_sets(build):
    """1,000-string test sets ``a^{n+i} b^{n+j}`` (``c^{n+k}``), ``n ∈ [0, 200]`` ([0, 150]),
    ``i, j, k ∈ [−2, 2]``, labelled by membership."""
    p = get_preset("weiss")
    assert (p.train_size, p.val_size, p.test_size, p.extra) == (2000, 500, 1000, {"test_set": "near_miss"})
    for name, n_hi in (("lstm_anbn", 200), ("lstm_anbncn", 150)):
        dm = build(name).datamodule
        assert dm.test_set == "near_miss" and dm.sizes["test"] == 1000
        strings, labels = dm.language.near_miss_test_set(np.random.default_rng(0), 300)
        for w, label in zip(strings, labels, strict=True):
            counts = [w.count(i) for i in range(dm.language.blocks)]
            assert max(counts) - min(counts) <= 4 and max(counts) <= n_hi + 2
            assert label == dm.language.accepts(w)
        assert 0 < sum(labels) < 300


@pytest.mark.parametrize("name", CONFIGS)
def test_memrns_variant_is_a_named_option(build, name):
    """``<config>_prefix.yaml``: per-prefix labels and empty-block negatives, trained the full 60
    epochs (memrnn's default before the parity audit)."""
    cli = build(f"{name}_prefix")
    assert cli.model.objectives == {"acceptor_end": 1.0, "acceptor_prefix": 1.0}
    assert cli.datamodule.language.negative_min_count == 0
    assert not [c for c in cli.trainer.callbacks if isinstance(c, EarlyStopping)]
    assert type(cli.model.layer) is type(build(name).model.layer) and cli.model.layer.hidden_size == 10


def test_the_input_is_memrns_choice(build):
    """The paper is silent on the input; memrnn reads a 4-dim learned embedding with ``BOS`` first
    (the public token predictors: 3-dim lookups, a learned initial state, no start symbol)."""
    module = build("lstm_anbn").model
    assert module.hparams.embedding == "learned" and module.hparams.embedding_dim == 4
    assert module.vocab_size == 4  # a, b, END, BOS
