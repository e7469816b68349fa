"""Optimizers and gradient clipping over stacked member parameters.

A member model holds every parameter as ONE tensor with a leading member dimension ``[M, ...]``:
member ``m``'s parameter is ``p[m]``, and the members' parameters never mix, so the gradient of
the sum of the members' losses gives each member exactly its own gradient.  The optimizers here
update such parameters so that each member's slice moves exactly as torch's optimizer would move
that member alone (``torch.optim.Adam``, ``AdamW``, ``SGD``), with a learning rate and a weight
decay of its own, e.g. Delétang et al.'s (2023) grid of three learning rates times ten seeds in
one process.  Every update is a handful of ``torch._foreach_*`` ops over the list of parameters
(per-member coefficients broadcast as ``[M, 1, ...]`` views), never a loop over members, so a step
costs about the same for M members as for one.

Per-member hyperparameters live in each param group as float64 CPU tensors of M values,
``group["member_lr"]`` and ``group["member_weight_decay"]`` (set them with :meth:`set_lr` and
:meth:`set_weight_decay`, or schedule them with :class:`memrnn.members.schedule.MemberScheduler`).
``group["lr"]`` and ``group["weight_decay"]`` hold a float summary (the members' common value, or
their mean when they differ): it is what Lightning's ``LearningRateMonitor`` logs.  A torch LR
scheduler attached to the member optimizer itself would write that summary back and so set every
member alike; the next :meth:`step` refuses with an error naming the value, rather than silently
training every member at one learning rate.

A per-member :attr:`~MemberOptimizer.frozen` mask stops members: a frozen member's parameters and
optimizer state (moments, step counts) stay bit for bit unchanged by :meth:`step`, whatever its
gradient holds (NaN included), which is how a stopped or diverged member is kept while the others
train on.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch
from torch import Tensor
from torch.optim import Optimizer

__all__ = [
    "MemberAdam",
    "MemberAdamW",
    "MemberOptimizer",
    "MemberSGD",
    "clip_grad_norm_per_member_",
    "member_values",
]

#: per-member hyperparameters: a float (every member) or M values; stored per group under
#: ``"member_<name>"`` as a float64 CPU tensor, with a float summary under ``name``
PER_MEMBER = ("lr", "weight_decay")

PerMember = float | Sequence[float] | Tensor


def member_values(name: str, value: PerMember, members: int, *, minimum: float = 0.0) -> Tensor:
    """``value`` (a float for every member, or a sequence / 1-D tensor of ``members`` values) as a
    float64 CPU tensor ``[members]``; a ValueError names a value of the wrong length, a non-finite
    value, or one below ``minimum``."""
    if isinstance(value, bool):
        raise ValueError(f"{name} must be a number or {members} numbers (one per member), got {value!r}")
    if isinstance(value, Tensor):
        if value.dim() > 1 or value.is_complex():
            raise ValueError(
                f"{name} must be a number or a 1-D tensor of {members} values (one per member), "
                f"got a tensor of shape {tuple(value.shape)}"
            )
        values = value.detach().to("cpu", torch.float64).reshape(-1)
        if value.dim() == 0:
            values = values.expand(members)
    elif isinstance(value, int | float):
        values = torch.full((members,), float(value), dtype=torch.float64)
    else:
        try:
            items = [float(v) for v in value]  # type: ignore[union-attr]
        except (TypeError, ValueError):
            raise ValueError(
                f"{name} must be a number or {members} numbers (one per member), got {value!r}"
            ) from None
        values = torch.tensor(items, dtype=torch.float64)
    if values.numel() != members:
        raise ValueError(
            f"{name} has {values.numel()} values for {members} members: give one number or one per member, "
            f"got {value!r}"
        )
    bad = ~(torch.isfinite(values) & (values >= minimum))
    if bad.any():
        m = int(bad.nonzero()[0, 0])
        raise ValueError(
            f"{name} must be finite and >= {minimum} for every member; member {m} has {values[m].item()!r} "
            f"(got {value!r})"
        )
    return values.clone()


def group_value(values: Tensor) -> float:
    """The float ``group[name]`` shows: the members' common value, or their mean."""
    first = float(values[0])
    return first if bool((values == first).all()) else float(values.mean())


def _as_index(members: int, which: int | Sequence[int] | Tensor) -> Tensor:
    """Members ``which`` (an index, indices, or a bool mask ``[M]``) as a bool mask ``[M]``."""
    mask = torch.zeros(members, dtype=torch.bool)
    if isinstance(which, Tensor) and which.dtype == torch.bool:
        if which.shape != (members,):
            raise ValueError(f"a member mask must have shape ({members},), got {tuple(which.shape)}")
        return which.detach().cpu().clone()
    index = torch.as_tensor(which, dtype=torch.long).reshape(-1).cpu()
    bad = (index < 0) | (index >= members)
    if bad.any():
        raise ValueError(
            f"member {int(index[bad][0])} does not exist: there are {members} members (0..{members - 1})"
        )
    mask[index] = True
    return mask


def _broadcast(values: Tensor, like: Tensor) -> Tensor:
    """``values [M]`` as a ``[M, 1, ..., 1]`` view that broadcasts against ``like [M, ...]``."""
    return values.view(values.shape[0], *([1] * (like.dim() - 1)))


class MemberOptimizer(Optimizer):
    """The common part of the member optimizers: parameter checks, per-member hyperparameters,
    the frozen mask, state-dict round trips.  Subclasses implement :meth:`_update`.

    Args:
        params: parameters (or param groups) whose every tensor is ``[members, ...]``.
        members: M, the number of members.
        defaults: the optimizer's defaults; ``lr`` and ``weight_decay`` may be a float or M values.
    """

    #: per-parameter state tensors shaped like the parameter
    _moments: tuple[str, ...] = ()

    def __init__(self, params: Iterable[Any], members: int, defaults: dict[str, Any]) -> None:
        if isinstance(members, bool) or not isinstance(members, int) or members < 1:
            raise ValueError(f"members must be a positive int, got {members!r}")
        self.members = members
        self.frozen = torch.zeros(members, dtype=torch.bool)
        self._summaries: dict[str, tuple[Tensor, int, Any]] = {}
        for name in PER_MEMBER:
            member_values(name, defaults[name], members)  # the error names the optimizer's argument
        super().__init__(params, defaults)

    # -- parameters and hyperparameters ---------------------------------------------------------
    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """Add a param group (torch's method) after checking its parameters' member dimension and
        its keys; ``lr``/``weight_decay`` may be a float or M values."""
        name = type(self).__name__
        unknown = sorted(
            set(param_group)
            - set(self.defaults)
            - {"params", "param_names", *(f"member_{k}" for k in PER_MEMBER)}
        )
        if unknown:
            raise ValueError(
                f"{name} param group has unknown options {unknown}; it takes {sorted(self.defaults)}"
            )
        params = param_group["params"]
        params = [params] if isinstance(params, Tensor) else list(params)
        first = sum(len(g["params"]) for g in getattr(self, "param_groups", []))
        for i, p in enumerate(params, first):
            if not isinstance(p, Tensor):
                raise ValueError(f"parameter {i} of a {name} is a {type(p).__name__}, not a tensor")
            if not p.is_floating_point():
                raise ValueError(
                    f"parameter {i} of a {name} has dtype {p.dtype}; a real floating dtype is needed"
                )
            if p.dim() == 0 or p.shape[0] != self.members:
                raise ValueError(
                    f"parameter {i} has shape {tuple(p.shape)}; every parameter of a {name} needs the member "
                    f"dimension first: [{self.members}, ...]"
                )
        group = {**param_group, "params": params}
        for key in PER_MEMBER:
            given = group.pop(f"member_{key}", None)
            value = given if given is not None else group.get(key, self.defaults[key])
            values = member_values(key, value, self.members)
            group[f"member_{key}"] = values
            group[key] = group_value(values)
        super().add_param_group(group)

    def set_lr(self, lr: PerMember, group: int | None = None) -> None:
        """Set the learning rate of every member (a float or M values) of param group ``group``
        (every group when None)."""
        self._set("lr", lr, group)

    def set_weight_decay(self, weight_decay: PerMember, group: int | None = None) -> None:
        """Set the weight decay of every member (a float or M values) of param group ``group``
        (every group when None)."""
        self._set("weight_decay", weight_decay, group)

    def _set(self, key: str, value: PerMember, group: int | None) -> None:
        values = member_values(key, value, self.members)
        groups = self.param_groups if group is None else [self.param_groups[group]]
        for g in groups:
            g[f"member_{key}"] = values.clone()
            g[key] = group_value(values)

    def _memo(self, name: str, values: Tensor, fn: Callable[[Tensor], Any]) -> Any:
        """``fn(values)``, recomputed only when ``values`` is another tensor or was changed in
        place (a tensor's ``_version`` counts its in-place changes): the step's per-member
        bookkeeping costs no tensor op in the usual step."""
        cached = self._summaries.get(name)
        if cached is not None and cached[0] is values and cached[1] == values._version:
            return cached[2]
        result = fn(values)
        self._summaries[name] = (values, values._version, result)
        return result

    def _frozen_summary(self, frozen: Tensor) -> tuple[bool, bool, Tensor]:
        if not (
            isinstance(frozen, Tensor) and frozen.dtype == torch.bool and frozen.shape == (self.members,)
        ):
            raise ValueError(f"frozen must be a bool tensor of shape ({self.members},), got {frozen!r}")
        return bool(frozen.all()), bool(frozen.any()), (~frozen).to(torch.float32)

    def _check_summaries(self, index: int, group: dict[str, Any]) -> None:
        for key in PER_MEMBER:
            values = group[f"member_{key}"]
            if not (isinstance(values, Tensor) and values.shape == (self.members,)):
                raise ValueError(
                    f"param group {index}'s member_{key} must be a tensor of {self.members} values, got {values!r}"
                )
            name = f"{index}/{key}"
            old = self._summaries.get(name)
            summary = self._memo(name, values, group_value)
            if group[key] != summary and old is not None and old[0] is values and group[key] == old[2]:
                group[key] = summary  # member_{key} was changed in place: the summary follows
            if group[key] != summary:
                raise ValueError(
                    f"param group {index}'s {key} was set to {group[key]!r}, but a {type(self).__name__}'s {key} "
                    f"is per member (member_{key} = {values.tolist()}); set it with set_{key}(...), or schedule "
                    "it with memrnn.members.schedule.MemberScheduler (a torch LR scheduler on the member "
                    "optimizer itself would set every member alike)"
                )

    # -- frozen members -------------------------------------------------------------------------
    def freeze(self, members: int | Sequence[int] | Tensor) -> None:
        """Freeze ``members`` (an index, indices or a bool mask ``[M]``): from now on :meth:`step`
        leaves their parameters and optimizer state bit for bit unchanged."""
        self.frozen = self.frozen | _as_index(self.members, members)

    def unfreeze(self, members: int | Sequence[int] | Tensor) -> None:
        """Let ``members`` train again, from the parameters and state they were frozen with."""
        self.frozen = self.frozen & ~_as_index(self.members, members)

    @torch.no_grad()
    def reset_state(self, members: int | Sequence[int] | Tensor) -> None:
        """Empty ``members``' optimizer state (moments, momentum buffers, step counts), as for a
        new optimizer: a restarted Adam (Hewitt et al. 2020, appendix H.3, restart on decay)."""
        mask = _as_index(self.members, members)
        for group in self.param_groups:
            for p in group["params"]:
                state = self.state.get(p)
                if not state:
                    continue
                for value in state.values():
                    if isinstance(value, Tensor) and value.dim() > 0 and value.shape[0] == self.members:
                        value[mask.to(value.device)] = 0

    # -- the step -------------------------------------------------------------------------------
    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:  # type: ignore[override]
        """One update of every member that is not frozen; ``closure`` re-evaluates the loss (as
        for torch's optimizers)."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        frozen = self.frozen
        all_frozen, any_frozen, active = self._memo("frozen", frozen, self._frozen_summary)
        if all_frozen:
            return loss
        for index, group in enumerate(self.param_groups):
            self._check_summaries(index, group)
            params = [p for p in group["params"] if p.grad is not None]
            if not params:
                continue
            for p in params:
                if p.grad.is_sparse:
                    raise ValueError(f"{type(self).__name__} does not support sparse gradients")
                if p.grad.shape != p.shape:
                    raise ValueError(
                        f"a gradient has shape {tuple(p.grad.shape)}, its parameter {tuple(p.shape)}"
                    )
            states = [self._state(p, group) for p in params]
            saved = self._save(params, states, frozen) if any_frozen else None
            steps = [s["step"] for s in states]
            # the step counts taken so far: [P, M] (a float32 [M] per parameter, as torch's
            # scalars); [M] when every parameter has taken the same steps (the coefficients are
            # then shared); a float when every member too (the usual case: nothing ever frozen)
            step = torch.stack([s if s.device.type == "cpu" else s.cpu() for s in steps])
            first = step[0, 0]
            if bool((step == first).all()):
                step = float(first)
            elif bool((step == step[0]).all()):
                step = step[0]
            buckets = _buckets(params)
            for (device, dtype), idx in buckets.items():
                self._update(
                    group,
                    [params[i] for i in idx],
                    [states[i] for i in idx],
                    step
                    if not isinstance(step, Tensor) or step.dim() == 1 or len(buckets) == 1
                    else step[idx],
                    device,
                    dtype,
                )
            if all(s.device.type == "cpu" for s in steps):
                torch._foreach_add_(steps, [active] * len(steps))
            else:
                for s in steps:
                    s.add_(active.to(s.device))
            if saved is not None:
                self._restore(params, states, frozen, saved)
        return loss

    def _state(self, p: Tensor, group: dict[str, Any]) -> dict[str, Tensor]:
        state = self.state[p]
        if not state:
            # torch's step counts are float32 CPU scalars (no capturable/fused): one per member here
            state["step"] = torch.zeros(self.members, dtype=torch.float32)
            for key in self._moments:
                state[key] = torch.zeros_like(p, memory_format=torch.preserve_format)
        return state

    def _save(self, params: list[Tensor], states: list[dict[str, Tensor]], frozen: Tensor) -> list[Tensor]:
        index: dict[torch.device, Tensor] = {}
        saved = []
        for t in self._frozen_tensors(params, states):
            if t.device not in index:
                index[t.device] = frozen.nonzero().reshape(-1).to(t.device)
            saved.append(t.index_select(0, index[t.device]))
        return saved

    def _restore(
        self, params: list[Tensor], states: list[dict[str, Tensor]], frozen: Tensor, saved: list[Tensor]
    ) -> None:
        index: dict[torch.device, Tensor] = {}
        for t, old in zip(self._frozen_tensors(params, states), saved, strict=True):
            if t.device not in index:
                index[t.device] = frozen.nonzero().reshape(-1).to(t.device)
            t.index_copy_(0, index[t.device], old)

    def _frozen_tensors(self, params: list[Tensor], states: list[dict[str, Tensor]]) -> list[Tensor]:
        # the step counts are advanced by the active mask, never for a frozen member
        return [*params, *(s[key] for s in states for key in self._moments)]

    def _update(
        self,
        group: dict[str, Any],
        params: list[Tensor],
        states: list[dict[str, Tensor]],
        steps: float | Tensor,
        device: torch.device,
        dtype: torch.dtype,
    ) -> None:
        """Update ``params`` (all on ``device`` in ``dtype``) of the members, frozen ones included
        (:meth:`step` restores those); ``steps``: the steps taken so far, a float (the same for
        every parameter and member), ``[M]`` (the same for every parameter) or ``[P, M]``."""
        raise NotImplementedError

    @staticmethod
    def _coefficients(rows: list[Tensor], params: list[Tensor], device: torch.device, dtype: torch.dtype):
        """Per-member coefficients ``rows`` (each ``[M]``, or ``[P, M]`` for parameters that took
        different numbers of steps; float64 CPU) as, for each row, one ``[M, 1, ...]`` view per
        parameter, on ``device`` in ``dtype`` (one copy for all)."""
        if all(r.dim() == 1 for r in rows):
            stacked = torch.stack(rows).to(device, dtype, non_blocking=True)  # [K, M]
            by_dim: dict[int, list[Tensor]] = {}
            for p in params:
                if p.dim() not in by_dim:
                    by_dim[p.dim()] = [_broadcast(row, p) for row in stacked]
            return [[by_dim[p.dim()][k] for p in params] for k in range(len(rows))]
        P = len(params)
        stacked = torch.stack([r.expand(P, r.shape[-1]) for r in rows]).to(device, dtype, non_blocking=True)
        return [[_broadcast(stacked[k, i], p) for i, p in enumerate(params)] for k in range(len(rows))]

    # -- state dicts ----------------------------------------------------------------------------
    def __getstate__(self) -> dict[str, Any]:
        # torch's keeps only defaults, state and param groups: a deepcopy or pickle would lose M
        return {**super().__getstate__(), "members": self.members, "frozen": self.frozen}

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        self._summaries = {}

    def state_dict(self) -> dict[str, Any]:
        """torch's state dict (the per-member step counts ``[M]`` under ``"step"``, the moments
        ``[M, ...]``), with copies of the per-member hyperparameters, the frozen mask and M."""
        sd = super().state_dict()
        for g in sd["param_groups"]:
            for key in PER_MEMBER:
                g[f"member_{key}"] = g[f"member_{key}"].clone()
        sd["frozen"] = self.frozen.clone()
        sd["members"] = self.members
        return sd

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load a state dict of :meth:`state_dict` from an optimizer of the same M."""
        members = state_dict.get("members")
        if members != self.members:
            raise ValueError(
                f"the state dict is of a member optimizer with members={members!r}; this one has {self.members}"
            )
        frozen = torch.as_tensor(state_dict["frozen"], dtype=torch.bool).cpu().clone()
        super().load_state_dict({"state": state_dict["state"], "param_groups": state_dict["param_groups"]})
        for index, group in enumerate(self.param_groups):
            for key in PER_MEMBER:
                group[f"member_{key}"] = member_values(f"member_{key}", group[f"member_{key}"], self.members)
            self._check_summaries(index, group)
        self.frozen = frozen


def _buckets(params: list[Tensor]) -> dict[tuple[torch.device, torch.dtype], list[int]]:
    """Indices of ``params`` by (device, dtype): each bucket is one run of foreach ops."""
    buckets: dict[tuple[torch.device, torch.dtype], list[int]] = {}
    for i, p in enumerate(params):
        buckets.setdefault((p.device, p.dtype), []).append(i)
    return buckets


def _check_betas(betas: tuple[float, float], eps: float) -> tuple[float, float]:
    try:
        b1, b2 = (float(b) for b in betas)
    except (TypeError, ValueError):
        raise ValueError(f"betas must be two numbers in [0, 1), got {betas!r}") from None
    for i, b in enumerate((b1, b2)):
        if not 0.0 <= b < 1.0:
            raise ValueError(f"betas[{i}] must be in [0, 1), got {b!r}")
    if not (math.isfinite(eps) and eps >= 0.0):
        raise ValueError(f"eps must be finite and >= 0, got {eps!r}")
    return b1, b2


class MemberAdam(MemberOptimizer):
    """``torch.optim.Adam`` (Kingma & Ba 2015) for each member alone, over stacked parameters.

    Weight decay is L2 (added to the gradient), as torch's Adam; see :class:`MemberAdamW` for the
    decoupled decay of Loshchilov & Hutter (2019).  No amsgrad, maximize, fused or capturable.

    Args:
        params: parameters or param groups; every parameter is ``[members, ...]``.
        members: M.
        lr, weight_decay: a float for every member, or M values (a sequence or a 1-D tensor).
        betas, eps: shared by the members.
    """

    _moments = ("exp_avg", "exp_avg_sq")
    _decoupled = False

    def __init__(
        self,
        params: Iterable[Any],
        members: int,
        lr: PerMember = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: PerMember = 0.0,
    ) -> None:
        betas = _check_betas(betas, float(eps))
        super().__init__(
            params, members, {"lr": lr, "betas": betas, "eps": float(eps), "weight_decay": weight_decay}
        )

    def _update(self, group, params, states, steps, device, dtype) -> None:
        beta1, beta2 = group["betas"]
        grads = [p.grad for p in params]
        exp_avgs = [s["exp_avg"] for s in states]
        exp_avg_sqs = [s["exp_avg_sq"] for s in states]
        lr, wd = group["member_lr"], group["member_weight_decay"]
        # the step each member is about to take (frozen members' results are discarded)
        if isinstance(steps, float):  # every member at the same step: torch's Python-float bias corrections
            step = steps + 1
            bias_correction1 = 1 - beta1**step
            bias_correction2_sqrt = (1 - beta2**step) ** 0.5
            rows = [lr / -bias_correction1]
        else:
            step = steps.to(torch.float64) + 1  # [M] or [P, M]
            bias_correction1 = 1 - torch.pow(beta1, step)
            bias_correction2_sqrt = (1 - torch.pow(beta2, step)).sqrt()
            rows = [lr / -bias_correction1, bias_correction2_sqrt]
        decay = self._memo(f"decay/{id(group)}", wd, lambda wd: bool((wd != 0).any()))
        if decay:
            rows.append(1 - lr * wd if self._decoupled else wd)
        coef = self._coefficients(rows, params, device, dtype)
        if decay:
            if self._decoupled:
                torch._foreach_mul_(params, coef[-1])
            else:
                grads = torch._foreach_addcmul(grads, params, coef[-1])
        torch._foreach_lerp_(exp_avgs, grads, 1 - beta1)
        torch._foreach_mul_(exp_avg_sqs, beta2)
        torch._foreach_addcmul_(exp_avg_sqs, grads, grads, 1 - beta2)
        denom = torch._foreach_sqrt(exp_avg_sqs)
        torch._foreach_div_(denom, bias_correction2_sqrt if isinstance(steps, float) else coef[1])
        torch._foreach_add_(denom, group["eps"])
        update = torch._foreach_div(exp_avgs, denom)
        torch._foreach_addcmul_(params, update, coef[0])


class MemberAdamW(MemberAdam):
    """``torch.optim.AdamW`` (Loshchilov & Hutter 2019) for each member alone: decoupled weight
    decay (``p *= 1 - lr * weight_decay`` before Adam's step), default weight decay 1e-2 as torch.
    Arguments as :class:`MemberAdam`."""

    _decoupled = True

    def __init__(
        self,
        params: Iterable[Any],
        members: int,
        lr: PerMember = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: PerMember = 1e-2,
    ) -> None:
        super().__init__(params, members, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)


class MemberSGD(MemberOptimizer):
    """``torch.optim.SGD`` for each member alone, over stacked parameters: momentum, dampening
    and Nesterov momentum (Sutskever et al. 2013) shared by the members; learning rate and L2
    weight decay per member.  With momentum the state holds ``momentum_buffer [M, ...]`` and a step
    count ``[M]`` per parameter (torch's first step copies the gradient into the buffer, undamped).

    Args:
        params: parameters or param groups; every parameter is ``[members, ...]``.
        members: M.
        lr, weight_decay: a float for every member, or M values (a sequence or a 1-D tensor).
    """

    def __init__(
        self,
        params: Iterable[Any],
        members: int,
        lr: PerMember = 1e-3,
        momentum: float = 0.0,
        dampening: float = 0.0,
        weight_decay: PerMember = 0.0,
        nesterov: bool = False,
    ) -> None:
        momentum, dampening = float(momentum), float(dampening)
        if not (math.isfinite(momentum) and momentum >= 0.0):
            raise ValueError(f"momentum must be finite and >= 0, got {momentum!r}")
        if not math.isfinite(dampening):
            raise ValueError(f"dampening must be finite, got {dampening!r}")
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError(
                f"Nesterov momentum needs momentum > 0 and dampening 0, got momentum={momentum}, dampening={dampening}"
            )
        defaults = {
            "lr": lr,
            "momentum": momentum,
            "dampening": dampening,
            "weight_decay": weight_decay,
            "nesterov": bool(nesterov),
        }
        super().__init__(params, members, defaults)

    def _state(self, p: Tensor, group: dict[str, Any]) -> dict[str, Tensor]:
        state = self.state[p]
        if not state:
            state["step"] = torch.zeros(self.members, dtype=torch.float32)
        if group["momentum"] != 0 and "momentum_buffer" not in state:
            state["momentum_buffer"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        return state

    def _frozen_tensors(self, params, states):
        return [*params, *(s["momentum_buffer"] for s in states if "momentum_buffer" in s)]

    def _update(self, group, params, states, steps, device, dtype) -> None:
        momentum, dampening = group["momentum"], group["dampening"]
        grads = [p.grad for p in params]
        lr, wd = group["member_lr"], group["member_weight_decay"]
        rows = [-lr]
        decay = self._memo(f"decay/{id(group)}", wd, lambda wd: bool((wd != 0).any()))
        if decay:
            rows.append(wd)
        uniform = isinstance(steps, float)  # every member at the same step
        if momentum != 0 and not uniform:
            # torch's first step sets the buffer to the gradient: buffer * 0 + gradient * 1
            # (float64 throughout: torch.where of Python floats would round them to float32)
            later = (steps != 0).to(torch.float64)  # [M] or [P, M]
            rows.append(later * momentum)
            rows.append(1 + later * -dampening)
        coef = self._coefficients(rows, params, device, dtype)
        if decay:
            grads = torch._foreach_addcmul(grads, params, coef[1])
        if momentum != 0:
            bufs = [s["momentum_buffer"] for s in states]
            if uniform and steps == 0:  # torch's first step: the buffer is the gradient
                torch._foreach_copy_(bufs, grads)
            elif uniform:
                torch._foreach_mul_(bufs, momentum)
                torch._foreach_add_(bufs, grads, alpha=1 - dampening)
            else:
                torch._foreach_mul_(bufs, coef[-2])
                torch._foreach_addcmul_(bufs, grads, coef[-1])
            grads = torch._foreach_add(grads, bufs, alpha=momentum) if group["nesterov"] else bufs
        torch._foreach_addcmul_(params, grads, coef[0])


# -- gradient clipping ---------------------------------------------------------------------------
@torch.no_grad()
def clip_grad_norm_per_member_(
    params: Tensor | Iterable[Tensor], max_norm: PerMember, members: int, norm_type: float = 2.0
) -> Tensor:
    """``torch.nn.utils.clip_grad_norm_`` applied to each member's gradients alone: member ``m``'s
    gradients ``[p.grad[m] for p in params]`` are scaled by ``min(max_norm[m] / (norm_m + 1e-6), 1)``
    where ``norm_m`` is their total ``norm_type``-norm (Delétang et al. 2023 clip at 1; FLaRe,
    Butoi et al. 2025, at 5).

    Args:
        params: parameters ``[members, ...]`` (those whose grad is None are skipped).
        max_norm: a float for every member or M values.
        members: M.
        norm_type: the p of the p-norm (``inf`` for the largest absolute value).

    Returns:
        ``[members]``: each member's total gradient norm before clipping (on the first gradient's
        device, in its dtype; zeros when no parameter has a gradient).
    """
    if isinstance(params, Tensor):
        params = [params]
    params = list(params)
    limit = member_values("max_norm", max_norm, members)
    norm_type = float(norm_type)
    grads = []
    for i, p in enumerate(params):
        if p.dim() == 0 or p.shape[0] != members:
            raise ValueError(
                f"parameter {i} has shape {tuple(p.shape)}; clip_grad_norm_per_member_ needs the member "
                f"dimension first: [{members}, ...]"
            )
        if p.grad is not None:
            grads.append(p.grad)
    if not grads:
        return torch.zeros(members)
    first = grads[0].device
    # one reduction per parameter over its non-member dimensions (a loop over parameters, not members)
    norms = torch.stack(
        [torch.linalg.vector_norm(g.reshape(members, -1), norm_type, dim=1).to(first) for g in grads]
    )
    total = torch.linalg.vector_norm(norms, norm_type, dim=0)
    clip = torch.clamp(limit.to(first, total.dtype) / (total + 1e-6), max=1.0)
    for (device, dtype), idx in _buckets(grads).items():
        bucket = [grads[i] for i in idx]
        scale = clip.to(device, dtype)
        torch._foreach_mul_(bucket, [_broadcast(scale, g) for g in bucket])
    return total
