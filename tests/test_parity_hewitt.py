"""Parity with Hewitt et al.'s (2020) public code, ``john-hewitt/dyckkm-learning``
(docs/parity.md, Hewitt et al. rows): each test holds one row's memrnn default, building the model
and data from ``configs/hewitt`` (and ``configs/dyck``) through the real CLI (no training)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from lightning.pytorch.callbacks import EarlyStopping
from torch.optim.lr_scheduler import ReduceLROnPlateau

from memrnn.data import collate_generator
from memrnn.languages import DyckKM, bracket_annotations
from memrnn.layers import LSTMLayer
from memrnn.lit.metrics import BracketClosingAccuracy
from memrnn.suite import Suite

ROOT = Path(__file__).resolve().parents[1]
KM = [(k, m) for m in (3, 5) for k in (2, 8, 32, 128)]


def authors_lr(k: int, tokens: int) -> float:
    """scripts/make_emnlp2020_experiments.py's learning rate."""
    return 0.001 if tokens >= 10_000_000 or (tokens >= 1_000_000 and k == 128) else 0.01


@pytest.fixture(scope="module")
def build(build_config):
    """``build(config, *overrides)`` (``config`` relative to ``configs/``) through the CLI."""
    return build_config


@pytest.mark.parametrize(("k", "m"), KM)
def test_model_sizes_are_the_scripts(build, k, m):
    """``hidden_dim = round(m*(3*log2 k)) - m``, ``embedding_dim = 2k + 10``, one ``nn.LSTM``
    layer (``PytorchRecurrentModel``), a linear readout (``TraditionalLanguageModel``)."""
    cli = build(f"hewitt/lstm_k{k}_m{m}.yaml")
    module, lang = cli.model, cli.datamodule.language
    assert (lang.k, lang.m) == (k, m)
    assert isinstance(module.layer, LSTMLayer) and module.layer.rnn.num_layers == 1
    assert module.layer.hidden_size == round(m * 3 * math.log2(k)) - m == 3 * m * math.ceil(math.log2(k)) - m
    assert module.hparams.embedding_dim == 2 * k + 10 and module.hparams.embedding == "learned"
    assert isinstance(module.readout, torch.nn.Linear)


def test_vocabulary_and_readout(build):
    """Inputs: the brackets and a start symbol; outputs: memrnn's 2k + 1 classes (the brackets and
    END), theirs 2k + 2 (their softmax also has START, never a target).  The readout is
    initialised as theirs (``lm.py``): ``U(-sqrt(h), sqrt(h))`` with a zero bias (``init: hewitt``);
    the LSTM keeps torch's (|w| <= 1/sqrt(h))."""
    module = build("hewitt/lstm_k8_m3.yaml").model
    assert module.vocab_size == 2 * 8 + 2 and module.num_symbols == 2 * 8 + 1
    h = module.layer.hidden_size
    assert module.hparams.init == "hewitt" and module.readout.bias.abs().sum() == 0
    assert 1 / math.sqrt(h) < module.readout.weight.abs().max() <= math.sqrt(h)
    assert max(p.abs().max() for p in module.layer.parameters()) <= 1 / math.sqrt(h) + 1e-6


@pytest.mark.parametrize(("k", "m"), KM)
def test_training_is_the_authors_regimen(build, k, m):
    """``training_regimen.train``: Adam, ``ReduceLROnPlateau(factor=0.5, patience=0)`` on the dev
    loss, stop after 3 epochs without an improvement of 1e-4, at most 100 epochs, batch 10, no
    gradient clipping; the learning rate of the configs' 2e6 tokens."""
    cli = build(f"hewitt/lstm_k{k}_m{m}.yaml")
    module = cli.model
    assert module.optimizer_class is torch.optim.Adam and module.hparams.lr == authors_lr(k, 2_000_000)
    sched = module.lr_scheduler(torch.optim.Adam([torch.zeros(1, requires_grad=True)], lr=1.0))
    assert isinstance(sched, ReduceLROnPlateau) and (sched.factor, sched.patience) == (0.5, 0)
    (stop,) = [c for c in cli.trainer.callbacks if isinstance(c, EarlyStopping)]
    assert (stop.monitor, stop.patience, abs(stop.min_delta)) == ("val/ce", 3, 1e-4)
    assert cli.trainer.max_epochs == 100 and cli.trainer.gradient_clip_val is None
    assert cli.datamodule.batch_size == 10 and module.loss_reduction == "token"


def test_the_figure_suite_uses_the_authors_learning_rate_in_every_cell(build):
    """Every (k, m, tokens) cell of ``hewitt_fig3.yaml`` trains at ``authors_lr(k, tokens)``."""
    suite = Suite.load(ROOT / "configs" / "suites" / "hewitt_fig3.yaml")
    assert suite.seeds == [0, 1, 2] and suite.metric == "test/closing_error"
    seen = set()
    for cell in suite.cells():
        if cell.seed:
            continue
        args = suite.cli_args(cell)
        tokens = int(next(a for a in args if a.startswith("--data.init_args.train_tokens=")).split("=")[1])
        given = [float(a.split("=")[1]) for a in args if a.startswith("--model.init_args.lr=")]
        k, m = (int(x[1:]) for x in cell.arch.split("_"))
        lr = given[-1] if given else build(f"hewitt/lstm_k{k}_m{m}.yaml").model.hparams.lr
        assert lr == authors_lr(k, tokens), cell.name
        seen.add(tokens)
    assert seen == {2_000, 20_000, 200_000, 2_000_000, 20_000_000}


@pytest.mark.parametrize("m", (3, 5))
def test_data_sizes_and_windows_are_table_2(build, m):
    """Tokens (END counted, START not): 2e6 train, 20k dev, 300k test; lengths 1..8m(m-2)+60 for
    train and dev, (that, twice that] for test; END re-drawn until ``min_length`` symbols
    (``DyckPDFA.sample``), longer strings rejected whole (``write_dataset``)."""
    dm = build(f"hewitt/lstm_k2_m{m}.yaml").datamodule
    top = 8 * m * (m - 2) + 60
    assert dm.tokens == {"train": 2_000_000, "val": 20_000, "test": 300_000}
    assert dm.windows == {"train": (1, top), "val": (1, top), "test": (top + 1, 2 * top)}
    assert dm.length_sampling == "natural" and dm.language.truncation == "hewitt"


def test_a_split_counted_in_tokens_stops_once_it_has_them(build):
    """``while total_tokens_written < sample_count``: whole strings until the count is reached."""
    dm = build("hewitt/lstm_k2_m3.yaml", "--data.init_args.train_tokens=300").datamodule
    strings = dm.build_split("train").strings
    total = sum(len(w) for w in strings)
    assert total >= 300 and total - len(strings[-1]) < 300


def test_the_generating_distribution_is_h1_with_their_truncation():
    """``DyckPDFA.get_token_distribution_for_state``: empty stack: each open 1/(2k), END 1/2;
    0 < depth < m: each open 1/(2k), close-top 1/2; depth m: close-top 1.  With the window's
    minimum not reached, END is re-drawn: each open 1/k on the empty stack."""
    lang = DyckKM(k=2, m=3)
    end = lang.end_id
    p = np.exp(lang.next_log_probs([]))
    assert p[:2] == pytest.approx([0.25, 0.25]) and p[end] == pytest.approx(0.5)
    p = np.exp(lang.next_log_probs([0, 1]))
    assert p[:2] == pytest.approx([0.25, 0.25]) and p[2 + 1] == pytest.approx(0.5)
    p = np.exp(lang.next_log_probs([0, 1, 0]))
    assert p[2 + 0] == pytest.approx(1.0)
    assert DyckKM(k=2, m=3).truncation == "hewitt"
    rng = np.random.default_rng(0)
    for _ in range(50):  # test strings: END only after 85 brackets, at most 168 tokens
        w = lang.sample(rng, (85, 168))
        assert len(w) - 1 >= 85 and len(w) <= 168


def test_the_closing_metric_scores_every_open_stack_position_weighting_distances_equally(build):
    """H.4 as their reporter.py computes it (the default, ``positions="code"``): at every position
    whose stack is non-empty, whatever comes next, ``p(close of the top)/Σ p(close) > 0.8``, a rate
    per distance from the top open to the current input, the mean over distances.  The paper's
    text ("for each observed close bracket") is ``positions="paper"``."""
    k = 2
    # "(0 (1 )1 )0 END" with BOS: the targets; distances 1 at ")1", 3 at ")0"
    target = torch.tensor([[0, 1, 3, 2, 4]])
    distance = torch.tensor([[0, 0, 1, 3, 0]])
    depth = torch.tensor([[0, 1, 2, 1, 0]])
    logits = torch.zeros(1, 5, 2 * k + 1)
    logits[0, 1, 3] = 5.0  # predicting "(1" with "(0" on top: the close mass favours ")1", wrongly
    logits[0, 2, 3] = 5.0  # the right close ")1"
    logits[0, 3, 2] = 5.0  # the right close ")0"
    full = torch.zeros_like(depth, dtype=torch.bool)
    code, paper = BracketClosingAccuracy(k), BracketClosingAccuracy(k, positions="paper")
    code.update(logits, target, distance, depth, full)
    paper.update(logits, target, distance, depth, full)
    # the code: positions 1 and 2 at distance 0 (1 of 2: position 1 is wrong), position 3 at
    # distance 2 (input 3, "(0" read at input 1)
    assert code.positions == "code" and code.compute()["closing"] == pytest.approx(0.75)
    assert paper.compute()["closing"] == 1.0  # position 1 is not an observed close: not scored
    # "(0 (1 )1 (1 )1 )0 END", the paper's positions: two closes at distance 1, both confident;
    # one at distance 5, not
    target = torch.tensor([[0, 1, 3, 1, 3, 2, 4]])
    distance = torch.tensor([[0, 0, 1, 0, 1, 5, 0]])
    depth = torch.tensor([[0, 1, 2, 1, 2, 1, 0]])
    logits = torch.zeros(1, 7, 2 * k + 1)
    logits[0, 2, 3] = logits[0, 4, 3] = 5.0
    paper = BracketClosingAccuracy(k, positions="paper")
    paper.update(logits, target, distance, depth, torch.zeros_like(depth, dtype=torch.bool))
    assert paper.compute()["closing"] == pytest.approx(0.5)  # (1 + 0) / 2 distances, not 2 / 3 closes
    assert paper.threshold == 0.8 and paper.side_threshold == 0.2
    # the Hewitt configs' model builds it with the code's positions
    model = build("hewitt/lstm_k2_m3.yaml").model
    assert model.val_metrics["closing"].positions == model.test_metrics["closing"].positions == "code"


def reporter_loop(strings, probs, k, m):
    """A transcription of ``reporter.get_dyck_eval_dict``'s loop and ``report_results_dict``'s
    summary, one string at a time: the observation is ``START`` then the string without ``END``;
    after reading each symbol (``DyckPDFA.update_state``: push an open below the bound, pop a
    matching close, ignore anything else) the distribution ``probs[t]`` is scored.  Returns the
    mean over distances of the confident rate and the three side constraints' rates."""
    per_distance, side = {}, [[0, 0], [0, 0], [0, 0]]  # side: [ok, n]
    for w, p in zip(strings, probs, strict=True):
        stack, opened_at = [], []
        for t, symbol in enumerate(["START", *w[:-1]]):
            if symbol != "START" and symbol < k and len(stack) < m:
                stack.append(symbol)
                opened_at.append(t)
            elif symbol != "START" and k <= symbol < 2 * k and stack and stack[-1] == symbol - k:
                stack.pop()
                opened_at.pop()
            close_mass = sum(p[t][k : 2 * k])
            if stack:
                ok = p[t][k + stack[-1]] / close_mass > 0.8
                counts = per_distance.setdefault(t - opened_at[-1], [0, 0])
                counts[0], counts[1] = counts[0] + ok, counts[1] + 1
            for i, (applies, mass) in enumerate(
                ((not stack, close_mass), (len(stack) == m, sum(p[t][:k])), (bool(stack), p[t][2 * k]))
            ):
                if applies:
                    side[i][0] += mass < 0.2
                    side[i][1] += 1
    rates = [ok / n for ok, n in per_distance.values()]
    return sum(rates) / len(rates), [ok / n for ok, n in side]


@pytest.mark.parametrize(("k", "m"), [(2, 3), (3, 5)])
def test_the_closing_metric_is_their_reporter_on_random_models(k, m):
    """The metric (its default) equals the transcribed ``reporter.py`` loop on random Dyck-(k,m)
    strings and random logits, batched and padded as the data module collates them."""
    lang = DyckKM(k, m)
    rng = np.random.default_rng(k * 10 + m)
    gen = torch.Generator().manual_seed(k * 10 + m)
    metric = BracketClosingAccuracy(k)
    strings, probs = [], []
    for _ in range(3):  # three batches of 8 strings of different lengths
        batch_strings = [lang.sample(rng, (1, 60)) for _ in range(8)]
        batch = collate_generator(
            [{"ids": w, **bracket_annotations(lang, w)} for w in batch_strings], lang.bos_id
        )
        logits = 2.0 * torch.randn(*batch["target"].shape, 2 * k + 1, generator=gen, dtype=torch.float64)
        metric.update(logits, batch["target"], batch["distance"], batch["depth"], batch["full"])
        p = logits.softmax(-1).tolist()
        strings += batch_strings
        probs += [row[: len(w)] for row, w in zip(p, batch_strings, strict=True)]
    closing, side = reporter_loop(strings, probs, k, m)
    out = metric.compute()
    assert 0.05 < closing < 0.95  # random logits: confident and not both occur
    assert out["closing"].item() == pytest.approx(closing, abs=1e-12)
    got = [out[key].item() for key in ("close_on_empty_ok", "open_on_full_ok", "end_on_nonempty_ok")]
    assert got == pytest.approx(side, abs=1e-12)


@pytest.mark.parametrize("suite", ["hewitt_fig3.yaml", "hewitt_init.yaml"])
def test_the_suites_draw_one_data_set_for_every_seed(suite):
    """Their data come from fixed seeds (1, 1000, 2000): one data set per (k, m, size) for the 3
    model seeds; the suites' ``data_seed: 0`` gives every cell the same data, each its own model
    seed."""
    suite = Suite.load(ROOT / "configs" / "suites" / suite)
    cells = [next(c for c in suite.cells() if c.seed == seed) for seed in (0, 2)]
    args = [suite.cli_args(c) for c in cells]
    for a, cell in zip(args, cells, strict=True):
        assert "--data.init_args.seed=0" in a and f"--seed_everything={cell.seed}" in a


@pytest.mark.parametrize("arch", ("lstm", "gru", "elman"))
def test_the_dyck_demo_configs_draw_hewitts_data(build, arch):
    """``configs/dyck`` is memrnn's few-minute demo (16 units, strings not tokens), not the
    learning study; its data are H.1's with Table 2's windows and the authors' truncation."""
    cli = build(f"dyck/{arch}_k2_m3.yaml")
    dm = cli.datamodule
    assert isinstance(dm.language, DyckKM) and (dm.language.k, dm.language.m) == (2, 3)
    assert (
        dm.language.truncation == "hewitt"
        and dm.windows["train"] == (1, 84)
        and dm.windows["test"] == (85, 168)
    )
    assert cli.model.hparams.embedding_dim == 2 * 2 + 10
