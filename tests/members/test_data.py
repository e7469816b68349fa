"""Members on their own data (``member_data="independent"``, :class:`memrnn.data.members.MemberData`):
each member trains on exactly the batches its single run with that data seed draws, and equals
that run; the CLI builds the members' data from a single run's config."""

from __future__ import annotations

import functools
import warnings

import lightning as L
import pytest
import torch
from torch.utils.data import DataLoader

from memrnn.data import IGNORE_INDEX, FormalLanguageDataModule
from memrnn.data.members import MemberData, MemberLoader, member_batch, reuse_drawn
from memrnn.languages import DyckKM
from memrnn.layers import LSTMLayer
from memrnn.lit import SequenceModule
from memrnn.lit.cli import build_cli
from memrnn.lit.members import MemberSequenceModule

MEMBERS = [{"seed": 0, "lr": 0.01}, {"seed": 1, "lr": 0.003}, {"seed": 2, "lr": 0.01, "data_seed": 5}]


def _data(seed: int, **kwargs) -> FormalLanguageDataModule:
    return FormalLanguageDataModule(
        DyckKM(k=2, m=3), train_size=48, val_size=16, test_size=16, batch_size=16, seed=seed, **kwargs
    )


def _kwargs() -> dict:
    dm = _data(0)
    return {"layer": functools.partial(LSTMLayer, hidden_size=8), "vocab_size": dm.vocab_size,
            "num_symbols": dm.num_symbols, "embedding_dim": 6}  # fmt: skip


def _fit(module, data, tmp_path, epochs=2):
    trainer = L.Trainer(
        max_epochs=epochs, logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, gradient_clip_val=1.0, default_root_dir=tmp_path, num_sanity_val_steps=0,
    )  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(module, data)
        trainer.test(module, data, verbose=False)
    return trainer


def test_a_member_batch_is_its_own_modules_batch_padded():
    data = MemberData.from_seeds(_data(0), [0, 3])
    data.setup("fit")
    alone = _data(3)
    alone.setup("fit")
    for epoch in (0, 1):
        loader = data.train_dataloader()
        loader.sampler.set_epoch(epoch)
        single = alone.train_dataloader()
        single.sampler.set_epoch(epoch)
        for batch, own in zip(loader, single, strict=True):
            assert batch["input"].shape[:2] == (2, 16)
            mine = member_batch(batch, 1)
            T = own["input"].shape[1]
            for key, value in own.items():
                assert torch.equal(mine[key][:, :T] if mine[key].dim() > 1 else mine[key], value), key
            assert not mine["mask"][:, T:].any()  # the rest is padding


def test_a_test_set_of_one_seed_is_drawn_once_and_shared(split_draws):
    """With ``test_seed`` the members' test split is one set (DuSell & Chiang's one test set per
    task): drawn once (a split of the hardest CFL costs ~80 s of exact scoring) and equal to the
    one each module alone draws; the splits of the members' own seeds stay their own."""
    drawn = split_draws
    data = MemberData.from_seeds(_data(0, test_seed=7), [0, 3, 3, 5])
    data.setup("fit")
    data.setup("test")
    assert sorted(drawn) == sorted([("train", 0), ("val", 0), ("train", 3), ("val", 3), ("train", 5), ("val", 5),
                                    ("test", 7)])  # fmt: skip
    modules = list(dict.fromkeys(data.modules))
    assert all(m.datasets["test"] is modules[0].datasets["test"] for m in modules)
    assert modules[0].datasets["val"] is not modules[1].datasets["val"]
    alone = _data(5, test_seed=7)
    alone.setup("test")
    assert alone.datasets["test"].strings == modules[0].datasets["test"].strings
    assert [r.tolist() for r in alone.datasets["test"].ref_logprobs] == [
        r.tolist() for r in modules[0].datasets["test"].ref_logprobs
    ]
    # without test_seed every seed draws its own test split
    drawn.clear()
    data = MemberData.from_seeds(_data(0), [0, 3])
    data.setup("test")
    assert sorted(drawn) == [("test", 0), ("test", 3)]
    # modules not made by from_seeds are never assumed alike
    drawn.clear()
    data = MemberData([_data(0, test_seed=7), _data(3, test_seed=7)])
    data.setup("test")
    assert drawn == [("test", 7), ("test", 7)]


def test_splits_drawn_before_are_reused_by_seed():
    """:func:`reuse_drawn` gives a split to a module of the same class and the same split seed
    only: seed 3's splits to seed 3's module, the test set of ``test_seed`` to every module."""
    before = MemberData.from_seeds(_data(0, test_seed=7), [0, 3])
    before.setup("fit")
    before.setup("test")
    after = MemberData.from_seeds(_data(3, test_seed=7), [3, 5])
    assert reuse_drawn(after, before) == 4  # seed 3's train, val and test; seed 5's test
    three, five = after.modules
    assert three.datasets["train"] is before.modules[1].datasets["train"]
    assert sorted(five.datasets) == ["test"] and five.datasets["test"] is before.modules[0].datasets["test"]
    assert reuse_drawn(after, before) == 0  # nothing is replaced
    assert reuse_drawn(_data(0), before) == 2  # seed 0 without test_seed: its own test set
    assert reuse_drawn(_data(5), _data(5)) == 0  # nothing drawn, nothing given


def test_each_member_on_its_own_data_is_its_single_run(tmp_path):
    members = MemberSequenceModule(members=MEMBERS, member_data="independent", **_kwargs())
    assert members.data_seeds == [0, 1, 5]
    _fit(members, MemberData.from_seeds(_data(0), members.data_seeds), tmp_path)
    for m, row in enumerate(MEMBERS):
        torch.manual_seed(row["seed"])
        single = SequenceModule(lr=row["lr"], **_kwargs())
        trainer = _fit(single, _data(members.data_seeds[m]), tmp_path)
        got = members.member_module(m).state_dict()
        for key, value in single.state_dict().items():
            torch.testing.assert_close(
                got[key], value, atol=1e-5, rtol=1e-5, msg=lambda s, k=key: f"{k}: {s}"
            )
        tested = [k for k in members.member_epoch if k.startswith("test/")]
        assert "test/ce" in tested and "test/acc_mean_over_lengths" in tested
        for key in tested:
            want = float(trainer.callback_metrics[key])
            assert members.member_epoch[key][m].item() == pytest.approx(want, abs=1e-5), key


@pytest.mark.parametrize("reduction", ["token", "string", "sum_per_string"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_a_batch_per_member_takes_its_losses_at_once_as_each_member_alone(reduction, dtype):
    """With a batch per member the generator's losses are taken for all members at once: bit for
    bit each member's loss on its own rows (:meth:`SequenceModule.losses` on its slices), for
    every ``loss_reduction``; a string without a scored position (none in memrnn's data) falls
    back to the members one by one."""
    torch.manual_seed(0)
    members = MemberSequenceModule(seeds=[0, 1, 2], member_data="independent", loss_reduction=reduction,
                                   **_kwargs()).to(dtype)  # fmt: skip
    M, B, T = 3, 4, 7
    g = torch.Generator().manual_seed(1)
    lengths = torch.randint(1, T + 1, (M, B), generator=g)
    mask = torch.arange(T) < lengths[..., None]
    ids = torch.randint(0, members.vocab_size, (M, B, T), generator=g) * mask
    target = torch.randint(0, members.num_symbols, (M, B, T), generator=g).masked_fill(~mask, IGNORE_INDEX)
    batch = {"input": ids, "mask": mask, "target": target, "lengths": lengths}

    def one_by_one(batch, out):
        return torch.stack([members.losses(member_batch(batch, m), {k: v[m] for k, v in out.items()})["generator"]
                            for m in range(M)])  # fmt: skip

    out, losses = members._outputs_and_losses(batch)
    assert losses["generator"].dtype == dtype and torch.equal(losses["generator"], one_by_one(batch, out))
    blank = {**batch, "target": target.clone()}
    blank["target"][1, 2] = IGNORE_INDEX  # member 1's string 2 has no scored position
    out, losses = members._outputs_and_losses(blank)
    assert torch.equal(losses["generator"], one_by_one(blank, out))


def test_member_data_is_checked():
    with pytest.raises(ValueError, match="member_data must be one of"):
        MemberSequenceModule(seeds=[0], member_data="own", **_kwargs())
    with pytest.raises(ValueError, match="data_seed needs member_data='independent'"):
        MemberSequenceModule(members=MEMBERS, **_kwargs())
    shared = MemberSequenceModule(seeds=[0, 1], **_kwargs())
    own = MemberSequenceModule(seeds=[0, 1], member_data="independent", **_kwargs())
    ids = torch.zeros(2, 3, 4, dtype=torch.long)
    mask = torch.ones(2, 3, 4, dtype=torch.bool)
    with pytest.raises(ValueError, match="needs member_data='independent'"):
        shared._outputs_and_losses({"input": ids, "mask": mask})
    with pytest.raises(ValueError, match=r"takes batches with the members first, input \[2, B, T\]"):
        own._outputs_and_losses({"input": ids[0], "mask": mask[0]})


def test_members_whose_batches_do_not_line_up_are_named():
    def collate(xs):
        return {"x": torch.zeros(len(xs))}

    def loader(n, batch):
        return DataLoader([{"x": 1}] * n, batch_size=batch, collate_fn=collate)

    with pytest.raises(ValueError, match=r"different numbers of rows \[2, 3\]"):
        next(iter(MemberLoader([loader(2, 2), loader(3, 3)], collate)))
    with pytest.raises(ValueError, match=r"end at different steps: members \[1\] ended at step 1"):
        for _ in iter(MemberLoader([loader(4, 2), loader(2, 2)], collate)):
            pass
    with pytest.raises(ValueError, match=r"different numbers of batches: \[2, 1\]"):
        len(MemberLoader([loader(4, 2), loader(2, 2)], collate))


def test_the_cli_gives_each_member_its_own_data():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cli = build_cli(
            ["--config", "configs/dyck/lstm_k2_m3.yaml", "--model.class_path=memrnn.lit.members.MemberSequenceModule",
             "--model.init_args.seeds=[0,1]", "--model.init_args.lrs=[0.01,0.001]",
             "--model.init_args.member_data=independent", "--trainer.logger=false"],
            run=False,
        )  # fmt: skip
    assert isinstance(cli.datamodule, MemberData)
    assert [m.seed for m in cli.datamodule.modules] == [0, 0, 1, 1]
    assert cli.datamodule.modules[0] is cli.datamodule.modules[1]  # one module per data seed
