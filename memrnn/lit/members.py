"""M runs of :class:`~memrnn.lit.sequence.SequenceModule` trained as one model in one process:
:class:`MemberSequenceModule` (``docs/design.md``, "Members").

Each member is the run it would have been alone (its own seed's initial weights, its own learning
rate and weight decay, the same batches: by default the members share the batch stream, as
Delétang et al.'s (2023) seeds vary the initialisation only): the embedding, the layer and the
heads carry a leading member dimension (:mod:`memrnn.members`), the loss is the sum of the
members' losses (the members share no parameter, so each gets its own gradient), and the
optimizer, the gradient clipping, the learning-rate schedule and early stopping act per member
(:mod:`memrnn.members.optim`, :mod:`memrnn.members.schedule`).  Metrics are per member, logged
as ``<split>/<name>/m<m>`` beside their mean over the members under the single run's key
(``val/loss`` etc.: what checkpoints and progress bars watch).  :meth:`member_module` gives any
member back as an ordinary :class:`SequenceModule`; ``python -m memrnn.lit.members CKPT --member
m --out PATH`` writes it as a checkpoint that ``SequenceModule.load_from_checkpoint`` opens.
"""

from __future__ import annotations

import argparse
import copy
import itertools
from collections.abc import Mapping, Sequence
from typing import Any

import lightning as L
import torch
from lightning.pytorch.utilities import rank_zero_warn
from torch import Tensor, nn

from memrnn.lit.metrics import PerLengthStats
from memrnn.lit.objectives import computed_metrics, curve_stats, make_metrics, update_metrics
from memrnn.lit.sequence import SequenceModule
from memrnn.members import MemberEmbedding, MemberLayer, MemberLinear
from memrnn.members.optim import MemberAdam, MemberAdamW, MemberSGD, clip_grad_norm_per_member_
from memrnn.members.schedule import MemberScheduler

#: the member optimizer for each torch optimizer class a config may name
MEMBER_OPTIMIZERS = {torch.optim.Adam: MemberAdam, torch.optim.AdamW: MemberAdamW, torch.optim.SGD: MemberSGD}
#: what a member may set differently from the others
MEMBER_KEYS = ("seed", "lr", "weight_decay")


def member_table(
    members: Sequence[Mapping[str, Any]] | None,
    seeds: Sequence[int] | None,
    lrs: Sequence[float] | None,
    lr: float,
    weight_decay: float,
) -> list[dict[str, Any]]:
    """Each member's ``{seed, lr, weight_decay}``: ``members`` as given (missing keys from the
    module's ``lr``/``weight_decay``; ``seed`` required), else every seed with every learning rate
    (seed-major: ``seeds × lrs``)."""
    if members is not None:
        if seeds is not None or lrs is not None:
            raise ValueError("give members as a list of overrides or as seeds (and lrs), not both")
        if isinstance(members, Mapping) or not len(members):
            raise ValueError(
                f"members must be a non-empty list of {{seed, lr, weight_decay}} maps, got {members!r}"
            )
        table = []
        for i, row in enumerate(members):
            unknown = sorted(set(row) - set(MEMBER_KEYS))
            if unknown:
                raise ValueError(f"member {i} sets {unknown}; a member may set only {', '.join(MEMBER_KEYS)}")
            if "seed" not in row:
                raise ValueError(f"member {i} has no seed: {dict(row)}")
            table.append({"seed": int(row["seed"]), "lr": float(row.get("lr", lr)),
                          "weight_decay": float(row.get("weight_decay", weight_decay))})  # fmt: skip
        return table
    seeds = [0] if seeds is None else seeds
    lrs = [lr] if lrs is None else lrs
    for name, values in (("seeds", seeds), ("lrs", lrs)):
        if isinstance(values, int | float) or not len(values):
            raise ValueError(f"{name} must be a non-empty list, got {values!r}")
    return [
        {"seed": int(s), "lr": float(r), "weight_decay": float(weight_decay)}
        for s, r in itertools.product(seeds, lrs)
    ]


class MemberSequenceModule(SequenceModule):
    """:class:`SequenceModule` with M members: every argument of :class:`SequenceModule` (the
    members share them), plus who the members are.

    Args:
        seeds: one member per seed (its initial weights are those the single run with
            ``seed_everything(seed)`` builds); with ``lrs``, every seed with every learning rate.
        lrs: the members' learning rates (default: the module's ``lr``).
        members: instead of ``seeds``/``lrs``, a list of ``{seed, lr, weight_decay}`` per member.
        stop_patience: per-member early stopping: a member whose ``val/loss`` has not improved for
            this many validations is frozen (its parameters and optimizer state stop changing);
            every member's best parameters so far are kept (:meth:`restore_best`).  None: no
            stopping (the best parameters are still kept).
        **kwargs: :class:`SequenceModule`'s arguments.

    Not with members: ``tie_embeddings`` (the tied head), and dropout keeps the members exact
    only in distribution (each member draws its own masks, not its single run's).
    """

    def __init__(
        self,
        seeds: Sequence[int] | None = None,
        lrs: Sequence[float] | None = None,
        members: Sequence[Mapping[str, Any]] | None = None,
        stop_patience: int | None = None,
        **kwargs: Any,
    ) -> None:
        table = member_table(members, seeds, lrs, kwargs.get("lr", 1e-2), kwargs.get("weight_decay", 0.0))
        if kwargs.get("tie_embeddings"):
            raise ValueError(
                "tie_embeddings is not available with members (the tied head has no member path)"
            )
        if stop_patience is not None and (
            isinstance(stop_patience, bool) or not isinstance(stop_patience, int) or stop_patience < 0
        ):
            raise ValueError(f"stop_patience must be a whole number >= 0 or None, got {stop_patience!r}")
        singles = []
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(table[0]["seed"])
            super().__init__(**kwargs)
            singles.append(self)
            for row in table[1:]:
                torch.manual_seed(row["seed"])
                singles.append(SequenceModule(**kwargs))
        self.members, self.member_rows = len(table), table
        self.stop_patience = stop_patience
        self._single_kwargs = dict(kwargs)
        parts = [(s.embedding, s.layer, dict(s.heads)) for s in singles]
        self.embedding = MemberEmbedding.from_modules([p[0] for p in parts])
        self.layer = MemberLayer([p[1] for p in parts])
        self.heads = nn.ModuleDict(
            {k: MemberLinear.from_modules([p[2][k] for p in parts]) for k in self.heads}
        )
        acceptor = "acceptor" in self.heads
        bracket_types = self.hparams.get("bracket_types")
        max_length = self.hparams.get("max_length", 1024)
        for split in ("val", "test"):
            setattr(self, f"{split}_metrics", nn.ModuleList(
                make_metrics(self.objectives, self.num_symbols, bracket_types, acceptor) for _ in table))  # fmt: skip
            setattr(self, f"{split}_by_length", nn.ModuleList(
                PerLengthStats(curve_stats(self.objectives), max_length=max_length) for _ in table))  # fmt: skip
        #: each member's value ``[M]`` of every epoch-level metric of the last evaluation
        #: (``val/ce``, ``val/loss``, …): what the plateau schedule and early stopping read
        self.member_epoch: dict[str, Tensor] = {}
        #: per split, each member's per-length curves of the last evaluation
        self.member_curves: dict[str, list[dict[str, list[float]]]] = {}
        self.register_buffer("best_loss", torch.full((self.members,), float("inf")), persistent=True)
        self.register_buffer("stale", torch.zeros(self.members, dtype=torch.long), persistent=True)
        self.register_buffer("stopped", torch.zeros(self.members, dtype=torch.bool), persistent=True)
        #: members stopped because their training loss was not finite (a subset of ``stopped``)
        self.register_buffer("diverged", torch.zeros(self.members, dtype=torch.bool), persistent=True)
        #: each member's best parameters so far (by ``val/loss``), stacked like the parameters (in
        #: the checkpoint, so that a resumed run keeps them)
        self.best = _Best(dict(self.named_parameters()))
        self._val_losses: list[list[Tensor]] = [[] for _ in table]

    # -- members ---------------------------------------------------------------------------------
    def member_module(self, m: int, *, best: bool = False) -> SequenceModule:
        """Member ``m`` as an ordinary :class:`SequenceModule` (copies of its weights; its own
        ``lr``/``weight_decay`` in the hyperparameters); ``best``: its best parameters by
        ``val/loss`` (:attr:`best`)."""
        if isinstance(m, bool) or not isinstance(m, int) or not 0 <= m < self.members:
            raise ValueError(f"member {m!r} does not exist; this module has members 0..{self.members - 1}")
        row = self.member_rows[m]
        with torch.random.fork_rng(devices=[]):  # its initial weights are overwritten: draw nothing
            single = SequenceModule(
                **{**self._single_kwargs, "lr": row["lr"], "weight_decay": row["weight_decay"]}
            )
        ref = next(self.parameters())
        single = single.to(device=ref.device, dtype=ref.dtype)
        own = self.state_dict()
        state = {}
        for name in single.state_dict():
            key = "layer.layer." + name[len("layer.") :] if name.startswith("layer.") else name
            stacked = self.best.get(key) if best and key in dict(self.named_parameters()) else own[key]
            state[name] = stacked.detach()[m].clone()
        single.load_state_dict(state)
        return single

    @torch.no_grad()
    def restore_best(self) -> None:
        """Every member's parameters back to its best so far (by ``val/loss``)."""
        for name, p in self.named_parameters():
            p.copy_(self.best.get(name))

    # -- forward ---------------------------------------------------------------------------------
    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        out = self.heads_out(batch["input"], batch["mask"], batch.get("input_lengths"))
        totals = self._total(self.losses(batch, out))
        self._stop_diverged(totals.detach())
        if self._logging_step():
            n = int(batch["mask"].shape[0])
            self.log(
                "train/loss", totals[~self.diverged.to(totals.device)].mean(), prog_bar=True, batch_size=n
            )
            self.log_dict({f"train/loss/m{m}": v for m, v in enumerate(totals)}, batch_size=n)
        # a diverged member's loss is left out of the sum (its parameters are frozen; the others'
        # gradients never depended on it: the members share no parameter)
        return totals.masked_fill(self.diverged.to(totals.device), 0.0).sum()

    @torch.no_grad()
    def _stop_diverged(self, totals: Tensor) -> None:
        """A member whose training loss is not finite is stopped for good (frozen, its best weights
        kept) and reported; the others go on.  One host sync per step (``.any()``)."""
        bad = ~torch.isfinite(totals).cpu() & ~self.diverged
        if not bool(bad.any()):
            return
        self.diverged |= bad
        self.stopped |= bad
        for opt in self._member_optimizers():
            opt.freeze(bad)
        step = self._trainer.global_step if self._trainer is not None else None
        for m in bad.nonzero().flatten().tolist():
            rank_zero_warn(
                f"member {m} ({self.member_rows[m]}) diverged (training loss {float(totals[m])} at step {step}): "
                "stopped; the other members go on"
            )
        if bool(self.stopped.all()) and self._trainer is not None:
            self._trainer.should_stop = True

    def _eval_step(self, batch: dict[str, Tensor], split: str) -> None:
        out = self.heads_out(batch["input"], batch["mask"], batch.get("input_lengths"))
        n = int(batch["mask"].shape[0])
        metrics, by_length = getattr(self, f"{split}_metrics"), getattr(self, f"{split}_by_length")
        lengths = batch.get("input_lengths", batch["lengths"])
        losses = self.losses(batch, out)
        selected = self._total(losses) if self.select_on is None else losses[self.select_on]
        for m in range(self.members):
            out_m = {k: v[m] for k, v in out.items()}
            update_metrics(metrics[m], self.objectives, batch, out_m)
            by_length[m].update(self._per_string(batch, out_m), lengths)
        self.log(f"{split}/loss", selected.mean(), batch_size=n)
        self.log_dict({f"{split}/loss/m{m}": v for m, v in enumerate(selected)}, batch_size=n)
        if split == "val":
            self._val_batches.append((selected.detach(), n))

    def _eval_epoch_start(self, split: str) -> None:
        for metrics in getattr(self, f"{split}_metrics"):
            for metric in metrics.values():
                metric.reset()
        for stats in getattr(self, f"{split}_by_length"):
            stats.reset()
        self._val_batches: list[tuple[Tensor, int]] = []

    def _eval_epoch_end(self, split: str) -> None:
        logs: dict[str, list[Tensor]] = {}
        for metrics in getattr(self, f"{split}_metrics"):
            for key, value in computed_metrics(metrics, split).items():
                logs.setdefault(key, []).append(value.float())
        for key, values in logs.items():
            stacked = torch.stack(values)
            self.member_epoch[key] = stacked.detach().double().cpu()
            self.log(key, stacked.nanmean(), prog_bar=key in {"val/ce_gap", "val/accept_end"})
            self.log_dict({f"{key}/m{m}": v for m, v in enumerate(stacked)})
        curves = [
            self.curves_from(stats) if stats.update_called else {}
            for stats in getattr(self, f"{split}_by_length")
        ]
        self.member_curves[split] = curves
        if curves and curves[0]:
            self.curves[split] = _mean_curves(curves)
            means = [self.curve_means(c) for c in curves]
            for name in means[0]:
                values = torch.tensor([mm[name] for mm in means], dtype=torch.float32)
                self.log(f"{split}/{name}_mean_over_lengths", values.mean())
                self.log_dict({f"{split}/{name}_mean_over_lengths/m{m}": v for m, v in enumerate(values)})
        if split == "val" and self._val_batches:
            self._end_validation()

    @torch.no_grad()
    def _end_validation(self) -> None:
        """Per member: the epoch's ``val/loss`` (batch-size weighted, as Lightning's mean), the best
        parameters kept, and early stopping (:attr:`stop_patience`)."""
        weights = torch.tensor([n for _, n in self._val_batches], dtype=torch.float64)
        losses = torch.stack([v.double().cpu() for v, _ in self._val_batches])
        self.last_val_loss = (losses * weights[:, None]).sum(0) / weights.sum()
        self.member_epoch["val/loss"] = self.last_val_loss
        if self._trainer is not None and self._trainer.sanity_checking:
            return
        better = self.last_val_loss.to(self.best_loss) < self.best_loss
        better &= ~self.stopped
        self.best_loss[better] = self.last_val_loss.to(self.best_loss)[better]
        self.stale[better] = 0
        self.stale[~better & ~self.stopped] += 1
        for name, p in self.named_parameters():
            self.best.get(name)[better.to(p.device)] = p.detach()[better.to(p.device)]
        if self.stop_patience is not None:
            newly = (self.stale > self.stop_patience) & ~self.stopped
            if bool(newly.any()):
                self.stopped |= newly
                for opt in self._member_optimizers():
                    opt.freeze(newly.cpu())
        if bool(self.stopped.all()) and self._trainer is not None:
            self._trainer.should_stop = True

    def _member_optimizers(self) -> list:
        if self._trainer is None:
            return []
        return [o for o in self._trainer.optimizers if hasattr(o, "freeze")]

    # -- optimisation ----------------------------------------------------------------------------
    def configure_optimizers(self):
        member_class = MEMBER_OPTIMIZERS.get(self.optimizer_class)
        if member_class is None:
            raise ValueError(
                f"optimizer {self.optimizer_class.__name__} has no member version; members train with "
                f"{', '.join(c.__name__ for c in MEMBER_OPTIMIZERS)}"
            )
        opt = member_class(
            list(self.parameters()),
            members=self.members,
            lr=[row["lr"] for row in self.member_rows],
            weight_decay=[row["weight_decay"] for row in self.member_rows],
            **self.optimizer_args,
        )
        if self.stopped.any():
            opt.freeze(self.stopped.cpu())
        if self.lr_scheduler is None:
            return opt
        scheduler = MemberScheduler(opt, self.lr_scheduler)
        config: dict[str, Any] = {"scheduler": scheduler, "interval": "epoch"}
        if scheduler.is_plateau:  # stepped after validation, as Lightning steps a ReduceLROnPlateau
            config.update(reduce_on_plateau=True, monitor=self.lr_monitor)
        return {"optimizer": opt, "lr_scheduler": config}

    def configure_gradient_clipping(
        self,
        optimizer: Any,
        gradient_clip_val: float | None = None,
        gradient_clip_algorithm: str | None = None,
    ) -> None:
        """The Trainer's ``gradient_clip_val`` per member (each member's gradients clipped as its
        single run's: Delétang et al. clip at 1, FLaRe at 5)."""
        if not gradient_clip_val:
            return
        if gradient_clip_algorithm not in (None, "norm"):
            super().configure_gradient_clipping(
                optimizer, gradient_clip_val, gradient_clip_algorithm
            )  # elementwise
            return
        params = [p for group in optimizer.param_groups for p in group["params"]]  # not self.parameters():
        clip_grad_norm_per_member_(params, gradient_clip_val, self.members)  # its walk costs ~5 ms a step

    def lr_scheduler_step(self, scheduler: Any, metric: Any) -> None:
        """Each member's schedule: a plateau schedule on its own value of the metric the single run
        watches (``lr_monitor``: ``val/ce`` for a generator, else ``val/loss``), the others stepped
        alike; with ``restart_optimizer_on_decay`` the members whose rate fell restart their
        optimizer (their moments and step counts from zero)."""
        if scheduler.is_plateau:
            values = self.member_epoch.get(self.lr_monitor)
            if values is None:
                raise ValueError(
                    f"the plateau schedule watches {self.lr_monitor!r}, which no validation gave per member; "
                    f"known: {sorted(self.member_epoch)}"
                )
            lowered = scheduler.step(values.tolist())
        else:
            lowered = scheduler.step()
        if self.restart_optimizer_on_decay and bool(lowered.any()):
            scheduler.optimizer.reset_state(lowered)


class _Best(nn.Module):
    """Copies of the members' parameters, as buffers (named as the parameters, dots escaped)."""

    def __init__(self, params: Mapping[str, Tensor]) -> None:
        super().__init__()
        for name, p in params.items():
            self.register_buffer(name.replace(".", "__"), p.detach().clone())

    def get(self, name: str) -> Tensor:
        return getattr(self, name.replace(".", "__"))


def _mean_curves(curves: list[dict[str, list[float]]]) -> dict[str, list[float]]:
    """The members' per-length curves averaged (the lengths are shared: the batches are)."""
    out = {"length": curves[0]["length"], "count": curves[0]["count"]}
    for key in curves[0]:
        if key in out:
            continue
        out[key] = torch.tensor([c[key] for c in curves if key in c], dtype=torch.float64).mean(0).tolist()
    return out


def write_member_checkpoint(checkpoint: str, member: int, out: str, *, best: bool = False) -> None:
    """Member ``member`` of a :class:`MemberSequenceModule` checkpoint as an ordinary
    :class:`SequenceModule` checkpoint at ``out`` (``SequenceModule.load_from_checkpoint(out)``)."""
    module = MemberSequenceModule.load_from_checkpoint(checkpoint, map_location="cpu")
    single = module.member_module(member, best=best)
    ckpt = {
        "state_dict": single.state_dict(),
        "hyper_parameters": copy.copy(dict(single.hparams)),
        "pytorch-lightning_version": L.__version__,
        "epoch": 0,
        "global_step": 0,
        "memrnn_member": {"checkpoint": str(checkpoint), "member": member, **module.member_rows[member]},
    }
    torch.save(ckpt, out)


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        description="Write one member of a members checkpoint as an ordinary checkpoint"
    )
    ap.add_argument("checkpoint")
    ap.add_argument("--member", type=int, required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--best", action="store_true", help="the member's best parameters by val/loss")
    args = ap.parse_args(argv)
    write_member_checkpoint(args.checkpoint, args.member, args.out, best=args.best)
    print(f"member {args.member} -> {args.out}")


if __name__ == "__main__":
    main()
