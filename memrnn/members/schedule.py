"""Learning-rate schedules per member: any torch LR scheduler, run once per member.

A torch scheduler reads and writes ``group["lr"]``, one float per param group; a member optimizer
(:mod:`memrnn.members.optim`) has M learning rates per group.  :class:`MemberScheduler` gives each
member its own torch scheduler on a small proxy optimizer (a real ``torch.optim.Optimizer`` over
one empty tensor per param group, holding that member's learning rates), steps them, and copies
each member's learning rates into the member optimizer: every member's schedule is exactly
torch's, e.g. Hewitt et al.'s (2020) plateau halving (``ReduceLROnPlateau(factor=0.5,
patience=0)``) on each member's own validation loss.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LRScheduler, ReduceLROnPlateau

from memrnn.members.optim import MemberOptimizer

__all__ = ["MemberScheduler"]

Scheduler = LRScheduler | ReduceLROnPlateau


class _Proxy(Optimizer):
    """One member's learning rates as a torch optimizer (one param group per group of the member
    optimizer, each over an empty tensor) for a torch scheduler to drive; its step does nothing."""

    def __init__(self, lrs: Sequence[float]) -> None:
        super().__init__([{"params": [torch.empty(0)], "lr": lr} for lr in lrs], {"lr": lrs[0]})

    def step(self, closure: Callable[[], Any] | None = None) -> None:  # type: ignore[override]
        return None


class MemberScheduler:
    """Run ``scheduler(optimizer)`` (any torch LR scheduler) for every member of ``optimizer``.

    Each member has its own torch scheduler on a proxy optimizer that holds its learning rates;
    after each :meth:`step` (and at construction, where torch's schedulers set their first
    learning rate), each member's learning rates are written into ``optimizer``'s
    ``group["member_lr"]``.  Frozen members' schedulers do not step.

    Args:
        optimizer: the member optimizer whose learning rates are scheduled.
        scheduler: a callable of a ``torch.optim.Optimizer`` returning a scheduler, e.g.
            ``lambda o: torch.optim.lr_scheduler.ReduceLROnPlateau(o, factor=0.5, patience=0)``
            or ``functools.partial(StepLR, step_size=10, gamma=0.5)``.

    Example:
        >>> sched = MemberScheduler(opt, lambda o: ReduceLROnPlateau(o, factor=0.5, patience=0))
        >>> lowered = sched.step(val_loss)  # val_loss [M]; lowered: bool [M]
    """

    def __init__(self, optimizer: MemberOptimizer, scheduler: Callable[[Optimizer], Scheduler]) -> None:
        if not isinstance(optimizer, MemberOptimizer):
            raise ValueError(
                f"MemberScheduler schedules a member optimizer (memrnn.members.optim), got {type(optimizer).__name__}"
            )
        self.optimizer = optimizer
        self.members = optimizer.members
        lrs = [g["member_lr"].tolist() for g in optimizer.param_groups]
        self.proxies = [_Proxy([lr[m] for lr in lrs]) for m in range(self.members)]
        self.schedulers: list[Scheduler] = []
        for proxy in self.proxies:
            made = scheduler(proxy)
            if not isinstance(made, LRScheduler | ReduceLROnPlateau):
                raise ValueError(
                    f"scheduler must return a torch LR scheduler (torch.optim.lr_scheduler), got {type(made).__name__}"
                )
            if made.optimizer is not proxy:
                raise ValueError("scheduler must schedule the optimizer it is given, not another one")
            self.schedulers.append(made)
        self._write()

    @property
    def is_plateau(self) -> bool:
        """Whether the schedule is ``ReduceLROnPlateau`` (its :meth:`step` takes metrics)."""
        return isinstance(self.schedulers[0], ReduceLROnPlateau)

    def step(self, metrics: Sequence[float] | Tensor | None = None) -> Tensor:
        """Step every member's scheduler that is not frozen; ``metrics [M]`` (each member's
        monitored value) for ``ReduceLROnPlateau``, nothing for the others.

        Returns:
            ``[M]`` bool: the members any of whose learning rates this step lowered (for a
            restart of their optimizer state, :meth:`MemberOptimizer.reset_state`).
        """
        if self.is_plateau:
            if metrics is None:
                raise ValueError(
                    f"ReduceLROnPlateau steps on metrics: give {self.members} values, one per member"
                )
            values = torch.as_tensor(metrics).detach().reshape(-1).cpu().tolist()
            if len(values) != self.members:
                raise ValueError(
                    f"metrics has {len(values)} values for {self.members} members: give one per member"
                )
        elif metrics is not None:
            name = type(self.schedulers[0]).__name__
            raise ValueError(
                f"{name} steps without metrics (only ReduceLROnPlateau takes them), got {metrics!r}"
            )
        before = self._lrs()
        frozen = self.optimizer.frozen.tolist()
        for m, (proxy, scheduler) in enumerate(zip(self.proxies, self.schedulers, strict=True)):
            if frozen[m]:
                continue
            proxy.step()  # torch's schedulers check that the optimizer stepped before them
            if self.is_plateau:
                scheduler.step(values[m])
            else:
                scheduler.step()
        after = self._lrs()
        self._write()
        return (after < before).any(dim=0)

    def _lrs(self) -> Tensor:
        """``[groups, M]`` float64: the proxies' learning rates."""
        return torch.tensor(
            [
                [float(p.param_groups[g]["lr"]) for p in self.proxies]
                for g in range(len(self.optimizer.param_groups))
            ],
            dtype=torch.float64,
        )

    def _write(self) -> None:
        for g, lrs in enumerate(self._lrs()):
            self.optimizer.set_lr(lrs, group=g)

    def get_last_lr(self) -> Tensor:
        """``[groups, M]``: each member's learning rate per param group."""
        return self._lrs()

    def state_dict(self) -> dict[str, Any]:
        """Each member's torch scheduler's state and learning rates."""
        return {
            "members": self.members,
            "schedulers": [s.state_dict() for s in self.schedulers],
            "lrs": self._lrs(),
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load :meth:`state_dict`'s output; the learning rates are written into the proxies and
        the member optimizer, so the two agree whatever order they are loaded in."""
        if state_dict.get("members") != self.members or len(state_dict["schedulers"]) != self.members:
            raise ValueError(
                f"the state dict is of a MemberScheduler with members={state_dict.get('members')!r}; "
                f"this one has {self.members}"
            )
        lrs = torch.as_tensor(state_dict["lrs"], dtype=torch.float64)
        if lrs.shape != (len(self.optimizer.param_groups), self.members):
            raise ValueError(
                f"the state dict has learning rates of shape {tuple(lrs.shape)}; this optimizer needs "
                f"({len(self.optimizer.param_groups)}, {self.members})"
            )
        for scheduler, sd in zip(self.schedulers, state_dict["schedulers"], strict=True):
            scheduler.load_state_dict(sd)
        for m, proxy in enumerate(self.proxies):
            for g, group in enumerate(proxy.param_groups):
                group["lr"] = float(lrs[g, m])
        self._write()
