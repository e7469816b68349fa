"""Per-member optimisation (issue 67, item 3): every member of a member optimizer moves exactly as
torch's optimizer moves that member alone.

Tolerances are absolute (``atol``, ``rtol=0``): 1e-5 in float32 and 1e-10 in float64 over 200
steps, the issue's exactness contract; parameters are of order 1.
"""

from __future__ import annotations

import copy
import io

import pytest
import torch
from torch.optim.lr_scheduler import ReduceLROnPlateau, StepLR

from memrnn.members.optim import (
    MemberAdam,
    MemberAdamW,
    MemberSGD,
    clip_grad_norm_per_member_,
)
from memrnn.members.schedule import MemberScheduler

M = 3
LRS = [1e-3, 3e-3, 1e-2]
WDS = [0.0, 1e-2, 1e-1]
#: a scalar per member, a matrix per member, a vector per member
SHAPES = [(M,), (M, 5, 7), (M, 4)]
ATOL = {torch.float32: 1e-5, torch.float64: 1e-10}

OPTIMIZERS = {
    "adam": (MemberAdam, torch.optim.Adam, {}),
    "adamw": (MemberAdamW, torch.optim.AdamW, {}),
    "sgd": (MemberSGD, torch.optim.SGD, {}),
    "sgd-momentum": (MemberSGD, torch.optim.SGD, {"momentum": 0.9, "dampening": 0.3}),
    "sgd-nesterov": (MemberSGD, torch.optim.SGD, {"momentum": 0.9, "nesterov": True}),
}


def _params(gen: torch.Generator, dtype: torch.dtype, device: str = "cpu") -> list[torch.Tensor]:
    return [torch.randn(s, generator=gen, dtype=dtype).to(device).requires_grad_() for s in SHAPES]


def _alone(params: list[torch.Tensor], m: int) -> list[torch.Tensor]:
    """Member ``m``'s parameters as ordinary tensors (clones of its slices)."""
    return [p[m].detach().clone().requires_grad_() for p in params]


def _assert_members_equal(params, singles, atol, what=""):
    for m, alone in enumerate(singles):
        for i, (p, q) in enumerate(zip(params, alone, strict=True)):
            torch.testing.assert_close(
                p[m].detach(),
                q.detach(),
                atol=atol,
                rtol=0,
                msg=lambda s, m=m, i=i: f"{what} member {m} param {i}: {s}",
            )


@pytest.mark.parametrize("clip", [None, 1.0])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_each_member_moves_as_torch_optimizer_alone(name, dtype, clip, gen):
    """200 steps of random gradients, M = 3 members with different learning rates and weight
    decays (with and without clipping at 1 per member, the default job's clip): each member equals
    torch's optimizer (and ``clip_grad_norm_``) run on clones of its slices."""
    cls, torch_cls, kwargs = OPTIMIZERS[name]
    params = _params(gen, dtype)
    singles = [_alone(params, m) for m in range(M)]
    opt = cls(params, M, lr=LRS, weight_decay=WDS, **kwargs)
    refs = [torch_cls(singles[m], lr=LRS[m], weight_decay=WDS[m], **kwargs) for m in range(M)]
    for _ in range(200):
        grads = [torch.randn(s, generator=gen, dtype=dtype) for s in SHAPES]
        for p, g in zip(params, grads, strict=True):
            p.grad = g.clone()
        if clip is not None:
            norms = clip_grad_norm_per_member_(params, clip, M)
        opt.step()
        for m in range(M):
            for q, g in zip(singles[m], grads, strict=True):
                q.grad = g[m].clone()
            if clip is not None:
                norm = torch.nn.utils.clip_grad_norm_(singles[m], clip)
                torch.testing.assert_close(norms[m], norm, atol=ATOL[dtype], rtol=0)
            refs[m].step()
    _assert_members_equal(params, singles, ATOL[dtype], name)
    # the clip did clip: random gradients of 4 + 35 + 1 unit normals have norm about 6
    assert clip is None or bool((norms > 1.0).all())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_tiny_model_trains_as_each_member_alone(dtype, gen):
    """3 members of a two-layer perceptron (stacked weights, products as ``torch.bmm``), loss the
    sum of the members' MSE losses, MemberAdam + per-member clipping at 1, against each member
    alone with ``torch.optim.Adam`` + ``clip_grad_norm_`` on ``torch.nn.functional.linear``:
    losses per step and final parameters agree."""
    n_in, n_hidden, n_out, batch = 6, 8, 2, 16
    shapes = [(M, n_hidden, n_in), (M, n_hidden), (M, n_out, n_hidden), (M, n_out)]
    params = [(0.5 * torch.randn(s, generator=gen, dtype=dtype)).requires_grad_() for s in shapes]
    singles = [_alone(params, m) for m in range(M)]
    opt = MemberAdam(params, M, lr=LRS, weight_decay=WDS)
    refs = [torch.optim.Adam(singles[m], lr=LRS[m], weight_decay=WDS[m]) for m in range(M)]
    target_w = torch.randn(n_out, n_in, generator=gen, dtype=dtype)

    def members_forward(x):  # x [M, batch, n_in]
        w1, b1, w2, b2 = params
        h = torch.tanh(torch.bmm(x, w1.transpose(1, 2)) + b1[:, None])
        return torch.bmm(h, w2.transpose(1, 2)) + b2[:, None]

    first = None
    for _ in range(200):
        x = torch.randn(batch, n_in, generator=gen, dtype=dtype)  # members share the batch stream
        y = x @ target_w.T
        out = members_forward(x.expand(M, batch, n_in))
        losses = ((out - y) ** 2).mean(dim=(1, 2))  # [M]
        opt.zero_grad()
        losses.sum().backward()
        clip_grad_norm_per_member_(params, 1.0, M)
        opt.step()
        for m in range(M):
            w1, b1, w2, b2 = singles[m]
            h = torch.tanh(torch.nn.functional.linear(x, w1, b1))
            loss = torch.nn.functional.mse_loss(torch.nn.functional.linear(h, w2, b2), y)
            refs[m].zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(singles[m], 1.0)
            refs[m].step()
            torch.testing.assert_close(losses[m].detach(), loss.detach(), atol=ATOL[dtype], rtol=0)
        if first is None:
            first = losses.detach()
    _assert_members_equal(params, singles, ATOL[dtype], "tiny model")
    assert bool((losses < 0.5 * first).all())  # every member learned


def test_frozen_member_is_unchanged_and_the_others_go_on(gen):
    """A frozen member's parameters and Adam state stay bit for bit, even with NaN gradients; the
    other members are bit for bit the run without freezing; unfrozen, the member continues as a
    torch Adam that skipped the frozen steps."""
    dtype = torch.float64
    params = _params(gen, dtype)
    free = [p.detach().clone().requires_grad_() for p in params]
    alone = _alone(params, 1)
    opt = MemberAdam(params, M, lr=LRS, weight_decay=WDS)
    opt_free = MemberAdam(free, M, lr=LRS, weight_decay=WDS)
    ref = torch.optim.Adam(alone, lr=LRS[1], weight_decay=WDS[1])
    for t in range(60):
        grads = [torch.randn(s, generator=gen, dtype=dtype) for s in SHAPES]
        frozen = 20 <= t < 40
        if t == 20:
            opt.freeze(1)
            snapshot = copy.deepcopy(([p.detach() for p in params], opt.state_dict()["state"]))
        if t == 40:
            assert opt.frozen.tolist() == [False, True, False]
            for p, old in zip(params, snapshot[0], strict=True):
                assert torch.equal(p[1], old[1])
            for i, state in opt.state_dict()["state"].items():
                for key, value in state.items():
                    assert torch.equal(value[1], snapshot[1][i][key][1]), (i, key)
            opt.unfreeze(1)
        for p, q, g in zip(params, free, grads, strict=True):
            p.grad = g.clone()
            if frozen:
                p.grad[1] = float("nan")  # a diverged member
            q.grad = g.clone()
        opt.step()
        opt_free.step()
        for p, q in zip(params, free, strict=True):
            assert torch.equal(p[0], q[0]) and torch.equal(p[2], q[2])
        if not frozen:
            for q, g in zip(alone, grads, strict=True):
                q.grad = g[1].clone()
            ref.step()
    _assert_members_equal([p[1:2] for p in params], [alone], ATOL[dtype], "unfrozen")
    assert opt.state[params[0]]["step"].tolist() == [60, 40, 60]


def test_sgd_momentum_member_frozen_from_the_start_takes_torchs_first_step(gen):
    """torch's SGD copies the first gradient into the momentum buffer undamped: a member that
    starts later (frozen for the first steps) does the same."""
    dtype = torch.float64
    params = _params(gen, dtype)
    alone = _alone(params, 0)
    opt = MemberSGD(params, M, lr=LRS, momentum=0.9, dampening=0.5)
    ref = torch.optim.SGD(alone, lr=LRS[0], momentum=0.9, dampening=0.5)
    opt.freeze([0])
    for t in range(20):
        if t == 5:
            opt.unfreeze(torch.tensor([True, False, False]))
        grads = [torch.randn(s, generator=gen, dtype=dtype) for s in SHAPES]
        for p, g in zip(params, grads, strict=True):
            p.grad = g.clone()
        opt.step()
        if t >= 5:
            for q, g in zip(alone, grads, strict=True):
                q.grad = g[0].clone()
            ref.step()
    _assert_members_equal([p[0:1] for p in params], [alone], ATOL[dtype], "late start")


def test_frozen_mask_changed_in_place_is_seen(gen):
    """``optimizer.frozen[m] = True`` freezes as ``freeze(m)`` does (the step's cached
    bookkeeping follows in-place changes of the mask and of ``member_weight_decay``)."""
    params = _params(gen, torch.float64)
    opt = MemberAdam(params, M, lr=LRS)
    for p in params:
        p.grad = torch.ones_like(p)
    opt.step()
    opt.frozen[0] = True
    before = [p.detach().clone() for p in params]
    opt.step()
    assert all(
        torch.equal(p[0], q[0]) and not torch.equal(p[1], q[1]) for p, q in zip(params, before, strict=True)
    )
    opt.param_groups[0]["member_weight_decay"][1] = 1.0  # in place: decay now on for member 1
    alone = _alone(params, 1)
    ref = torch.optim.Adam(alone, lr=LRS[1], weight_decay=1.0)
    ref.load_state_dict(
        {
            "state": {i: {k: v[1].clone() for k, v in opt.state[p].items()} for i, p in enumerate(params)},
            "param_groups": [{**ref.state_dict()["param_groups"][0]}],
        }
    )
    for q in alone:
        q.grad = torch.ones_like(q)
    opt.step()
    ref.step()
    _assert_members_equal([p[1:2] for p in params], [alone], 1e-12, "decay switched on in place")
    assert opt.param_groups[0]["weight_decay"] == pytest.approx(1 / 3)  # the summary followed


def test_reset_state_restarts_a_members_adam(gen):
    """``reset_state(m)`` empties member m's moments and step count: it continues as a new torch
    Adam (a restart on decay, Hewitt et al. 2020); the other members are untouched."""
    dtype = torch.float64
    params = _params(gen, dtype)
    opt = MemberAdam(params, M, lr=LRS)
    alone, ref = None, None
    for t in range(30):
        if t == 10:
            opt.reset_state(2)
            alone = _alone(params, 2)
            ref = torch.optim.Adam(alone, lr=LRS[2])
        grads = [torch.randn(s, generator=gen, dtype=dtype) for s in SHAPES]
        for p, g in zip(params, grads, strict=True):
            p.grad = g.clone()
        opt.step()
        if ref is not None:
            for q, g in zip(alone, grads, strict=True):
                q.grad = g[2].clone()
            ref.step()
    _assert_members_equal([p[2:3] for p in params], [alone], ATOL[dtype], "restarted")
    assert opt.state[params[1]]["step"].tolist() == [30, 30, 20]


def test_parameter_without_gradient_is_skipped_as_torch_does(gen):
    """A parameter whose grad is None is not updated and its step count does not advance (torch
    skips it), here parameter 1 always and parameter 2 every other step (the parameters' step
    counts then differ); clipping skips them too."""
    dtype = torch.float64
    params = _params(gen, dtype)
    singles = [_alone(params, m) for m in range(M)]
    opt = MemberAdamW(params, M, lr=LRS, weight_decay=WDS)
    refs = [torch.optim.AdamW(singles[m], lr=LRS[m], weight_decay=WDS[m]) for m in range(M)]
    before = params[1].detach().clone()
    for t in range(10):
        grads = [torch.randn(s, generator=gen, dtype=dtype) for s in SHAPES]
        grads[1] = None
        if t % 2:
            grads[2] = None
        for p, g in zip(params, grads, strict=True):
            p.grad = None if g is None else g.clone()
        norms = clip_grad_norm_per_member_(params, [0.5, 1.0, 2.0], M)
        opt.step()
        for m in range(M):
            for q, g in zip(singles[m], grads, strict=True):
                q.grad = None if g is None else g[m].clone()
            torch.testing.assert_close(
                norms[m], torch.nn.utils.clip_grad_norm_(singles[m], [0.5, 1.0, 2.0][m]), atol=1e-12, rtol=0
            )
            refs[m].step()
    assert torch.equal(params[1], before) and params[1] not in opt.state
    assert (
        opt.state[params[2]]["step"].tolist() == [5.0] * M
        and opt.state[params[0]]["step"].tolist() == [10.0] * M
    )
    _assert_members_equal(params, singles, ATOL[dtype], "grad None")


@pytest.mark.parametrize("norm_type", [1.0, 2.0, float("inf")])
def test_clip_per_member_equals_torch_clip_of_each_member(norm_type, gen):
    params = _params(gen, torch.float64)
    for p in params:
        p.grad = torch.randn(p.shape, generator=gen, dtype=p.dtype)
    p.grad[0] *= 1e-3  # member 0 below the limit: unclipped (torch's clamp at 1)
    singles = [_alone(params, m) for m in range(M)]
    for m in range(M):
        for q, p in zip(singles[m], params, strict=True):
            q.grad = p.grad[m].clone()
    max_norm = torch.tensor([1.0, 5.0, 0.5])
    norms = clip_grad_norm_per_member_(params, max_norm, M, norm_type=norm_type)
    assert norms.shape == (M,)
    for m in range(M):
        norm = torch.nn.utils.clip_grad_norm_(singles[m], float(max_norm[m]), norm_type=norm_type)
        torch.testing.assert_close(norms[m], norm, atol=1e-12, rtol=0)
        for p, q in zip(params, singles[m], strict=True):
            torch.testing.assert_close(p.grad[m], q.grad, atol=1e-12, rtol=0)
    assert clip_grad_norm_per_member_([torch.zeros(M, 2, requires_grad=True)], 1.0, M).tolist() == [0.0] * M


def _plateau(o):
    return ReduceLROnPlateau(o, factor=0.5, patience=0)


def _step_lr(o):
    return StepLR(o, step_size=3, gamma=0.5)


@pytest.mark.parametrize("make", [_plateau, _step_lr], ids=["plateau", "step"])
def test_member_scheduler_gives_each_member_torchs_schedule(make, gen):
    """Per-member learning rates equal torch's scheduler run on each member alone, for metrics
    that differ by member (Hewitt et al.'s plateau halving: factor 0.5, patience 0)."""
    params = _params(gen, torch.float64)
    opt = MemberAdam(params, M, lr=LRS)
    sched = MemberScheduler(opt, make)
    refs = [torch.optim.Adam(_alone(params, m), lr=LRS[m]) for m in range(M)]
    ref_scheds = [make(r) for r in refs]
    metrics = torch.rand(12, M, generator=gen, dtype=torch.float64)
    for t in range(12):
        for r in refs:
            r.step()  # (no gradients: only the order of steps matters to torch's schedulers)
        opt.step()
        before = opt.param_groups[0]["member_lr"].clone()
        lowered = sched.step(metrics[t] if sched.is_plateau else None)
        for m in range(M):
            ref_scheds[m].step(float(metrics[t, m])) if sched.is_plateau else ref_scheds[m].step()
        expected = torch.tensor([r.param_groups[0]["lr"] for r in refs], dtype=torch.float64)
        assert torch.equal(opt.param_groups[0]["member_lr"], expected), t
        assert torch.equal(lowered, expected < before)
    assert len(set(expected.tolist())) == M  # the members' learning rates differ
    assert opt.param_groups[0]["lr"] == pytest.approx(float(expected.mean()))


def test_frozen_members_scheduler_does_not_step(gen):
    params = _params(gen, torch.float64)
    opt = MemberSGD(params, M, lr=0.1)
    sched = MemberScheduler(opt, _step_lr)
    opt.freeze(1)
    for _ in range(6):
        sched.step()
    assert opt.param_groups[0]["member_lr"].tolist() == [0.025, 0.1, 0.025]
    assert sched.schedulers[1].last_epoch == 0 and sched.schedulers[0].last_epoch == 6


def test_state_dict_round_trip_continues_bitwise(gen):
    """Optimizer and scheduler saved mid-run (per-member lr, step counts, frozen mask included)
    and loaded into new ones on copies of the parameters: the continuation is bit for bit."""
    dtype = torch.float32
    params = _params(gen, dtype)
    opt = MemberAdamW(params, M, lr=LRS, weight_decay=WDS)
    sched = MemberScheduler(opt, _plateau)
    grads = [[torch.randn(s, generator=gen, dtype=dtype) for s in SHAPES] for _ in range(40)]
    metrics = torch.rand(40, M, generator=gen)

    def run(params, opt, sched, steps):
        for t in steps:
            for p, g in zip(params, grads[t], strict=True):
                p.grad = g.clone()
            clip_grad_norm_per_member_(params, 1.0, M)
            opt.step()
            if t % 5 == 4:
                sched.step(metrics[t])

    run(params, opt, sched, range(20))
    opt.freeze(2)
    buffer = io.BytesIO()
    torch.save({"params": params, "opt": opt.state_dict(), "sched": sched.state_dict()}, buffer)
    run(params, opt, sched, range(20, 40))
    buffer.seek(0)
    ckpt = torch.load(buffer, weights_only=True)
    params2 = [p.detach().clone().requires_grad_() for p in ckpt["params"]]
    opt2 = MemberAdamW(params2, M, lr=0.5)
    sched2 = MemberScheduler(opt2, _plateau)
    opt2.load_state_dict(ckpt["opt"])
    sched2.load_state_dict(ckpt["sched"])
    assert opt2.frozen.tolist() == [False, False, True]
    assert torch.equal(opt2.param_groups[0]["member_lr"], ckpt["opt"]["param_groups"][0]["member_lr"])
    assert torch.equal(opt2.state[params2[0]]["step"], torch.tensor([20.0, 20.0, 20.0]))
    run(params2, opt2, sched2, range(20, 40))
    for p, q in zip(params, params2, strict=True):
        assert torch.equal(p, q)
    for p, q in zip(params, params2, strict=True):
        for key in ("step", "exp_avg", "exp_avg_sq"):
            assert torch.equal(opt.state[p][key], opt2.state[q][key]), key
    assert torch.equal(opt.param_groups[0]["member_lr"], opt2.param_groups[0]["member_lr"])


def test_deepcopy_keeps_the_members_and_frozen_mask(gen):
    """torch's ``Optimizer.__getstate__`` keeps only defaults, state and param groups."""
    params = _params(gen, torch.float64)
    opt = MemberSGD(params, M, lr=LRS, momentum=0.5)
    opt.freeze(0)
    twin = copy.deepcopy(opt)
    assert twin.members == M and twin.frozen.tolist() == [True, False, False]
    for p in twin.param_groups[0]["params"]:
        p.grad = torch.ones_like(p)
    twin.step()  # steps the copies of the parameters
    assert torch.equal(twin.param_groups[0]["params"][1][0], params[1][0])
    assert not torch.equal(twin.param_groups[0]["params"][1][1], params[1][1])


def test_state_dict_is_a_snapshot_of_the_learning_rates(gen):
    opt = MemberAdam(_params(gen, torch.float32), M, lr=LRS)
    sd = opt.state_dict()
    opt.set_lr([1.0, 2.0, 3.0])
    opt.param_groups[0]["member_lr"][0] = 7.0
    assert sd["param_groups"][0]["member_lr"].tolist() == LRS


def test_group_lr_is_a_float_summary_for_lightnings_monitor(gen):
    """``group["lr"]`` is a float (what Lightning's LearningRateMonitor logs): the members' common
    learning rate, or their mean; the per-member values are ``group["member_lr"]``."""
    params = _params(gen, torch.float32)
    opt = MemberAdam([{"params": params[:2]}, {"params": params[2:], "lr": 1e-2}], M, lr=LRS)
    assert isinstance(opt.param_groups[0]["lr"], float)
    assert opt.param_groups[0]["lr"] == pytest.approx(sum(LRS) / M)
    assert opt.param_groups[1]["lr"] == 1e-2 and opt.param_groups[1]["member_lr"].tolist() == [1e-2] * M
    opt.set_lr(torch.tensor([0.1, 0.2, 0.3]), group=1)
    assert opt.param_groups[1]["member_lr"].dtype == torch.float64
    assert opt.param_groups[1]["lr"] == pytest.approx(0.2)


def test_a_torch_scheduler_on_the_member_optimizer_is_refused(gen):
    """A plain torch scheduler writes ``group["lr"]`` (the summary) and would set every member
    alike: the next step says so instead of training every member at one learning rate."""
    params = _params(gen, torch.float32)
    opt = MemberAdam(params, M, lr=LRS)
    sched = StepLR(opt, step_size=1, gamma=0.5)
    for p in params:
        p.grad = torch.ones_like(p)
    opt.step()
    sched.step()
    with pytest.raises(ValueError, match=r"param group 0's lr was set to .*MemberScheduler"):
        opt.step()


def test_errors_name_the_bad_value(gen):
    params = _params(gen, torch.float32)
    with pytest.raises(
        ValueError,
        match=r"parameter 3 has shape \(5, 4\); every parameter of a MemberAdam needs the member dimension "
        r"first: \[3, \.\.\.\]",
    ):
        MemberAdam([*params, torch.zeros(5, 4, requires_grad=True)], M)
    with pytest.raises(ValueError, match=r"parameter 0 has shape \(\); every parameter of a MemberSGD"):
        MemberSGD([torch.zeros((), requires_grad=True)], M, lr=0.1)
    with pytest.raises(ValueError, match=r"lr has 2 values for 3 members"):
        MemberAdam(params, M, lr=[1e-3, 1e-2])
    with pytest.raises(
        ValueError, match=r"lr must be finite and >= 0.0 for every member; member 1 has -0.01"
    ):
        MemberAdam(params, M, lr=[1e-3, -1e-2, 1e-3])
    with pytest.raises(ValueError, match=r"weight_decay must be finite .* member 2 has nan"):
        MemberAdamW(params, M, weight_decay=torch.tensor([0.0, 0.0, float("nan")]))
    with pytest.raises(TypeError, match=r"amsgrad"):
        MemberAdam(params, M, amsgrad=True)
    with pytest.raises(ValueError, match=r"MemberAdam param group has unknown options \['amsgrad'\]"):
        MemberAdam([{"params": params, "amsgrad": True}], M)
    with pytest.raises(ValueError, match=r"members must be a positive int, got 0"):
        MemberAdam(params, 0)
    with pytest.raises(ValueError, match=r"betas\[1\] must be in \[0, 1\), got 1.0"):
        MemberAdam(params, M, betas=(0.9, 1.0))
    with pytest.raises(ValueError, match=r"Nesterov momentum needs momentum > 0"):
        MemberSGD(params, M, lr=0.1, nesterov=True)
    opt = MemberAdam(params, M)
    with pytest.raises(ValueError, match=r"lr has 4 values for 3 members"):
        opt.set_lr([0.1] * 4)
    with pytest.raises(ValueError, match=r"member 3 does not exist: there are 3 members"):
        opt.freeze(3)
    opt.frozen = torch.zeros(2, dtype=torch.bool)
    with pytest.raises(
        ValueError, match=r"frozen must be a bool tensor of shape \(3,\), got tensor\(\[False, False\]\)"
    ):
        opt.step()
    opt.frozen = torch.zeros(M, dtype=torch.bool)
    with pytest.raises(ValueError, match=r"members=4; this one has 3"):
        opt.load_state_dict(MemberAdam([torch.zeros(4, 2, requires_grad=True)], 4).state_dict())
    with pytest.raises(ValueError, match=r"parameter 0 has shape \(2, 2\); clip_grad_norm_per_member_ needs"):
        clip_grad_norm_per_member_([torch.zeros(2, 2)], 1.0, M)
    with pytest.raises(ValueError, match=r"max_norm has 2 values for 3 members"):
        clip_grad_norm_per_member_(params, [1.0, 5.0], M)
    plateau = MemberScheduler(opt, _plateau)
    with pytest.raises(ValueError, match=r"ReduceLROnPlateau steps on metrics: give 3 values"):
        plateau.step()
    with pytest.raises(ValueError, match=r"metrics has 2 values for 3 members"):
        plateau.step([1.0, 2.0])
    with pytest.raises(ValueError, match=r"StepLR steps without metrics"):
        MemberScheduler(opt, _step_lr).step([1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match=r"MemberScheduler schedules a member optimizer .* got Adam"):
        MemberScheduler(torch.optim.Adam([torch.zeros(2, requires_grad=True)]), _step_lr)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("name", ["adam", "adamw", "sgd-nesterov"])
def test_member_optimizers_on_cuda_equal_torch_per_member(name, gen):
    cls, torch_cls, kwargs = OPTIMIZERS[name]
    dtype = torch.float32
    params = _params(gen, dtype, "cuda")
    singles = [_alone(params, m) for m in range(M)]
    opt = cls(params, M, lr=LRS, weight_decay=WDS, **kwargs)
    refs = [torch_cls(singles[m], lr=LRS[m], weight_decay=WDS[m], **kwargs) for m in range(M)]
    opt.freeze(1)
    for t in range(200):
        if t == 100:
            opt.unfreeze(1)
        grads = [torch.randn(s, generator=gen, dtype=dtype).cuda() for s in SHAPES]
        for p, g in zip(params, grads, strict=True):
            p.grad = g.clone()
        norms = clip_grad_norm_per_member_(params, 1.0, M)
        assert norms.device.type == "cuda"
        opt.step()
        for m in range(M):
            if m == 1 and t < 100:
                continue
            for q, g in zip(singles[m], grads, strict=True):
                q.grad = g[m].clone()
            torch.nn.utils.clip_grad_norm_(singles[m], 1.0)
            refs[m].step()
    _assert_members_equal(params, singles, ATOL[dtype], f"cuda {name}")
