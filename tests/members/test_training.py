"""The exactness contract of members (issue "many runs, one process"): a member of an M-member
run equals the single run with the same initial weights, learning rate and batches, for every
registered layer: losses per step and final parameters within 1e-5 (float32) over 200 steps of
the default job's optimizer (Adam) with gradient clipping at 1, and to 1e-10 in float64.

The default run trains every registered layer 20 steps and two layers (the LSTM and a stack RNN)
the full 200; ``bash scripts/dev.sh slow`` trains every layer 200 steps."""

from __future__ import annotations

import functools
import warnings

import pytest
import torch

from memrnn.core import create_layer, list_layers
from memrnn.lit import SequenceModule
from memrnn.lit.members import MemberSequenceModule
from memrnn.members.optim import clip_grad_norm_per_member_

MEMBERS = [{"seed": 0, "lr": 0.01}, {"seed": 1, "lr": 0.003}, {"seed": 0, "lr": 0.003}]
B, T, V = 3, 6, 5
FULL = ("lstm", "superposition_lstm")
TOL = {torch.float32: 1e-5, torch.float64: 1e-10}


def _layer(name: str, input_size: int):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the registry's tiny values
        return create_layer(name, input_size=input_size)


def _batches(n: int) -> list[dict[str, torch.Tensor]]:
    """Fixed batches of a generator objective, right padded (lengths 6, 4, 1)."""
    g = torch.Generator().manual_seed(0)
    out = []
    for _ in range(n):
        ids = torch.randint(0, V, (B, T + 1), generator=g)
        mask = torch.arange(T)[None] < torch.tensor([T, 4, 1])[:, None]
        target = ids[:, 1:].masked_fill(~mask, -100)
        out.append({"input": ids[:, :-1], "target": target, "mask": mask, "lengths": mask.sum(1)})
    return out


def _module(cls, dtype, name, **kw):
    """The model around layer ``name``, its embedding as wide as the registry's tiny layer reads
    (Hewitt et al.'s constructions read a fixed width; measured without drawing from the global
    generator, which seeds the initial weights)."""
    with warnings.catch_warnings(), torch.random.fork_rng(devices=[]):
        warnings.simplefilter("ignore")
        width = create_layer(name).input_size
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return cls(
            layer=functools.partial(_layer, name), vocab_size=V, num_symbols=V, embedding_dim=width, **kw
        ).to(dtype)


def _train_members(name, dtype, batches):
    module = _module(MemberSequenceModule, dtype, name, members=MEMBERS)
    opt = module.configure_optimizers()
    params = list(module.parameters())
    losses = []
    for batch in batches:
        opt.zero_grad()
        out = module.heads_out(batch["input"], batch["mask"])
        per = module._total(module.losses(batch, out))
        per.sum().backward()
        clip_grad_norm_per_member_(params, 1.0, module.members)
        opt.step()
        losses.append(per.detach())
    return module, torch.stack(losses)


def _train_single(name, dtype, batches, seed, lr):
    torch.manual_seed(seed)
    module = _module(SequenceModule, dtype, name, lr=lr)
    opt = torch.optim.Adam(module.parameters(), lr=lr)
    losses = []
    for i, batch in enumerate(batches):
        opt.zero_grad()
        loss = module.training_step(batch, i)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(module.parameters(), 1.0)
        opt.step()
        losses.append(loss.detach())
    return module, torch.stack(losses)


def _check(name: str, dtype: torch.dtype, steps: int) -> None:
    batches = _batches(steps)
    members, member_losses = _train_members(name, dtype, batches)
    for m, row in enumerate(MEMBERS):
        single, losses = _train_single(name, dtype, batches, row["seed"], row["lr"])
        torch.testing.assert_close(member_losses[:, m], losses, atol=TOL[dtype], rtol=TOL[dtype])
        got = members.member_module(m).state_dict()
        for key, value in single.state_dict().items():
            torch.testing.assert_close(
                got[key], value, atol=TOL[dtype], rtol=TOL[dtype], msg=lambda s, k=key: f"{k}: {s}"
            )


DTYPES = pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])


@DTYPES
@pytest.mark.parametrize("name", list_layers())
def test_each_member_trains_as_its_single_run(name, dtype):
    """20 steps of every registered layer (200 for :data:`FULL`)."""
    _check(name, dtype, 200 if name in FULL else 20)


@pytest.mark.slow
@DTYPES
@pytest.mark.parametrize("name", sorted(set(list_layers()) - set(FULL)))
def test_each_member_trains_as_its_single_run_for_200_steps(name, dtype):
    _check(name, dtype, 200)
