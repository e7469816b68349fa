"""configs/chomsky/ against Delétang et al.'s (2023) public code
(github.com/google-deepmind/neural_networks_chomsky_hierarchy), which produced the paper's numbers:
each config builds their architecture (models/rnn.py, stack_rnn.py, tape_rnn.py with haiku's cores),
the loss covers the positions their loss covers (experiments/example.py), training batches have one
length each (curriculum.py, training.py), the score averages the lengths their script averages
(example.py, range_evaluation.py), and their task registry's names are accepted
(experiments/constants.py).  One test per default of the project's parity table."""

from __future__ import annotations

import functools
from pathlib import Path

import lightning as L
import numpy as np
import pytest
import torch
from torch import nn

from memrnn.data import ChomskyDataModule
from memrnn.data.datamodule import IGNORE_INDEX
from memrnn.layers import ElmanRNN, LSTMLayer, StackRNN
from memrnn.layers.memories import JumpTape, SuperpositionStack
from memrnn.lit import SequenceModule
from memrnn.lit.cli import build_cli
from memrnn.suite import Suite

ROOT = Path(__file__).resolve().parents[1]
CHOMSKY = ROOT / "configs" / "chomsky"
DEFAULTS = ROOT / "configs" / "defaults.yaml"

#: the public code's TASK_BUILDERS keys (experiments/constants.py), in its order
AUTHORS_TASKS = (
    "modular_arithmetic", "parity_check", "even_pairs", "cycle_navigation", "modular_arithmetic_brackets",
    "reverse_string", "missing_duplicate_string", "duplicate_string", "binary_addition",
    "binary_multiplication", "compute_sqrt", "odds_first", "solve_equation", "stack_manipulation",
    "bucket_sort",
)  # fmt: skip


@functools.cache
def built(name: str, *args: str):
    """The model and data module ``configs/chomsky/<name>.yaml`` builds through the real CLI."""
    cli = build_cli(["--config", str(CHOMSKY / f"{name}.yaml"), "--trainer.logger=false", *args], run=False,
                    default_config_files=[DEFAULTS])  # fmt: skip
    return cli.model, cli.datamodule


# -- the architectures ---------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["lstm", "rnn", "stack_rnn", "tape_rnn"])
def test_the_readout_is_linear_of_relu_h(name):
    """models/rnn.py ``make_rnn``: ``hk.Linear(output_size)(jnn.relu(output))`` on the core's
    outputs, for every model of the paper."""
    model, _ = built(name)
    assert model.readout_activation == "relu" and model.embedding.weight.shape == (3, 3)  # one-hot
    ids = torch.tensor([[0, 1, 1, 0, 2, 2]])
    lengths = torch.tensor([4])  # the input's length (the Tape-RNN jumps by it)
    h = model.encode(ids, input_lengths=lengths)  # (a ReLU core's h >= 0 already: relu(h) == h there)
    out = model.heads_out(ids, input_lengths=lengths)["generator"]
    torch.testing.assert_close(out, model.heads["generator"](torch.relu(h)))


def test_the_lstm_is_haikus():
    """``hk.LSTM`` (hidden 256): ``f = sigmoid(f + 1)``, a constant forget bias of 1; here the
    forget gate's bias starts at 1 more than torch's draw (the same model under Adam)."""
    model, _ = built("lstm")
    assert isinstance(model.layer, LSTMLayer) and model.layer.hidden_size == 256
    assert model.layer.forget_bias == 1.0
    torch.manual_seed(0)
    plain = LSTMLayer(3, 256)
    torch.manual_seed(0)
    biased = LSTMLayer(3, 256, forget_bias=1.0)
    diff = biased.rnn.bias_ih_l0 - plain.rnn.bias_ih_l0
    torch.testing.assert_close(diff[256:512], torch.ones(256))  # torch's gate order i, f, g, o
    assert diff[:256].abs().max() == 0 and diff[512:].abs().max() == 0


def test_the_rnn_is_haikus_vanilla_rnn():
    """``hk.VanillaRNN``: ``h_t = relu(W_x x_t + b_x + W_h h_{t−1} + b_h)`` from ``h_0 = 0``."""
    model, _ = built("rnn")
    layer = model.layer
    assert isinstance(layer, ElmanRNN) and layer.activation == "relu" and layer.hidden_size == 256
    x = torch.randn(2, 5, 3)
    h, want = torch.zeros(2, 256), []
    for t in range(5):
        h = torch.relu(x[:, t] @ layer.weight_ih.T + layer.bias + h @ layer.weight_hh.T)
        want.append(h)
    torch.testing.assert_close(layer(x)[0], torch.stack(want, 1), rtol=1e-5, atol=1e-5)


def test_the_stack_rnn_is_their_stack_rnn_core():
    """models/stack_rnn.py ``StackRNNCore`` with ``inner_core=hk.VanillaRNN`` (ReLU), hidden 256,
    cells of 8, ``stack_size`` 30: actions ``softmax(Linear(h))`` over push, pop, no-op and the
    pushed vector ``Linear(h)``, unsquashed."""
    model, _ = built("stack_rnn")
    layer = model.layer
    assert isinstance(layer, StackRNN) and isinstance(layer.memory, SuperpositionStack)
    assert isinstance(layer.controller, ElmanRNN) and layer.controller.activation == "relu"
    assert (layer.controller.hidden_size, layer.memory.width, layer.memory.depth) == (256, 8, 30)
    assert layer.memory.actions == ("push", "pop", "noop")
    assert layer.memory.value_activation == "identity"
    h = torch.randn(4, 256)
    actions, pushed = layer.memory.heads(h)
    raw = layer.memory.head(h)
    torch.testing.assert_close(pushed, raw[:, 3:])  # no sigmoid
    torch.testing.assert_close(actions, torch.softmax(raw[:, :3], -1))
    assert (pushed < 0).any() or (pushed > 1).any()


def test_the_tape_rnn_is_their_tape_input_length_jump_core():
    """models/tape_rnn.py ``TapeInputLengthJumpCore`` as experiments/example.py builds it: a ReLU
    ``hk.VanillaRNN`` controller (hidden 256), a tape of ``memory_size`` 40 cells of 8, five
    actions, and the written value an MLP of ``h``: ``hk.nets.MLP([64, 64, 8])`` (ReLU between).

    The MLP write head is the tape's ``write_mlp`` option (``memory_args: {write_mlp: [64, 64]}``),
    another change of the same issue: this test fails until it is in."""
    model, _ = built("tape_rnn")
    layer = model.layer
    assert isinstance(layer, StackRNN) and isinstance(layer.memory, JumpTape)
    assert isinstance(layer.controller, ElmanRNN) and layer.controller.activation == "relu"
    assert (layer.controller.hidden_size, layer.memory.width, layer.memory.depth) == (256, 8, 40)
    assert layer.memory.actions == ("stay", "left", "right", "jump_left", "jump_right")
    linears = [m for m in layer.memory.modules() if isinstance(m, nn.Linear)]
    chain = [(m.in_features, m.out_features) for m in linears]
    assert [c for c in chain if c in ((256, 64), (64, 64), (64, 8))] == [(256, 64), (64, 64), (64, 8)], chain


# -- the loss ------------------------------------------------------------------------------------
def authors_loss(logits: torch.Tensor, batch: dict[str, torch.Tensor], task) -> torch.Tensor:
    """example.py's ``loss_fn``, transcribed: ``mean(sum(-target * log_softmax(output), -1))``
    over the batch and the output positions (``output[:, -output_length:]``), the one-hot targets
    being the task's whole output (zeros after a termination token included); one length per batch."""
    n = int(batch["input_lengths"][0])
    L_out = task.output_length(n)
    out = logits[:, n : n + L_out]
    x = batch["input"][:, :n]
    target = torch.stack(
        [nn.functional.one_hot(torch.tensor(task.transduce(row.tolist())), out.shape[-1]) for row in x]
    ).to(out.dtype)
    return (-target * torch.log_softmax(out, -1)).sum(-1).mean()


@pytest.mark.parametrize("task", ["binary_addition", "stack_manipulation", "reverse_string", "parity_check"])
def test_the_loss_is_their_loss_on_a_training_batch(task):
    """``_base.yaml``'s data (``loss_positions: outputs``, one length per batch) and the module's
    generator loss equal the transcription of their loss on every training batch of an epoch;
    the scored-only loss (``loss_positions: scored``) differs where outputs end early."""
    model, _ = built("lstm", "--model.init_args.layer.init_args.hidden_size=8")
    dm = ChomskyDataModule(task, train_size=48, train_lengths=(4, 12), batch_size=8, test_per_length=1)
    assert (dm.loss_positions, dm.batch_lengths) == ("outputs", "per_batch")
    _, cfg = built("lstm")
    assert (cfg.loss_positions, cfg.batch_lengths) == ("outputs", "per_batch")
    scored = ChomskyDataModule(task, train_size=48, train_lengths=(4, 12), batch_size=8, test_per_length=1,
                               loss_positions="scored")  # fmt: skip
    for s in (dm, scored):
        s.setup("fit")
    differ = []
    for batch, other in zip(dm.train_dataloader(), scored.train_dataloader(), strict=True):
        logits = torch.randn(*batch["input"].shape, dm.num_symbols, dtype=torch.float64)
        want = authors_loss(logits, batch, dm.task)
        torch.testing.assert_close(model.losses(batch, {"generator": logits})["generator"], want)
        differ.append(float((model.losses(other, {"generator": logits})["generator"] - want).abs()))
    assert max(differ) > 1e-3 if dm.task.terminated else max(differ) < 1e-12


# -- one length per batch ------------------------------------------------------------------------
def test_training_batches_have_one_length_each():
    """curriculum.py ``UniformCurriculum``: one length per step, uniform in 1..40, for the whole
    batch (each row's ``input_lengths``, the Tape-RNN's jump, is the batch's length)."""
    _, cfg = built("lstm", "--data.init_args.train_size=3200", "--data.init_args.batch_size=4")
    assert cfg.windows["train"] == (1, 40)
    cfg.setup("fit")
    lengths = []
    for batch in cfg.train_dataloader():
        assert (batch["input_lengths"] == batch["input_lengths"][0]).all()
        lengths.append(int(batch["input_lengths"][0]))
    counts = np.bincount(lengths, minlength=41)[1:]
    assert len(lengths) == 800 and counts.min() > 5 and counts.max() < 45  # uniform over 1..40 (mean 20)


# -- the score -----------------------------------------------------------------------------------
def test_the_score_averages_the_lengths_their_script_averages(tmp_path):
    """example.py: ``np.mean(accuracies[_SEQUENCE_LENGTH.value + 1:])`` of range_evaluation's
    lengths ``1..max`` (``N = 40``): lengths 42 and up.  The configs' test window is 42–500, and
    ``test/acc_mean_over_lengths`` is the mean of the per-length accuracies over that window."""
    authors = list(range(1, 501))[40 + 1 :]
    _, cfg = built("lstm")
    assert cfg.windows["test"] == (authors[0], authors[-1]) == (42, 500)
    assert cfg.test_per_length == 512  # range_test_total_batch_size
    # the logged score is the mean over the window's lengths, each weighing 1
    dm = ChomskyDataModule("binary_addition", train_size=8, val_size=4, test_per_length=3,
                           test_lengths=(42, 45), eval_batch_size=5)  # fmt: skip
    torch.manual_seed(0)
    model = SequenceModule(functools.partial(LSTMLayer, hidden_size=4), dm.vocab_size, dm.num_symbols,
                           embedding="one_hot", readout_activation="relu")  # fmt: skip
    trainer = L.Trainer(logger=False, enable_progress_bar=False, enable_model_summary=False,
                        default_root_dir=tmp_path)  # fmt: skip
    (logged,) = trainer.test(model, datamodule=dm)
    curves = model.length_curves("test")
    assert curves["length"] == [42, 43, 44, 45]
    assert logged["test/acc_mean_over_lengths"] == pytest.approx(np.mean(curves["acc"]), abs=1e-6)


def test_the_chomsky_test_set_is_one_for_every_run():
    """range_evaluation.py seeds its test draws with 1 for every run: ``test_seed: 1``, so runs of
    other data seeds are scored on the same test sequences (memrnn's own draw from that seed)."""
    _, cfg = built("lstm")
    assert cfg.test_seed == 1
    sets = []
    for seed in (0, 5):
        dm = ChomskyDataModule("reverse_string", train_size=8, val_size=4, test_per_length=2,
                               test_lengths=(42, 43), seed=seed, test_seed=cfg.test_seed)  # fmt: skip
        sets.append([dm.build_split("test")[i]["input"].tolist() for i in range(4)])
    assert sets[0] == sets[1]


@pytest.mark.parametrize("task, equal", [("reverse_string", True), ("binary_addition", False)])
def test_per_length_accuracy_is_theirs_where_every_sequence_scores_alike(task, equal):
    """range_evaluation.py averages 8 sub-batch accuracies of 64 sequences; memrnn pools the 512
    sequences of a length.  The two are one number when every sequence of a length has the same
    number of scored positions (a task whose output length is fixed by the input's); binary
    addition's scored outputs end at its terminator, so there they may differ by rounding."""
    dm = ChomskyDataModule(task, train_size=8, val_size=4, test_per_length=512, test_lengths=(42, 42))
    split = dm.build_split("test")
    scored = np.array([int((split[i]["target"] != IGNORE_INDEX).sum()) for i in range(512)])
    rng = np.random.default_rng(0)
    correct = rng.binomial(scored, 0.7)  # any per-sequence counts of correct scored positions
    pooled = correct.sum() / scored.sum()
    theirs = np.mean([correct[j : j + 64].sum() / scored[j : j + 64].sum() for j in range(0, 512, 64)])
    assert (len(set(scored)) == 1) == equal
    if equal:
        assert pooled == pytest.approx(theirs, abs=1e-12)
    else:
        assert pooled == pytest.approx(theirs, abs=0.02) and pooled != theirs


@pytest.mark.parametrize("name", ["lstm", "rnn", "stack_rnn", "tape_rnn"])
def test_the_models_start_from_haikus_initialisers(name):
    """haiku's defaults: every ``hk.Linear`` weight truncated normal with std ``1/√fan_in``, biases
    0 (``hk.LSTM``'s forget gate +1 a constant: here ``forget_bias: 1``)."""
    model, _ = built(name)
    assert model.hparams.init == "haiku"
    layer = model.layer
    hidden = 256
    weights = dict(layer.controller.named_parameters()) if isinstance(layer, StackRNN) else None
    if isinstance(layer, LSTMLayer):
        w, b = layer.rnn.weight_hh_l0, layer.rnn.bias_ih_l0 + layer.rnn.bias_hh_l0
        assert float(w.abs().max()) <= 2 / (layer.input_size + hidden) ** 0.5 * (
            1 + 1e-6
        )  # one map over [x ; h]
        assert torch.equal(b[hidden : 2 * hidden], torch.ones(hidden)) and b[:hidden].abs().sum() == 0
    else:
        rnn = layer.controller if weights is not None else layer
        assert float(rnn.weight_hh.abs().max()) <= 2 / hidden**0.5 * (1 + 1e-6) and rnn.bias.abs().sum() == 0
        assert float(rnn.weight_hh.std()) == pytest.approx(0.8796 / hidden**0.5, rel=0.05)
    assert model.readout.bias.abs().sum() == 0
    assert float(model.readout.weight.abs().max()) <= 2 / hidden**0.5 * (1 + 1e-6)


def test_the_suites_test_the_final_weights():
    """training.py trains for a fixed number of steps and range_evaluation.py scores the final
    parameters (no validation set): the paper's suites test the last weights, not the checkpoint of
    the best validation (which here would be chosen on the test lengths themselves)."""
    for name in ("chomsky.yaml", "chomsky_matched.yaml"):
        assert Suite.load(ROOT / "configs" / "suites" / name).test_checkpoint == "last"


# -- the task names ------------------------------------------------------------------------------
@pytest.mark.parametrize("name", AUTHORS_TASKS)
def test_every_registry_name_of_their_code_is_a_task(name):
    dm = ChomskyDataModule(name, train_size=8, test_per_length=1)
    want = "missing_duplicate" if name == "missing_duplicate_string" else name
    assert dm.task.name == want
    x, y = dm.task.sample(np.random.default_rng(0), 5)
    assert len(y) == dm.task.output_length(len(x)) and all(t != IGNORE_INDEX for t in y)


def test_the_suite_scores_what_the_configs_score():
    """configs/suites/chomsky.yaml collects ``test/acc_mean_over_lengths`` (memrnn.suite.collect
    reads that metric and its ``acc`` curve) of cells whose test window is the configs' 42–500."""
    from memrnn.suite.spec import Suite

    suite = Suite.load(ROOT / "configs" / "suites" / "chomsky.yaml")
    assert suite.metric == "test/acc_mean_over_lengths" and suite.mode == "max"
    cell = next(c for c in suite.cells() if c.arch == "lstm")
    cli = build_cli([*suite.cli_args(cell), "--trainer.accelerator=cpu", "--trainer.logger=false"], run=False,
                    default_config_files=[suite.defaults])  # fmt: skip
    assert cli.datamodule.windows["test"] == (42, 500) and cli.model.readout_activation == "relu"
