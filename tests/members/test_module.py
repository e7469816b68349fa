""":class:`memrnn.lit.members.MemberSequenceModule` under Lightning: each member of a fit equals
its single run (same seed's initial weights, its learning rate, the same batches) with the
Trainer's gradient clipping and a plateau schedule per member; a member written out is an
ordinary :class:`SequenceModule` checkpoint; per-member early stopping keeps the best weights."""

from __future__ import annotations

import functools
import warnings
from typing import ClassVar

import lightning as L
import pytest
import torch

from memrnn.data import FormalLanguageDataModule
from memrnn.languages import DyckKM
from memrnn.layers import ElmanRNN, LSTMLayer
from memrnn.lit import SequenceModule
from memrnn.lit.cli import build_cli
from memrnn.lit.members import MemberSequenceModule, write_member_checkpoint
from memrnn.members.optim import MemberAdam

MEMBERS = [{"seed": 0, "lr": 0.01}, {"seed": 1, "lr": 0.003}, {"seed": 2, "lr": 0.03}]


def _data() -> FormalLanguageDataModule:
    return FormalLanguageDataModule(
        language=DyckKM(k=2, m=3),
        train_size=64,
        val_size=32,
        test_size=16,
        batch_size=16,
        eval_batch_size=16,
        seed=0,
    )


def _kwargs(layer) -> dict:
    dm = _data()
    plateau = functools.partial(
        torch.optim.lr_scheduler.ReduceLROnPlateau, factor=0.5, patience=0, threshold=0.02
    )
    return {"layer": layer, "vocab_size": dm.vocab_size, "num_symbols": dm.num_symbols, "embedding_dim": 6,
            "lr_scheduler": plateau}  # fmt: skip


def _fit(module, tmp_path, epochs=3):
    trainer = L.Trainer(
        max_epochs=epochs, logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, gradient_clip_val=1.0, default_root_dir=tmp_path, num_sanity_val_steps=0,
    )  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(module, _data())
    return trainer


@pytest.mark.parametrize(
    "layer", [functools.partial(LSTMLayer, hidden_size=8), functools.partial(ElmanRNN, hidden_size=8)]
)
def test_each_member_of_a_fit_is_its_single_run(layer, tmp_path):
    members = MemberSequenceModule(members=MEMBERS, **_kwargs(layer))
    trainer = _fit(members, tmp_path)
    member_lrs = trainer.optimizers[0].param_groups[0]["member_lr"]
    assert isinstance(trainer.optimizers[0], MemberAdam)
    for m, row in enumerate(MEMBERS):
        torch.manual_seed(row["seed"])
        single = SequenceModule(lr=row["lr"], **_kwargs(layer))
        single_trainer = _fit(single, tmp_path)
        got = members.member_module(m).state_dict()
        for key, value in single.state_dict().items():
            torch.testing.assert_close(
                got[key], value, atol=1e-5, rtol=1e-5, msg=lambda s, k=key: f"{k}: {s}"
            )
        assert member_lrs[m].item() == single_trainer.optimizers[0].param_groups[0]["lr"]
    assert (
        member_lrs < torch.tensor([r["lr"] for r in MEMBERS], dtype=member_lrs.dtype)
    ).any()  # some halved


def test_a_member_is_written_as_an_ordinary_checkpoint(tmp_path):
    members = MemberSequenceModule(seeds=[3, 4], **_kwargs(functools.partial(LSTMLayer, hidden_size=8)))
    trainer = _fit(members, tmp_path, epochs=1)
    trainer.save_checkpoint(tmp_path / "members.ckpt")
    write_member_checkpoint(str(tmp_path / "members.ckpt"), 1, str(tmp_path / "one.ckpt"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        single = SequenceModule.load_from_checkpoint(tmp_path / "one.ckpt")
        back = MemberSequenceModule.load_from_checkpoint(tmp_path / "members.ckpt")
    dm = _data()
    dm.setup("fit")
    batch = next(iter(dm.val_dataloader()))
    members.eval(), single.eval(), back.eval()
    with torch.no_grad():
        want = members.heads_out(batch["input"], batch["mask"])["generator"]
        torch.testing.assert_close(
            single.heads_out(batch["input"], batch["mask"])["generator"], want[1], atol=1e-5, rtol=1e-5
        )
        assert torch.equal(back.heads_out(batch["input"], batch["mask"])["generator"], want)
    assert back.member_rows == members.member_rows and back.members == 2


def test_a_checkpoint_from_before_stops_were_recorded_loads_with_none_recorded(tmp_path):
    """A members checkpoint without ``stop_step``/``stop_epoch`` (written before memrnn kept
    where each member stopped) loads, and its stopped members report the run's steps and epochs."""
    members = MemberSequenceModule(seeds=[3, 4], **_kwargs(functools.partial(LSTMLayer, hidden_size=8)))
    trainer = _fit(members, tmp_path, epochs=1)
    trainer.save_checkpoint(tmp_path / "members.ckpt")
    old = torch.load(tmp_path / "members.ckpt", weights_only=False)
    old["state_dict"]["stopped"] = torch.tensor([True, False])
    del old["state_dict"]["stop_step"], old["state_dict"]["stop_epoch"]
    torch.save(old, tmp_path / "old.ckpt")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        back = MemberSequenceModule.load_from_checkpoint(tmp_path / "old.ckpt")
    assert back.stop_step.tolist() == back.stop_epoch.tolist() == [-1, -1]
    assert back.member_progress(0, 40, 5) == back.member_progress(1, 40, 5) == (40, 5)


def test_early_stopping_per_member_freezes_and_keeps_the_best(tmp_path):
    members = MemberSequenceModule(
        seeds=[0, 1], stop_patience=0, **_kwargs(functools.partial(LSTMLayer, hidden_size=8))
    )
    members._val_batches = [(torch.tensor([1.0, 2.0]), 4)]
    members._end_validation()
    first = {k: v.clone() for k, v in members.state_dict().items() if k.startswith("embedding")}
    with torch.no_grad():
        members.embedding.weight.add_(1.0)
    members._val_batches = [(torch.tensor([0.5, 3.0]), 4)]  # member 0 improves, member 1 does not
    members._end_validation()
    assert members.stopped.tolist() == [False, True]
    assert members.best_score.tolist() == [0.5, 2.0]
    members.restore_best()
    assert torch.equal(
        members.embedding.weight[0], first["embedding.weight"][0] + 1.0
    )  # its best: the new one
    assert torch.equal(members.embedding.weight[1], first["embedding.weight"][1])  # its best: the first


@pytest.mark.parametrize(
    ("mode", "patience", "min_delta", "values"),
    [
        ("min", 2, 0.0, [3.0, 2.0, 2.0, 2.5, 1.0, 1.5, 1.5, 1.2]),
        ("min", 0, 0.0, [3.0, 2.0, 2.5]),
        ("max", 1, 0.1, [0.5, 0.55, 0.7, 0.75]),
        ("min", 3, 0.0, [3.0, float("nan")]),
        ("max", 2, 0.0, [0.5, 0.4, 0.6, 0.6, 0.6]),
    ],
)
def test_the_stop_rule_is_lightnings_early_stopping(mode, patience, min_delta, values):
    """Each member stops at the validation where Lightning's ``EarlyStopping`` on its values
    would stop its single run."""
    from lightning.pytorch.callbacks import EarlyStopping

    from memrnn.lit.members import _stop_rule_of

    cb = EarlyStopping(monitor="val/x", mode=mode, patience=patience, min_delta=min_delta)
    rule = _stop_rule_of([cb], None)
    best, stale = torch.full((1,), float("nan")), torch.zeros(1, dtype=torch.long)
    want = got = None
    for i, v in enumerate(values):
        if want is None and cb._evaluate_stopping_criteria(torch.tensor(v))[0]:
            want = i
        if got is None and bool(rule.step(torch.tensor([v], dtype=torch.float64), best, stale)[0]):
            got = i
    assert want is not None and got == want


def test_members_take_the_trainers_checkpoint_monitor_and_early_stopping(tmp_path):
    """A single run's config trains members: each member's best weights are those its
    ``ModelCheckpoint`` would select, and ``EarlyStopping`` stops each member on its own values."""
    from lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint

    members = MemberSequenceModule(seeds=[0, 1], **_kwargs(functools.partial(LSTMLayer, hidden_size=8)))
    ckpt = ModelCheckpoint(dirpath=tmp_path, monitor="val/acc_mean_over_lengths", mode="max")
    stop = EarlyStopping(monitor="val/loss", patience=50)

    class Record(L.Callback):
        values: ClassVar[list] = []

        def on_validation_end(self, trainer, module):
            self.values.append(module.member_epoch["val/acc_mean_over_lengths"].clone())

    record = Record()
    trainer = L.Trainer(
        max_epochs=2, logger=False, enable_progress_bar=False, enable_model_summary=False,
        default_root_dir=tmp_path, num_sanity_val_steps=0, callbacks=[ckpt, stop, record],
    )  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(members, _data())
    assert stop not in trainer.callbacks and members.stopping_rule().patience == 50
    assert members.selection_rule() == ("val/acc_mean_over_lengths", "max")
    seen = torch.stack(record.values)  # [epochs, M]: the best is each member's highest
    assert len(record.values) == 2
    assert torch.equal(members.best_score, seen.max(0).values.to(members.best_score))
    with pytest.raises(ValueError, match="stop_patience or an EarlyStopping callback, not both"):
        from memrnn.lit.members import _stop_rule_of

        _stop_rule_of([stop], 3)


def test_the_cli_builds_members_from_a_single_runs_config():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cli = build_cli(
            ["--config", "configs/dyck/lstm_k2_m3.yaml", "--model.class_path=memrnn.lit.members.MemberSequenceModule",
             "--model.init_args.seeds=[0,1]", "--model.init_args.lrs=[0.01,0.001]", "--trainer.logger=false"],
            run=False,
        )  # fmt: skip
    assert cli.model.members == 4 and cli.model.layer.member_path == "lstm_sequence (members batched)"
    assert [(r["seed"], r["lr"]) for r in cli.model.member_rows] == [
        (0, 0.01),
        (0, 0.001),
        (1, 0.01),
        (1, 0.001),
    ]
    # a member module is built from the layer's class, not the CLI's deferred partial, which holds
    # the CLI's instantiators (after a fit, the trainer and data that save_hyperparameters copied)
    given = cli.model._single_kwargs["layer"]
    assert type(given.args[0]).__name__ == "ClassInstantiator"
    single = cli.model.member_module(3)
    assert single.hparams["layer"].func is LSTMLayer and single.hparams["layer"].keywords == given.keywords
    assert not single.hparams["layer"].args and single.hparams["lr"] == 0.001


def test_bad_member_settings_are_named():
    kw = _kwargs(functools.partial(LSTMLayer, hidden_size=8))
    with pytest.raises(ValueError, match=r"member 0 sets \['momentum'\]"):
        MemberSequenceModule(members=[{"seed": 0, "momentum": 0.9}], **kw)
    with pytest.raises(ValueError, match="member 1 has no seed"):
        MemberSequenceModule(members=[{"seed": 0}, {"lr": 0.1}], **kw)
    with pytest.raises(ValueError, match="not both"):
        MemberSequenceModule(members=[{"seed": 0}], seeds=[1], **kw)
    with pytest.raises(ValueError, match="tie_embeddings is not available with members"):
        MemberSequenceModule(seeds=[0], **{**kw, "tie_embeddings": True, "embedding_dim": 8})
    with pytest.raises(ValueError, match="member 5 does not exist"):
        MemberSequenceModule(seeds=[0, 1], **kw).member_module(5)


def test_comparisons_read_member_zero_and_the_curves_are_the_members_mean(tmp_path):
    """The callbacks of the configs run with members: a probe of the layer reads member 0's model
    (:func:`memrnn.lit.callbacks.base.model_to_compare`), the per-length curves are the members'
    mean."""
    from memrnn.lit import LengthCurves, LinearProbe
    from memrnn.lit.callbacks.base import model_to_compare

    members = MemberSequenceModule(seeds=[0, 1], **_kwargs(functools.partial(LSTMLayer, hidden_size=8)))
    curves, probe = LengthCurves(figures=False), LinearProbe(every_n_epochs=1)
    trainer = L.Trainer(
        max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, default_root_dir=tmp_path, num_sanity_val_steps=0, callbacks=[curves, probe],
    )  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(members, _data())
    assert "val" in probe.results
    before = torch.random.get_rng_state()
    assert isinstance(model_to_compare(members), SequenceModule)  # a comparison draws nothing: dropout
    assert torch.equal(torch.random.get_rng_state(), before)  # masks stay the run's own
    mine = curves.curves["val"]
    each = members.member_curves["val"]
    assert len(each) == 2 and mine["length"] == each[0]["length"]
    want = [(a + b) / 2 for a, b in zip(each[0]["ce"], each[1]["ce"], strict=True)]
    torch.testing.assert_close(torch.tensor(mine["ce"]), torch.tensor(want), atol=1e-12, rtol=0)


def test_a_diverging_member_is_stopped_and_the_others_go_on(tmp_path):
    """A member whose loss is not finite is frozen and reported; the others train exactly as alone."""
    layer = functools.partial(LSTMLayer, hidden_size=8)
    members = MemberSequenceModule(members=MEMBERS[:2], **_kwargs(layer))
    with torch.no_grad():
        members.embedding.weight[1] = float("nan")
    before = {k: v[1].clone() for k, v in members.named_parameters()}
    trainer = L.Trainer(
        max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, gradient_clip_val=1.0, default_root_dir=tmp_path, num_sanity_val_steps=0,
    )  # fmt: skip
    with pytest.warns(UserWarning, match=r"member 1 .* diverged .* stopped; the other members go on"):
        trainer.fit(members, _data())
    assert members.diverged.tolist() == [False, True] and members.stopped.tolist() == [False, True]
    # where it stopped: its first step (the loss was never finite), in epoch 1
    assert members.stop_step.tolist() == [-1, 0] and members.stop_epoch.tolist() == [-1, 1]
    steps = trainer.global_step
    assert members.member_progress(0, steps, 1) == (steps, 1)  # it ran with the fit to its end
    assert members.member_progress(1, steps, 1) == (0, 1)
    after = {k: v[1] for k, v in members.named_parameters()}
    assert all(
        torch.equal(after[k], v) or (v.isnan().all() and after[k].isnan().all()) for k, v in before.items()
    )
    torch.manual_seed(MEMBERS[0]["seed"])
    single = SequenceModule(lr=MEMBERS[0]["lr"], **_kwargs(layer))
    _fit(single, tmp_path, epochs=1)
    got = members.member_module(0).state_dict()
    for key, value in single.state_dict().items():
        torch.testing.assert_close(got[key], value, atol=1e-5, rtol=1e-5)
