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
import functools
import itertools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import EarlyStopping
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn
from torch import Tensor, nn

try:  # LightningCLI's deferred classes (jsonargparse's own module: _plain_callable)
    from jsonargparse._instantiation import ClassInstantiator, call_without_instantiate_context, is_subclass
except ImportError:  # another jsonargparse
    ClassInstantiator = call_without_instantiate_context = is_subclass = None

from memrnn.data.datamodule import IGNORE_INDEX
from memrnn.data.members import member_batch
from memrnn.lit.metrics import PerLengthStats
from memrnn.lit.objectives import computed_metrics, curve_stats, make_metrics, update_metrics
from memrnn.lit.runs import RUN_KEY
from memrnn.lit.sequence import PLATEAU_KEY, SequenceModule
from memrnn.members import MemberEmbedding, MemberLayer, MemberLinear
from memrnn.members.optim import (
    PER_MEMBER,
    MemberAdam,
    MemberAdamW,
    MemberSGD,
    clip_grad_norm_per_member_,
    group_value,
)
from memrnn.members.schedule import MemberScheduler

#: the member optimizer for each torch optimizer class a config may name
MEMBER_OPTIMIZERS = {torch.optim.Adam: MemberAdam, torch.optim.AdamW: MemberAdamW, torch.optim.SGD: MemberSGD}
#: what a member may set differently from the others (``data_seed``: with ``member_data:
#: independent``, the seed of its data, by default its ``seed``)
MEMBER_KEYS = ("seed", "lr", "weight_decay", "data_seed")
#: the arguments of MemberSequenceModule that SequenceModule has not
_MEMBER_ARGS = ("seeds", "lrs", "members", "stop_patience", "member_data")
#: where the members' batches come from: one stream for all, or each member its own
MEMBER_DATA = ("shared", "independent")


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
            if "data_seed" in row:
                table[-1]["data_seed"] = int(row["data_seed"])
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
        members: instead of ``seeds``/``lrs``, a list of ``{seed, lr, weight_decay, data_seed}``
            per member (``data_seed``: see ``member_data``).
        stop_patience: per-member early stopping on ``val/loss``, with the ``patience`` of
            Lightning's ``EarlyStopping`` (a member is stopped at the ``stop_patience``-th
            validation in a row without improvement, or when its value is not finite): a stopped
            member is frozen (its parameters and optimizer state stop changing).  An
            ``EarlyStopping`` callback in the Trainer (a single run's config) acts per member the
            same way, on its own monitor, mode, patience and ``min_delta``.  None and no callback:
            no stopping.
        member_data: ``"shared"`` (default): every member trains on the same batches ``[B, T]``;
            ``"independent"``: each member on its own stream, batches ``[M, B, T]``
            (:class:`memrnn.data.members.MemberData`, which ``train.py`` builds from the config's
            data module with each member's ``data_seed``, by default its ``seed``: the data of
            the single run with ``--data.init_args.seed`` = that seed).
        **kwargs: :class:`SequenceModule`'s arguments.

    Every member's best parameters so far are kept (:meth:`restore_best`), by the monitor and
    mode of the Trainer's ``ModelCheckpoint`` (what its single run's checkpoint would select;
    ``val/loss``, lowest, without one).

    Not with members: ``tie_embeddings`` (the tied head), and dropout keeps the members exact
    only in distribution (each member draws its own masks, not its single run's).
    """

    def __init__(
        self,
        seeds: Sequence[int] | None = None,
        lrs: Sequence[float] | None = None,
        members: Sequence[Mapping[str, Any]] | None = None,
        stop_patience: int | None = None,
        member_data: str = "shared",
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
        if member_data not in MEMBER_DATA:
            raise ValueError(f"member_data must be one of {MEMBER_DATA}, got {member_data!r}")
        if member_data == "shared" and any("data_seed" in row for row in table):
            raise ValueError(
                "a member's data_seed needs member_data='independent' (shared data has one seed)"
            )
        singles = []
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(table[0]["seed"])
            super().__init__(**kwargs)
            singles.append(self)
            for row in table[1:]:
                torch.manual_seed(row["seed"])
                singles.append(SequenceModule(**kwargs))
        self.members, self.member_rows = len(table), table
        self.stop_patience, self.member_data = stop_patience, member_data
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
        #: each member's best value of the checkpoint monitor so far (NaN: none yet), and of the
        #: early-stopping monitor, with the validations since it last improved
        self.register_buffer("best_score", torch.full((self.members,), float("nan")), persistent=True)
        self.register_buffer("stop_best", torch.full((self.members,), float("nan")), persistent=True)
        self.register_buffer("stale", torch.zeros(self.members, dtype=torch.long), persistent=True)
        #: the training step at which each member's best weights were kept (-1: none yet)
        self.register_buffer("best_step", torch.full((self.members,), -1, dtype=torch.long), persistent=True)
        self.register_buffer("stopped", torch.zeros(self.members, dtype=torch.bool), persistent=True)
        #: members stopped because their training loss was not finite (a subset of ``stopped``)
        self.register_buffer("diverged", torch.zeros(self.members, dtype=torch.bool), persistent=True)
        #: where each member stopped (-1: it has not): the training steps and epochs its single
        #: run would report (``trainer.global_step``, ``trainer.current_epoch`` once it ends)
        self.register_buffer("stop_step", torch.full((self.members,), -1, dtype=torch.long), persistent=True)
        self.register_buffer("stop_epoch", torch.full((self.members,), -1, dtype=torch.long), persistent=True)
        #: each member's best parameters so far (by ``val/loss``), stacked like the parameters (in
        #: the checkpoint, so that a resumed run keeps them)
        self.best = _Best(dict(self.named_parameters()))
        self._val_losses: list[list[Tensor]] = [[] for _ in table]

    # -- members ---------------------------------------------------------------------------------
    @property
    def data_seeds(self) -> list[int]:
        """Each member's data seed (``member_data="independent"``): its ``data_seed``, else its seed."""
        return [int(row.get("data_seed", row["seed"])) for row in self.member_rows]

    def member_module(self, m: int, *, best: bool = False) -> SequenceModule:
        """Member ``m`` as an ordinary :class:`SequenceModule` (copies of its weights; its own
        ``lr``/``weight_decay`` in the hyperparameters); ``best``: its best parameters by
        ``val/loss`` (:attr:`best`)."""
        if isinstance(m, bool) or not isinstance(m, int) or not 0 <= m < self.members:
            raise ValueError(f"member {m!r} does not exist; this module has members 0..{self.members - 1}")
        row = self.member_rows[m]
        kwargs = {k: _plain_callable(v) for k, v in self._single_kwargs.items()}
        with torch.random.fork_rng(devices=[]):  # its initial weights are overwritten: draw nothing
            single = SequenceModule(**{**kwargs, "lr": row["lr"], "weight_decay": row["weight_decay"]})
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
    def embed(self, input_ids: Tensor) -> Tensor:
        """Token ids ``[B, T]`` (every member reads them) or ``[M, B, T]`` (each member its own
        rows) -> ``[M, B, T, E]``."""
        return self.embedding(self.checked_ids(input_ids), per_member=input_ids.dim() == 3)

    def encode(
        self, input_ids: Tensor, mask: Tensor | None = None, input_lengths: Tensor | None = None
    ) -> Tensor:
        """:meth:`SequenceModule.encode` with members: the layer's outputs ``[M, B, T, H]`` on the
        members' embeddings of ``input_ids`` (``[B, T]`` or ``[M, B, T]``), through
        :meth:`MemberLayer.outputs_from_tokens`, which folds the lookup into the layer's first
        product where the member path can (the LSTM's on CPU: no product over the batch's
        positions for its input projection, nor for its input's and ``w_in``'s gradients).  With
        input dropout, ``initial_output`` or input lengths in the state: the lookup, then the
        layer, as :meth:`SequenceModule.encode`."""
        reads_lengths = input_lengths is not None and self.layer.reads_input_lengths
        if self.input_dropout is not None or self.initial_output or reads_lengths:
            return super().encode(input_ids, mask, input_lengths)
        h = self.layer.outputs_from_tokens(self.checked_ids(input_ids), self.embedding.weight, mask=mask)
        return h if self.output_dropout is None else self.output_dropout(h)

    def _per_member(self, batch: Mapping[str, Tensor]) -> bool:
        """Whether ``batch`` has the members first (``member_data="independent"``), checked."""
        ids = batch["input"]
        if self.member_data == "independent":
            if ids.dim() != 3 or ids.shape[0] != self.members:
                raise ValueError(
                    f"member_data='independent' takes batches with the members first, input [{self.members}, B, "
                    f"T] (memrnn.data.members.MemberData), got input {tuple(ids.shape)}"
                )
            return True
        if ids.dim() != 2:
            raise ValueError(
                f"the members share batches of input [B, T], got input {tuple(ids.shape)} (a batch per member "
                "needs member_data='independent')"
            )
        return False

    def _outputs_and_losses(self, batch: Mapping[str, Tensor]) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
        """Every head's logits ``[M, B, T, ...]`` and each objective's loss per member ``[M]``; a
        batch per member gives each member the loss of its single run on its rows."""
        out = self.heads_out(batch["input"], batch["mask"], batch.get("input_lengths"))
        if not self._per_member(batch):
            return out, self.losses(batch, out)
        if set(self.objectives) == {"generator"}:
            # the members' losses at once, each its single run's sums (cross-entropy per position,
            # a sum per string, then over the strings); per string, where every string has a
            # scored position (always so for memrnn's data: END is scored), else member by member
            target = batch.get("loss_target", batch["target"])
            if self.loss_reduction == "token" or bool(((target != IGNORE_INDEX).sum(-1) > 0).all()):
                return out, self.losses(batch, out)
        rows = [
            self.losses(member_batch(batch, m), {k: v[m] for k, v in out.items()})
            for m in range(self.members)
        ]
        return out, {k: torch.stack([r[k] for r in rows]) for k in rows[0]}

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        _, losses = self._outputs_and_losses(batch)
        totals = self._total(losses)
        self._stop_diverged(totals.detach())
        if self._logging_step():
            n = int(batch["mask"].shape[-2])
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
        self._stamp_stop(bad)
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
        out, losses = self._outputs_and_losses(batch)
        per_member = batch["input"].dim() == 3
        n = int(batch["mask"].shape[-2])
        metrics, by_length = getattr(self, f"{split}_metrics"), getattr(self, f"{split}_by_length")
        selected = self._total(losses) if self.select_on is None else losses[self.select_on]
        for m in range(self.members):
            out_m = {k: v[m] for k, v in out.items()}
            batch_m = member_batch(batch, m) if per_member else batch
            update_metrics(metrics[m], self.objectives, batch_m, out_m)
            by_length[m].update(
                self._per_string(batch_m, out_m), batch_m.get("input_lengths", batch_m["lengths"])
            )
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
            scores = [self.curve_scores(c) for c in curves]
            for name in scores[0]:
                self.member_epoch[f"{split}/{name}"] = torch.tensor(
                    [sc[name] for sc in scores], dtype=torch.float64
                )
                values = torch.tensor([sc[name] for sc in scores], dtype=torch.float32)
                self.log(f"{split}/{name}", values.mean())
                self.log_dict({f"{split}/{name}/m{m}": v for m, v in enumerate(values)})
        if split == "val" and self._val_batches:
            self._end_validation()

    # -- the best weights and early stopping, per member ----------------------------------------
    def on_fit_start(self) -> None:
        """An ``EarlyStopping`` callback of the Trainer acts per member (:meth:`stopping_rule`):
        it leaves the Trainer, which stops when every member has stopped."""
        super().on_fit_start()
        callbacks = self.trainer.callbacks
        stoppers = [cb for cb in callbacks if isinstance(cb, EarlyStopping)]
        if stoppers:
            self._stopper = _stop_rule_of(stoppers, self.stop_patience)
            for cb in stoppers:
                callbacks.remove(cb)
            rank_zero_info(
                f"members: EarlyStopping(monitor={self._stopper.monitor!r}, patience={self._stopper.patience}) "
                "stops each member on its own value; training ends when every member has stopped"
            )

    def selection_rule(self) -> tuple[str, str]:
        """``(monitor, mode)`` by which each member's best weights are kept: the Trainer's
        ``ModelCheckpoint``'s (what the member's single run would test), else ``("val/loss", "min")``."""
        ckpt = self._trainer.checkpoint_callback if self._trainer is not None else None
        if ckpt is not None and getattr(ckpt, "monitor", None):
            return ckpt.monitor, ckpt.mode
        return "val/loss", "min"

    def stopping_rule(self) -> _StopRule | None:
        """The per-member early stopping: the Trainer's ``EarlyStopping`` callback's (taken over
        at fit start), else ``stop_patience`` on ``val/loss``, else None."""
        rule = getattr(self, "_stopper", None)
        if rule is None and self.stop_patience is not None:
            rule = _StopRule("val/loss", "min", self.stop_patience, 0.0, True)
        return rule

    def _member_values(self, key: str, what: str) -> Tensor:
        values = self.member_epoch.get(key)
        if values is None:
            raise ValueError(
                f"{what} watches {key!r}, which the validation gave no member value of; per member: "
                f"{sorted(self.member_epoch)}"
            )
        return values.double().cpu()

    @torch.no_grad()
    def _end_validation(self) -> None:
        """Per member: the epoch's ``val/loss`` (batch-size weighted, as Lightning's mean), the best
        parameters kept (:meth:`selection_rule`) and early stopping (:meth:`stopping_rule`)."""
        weights = torch.tensor([n for _, n in self._val_batches], dtype=torch.float64)
        losses = torch.stack([v.double().cpu() for v, _ in self._val_batches])
        self.member_epoch["val/loss"] = (losses * weights[:, None]).sum(0) / weights.sum()
        if self._trainer is not None and self._trainer.sanity_checking:
            return
        stopped = self.stopped.cpu()
        monitor, mode = self.selection_rule()
        current = self._member_values(monitor, "the checkpoint")
        worst = float("inf") if mode == "min" else float("-inf")
        current = torch.where(torch.isnan(current), worst, current)  # as ModelCheckpoint ranks NaN
        best = self.best_score.double().cpu()
        better = (torch.isnan(best) | (current < best if mode == "min" else current > best)) & ~stopped
        self.best_score.copy_(torch.where(better, current, best))
        if self._trainer is not None:
            self.best_step[better.to(self.best_step.device)] = self._trainer.global_step
        for name, p in self.named_parameters():
            self.best.get(name)[better.to(p.device)] = p.detach()[better.to(p.device)]
        rule = self.stopping_rule()
        if rule is not None:
            newly = rule.step(self._member_values(rule.monitor, "early stopping"), self.stop_best, self.stale)
            newly &= ~stopped
            if bool(newly.any()):
                self.stopped |= newly.to(self.stopped.device)
                self._stamp_stop(newly)
                for opt in self._member_optimizers():
                    opt.freeze(newly)
        if bool(self.stopped.all()) and self._trainer is not None:
            self._trainer.should_stop = True

    def _stamp_stop(self, newly: Tensor) -> None:
        """Record where the members ``newly`` (``[M]`` bool) stop: the trainer's step, and the
        epochs its single run would count (the epoch it stops in, counted from 1, as
        ``trainer.current_epoch`` reads after a fit that early stopping ended)."""
        if self._trainer is None:
            return
        where = newly.to(self.stop_step.device)
        self.stop_step[where] = self._trainer.global_step
        self.stop_epoch[where] = self._trainer.current_epoch + 1

    def member_progress(self, m: int, steps: int, epochs: int) -> tuple[int, int]:
        """``(steps, epochs)`` member ``m`` trained: where it stopped, else the run's ``steps``
        and ``epochs`` (a member that never stopped ran with the run to its end).  A member
        stopped in a run continued from a checkpoint written before memrnn recorded stops
        reads the run's."""
        if bool(self.stopped[m]) and int(self.stop_step[m]) >= 0:
            return int(self.stop_step[m]), int(self.stop_epoch[m])
        return steps, epochs

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """A checkpoint written before memrnn recorded where members stop loads with none
        recorded (``stop_step`` and ``stop_epoch`` of -1)."""
        super().on_load_checkpoint(checkpoint)
        state = checkpoint.get("state_dict")
        if isinstance(state, dict):
            for key in ("stop_step", "stop_epoch"):
                state.setdefault(key, torch.full((self.members,), -1, dtype=torch.long))

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

    def _plateau_value(self) -> Any:
        """Each member's last validation ``lr_monitor`` ``[M]`` (None before any)."""
        return self.member_epoch.get(self.lr_monitor)

    def _step_skipped_plateau(self, scheduler: Any, value: Any) -> None:
        self.member_epoch[self.lr_monitor] = torch.as_tensor(value, dtype=torch.float64)
        self.lr_scheduler_step(scheduler, None)

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


@dataclass(frozen=True)
class _StopRule:
    """Lightning's ``EarlyStopping`` per member (``_evaluate_stopping_criteria``), checked after each
    validation (a validation per epoch: what its check at the training epoch's end reads): a non-finite
    value stops (``check_finite``); a value better than the best by more than ``min_delta``
    (signed as Lightning stores it: negative for ``"min"``) resets the count, else it counts one,
    and ``patience`` counts stop."""

    monitor: str
    mode: str
    patience: int
    min_delta: float
    check_finite: bool

    def step(self, current: Tensor, best: Tensor, stale: Tensor) -> Tensor:
        """Update ``best``/``stale`` (``[M]`` buffers) with ``current [M]``; the members to stop."""
        prior = best.double().cpu()
        finite = torch.isfinite(current)
        shifted = current - self.min_delta
        improved = torch.isnan(prior) | (shifted < prior if self.mode == "min" else shifted > prior)
        improved &= finite
        counted = finite & ~improved
        best.copy_(torch.where(improved, current, prior))
        stale_cpu = stale.cpu()
        stale.copy_(torch.where(improved, 0, stale_cpu + counted.long()))
        return (self.check_finite & ~finite) | (counted & (stale.cpu() >= self.patience))


def _stop_rule_of(stoppers: Sequence[EarlyStopping], stop_patience: int | None) -> _StopRule:
    if len(stoppers) > 1:
        raise ValueError(f"members take one EarlyStopping callback, the Trainer has {len(stoppers)}")
    if stop_patience is not None:
        raise ValueError("give members stop_patience or an EarlyStopping callback, not both")
    cb = stoppers[0]
    unsupported = {
        "stopping_threshold": cb.stopping_threshold,
        "divergence_threshold": cb.divergence_threshold,
    }
    given = {k: v for k, v in unsupported.items() if v is not None}
    if given:
        raise ValueError(f"EarlyStopping with {given} has no per-member version; members take monitor, mode, "
                         "patience, min_delta and check_finite")  # fmt: skip
    return _StopRule(cb.monitor, cb.mode, int(cb.patience), float(cb.min_delta), bool(cb.check_finite))


def _plain_callable(value: Any) -> Any:
    """``value``, or for a class given through LightningCLI (jsonargparse's deferred
    ``partial(call_without_instantiate_context, ClassInstantiator, cls, **init_args)``, e.g. the
    ``layer`` and ``lr_scheduler`` of a config) the plain ``partial(cls, **init_args)`` it calls
    when no instantiator of the CLI applies to ``cls``.  The CLI's partial holds the CLI's
    instantiators, and through them the fitted trainer and data: Lightning's
    ``save_hyperparameters`` deep-copies its arguments, and a module built from that partial after
    a fit copied them all (33 s per member of a DuSell group, 20 members at a group's end)."""
    if not isinstance(value, functools.partial) or len(value.args) < 2:
        return value
    if call_without_instantiate_context is None:  # another jsonargparse: keep its partial
        return value
    instantiator, cls = value.args[0], value.args[1]
    if value.func is not call_without_instantiate_context or not isinstance(instantiator, ClassInstantiator):
        return value
    if not isinstance(cls, type) or any(
        cls is base or (subclasses and is_subclass(cls, base))
        for base, subclasses in instantiator.instantiators
    ):
        return value
    return functools.partial(cls, *value.args[2:], **value.keywords)


class _Best(nn.Module):
    """Copies of the members' parameters, as buffers (named as the parameters, dots escaped)."""

    def __init__(self, params: Mapping[str, Tensor]) -> None:
        super().__init__()
        for name, p in params.items():
            self.register_buffer(name.replace(".", "__"), p.detach().clone())

    def get(self, name: str) -> Tensor:
        return getattr(self, name.replace(".", "__"))


def _mean_curves(curves: list[dict[str, list[float]]]) -> dict[str, list[float]]:
    """The members' per-length curves averaged at each length (members with their own data may
    have strings of a length another lacks: the mean of those that have it; ``count``: the
    first's that has it)."""
    lengths = sorted({n for c in curves for n in c["length"]})
    at = [{n: i for i, n in enumerate(c["length"])} for c in curves]
    out: dict[str, list[float]] = {"length": lengths}
    pairs = list(zip(curves, at, strict=True))
    out["count"] = [next(c["count"][a[n]] for c, a in pairs if n in a) for n in lengths]
    for key in curves[0]:
        if key in out:
            continue
        rows = [
            [c[key][a[n]] if n in a else float("nan") for n in lengths]
            for c, a in zip(curves, at, strict=True)
            if key in c
        ]
        out[key] = torch.tensor(rows, dtype=torch.float64).nanmean(0).tolist()
    return out


def member_checkpoint(
    module: MemberSequenceModule, member: int, *, best: bool = False, **source: Any
) -> dict:
    """Member ``member`` of ``module`` as the contents of an ordinary :class:`SequenceModule`
    checkpoint (``torch.save`` it; ``SequenceModule.load_from_checkpoint`` opens it); ``best``: its
    best parameters; ``source``: recorded under ``memrnn_member`` with the member's row."""
    single = module.member_module(member, best=best)
    # the members module's own arguments as given (a config's class_path dicts, which Lightning's
    # loader instantiates), without those of the members, with this member's lr and weight decay
    hparams = {k: v for k, v in module.hparams.items() if k not in _MEMBER_ARGS}
    hparams.update(lr=single.hparams["lr"], weight_decay=single.hparams["weight_decay"])
    if "_class_path" in hparams:
        hparams["_class_path"] = f"{SequenceModule.__module__}.{SequenceModule.__qualname__}"
    return {
        "state_dict": single.state_dict(),
        "hyper_parameters": copy.deepcopy(hparams),
        "pytorch-lightning_version": L.__version__,
        "epoch": 0,
        "global_step": 0,
        "memrnn_member": {**source, "member": member, **module.member_rows[member]},
    }


class ShedStopped(L.Callback):
    """Ends a :class:`MemberSequenceModule`'s fit at the end of the first training epoch after
    which at least ``fraction`` of its members, but not all, have stopped (early stopping or
    divergence), so that the caller can continue the others alone (:func:`select_members`)
    instead of carrying the stopped ones to the end (a DuSell LSTM-20 epoch took 32 s for 20
    members and 18 s for the 10 left of them).
    :attr:`fired` tells whether it ended the fit.

    Args:
        fraction: in ``(0, 1]``; 0.5 sheds when half the members have stopped (at most
            ``log2(M)`` continuations for M members)."""

    def __init__(self, fraction: float = 0.5) -> None:
        if isinstance(fraction, bool) or not isinstance(fraction, int | float) or not 0 < fraction <= 1:
            raise ValueError(f"fraction must be a number in (0, 1], got {fraction!r}")
        self.fraction = float(fraction)
        self.fired = False

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # after the epoch's validation; the epoch's last.ckpt (written at the validation's end, or
        # by the ModelCheckpoint's own on_train_epoch_end, which runs after this one) is where the
        # members that go on continue, taking the epoch's plateau step there
        # (SequenceModule._take_skipped_plateau_step)
        stopped = getattr(pl_module, "stopped", None)
        if not isinstance(stopped, Tensor):
            raise ValueError(f"ShedStopped acts on a MemberSequenceModule, got a {type(pl_module).__name__}")
        n = int(stopped.sum())
        if 0 < n < stopped.numel() and n >= self.fraction * stopped.numel():
            trainer.should_stop = True
            self.fired = True


_MEMBER_KEY = re.compile(r"^(.*)/m(\d+)$")


def _renumber_keys(value: Any, new_index: Mapping[int, int]) -> Any:
    """``value`` with every map key ``<key>/m<m>`` renamed ``<key>/m<new_index[m]>`` and dropped
    where ``m`` is not in ``new_index`` (the member-keyed values a callback keeps: logged metrics)."""
    if isinstance(value, Mapping):
        out = {}
        for k, v in value.items():
            match = _MEMBER_KEY.match(k) if isinstance(k, str) else None
            if match:
                m = int(match.group(2))
                if m not in new_index:
                    continue
                k = f"{match.group(1)}/m{new_index[m]}"
            out[k] = _renumber_keys(v, new_index)
        return out
    if isinstance(value, list | tuple):
        return type(value)(_renumber_keys(v, new_index) for v in value)
    return value


def _take(name: str, t: Any, keep: Tensor, members: int) -> Any:
    """``t[keep]`` for a tensor with the member dimension first; an error naming ``name`` for a
    tensor without it."""
    if not isinstance(t, Tensor):
        return t
    if t.dim() == 0 or t.shape[0] != members:
        raise ValueError(
            f"{name} has shape {tuple(t.shape)}: no member dimension [{members}, ...] to select from"
        )
    return t[keep.to(t.device)].clone()


def select_members(checkpoint: Mapping[str, Any], keep: Sequence[int]) -> dict[str, Any]:
    """A :class:`MemberSequenceModule` checkpoint (a ``last.ckpt``, or ``trainer.save_checkpoint``'s)
    holding only members ``keep``, in that order, as a run of ``len(keep)`` members that continues
    where this one stopped (``trainer.fit(..., ckpt_path=...)`` with the kept members'
    ``members`` table): the parameters, best parameters, per-member buffers, optimizer and
    schedule states of the kept members, the loops' position, and callback states with their
    ``<key>/m<m>`` entries renumbered.  A run whose members are stopped can so shed them
    (``python -m memrnn.suite run --members auto --shed``) and go on at the cost of fewer members.

    Left out: ``ModelCheckpoint`` states (their scores are means over the old members; each member's
    best is kept per member, :attr:`MemberSequenceModule.best`) and the W&B run (the continued
    run is a new one; ``memrnn_run`` keeps only the ``code`` that trained so far).  The kept
    members keep their data path: a ``member_data="independent"`` run stays one even when the kept
    members draw one data seed (its batches are padded to the longest member's string of each
    step; the shared path would pad them otherwise, a float-level difference that training
    amplifies)."""
    hparams = dict(checkpoint.get("hyper_parameters", {}))
    if "member_data" not in hparams:
        raise ValueError(
            "select_members takes a MemberSequenceModule checkpoint; this one's hyperparameters have no "
            f"members (class {hparams.get('_class_path', 'unknown')})"
        )
    rows = hparams.get("members")  # as given: a continued run's config must give the same
    if rows is None:
        rows = member_table(None, hparams.get("seeds"), hparams.get("lrs"), hparams.get("lr", 1e-2),
                            hparams.get("weight_decay", 0.0))  # fmt: skip
    members = len(rows)
    keep = [int(k) for k in keep]
    if not keep or len(set(keep)) != len(keep) or not all(0 <= k < members for k in keep):
        raise ValueError(f"keep must be distinct members of 0..{members - 1}, got {keep}")
    index = torch.tensor(keep, dtype=torch.long)
    out = {k: v for k, v in checkpoint.items()}
    out["state_dict"] = {
        k: _take(f"state_dict[{k!r}]", v, index, members) for k, v in checkpoint["state_dict"].items()
    }
    optimizers = []
    for i, sd in enumerate(checkpoint.get("optimizer_states", [])):
        if sd.get("members") != members:
            raise ValueError(
                f"optimizer state {i} is of {sd.get('members')!r} members, the model of {members}"
            )
        state = {
            p: {k: _take(f"optimizer {i} state[{p}][{k!r}]", v, index, members) for k, v in s.items()}
            for p, s in sd["state"].items()
        }
        groups = []
        for g in sd["param_groups"]:
            g = dict(g)
            for key in PER_MEMBER:
                g[f"member_{key}"] = _take(
                    f"member_{key}", torch.as_tensor(g[f"member_{key}"]), index, members
                )
                g[key] = group_value(g[f"member_{key}"])
            groups.append(g)
        optimizers.append({**sd, "state": state, "param_groups": groups,
                           "frozen": _take("frozen", torch.as_tensor(sd["frozen"]), index, members),
                           "members": len(keep)})  # fmt: skip
    out["optimizer_states"] = optimizers
    schedulers = []
    for i, sd in enumerate(checkpoint.get("lr_schedulers", [])):
        if isinstance(sd, Mapping) and "schedulers" in sd:  # a MemberScheduler's
            if sd.get("members") != members:
                raise ValueError(
                    f"schedule state {i} is of {sd.get('members')!r} members, the model of {members}"
                )
            sd = {**sd, "members": len(keep), "schedulers": [sd["schedulers"][k] for k in keep],
                  "lrs": torch.as_tensor(sd["lrs"])[:, index].clone()}  # fmt: skip
        schedulers.append(sd)
    out["lr_schedulers"] = schedulers
    if isinstance(checkpoint.get(PLATEAU_KEY), Tensor):
        out[PLATEAU_KEY] = _take(PLATEAU_KEY, checkpoint[PLATEAU_KEY], index, members)
    renumber = {old: new for new, old in enumerate(keep)}
    out["callbacks"] = {
        k: _renumber_keys(v, renumber)
        for k, v in checkpoint.get("callbacks", {}).items()
        if not str(k).startswith("ModelCheckpoint")
    }
    kept = [dict(rows[k]) for k in keep]
    hparams.update(members=kept, seeds=None, lrs=None)
    out["hyper_parameters"] = hparams
    run = checkpoint.get(RUN_KEY)
    if isinstance(run, Mapping):
        out[RUN_KEY] = {k: v for k, v in run.items() if k in ("code", "codes")}
    return out


def write_member_checkpoint(checkpoint: str, member: int, out: str, *, best: bool = False) -> None:
    """Member ``member`` of a :class:`MemberSequenceModule` checkpoint as an ordinary
    :class:`SequenceModule` checkpoint at ``out`` (``SequenceModule.load_from_checkpoint(out)``)."""
    module = MemberSequenceModule.load_from_checkpoint(checkpoint, map_location="cpu")
    torch.save(member_checkpoint(module, member, best=best, checkpoint=str(checkpoint)), out)


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
