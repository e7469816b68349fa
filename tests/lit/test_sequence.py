"""SequenceModule: objective switching, masked acceptor gathering, clear errors, the
bracket-closing metric in validation."""

from __future__ import annotations

import copy
import functools

import lightning as L
import pytest
import torch

from memrnn.data import AcceptorDataModule, FormalLanguageDataModule
from memrnn.data.datamodule import collate_generator
from memrnn.data.tasks import collate_acceptor
from memrnn.languages import AnBn, DyckKM, DyckN
from memrnn.layers import JordanRNN, LSTMLayer, StackRNN
from memrnn.lit import SequenceModule
from memrnn.lit.cli import build_cli
from memrnn.lit.sequence import TiedReadout, acceptor_end_logits


def model_for(dm, objectives, **kw):
    torch.manual_seed(0)
    return SequenceModule(
        functools.partial(LSTMLayer, hidden_size=8), vocab_size=dm.vocab_size, num_symbols=dm.num_symbols,
        objectives=objectives, bracket_types=dm.bracket_types, **kw,
    )  # fmt: skip


def fit_and_validate(tmp_path, model, dm):
    t = L.Trainer(max_epochs=1, logger=False, enable_progress_bar=False, enable_model_summary=False,
                  enable_checkpointing=False, default_root_dir=tmp_path, limit_train_batches=3)  # fmt: skip
    t.fit(model, datamodule=dm)
    return {k: float(v) for k, v in t.callback_metrics.items()}


@pytest.mark.parametrize(
    ("objectives", "expected"),
    [
        ({"generator": 1.0}, {"val/ce_gap", "val/closing", "val/close_on_empty_ok", "val/acc"}),
        ({"next_set": 1.0}, {"val/next_set_token", "val/next_set_sequence"}),
        ({"generator": 1.0, "next_set": 0.5}, {"val/ce_gap", "val/next_set_sequence", "train/loss_next_set"}),
    ],
)
def test_generator_and_next_set_objectives(tmp_path, objectives, expected):
    dm = FormalLanguageDataModule(DyckKM(2, 2), train_size=24, val_size=16, test_size=8, train_lengths=(1, 21),
                                  batch_size=8, next_sets=True)  # fmt: skip
    logs = fit_and_validate(tmp_path, model_for(dm, objectives), dm)
    assert expected <= set(logs), sorted(logs)
    assert all(torch.isfinite(torch.tensor(v)) for v in logs.values())


@pytest.mark.parametrize("objective", ["acceptor_end", "acceptor_prefix"])
def test_acceptor_objectives(tmp_path, objective):
    dm = AcceptorDataModule(
        AnBn(), train_size=24, val_size=16, test_size=8, train_lengths=(3, 21), batch_size=8
    )
    logs = fit_and_validate(tmp_path, model_for(dm, {objective: 1.0}), dm)
    assert {"val/accept_end", "val/accept_prefix", "val/loss"} <= set(logs)


def test_padded_acceptor_batch_gives_each_sequences_own_loss():
    lang = DyckN(1)
    dm = AcceptorDataModule(lang, train_size=6, val_size=0, test_size=0, train_lengths=(2, 15), batch_size=6)
    items = dm.build_split("train").items
    assert len({len(it["body"]) for it in items}) > 1  # really padded
    model = model_for(dm, {"acceptor_end": 1.0, "acceptor_prefix": 1.0}).double()
    batch = collate_acceptor(items, lang.bos_id)
    together = model.losses(batch, model.heads_out(batch["input"], batch["mask"]))
    ends, prefix_sum, prefix_n = [], 0.0, 0
    for it in items:
        one = collate_acceptor([it], lang.bos_id)
        alone = model.losses(one, model.heads_out(one["input"], one["mask"]))
        ends.append(alone["acceptor_end"])
        prefix_sum += alone["acceptor_prefix"] * one["mask"].sum()
        prefix_n += int(one["mask"].sum())
    assert torch.allclose(together["acceptor_end"], torch.stack(ends).mean(), atol=1e-12)
    assert torch.allclose(together["acceptor_prefix"], prefix_sum / prefix_n, atol=1e-12)


def test_bad_objectives_and_missing_batch_keys_are_named():
    dm = FormalLanguageDataModule(DyckKM(2, 2), train_size=8, val_size=0, test_size=0, train_lengths=(1, 11))
    with pytest.raises(ValueError, match="unknown objective 'acceptor'"):
        model_for(dm, {"acceptor": 1.0})
    with pytest.raises(ValueError, match="positive coefficient"):
        model_for(dm, {"generator": 0.0})
    model = model_for(dm, {"next_set": 1.0})
    batch = next(iter(dm.train_dataloader()))
    with pytest.raises(
        ValueError, match=r"objective 'next_set' needs batch keys \['next_set'\].*next_sets: true"
    ):
        model.losses(batch, model.heads_out(batch["input"], batch["mask"]))


@pytest.mark.parametrize("cls", [torch.optim.Adam, torch.optim.AdamW, torch.optim.RMSprop, torch.optim.SGD])
def test_optimizer_and_plateau_schedule_are_configurable(cls):
    dm = FormalLanguageDataModule(DyckKM(2, 2), train_size=8, val_size=0, test_size=0, train_lengths=(1, 11))
    plateau = functools.partial(torch.optim.lr_scheduler.ReduceLROnPlateau, factor=0.5, patience=4)
    model = model_for(dm, {"generator": 1.0}, optimizer=cls, lr=0.03, weight_decay=0.01, lr_scheduler=plateau,
                      optimizer_args={"eps": 1e-6} if cls is not torch.optim.SGD else {"momentum": 0.9})  # fmt: skip
    conf = model.configure_optimizers()
    opt, sched = conf["optimizer"], conf["lr_scheduler"]["scheduler"]
    assert type(opt) is cls and opt.defaults["lr"] == 0.03 and opt.defaults["weight_decay"] == 0.01
    assert opt.defaults["momentum" if cls is torch.optim.SGD else "eps"] == (
        0.9 if cls is torch.optim.SGD else 1e-6
    )
    assert isinstance(sched, torch.optim.lr_scheduler.ReduceLROnPlateau) and sched.patience == 4
    assert sched.factor == 0.5 and conf["lr_scheduler"]["monitor"] == "val/ce"
    # any other scheduler: no monitor; none at all: the bare optimizer
    step = functools.partial(torch.optim.lr_scheduler.StepLR, step_size=3)
    conf = model_for(dm, {"generator": 1.0}, lr_scheduler=step).configure_optimizers()
    assert isinstance(conf["lr_scheduler"]["scheduler"], torch.optim.lr_scheduler.StepLR)
    assert "monitor" not in conf["lr_scheduler"]
    assert isinstance(model_for(dm, {"generator": 1.0}).configure_optimizers(), torch.optim.Adam)


def test_bad_optimizer_settings_are_named():
    dm = FormalLanguageDataModule(DyckKM(2, 2), train_size=8, val_size=0, test_size=0, train_lengths=(1, 11))
    with pytest.raises(ValueError, match=r"optimizer='adam': give the class .*python -m memrnn.lit.upgrade"):
        model_for(dm, {"generator": 1.0}, optimizer="adam")
    with pytest.raises(
        ValueError, match=r"optimizer must be a torch.optim.Optimizer class, got <class .int.>"
    ):
        model_for(dm, {"generator": 1.0}, optimizer=int)
    with pytest.raises(
        ValueError, match=r"optimizer_args sets \['lr'\]; lr and weight_decay are the module's own"
    ):
        model_for(dm, {"generator": 1.0}, optimizer_args={"lr": 0.1})
    with pytest.raises(ValueError, match=r"lr_scheduler must be a callable of the optimizer, got 0\.5"):
        model_for(dm, {"generator": 1.0}, lr_scheduler=0.5)


@pytest.mark.parametrize("monitored", [False, True])
def test_training_loss_is_logged_on_logging_steps_or_when_monitored(tmp_path, monitored):
    """``train/loss`` goes through ``self.log`` only on the steps the loggers receive (Lightning
    sends step k when ``(k + 1) % log_every_n_steps == 0``) and the epoch's last, unless a callback
    monitors it, which then sees it at every step."""
    dm = FormalLanguageDataModule(DyckKM(2, 2), train_size=56, val_size=8, test_size=8, train_lengths=(1, 11),
                                  batch_size=8)  # fmt: skip
    model = model_for(dm, {"generator": 1.0})
    logged: list[int] = []
    log = model.log

    def spy(name, *args, **kwargs):
        if name == "train/loss":
            logged.append(model.trainer.global_step)
        return log(name, *args, **kwargs)

    model.log = spy
    callbacks = []
    if monitored:
        callbacks.append(L.pytorch.callbacks.ModelCheckpoint(dirpath=tmp_path, monitor="train/loss",
                                                             every_n_train_steps=1))  # fmt: skip
    t = L.Trainer(max_epochs=1, logger=False, enable_progress_bar=False, enable_model_summary=False,
                  enable_checkpointing=monitored, default_root_dir=tmp_path, log_every_n_steps=3,
                  limit_val_batches=0, callbacks=callbacks)  # fmt: skip
    t.fit(model, datamodule=dm)
    assert logged == (list(range(7)) if monitored else [2, 5, 6])


def test_string_reduction_averages_each_strings_positions_then_the_strings():
    """``loss_reduction="string"`` (the recognizer benchmark's auxiliary losses): each string's
    mean over its scored positions (``target`` not ignored; ``next_set_mask``), then the mean over
    the strings that have any; ``"token"`` the mean over all of them.  ``select_on`` makes that
    objective's loss ``val/loss``."""
    from memrnn.data import RecognizerDataModule
    from memrnn.data.datamodule import IGNORE_INDEX

    dm = RecognizerDataModule(
        "marked_reversal", train_size=16, val_size=8, auxiliary=["language_modelling", "next_symbols"]
    )
    dm.setup("fit")
    batch = dm.collate_fn()([dm.datasets["train"][i] for i in range(16)])
    objectives = {"acceptor_end": 1.0, "generator": 1.0, "next_set": 1.0}
    string, token = (model_for(dm, objectives, loss_reduction=r) for r in ("string", "token"))
    token.load_state_dict(string.state_dict())
    out = string.heads_out(batch["input"], batch["mask"])
    got_s, got_t = string.losses(batch, out), token.losses(batch, out)
    nll = torch.nn.functional.cross_entropy(out["generator"].transpose(1, 2), batch["target"],
                                            ignore_index=IGNORE_INDEX, reduction="none")  # fmt: skip
    bce = torch.nn.functional.binary_cross_entropy_with_logits(
        out["next_set"], batch["next_set"].float(), reduction="none"
    ).mean(-1)
    lm_rows, ns_rows = [], []
    for i in range(16):
        scored = batch["target"][i] != IGNORE_INDEX
        if scored.any():
            lm_rows.append(nll[i][scored].mean())
            ns_rows.append(bce[i][batch["next_set_mask"][i]].mean())
    torch.testing.assert_close(got_s["generator"], torch.stack(lm_rows).mean())
    torch.testing.assert_close(got_s["next_set"], torch.stack(ns_rows).mean())
    scored = batch["target"] != IGNORE_INDEX
    torch.testing.assert_close(got_t["generator"], nll[scored].mean())
    torch.testing.assert_close(got_t["next_set"], bce[batch["next_set_mask"]].mean())
    torch.testing.assert_close(got_s["acceptor_end"], got_t["acceptor_end"])
    with pytest.raises(
        ValueError, match="loss_reduction must be one of 'token', 'string', 'sum_per_string', got 'sum'"
    ):
        model_for(dm, objectives, loss_reduction="sum")
    with pytest.raises(
        ValueError, match=r"select_on='generator' is not one of the objectives \(acceptor_end\)"
    ):
        model_for(dm, {"acceptor_end": 1.0}, select_on="generator")


def test_readout_activation_is_applied_before_every_head():
    """``readout_activation="relu"``: every head reads ``relu(h)`` (Delétang et al.'s readout
    ``Linear(relu(h))``); ``"identity"`` (the default) reads ``h``; other names are refused."""
    dm = AcceptorDataModule(
        AnBn(), train_size=8, val_size=0, test_size=0, train_lengths=(3, 11), batch_size=8
    )
    batch = next(iter(dm.train_dataloader()))
    objectives = {"generator": 1.0, "acceptor_prefix": 1.0}
    relu, plain = (model_for(dm, objectives, readout_activation=a) for a in ("relu", "identity"))
    assert (
        plain.readout_activation == "identity" and model_for(dm, objectives).readout_activation == "identity"
    )
    h = relu.encode(batch["input"], batch["mask"])
    assert (h < 0).any()  # an LSTM's outputs: the ReLU changes them
    got = relu.heads_out(batch["input"], batch["mask"])
    torch.testing.assert_close(got["generator"], relu.heads["generator"](torch.relu(h)))
    torch.testing.assert_close(got["acceptor"], relu.heads["acceptor"](torch.relu(h))[..., 0])
    torch.testing.assert_close(
        plain.heads_out(batch["input"], batch["mask"])["generator"], plain.heads["generator"](h)
    )
    with pytest.raises(ValueError, match="readout_activation must be one of 'identity', 'relu', got 'tanh'"):
        model_for(dm, objectives, readout_activation="tanh")


def test_the_generator_loss_reads_loss_target_when_the_batch_has_one():
    """A Chomsky batch's ``loss_target`` (every output position) is what the generator's loss
    averages; its metrics score ``target``; without ``loss_target`` the loss is over ``target``."""
    from memrnn.data import ChomskyDataModule
    from memrnn.data.chomsky import transduction_batch
    from memrnn.data.datamodule import IGNORE_INDEX

    dm = ChomskyDataModule("stack_manipulation", train_size=8, test_lengths=(42, 42), test_per_length=1)
    model = model_for(dm, {"generator": 1.0})
    batch = transduction_batch("stack_manipulation", 7, 16, seed=1)
    out = model.heads_out(batch["input"], batch["mask"])
    nll = torch.nn.functional.cross_entropy(out["generator"].transpose(1, 2), batch["loss_target"],
                                            ignore_index=IGNORE_INDEX, reduction="none")  # fmt: skip
    every_output = batch["loss_target"] != IGNORE_INDEX
    assert every_output.sum() > (batch["target"] != IGNORE_INDEX).sum()  # more positions than scored
    torch.testing.assert_close(model.losses(batch, out)["generator"], nll[every_output].mean())
    scored = transduction_batch("stack_manipulation", 7, 16, seed=1, loss_positions="scored")
    nll = torch.nn.functional.cross_entropy(out["generator"].transpose(1, 2), scored["target"],
                                            ignore_index=IGNORE_INDEX, reduction="none")  # fmt: skip
    torch.testing.assert_close(
        model.losses(scored, out)["generator"], nll[scored["target"] != IGNORE_INDEX].mean()
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bool])
def test_token_ids_that_are_not_integers_are_named(dtype):
    dm = FormalLanguageDataModule(DyckKM(2, 2), train_size=8, val_size=0, test_size=0, train_lengths=(1, 11))
    model = model_for(dm, {"generator": 1.0})
    ids = torch.tensor([[0, 1, 2]]).to(dtype)
    with pytest.raises(
        ValueError, match=rf"input_ids must hold integer token ids \(torch.long\), got dtype {dtype}"
    ):
        model(ids)
    small = torch.tensor([[0, 1, 2]], dtype=torch.uint8)  # integers of another width: read as long
    torch.testing.assert_close(model(small), model(small.long()))


@pytest.mark.parametrize(
    "layer",
    [torch.nn.LSTM(16, 8, batch_first=True), LSTMLayer(16, 8), 8],
    ids=["nn.LSTM", "LSTMLayer instance", "int"],
)
def test_a_layer_that_is_not_a_callable_of_the_input_size_is_named(layer):
    """A built module (``nn.LSTM(…)``, even a memrnn layer) or a non-callable as ``layer``: a
    clear error saying what ``layer`` must be, not torch's "'int' object has no attribute 'dim'"."""
    with pytest.raises(ValueError, match=r"layer must be a callable of the input size returning a memrnn "
                                         r"MemoryLayer, e\.g\. functools\.partial\(memrnn\.layers\.LSTMLayer"):  # fmt: skip
        SequenceModule(layer, vocab_size=4, num_symbols=3)
    with pytest.raises(ValueError, match=r"layer must build a memrnn MemoryLayer, got LSTM"):
        SequenceModule(functools.partial(torch.nn.LSTM, hidden_size=8), vocab_size=4, num_symbols=3)


# -- the authors' models: DuSell & Chiang, FLaRe, Hewitt et al. (docs/parity.md) ---------------------
def dyck_batch(train_lengths=(1, 15), size=8):
    dm = FormalLanguageDataModule(DyckKM(2, 2), train_size=size, val_size=0, test_size=0,
                                  train_lengths=train_lengths, batch_size=size)  # fmt: skip
    return dm, next(iter(dm.train_dataloader()))


def test_initial_output_predicts_the_first_symbol_from_the_initial_state():
    """``initial_output=True`` (rau's ``include_first``: DuSell & Chiang's and FLaRe's models, no
    start symbol): the layer runs on the input without ``BOS`` (``n`` steps, not ``n + 1``) and
    position 0 is its output at the initial state, so a one-layer LSTM's first logits are the
    readout's bias (``h_0 = 0``); a padded batch equals each row alone."""
    dm, batch = dyck_batch()
    inp, mask = batch["input"], batch["mask"]
    assert len(set(batch["lengths"].tolist())) > 1  # really padded
    model, before = (model_for(dm, {"generator": 1.0}, initial_output=o).double() for o in (True, False))
    steps = []
    hooks = [m.layer.rnn.register_forward_hook(lambda mod, args, out: steps.append(args[0].shape[1]))
             for m in (model, before)]  # fmt: skip
    logits = model.heads_out(inp, mask)["generator"]
    before.heads_out(inp, mask)
    for hook in hooks:
        hook.remove()
    assert steps == [inp.shape[1] - 1, inp.shape[1]]  # the LSTM takes n steps, memrnn's BOS model n + 1
    assert logits.shape == (*inp.shape, dm.num_symbols)  # every shape downstream unchanged
    torch.testing.assert_close(logits[:, 0], model.readout.bias.expand(len(inp), -1), atol=0, rtol=0)
    h, _ = model.layer(model.embedding(inp[:, 1:]), mask=mask[:, 1:])  # the string alone, no BOS
    torch.testing.assert_close(logits[:, 1:], model.readout(h), atol=1e-12, rtol=0)
    for b, n in enumerate(batch["lengths"].tolist()):
        alone = model.heads_out(inp[b : b + 1, :n], mask[b : b + 1, :n])["generator"]
        torch.testing.assert_close(logits[b : b + 1, :n], alone, atol=1e-12, rtol=0)
    model.losses(batch, model.heads_out(inp, mask))["generator"].backward()  # trains


def test_initial_output_reads_a_learned_state_a_stack_reading_and_the_empty_strings_verdict():
    """The first output is the layer's at its initial state: ``tanh(h0_input)`` with a learned
    state (FLaRe), ``[h_0 ; reading of the empty stack]`` for a StackRNN that outputs its reading
    (DuSell & Chiang's ``include_reading_in_output``); the acceptor reads it for the empty string."""
    dm = AcceptorDataModule(
        AnBn(), train_size=8, val_size=0, test_size=0, train_lengths=(3, 11), batch_size=8
    )
    torch.manual_seed(0)
    model = SequenceModule(functools.partial(LSTMLayer, hidden_size=8, learned_initial_state=True),
                           vocab_size=dm.vocab_size, num_symbols=dm.num_symbols, objectives={"acceptor_end": 1.0},
                           initial_output=True).double()  # fmt: skip
    with torch.no_grad():
        model.layer.h0_input.normal_()
    empty = torch.tensor([[AnBn().bos_id]])
    out = model.heads_out(empty, torch.ones(1, 1, dtype=torch.bool))["acceptor"]
    verdict = acceptor_end_logits(out, torch.tensor([1]))
    torch.testing.assert_close(
        verdict, model.heads["acceptor"](torch.tanh(model.layer.h0_input[-1]))[None, 0]
    )
    assert model.accepts([[]], AnBn().bos_id) == [bool(verdict > 0)]

    torch.manual_seed(0)
    stack = SequenceModule(
        functools.partial(StackRNN, hidden_size=6, width=3, depth=8, output="hidden+reading",
                          controller_args={"learned_initial_state": True}),
        vocab_size=dm.vocab_size, num_symbols=dm.num_symbols, initial_output=True,
    ).double()  # fmt: skip
    with torch.no_grad():
        stack.layer.controller.h0_input.normal_()
    batch = next(iter(dm.train_dataloader()))
    first = stack.heads_out(batch["input"], batch["mask"])["generator"][:, 0]
    h0 = torch.tanh(stack.layer.controller.h0_input[-1])
    want = stack.readout(torch.cat([h0, h0.new_zeros(3)]))  # the empty stack reads zeros
    torch.testing.assert_close(first, want.expand_as(first), atol=1e-12, rtol=0)


def test_initial_output_on_a_nondeterministic_stack_equals_each_row_alone():
    """The RNS-RNN (DuSell & Chiang 2022) with the reading in its output: position 0 is
    ``[h_0 ; reading of the initial stack]`` (the bottom symbol's), the rest the stack RNN on the
    string without ``BOS``; a padded batch equals each row alone."""
    dm, batch = dyck_batch()
    torch.manual_seed(0)
    model = SequenceModule(
        functools.partial(StackRNN, hidden_size=5, memory="nondeterministic", depth=16, output="hidden+reading",
                          memory_args={"states": 2, "symbols": 2}),
        vocab_size=dm.vocab_size, num_symbols=dm.num_symbols, embedding="one_hot", initial_output=True,
    ).double()  # fmt: skip
    inp, mask = batch["input"], batch["mask"]
    h = model.encode(inp, mask)
    layer = model.layer
    s0 = layer.initial_state(len(inp), dtype=torch.float64)
    reading = layer.memory.read(layer.split(s0)[1])
    assert reading.abs().sum() > 0  # the bottom symbol is read: not zeros
    torch.testing.assert_close(h[:, 0], torch.cat([torch.zeros_like(h[:, 0, :5]), reading], -1))
    rest = layer(model.embedding(inp[:, 1:]), mask=mask[:, 1:])[0]
    torch.testing.assert_close(h[:, 1:], rest, atol=1e-12, rtol=0)
    for b, n in enumerate(batch["lengths"].tolist()):
        torch.testing.assert_close(h[b : b + 1, :n], model.encode(inp[b : b + 1, :n]), atol=1e-12, rtol=0)


def test_initial_output_needs_a_layer_with_an_output_at_its_initial_state():
    dm, _ = dyck_batch()
    with pytest.raises(ValueError, match=r"initial_output=True .* but JordanRNN has no output_at\(state\)"):
        SequenceModule(functools.partial(JordanRNN, hidden_size=4, feedback_size=3), vocab_size=dm.vocab_size,
                       num_symbols=dm.num_symbols, initial_output=True)  # fmt: skip
    with pytest.raises(
        ValueError, match=r"initial_output=True needs .*LSTMLayer\(bidirectional=True\) cannot"
    ):
        SequenceModule(functools.partial(LSTMLayer, hidden_size=4, bidirectional=True), vocab_size=dm.vocab_size,
                       num_symbols=dm.num_symbols, initial_output=True)  # fmt: skip
    with pytest.raises(ValueError, match="initial_output must be True or False, got 'yes'"):
        model_for(dm, {"generator": 1.0}, initial_output="yes")


def test_sum_per_string_is_dusell_and_chiangs_loss():
    """``loss_reduction="sum_per_string"``: each string's summed loss, then the mean over strings
    (their ``sequence_losses.sum(1).mean()``): ``n + 1`` times the token mean on strings of ``n``
    symbols; on a padded batch, the transcription of their formula."""
    dm, padded = dyck_batch()
    items = [{"ids": ids} for ids in dm.build_split("train").strings if len(ids) == 3]  # ( ) END
    equal = collate_generator(items, DyckKM(2, 2).bos_id)
    assert len(items) > 1 and (equal["lengths"] == 3).all()
    summed, token = (model_for(dm, {"generator": 1.0}, loss_reduction=r) for r in ("sum_per_string", "token"))
    out = summed.heads_out(equal["input"], equal["mask"])
    torch.testing.assert_close(
        summed.losses(equal, out)["generator"], 3 * token.losses(equal, out)["generator"]
    )
    out = summed.heads_out(padded["input"], padded["mask"])
    sequence_losses = torch.nn.functional.cross_entropy(
        out["generator"].transpose(1, 2), padded["target"], ignore_index=-100, reduction="none"
    )  # 0 at padding, as their masked losses
    torch.testing.assert_close(summed.losses(padded, out)["generator"], sequence_losses.sum(1).mean())


def test_dropout_is_flares_before_and_after_the_layer_in_training_only(gen):
    """``dropout``: FLaRe's ``DropoutUnidirectional`` on the embedding's output and on the layer's
    output (its first, initial-state position too) in training mode; nothing in eval mode."""
    dm, batch = dyck_batch()
    inp, mask = batch["input"], batch["mask"]
    model = model_for(dm, {"generator": 1.0}, dropout=0.5, initial_output=True, embedding_dim=8).double()
    plain = model_for(dm, {"generator": 1.0}, initial_output=True, embedding_dim=8).double()
    plain.load_state_dict(model.state_dict())
    model.eval()
    torch.testing.assert_close(model.encode(inp, mask), plain.encode(inp, mask), atol=0, rtol=0)
    model.train()
    seen = {}
    model.layer.rnn.register_forward_hook(lambda mod, args, out: seen.update(x=args[0], y=out[0]))
    h = model.encode(inp, mask)
    x, y = model.embedding(inp[:, 1:]), seen["y"] * mask[:, 1:, None]
    for got, clean in ((seen["x"], x), (h[:, 1:], y)):  # each element dropped or scaled by 1 / (1 − p)
        dropped = got == 0
        assert dropped[clean != 0].any() and (~dropped[clean != 0]).any()
        torch.testing.assert_close(got[~dropped], 2 * clean[~dropped], atol=1e-12, rtol=0)
    first = model.layer.output_at(model.layer.initial_state(len(inp)))
    assert ((h[:, 0] == 0) | torch.isclose(h[:, 0], 2 * first)).all()
    with pytest.raises(ValueError, match=r"dropout must be in \[0, 1\), got 1.0"):
        model_for(dm, {"generator": 1.0}, dropout=1.0)


def test_tied_embeddings_are_one_parameter_and_the_readout_has_no_bias():
    """``tie_embeddings``: the generator's readout is the input embedding (FLaRe's language-modelling
    head, rau's ``TiedLinear``): one parameter, logits ``h · E[:num_symbols]ᵀ``, no bias; refused
    where there is nothing to tie or the sizes differ."""
    from memrnn.data import RecognizerDataModule

    dm = RecognizerDataModule("marked_reversal", train_size=8, val_size=4, auxiliary=["language_modelling"])
    dm.setup("fit")
    batch = dm.collate_fn()([dm.datasets["train"][i] for i in range(8)])
    objectives = {"acceptor_end": 1.0, "generator": 1.0}
    model = model_for(dm, objectives, tie_embeddings=True, embedding_dim=8, initial_output=True)
    head = model.heads["generator"]
    assert isinstance(head, TiedReadout) and head.weight is model.embedding.weight and head.bias is None
    assert sum(p.numel() for p in model.parameters()) == (
        sum(p.numel() for p in model_for(dm, objectives, embedding_dim=8).parameters())
        - (8 + 1) * dm.num_symbols
    )
    h = model.encode(batch["input"], batch["mask"])
    logits = model.heads_out(batch["input"], batch["mask"])["generator"]
    torch.testing.assert_close(logits, h @ model.embedding.weight[: dm.num_symbols].T)
    model.losses(batch, model.heads_out(batch["input"], batch["mask"]))["generator"].backward()
    assert model.embedding.weight.grad[dm.num_symbols - 1].abs().sum() > 0  # EOS's row: output only
    other = model_for(dm, objectives, tie_embeddings=True, embedding_dim=8, initial_output=True)
    other.load_state_dict(model.state_dict())
    assert other.heads["generator"].weight is other.embedding.weight
    torch.testing.assert_close(other.embedding.weight, model.embedding.weight)
    with pytest.raises(
        ValueError, match=r"tie_embeddings=True .* objectives \(acceptor_end\) have no generator"
    ):
        model_for(dm, {"acceptor_end": 1.0}, tie_embeddings=True, embedding_dim=8)
    with pytest.raises(
        ValueError, match="tie_embeddings=True needs a learned embedding, got embedding='one_hot'"
    ):
        model_for(dm, objectives, tie_embeddings=True, embedding="one_hot")
    with pytest.raises(
        ValueError, match="embedding_dim must equal the layer's output_size=8, got embedding_dim=16"
    ):
        model_for(dm, objectives, tie_embeddings=True)


def test_restart_optimizer_on_decay_gives_a_fresh_adam_when_the_plateau_lowers_the_lr():
    """``restart_optimizer_on_decay`` (Hewitt et al.'s text, appendix H.3): a plateau step that
    halves the learning rate empties Adam's state, so its next step is a new Adam's first step;
    a step that keeps the rate keeps it, and so does the default (their code)."""
    dm, batch = dyck_batch()
    plateau = functools.partial(torch.optim.lr_scheduler.ReduceLROnPlateau, factor=0.5, patience=0)
    for restart in (True, False):
        model = model_for(dm, {"generator": 1.0}, lr_scheduler=plateau, restart_optimizer_on_decay=restart)
        conf = model.configure_optimizers()
        opt, sched = conf["optimizer"], conf["lr_scheduler"]["scheduler"]

        def step(optimizer, model=model):
            optimizer.zero_grad()
            model.losses(batch, model.heads_out(batch["input"], batch["mask"]))["generator"].backward()
            optimizer.step()

        step(opt)
        model.lr_scheduler_step(sched, 1.0)  # the first value: a new best, no decay
        assert opt.param_groups[0]["lr"] == 0.01 and len(opt.state) > 0
        model.lr_scheduler_step(sched, 2.0)  # no better: halved
        assert opt.param_groups[0]["lr"] == 0.005
        assert (len(opt.state) == 0) == restart
        if restart:  # the next step is a fresh Adam's at the new rate
            snapshot = copy.deepcopy(model.state_dict())
            fresh = torch.optim.Adam(model.parameters(), lr=0.005)
            step(opt)
            after = copy.deepcopy(model.state_dict())
            model.load_state_dict(snapshot)
            step(fresh)
            for k, v in model.state_dict().items():
                torch.testing.assert_close(v, after[k], atol=0, rtol=0)
    with pytest.raises(ValueError, match=r"restart_optimizer_on_decay=True .* but lr_scheduler is None"):
        model_for(dm, {"generator": 1.0}, restart_optimizer_on_decay=True)


def test_lightning_calls_the_restart(tmp_path):
    """In a real fit Lightning steps the plateau through ``lr_scheduler_step``: with a rate halved
    after every validation but the first, Adam's state is empty at the end (restarted), else it
    holds every step."""
    dm = FormalLanguageDataModule(DyckKM(2, 2), train_size=16, val_size=8, test_size=0, train_lengths=(1, 11),
                                  batch_size=8)  # fmt: skip
    plateau = functools.partial(torch.optim.lr_scheduler.ReduceLROnPlateau, factor=0.5, patience=0,
                                threshold=1e9, threshold_mode="abs")  # fmt: skip
    for restart in (True, False):
        model = model_for(dm, {"generator": 1.0}, lr_scheduler=plateau, restart_optimizer_on_decay=restart)
        t = L.Trainer(max_epochs=3, logger=False, enable_progress_bar=False, enable_model_summary=False,
                      enable_checkpointing=False, default_root_dir=tmp_path)  # fmt: skip
        t.fit(model, datamodule=dm)
        opt = t.optimizers[0]
        assert opt.param_groups[0]["lr"] == 0.01 * 0.5**2
        steps = {int(s["step"]) for s in opt.state.values()}
        assert steps == (set() if restart else {6})


def test_the_options_come_from_yaml_and_survive_a_checkpoint(tmp_path):
    """Every option through the CLI (``model.init_args.…``), then ``load_from_checkpoint`` gives the
    same model (the tie, the learned state, the dropout, the init's scale)."""
    config = tmp_path / "flare_like.yaml"
    config.write_text(
        """
model:
  class_path: memrnn.lit.SequenceModule
  init_args:
    embedding_dim: 8
    objectives: {generator: 1.0, acceptor_end: 1.0}
    initial_output: true
    dropout: 0.1
    tie_embeddings: true
    init: flare
    init_scale: 0.05
    loss_reduction: sum_per_string
    restart_optimizer_on_decay: true
    lr_scheduler:
      class_path: torch.optim.lr_scheduler.ReduceLROnPlateau
      init_args: {factor: 0.5, patience: 0}
    layer:
      class_path: memrnn.layers.LSTMLayer
      init_args: {hidden_size: 8, num_layers: 2, dropout: 0.1, learned_initial_state: true}
data:
  class_path: memrnn.data.RecognizerDataModule
  init_args: {language: marked_reversal, train_size: 16, val_size: 8, batch_size: 8,
              auxiliary: [language_modelling]}
trainer: {max_epochs: 1, logger: false, enable_progress_bar: false, enable_model_summary: false}
"""
    )
    cli = build_cli(["--config", str(config), f"--trainer.default_root_dir={tmp_path}"], run=False)
    model = cli.model
    assert model.initial_output and model.tie_embeddings and model.restart_optimizer_on_decay
    assert model.input_dropout.p == 0.1 and model.loss_reduction == "sum_per_string"
    assert model.layer.learned_initial_state and model.layer.h0_input.abs().max() <= 0.05
    assert (model.layer.rnn.bias_hh_l0 == 0).all() and model.heads[
        "generator"
    ].weight is model.embedding.weight
    cli.trainer.fit(model, datamodule=cli.datamodule)
    ckpt = tmp_path / "last.ckpt"
    cli.trainer.save_checkpoint(ckpt)
    loaded = SequenceModule.load_from_checkpoint(ckpt).eval()
    model.eval()
    assert loaded.heads["generator"].weight is loaded.embedding.weight and loaded.hparams.init == "flare"
    batch = cli.datamodule.collate_fn()([cli.datamodule.datasets["train"][i] for i in range(4)])
    for key, value in model.heads_out(batch["input"], batch["mask"]).items():
        torch.testing.assert_close(
            loaded.heads_out(batch["input"], batch["mask"])[key], value, atol=0, rtol=0
        )


class _ReadsLengths(LSTMLayer):
    """An LSTM whose initial state takes the rows' input lengths (as a StackRNN on a jump tape)."""

    reads_input_lengths = True
    seen: torch.Tensor | None = None

    def initial_state(self, batch_size, *, device=None, dtype=None, input_lengths=None):
        if input_lengths is not None:
            self.seen = input_lengths
        return super().initial_state(batch_size, device=device, dtype=dtype)


def test_input_lengths_reach_a_layer_that_reads_them_through_its_initial_state():
    """``encode(..., input_lengths)`` asks a layer with ``reads_input_lengths`` for
    ``initial_state(B, input_lengths=…)`` (it does not look into the state's fields); a layer
    without it runs from its own initial state."""
    ids = torch.tensor([[1, 2, 3], [1, 2, 0]])
    mask = ids != 0
    lengths = torch.tensor([2, 1])
    model = SequenceModule(functools.partial(_ReadsLengths, hidden_size=4), vocab_size=4, num_symbols=3)
    h = model.encode(ids, mask, input_lengths=lengths)
    assert model.layer.seen is lengths and h.shape == (2, 3, 4)
    torch.testing.assert_close(h, model.encode(ids, mask))
    plain = SequenceModule(functools.partial(LSTMLayer, hidden_size=4), vocab_size=4, num_symbols=3)
    torch.testing.assert_close(plain.encode(ids, mask, input_lengths=lengths), plain.encode(ids, mask))
