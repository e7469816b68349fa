"""SequenceModule: objective switching, masked acceptor gathering, clear errors, the
bracket-closing metric in validation."""

from __future__ import annotations

import functools

import lightning as L
import pytest
import torch

from memrnn.data import AcceptorDataModule, FormalLanguageDataModule
from memrnn.data.tasks import collate_acceptor
from memrnn.languages import AnBn, DyckKM, DyckN
from memrnn.layers import LSTMLayer
from memrnn.lit import SequenceModule


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
    with pytest.raises(ValueError, match="loss_reduction must be 'token' or 'string', got 'sum'"):
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
