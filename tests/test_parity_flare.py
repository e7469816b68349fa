"""Parity with the public code of Butoi et al. (2025), FLaRe (rycolab/neural-network-recognizers,
``src/recognizers/string_sampling/sample_dataset.py`` and the languages it samples): each test
holds one data default of ``configs/flare``, built through the real CLI (no training).  Where the
paper's text and the code could differ, the code that made the benchmark's data is the default
and the other convention a named option."""

from __future__ import annotations

import collections
import math
from pathlib import Path

import numpy as np
import pytest

from memrnn.languages.recognizers import AutomatonRecognitionLanguage, ComputeSqrt, sample_negative_with_edits

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = sorted(p.stem for p in (ROOT / "configs" / "flare").glob("*.yaml") if not p.name.startswith("_"))


@pytest.fixture(scope="module")
def build(build_config):
    """``build(name, *overrides)``: the CLI's objects of ``configs/flare/<name>.yaml``."""
    return lambda name, *args: build_config(f"flare/{name}.yaml", *args)


def test_there_are_flare_configs():
    assert {"lstm", "rnn", "lstm_lm_ns"} <= set(CONFIGS)


@pytest.mark.parametrize("name", CONFIGS)
def test_every_flare_config_makes_the_public_codes_data(build, name):
    """``sample_dataset.py``'s ``main``: 10,000 training strings (0–40), validation-short 1,000
    (0–40), validation-long 1,000 (0–80), test 10 × 501 (0–500), half positive, negatives edited
    with probability 0.5 (``--perturbation-probability``), the kind redrawn on every try (no
    ``--strict-num-edits-distribution``), the float root of compute_sqrt, the uniform-action
    automaton for the regular languages, its stack-manipulation next-symbol sets; the benchmark's
    test set is the one scored (its held-out set an option)."""
    dm = build(name).datamodule
    assert dm.sizes == {"train": 10_000, "val": 1_000, "test": 5_010}
    assert dm.windows == {"train": (0, 40), "val": (0, 40), "test": (0, 500)}
    assert dm.sets["val_long"] == (1_000, (0, 80)) and dm.sets["held_out"] == (1_000, (0, 40))
    assert dm.perturbation_probability == 0.5
    assert (dm.sqrt_convention, dm.regular_sampling, dm.strict_edits, dm.convention, dm.test_set) == (
        "public",
        "pdfa",
        False,
        "public",
        "test",
    )
    assert build(name, "--data.init_args.validation=long").datamodule.windows["val"] == (0, 80)


def _public_sqrt_member(s, window):
    """The public code's membership test of compute_sqrt (``LengthRestrictedComputeSqrt``),
    transcribed: the length in the window, ``x = z`` with both non-empty little-endian binary
    numbers, and ``z`` the floor of the float square root of ``x``."""
    if not window[0] <= len(s) <= window[1] or s.count(2) != 1:
        return False
    i = s.index(2)
    x, z = s[:i], s[i + 1 :]
    if not x or not z:
        return False
    value = lambda bits: sum(b << k for k, b in enumerate(bits))  # noqa: E731
    return math.floor(math.sqrt(value(x))) == value(z)


def test_compute_sqrt_data_carry_the_public_codes_labels(build):
    """Every compute_sqrt string of lengths 0–500 the default config draws is labelled as the
    public code's membership test labels it (its float root); with ``sqrt_convention=exact`` a
    third of the long positives fail that test (``math.isqrt``'s language)."""
    args = ("--data.init_args.language=compute_sqrt", "--data.init_args.test_per_length=1")
    dm = build("lstm", *args).datamodule
    assert isinstance(dm.language, ComputeSqrt) and dm.language.sqrt == "public"
    test = dm.draw("test")
    assert len(test) == 501 and 200 < sum(y for _, y in test) < 300
    assert all(_public_sqrt_member(s, (0, 500)) == y for s, y in test)
    big = [s for s, y in test if y and s.index(2) > 60]  # x beyond 2**60: where the roots can differ
    assert len(big) > 100
    exact = build("lstm", *args, "--data.init_args.sqrt_convention=exact").datamodule
    assert exact.language.sqrt == "exact"
    positives = [s for s, y in exact.draw("test") if y]
    failing = np.mean([not _public_sqrt_member(s, (0, 500)) for s in positives])
    assert 0.2 < failing < 0.5, failing


def test_regular_strings_come_from_the_public_codes_automaton(build):
    """``prepare_sampler.py`` gives each state's actions (arcs, and accepting) equal probability
    and samples conditioned on the length: parity's strings of length 4 are not equally likely
    (0001, even state throughout, 0.216; 1000 0.064); ``regular_sampling=uniform`` gives 1/8
    each."""
    lang = build("lstm", "--data.init_args.language=parity").datamodule.language
    assert isinstance(lang, AutomatonRecognitionLanguage) and lang.sampling == "pdfa"
    rng = np.random.default_rng(0)
    freq = collections.Counter(lang.sample(rng, (4, 4)) for _ in range(6_000))
    assert freq[(0, 0, 0, 1)] / 6_000 == pytest.approx(0.216, abs=0.025)
    assert freq[(1, 0, 0, 0)] / 6_000 == pytest.approx(0.064, abs=0.025)
    uniform = build("lstm", "--data.init_args.language=parity", "--data.init_args.regular_sampling=uniform")
    assert uniform.datamodule.language.sampling == "uniform"


def test_negatives_redraw_their_kind_unless_strict(build):
    """The public code's default redraws edited-or-uniform on every rejected try, so an even-pairs
    negative is an edited positive well under half the time; ``strict_edits=true``
    (``--strict-num-edits-distribution``) keeps the share at ``perturbation_probability``."""
    for strict, lo, hi in ((False, 0.0, 0.35), (True, 0.4, 0.6)):
        args = ("--data.init_args.language=even_pairs",) + (
            ("--data.init_args.strict_edits=true",) if strict else ()
        )
        dm = build("lstm", *args).datamodule
        assert dm.strict_edits is strict
        rng = np.random.default_rng(1)
        made = [
            sample_negative_with_edits(
                dm.language, rng, (0, 40), dm.perturbation_probability, strict_edits=strict
            )
            for _ in range(600)
        ]
        assert lo < np.mean([k is not None for _, k in made]) < hi


def test_the_held_out_set_is_the_public_codes_test_short_held_out(build):
    """``test_set=held_out``: ``test-short-held-out``, 1,000 strings of lengths 0–40, none a
    training, validation-short or validation-long string (with the protocol's sizes)."""
    dm = build(
        "lstm", "--data.init_args.language=marked_reversal", "--data.init_args.test_set=held_out"
    ).datamodule
    assert dm.sizes["test"] == 1_000 and dm.windows["test"] == (0, 40)
    held = {s for s, _ in dm.draw("held_out")}
    assert len(dm.draw("held_out")) == 1_000 and max(map(len, held)) <= 40
    for other, size in (("train", 10_000), ("val_short", 1_000), ("val_long", 1_000)):
        drawn = dm.draw(other)
        assert len(drawn) == size and not held & {s for s, _ in drawn}, other


# -- the models (model_interface.py, get_architecture_args.py) --------------------------------------
def _public_count(architecture: str, vocab: int, hidden: int, layers: int = 5) -> int:
    """get_architecture_args.py's parameter count of its RNN and LSTM recognizers."""
    gates = 1 if architecture == "rnn" else 4
    return vocab * hidden + layers * hidden + layers * gates * hidden * (2 * hidden + 1) + hidden + 1


def _public_hidden(architecture: str, vocab: int, budget: int = 64_000, layers: int = 5) -> int:
    """get_architecture_args.py's hidden size: the rounded root of its count = budget."""
    a, b = (
        (2 * layers, vocab + 2 * layers + 1)
        if architecture == "rnn"
        else (8 * layers, vocab + 5 * layers + 1)
    )
    c = 1 - budget
    return round((-b + math.sqrt(b * b - 4 * a * c)) / (2 * a))


@pytest.mark.parametrize("name", ["rnn", "lstm"])
def test_the_recognizers_are_the_public_codes_models(build, name):
    """``construct_model``: a learned embedding of the hidden size, dropout 0.1 before and after the
    core and between its 5 layers, rau's RNN/LSTM with a learned initial hidden state
    (``learned_hidden_state``) and one bias per gate, no start symbol (``include_first``), the
    recognition head read at the last position; ``smart_init`` with a U(-0.1, 0.1) fallback; the
    hidden size of the 64,000-parameter formula; batches of up to a trial's tokens."""
    cli = build(name)
    model, dm = cli.model, cli.datamodule
    layer = model.layer
    hidden = _public_hidden(name, len(dm.language.alphabet))
    assert layer.hidden_size == hidden == (79 if name == "rnn" else 40)
    assert (layer.num_layers, layer.dropout, layer.learned_initial_state) == (5, 0.1, True)
    assert getattr(layer, "extra_bias", False) is False  # the LSTM's one bias per gate
    hp = model.hparams
    assert (hp.embedding, hp.embedding_dim, hp.initial_output, hp.dropout, hp.init) == (
        "learned",
        hidden,
        True,
        0.1,
        "flare",
    )
    # their count plus memrnn's BOS embedding row, never read with initial_output
    count = sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert count == _public_count(name, len(dm.language.alphabet), hidden) + hidden
    assert dm.batch_tokens == 2112  # the mean of their per-trial uniform 128-4,096


def test_the_language_modelling_head_is_the_tied_embedding(build):
    """``get_shared_embeddings(tie_embeddings=use_language_modeling_head)``: the LM head is the
    input embedding, without a bias; the next-symbol head has its own weights."""
    model = build("lstm_lm_ns").model
    assert model.hparams.tie_embeddings is True
    assert model.heads["generator"].weight is model.embedding.weight
    assert getattr(model.heads["generator"], "bias", None) is None
    assert model.heads["next_set"].weight is not model.embedding.weight
