"""torchmetrics metrics for language models of formal languages."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor
from torchmetrics import Metric

from memrnn.core.checks import positive_int
from memrnn.data.datamodule import IGNORE_INDEX


class CrossEntropyGap(Metric):
    """Model cross-entropy per token, the exact cross-entropy of the generating distribution on
    the same tokens, and their difference, in nats.

    ``update(logits [B, T, V], target [B, T], ref_logprob [B, T] | None)``: ``target`` holds
    ``-100`` at padding; ``ref_logprob`` is the exact ``log p(w_t | w_<t)`` of the distribution
    the data were drawn from (``memrnn.languages``), None where there is none (the recognizer
    benchmark's strings).  Sums are kept in float64 and reduced by summation, so the result is
    exact under DDP.  ``compute()`` returns ``{"ce", "ce_exact", "ce_gap"}``, or ``{"ce"}`` alone
    when no batch had a reference; ``ce_gap >= 0`` in expectation, since the generating
    distribution is the Bayes-optimal predictor.
    """

    full_state_update = False

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.add_state("model_nll", torch.zeros((), dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("exact_nll", torch.zeros((), dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("tokens", torch.zeros((), dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("referenced", torch.zeros((), dtype=torch.float64), dist_reduce_fx="sum")

    def update(self, logits: Tensor, target: Tensor, ref_logprob: Tensor | None) -> None:
        real = target != IGNORE_INDEX
        nll = F.cross_entropy(logits.flatten(0, 1).double(), target.flatten(), reduction="none")
        self.model_nll += nll.sum()
        if ref_logprob is not None:
            self.exact_nll += -(ref_logprob.double() * real).sum()
            self.referenced += real.sum()
        self.tokens += real.sum()

    def compute(self) -> dict[str, Tensor]:
        n = self.tokens.clamp_min(1)
        ce, exact = self.model_nll / n, self.exact_nll / n
        if self.referenced == 0:  # no exact reference: the model's cross-entropy alone
            return {"ce": ce}
        return {"ce": ce, "ce_exact": exact, "ce_gap": ce - exact}


class BracketClosingAccuracy(Metric):
    """The bracket-closing metric of Hewitt et al. 2020 (appendix H.4) and its side constraints.

    At each observed close bracket, ``p(⟩_j | ⟩) = p(⟩_j) / Σ_i p(⟩_i)`` (eq. H.4) for the observed
    ``⟩_j`` counts as *confident* when it exceeds ``threshold`` (0.8).  ``p_ℓ`` is the rate of
    confident closes among closes ``ℓ`` tokens after their open bracket; the metric is
    ``mean_ℓ p_ℓ`` over the distances seen (each distance weighted equally).  Side constraints
    (docs/references.md), each the fraction of positions where the mass is below ``side_threshold``
    (0.2): close mass on an empty stack, open mass on a full stack, ``END`` mass on a non-empty
    stack.

    Ids follow memrnn's bracket layout: opens ``0..k-1``, closes ``k..2k-1``, ``END = 2k``.
    ``update(logits [B, T, V], target [B, T], distance [B, T], depth [B, T], full [B, T])``:
    ``distance`` is ``t − (position of the matching open)`` at close brackets and 0 elsewhere;
    ``depth`` the stack depth before token ``t`` (−1 at padding); ``full`` whether the stack is at
    its bound.  States are per-distance counts reduced by summation: exact under DDP.
    """

    full_state_update = False

    def __init__(self, bracket_types: int, threshold: float = 0.8, side_threshold: float = 0.2,
                 max_distance: int = 4096, **kwargs) -> None:  # fmt: skip
        super().__init__(**kwargs)
        positive_int("bracket_types", bracket_types)
        self.k, self.threshold, self.side_threshold, self.max_distance = (
            bracket_types,
            threshold,
            side_threshold,
            max_distance,
        )
        self.add_state("confident", torch.zeros(max_distance + 1, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("closes", torch.zeros(max_distance + 1, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state(
            "side", torch.zeros(3, 2, dtype=torch.float64), dist_reduce_fx="sum"
        )  # [constraint, (ok, n)]

    def update(self, logits: Tensor, target: Tensor, distance: Tensor, depth: Tensor, full: Tensor) -> None:
        k = self.k
        if logits.shape[-1] != 2 * k + 1:
            raise ValueError(f"logits have {logits.shape[-1]} classes; Dyck with k={k} needs {2 * k + 1}")
        p = logits.double().softmax(-1)
        close_mass = p[..., k : 2 * k].sum(-1)
        at_close = distance > 0
        if at_close.any():
            tgt = (target[at_close] - k).clamp(0, k - 1)
            correct = p[at_close][:, k : 2 * k].gather(1, tgt[:, None])[:, 0] / close_mass[at_close]
            d = distance[at_close].clamp(max=self.max_distance)
            self.confident += torch.bincount(
                d, weights=(correct > self.threshold).double(), minlength=self.max_distance + 1
            )
            self.closes += torch.bincount(d, minlength=self.max_distance + 1).double()
        real = depth >= 0
        for i, (where, mass) in enumerate(
            (
                (real & (depth == 0), close_mass),
                (real & full, p[..., :k].sum(-1)),
                (real & (depth > 0), p[..., 2 * k]),
            )
        ):
            self.side[i, 0] += ((mass < self.side_threshold) & where).sum()
            self.side[i, 1] += where.sum()

    def compute(self) -> dict[str, Tensor]:
        seen = self.closes > 0
        rates = self.confident[seen] / self.closes[seen]
        closing = rates.mean() if seen.any() else torch.tensor(float("nan"), dtype=torch.float64)
        side = self.side[:, 0] / self.side[:, 1].clamp_min(1)
        return {
            "closing": closing,
            "closing_error": 1 - closing,
            "close_on_empty_ok": side[0],
            "open_on_full_ok": side[1],
            "end_on_nonempty_ok": side[2],
        }


class NextSetAccuracy(Metric):
    """Exact next-allowed-set accuracy (Suzgun et al. 2019): the predicted set is
    ``{i : sigmoid(logit_i) > 0.5}``; a position is correct when it equals the allowed set, a
    sequence when all its positions are.  ``update(logits [B, T, V], next_set [B, T, V] bool,
    mask [B, T])``; ``compute()`` gives ``{"token", "sequence"}``.  Sum-reduced: exact under DDP."""

    full_state_update = False

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        for name in ("tokens_ok", "tokens", "seqs_ok", "seqs"):
            self.add_state(name, torch.zeros((), dtype=torch.float64), dist_reduce_fx="sum")

    def update(self, logits: Tensor, next_set: Tensor, mask: Tensor) -> None:
        ok = ((logits > 0) == next_set.bool()).all(-1) | ~mask
        self.tokens_ok += (ok & mask).sum()
        self.tokens += mask.sum()
        rows = mask.any(-1)
        self.seqs_ok += (ok.all(-1) & rows).sum()
        self.seqs += rows.sum()

    def compute(self) -> dict[str, Tensor]:
        return {
            "token": self.tokens_ok / self.tokens.clamp_min(1),
            "sequence": self.seqs_ok / self.seqs.clamp_min(1),
        }


class AcceptorAccuracy(Metric):
    """Binary acceptance accuracy at each sequence's own end (``logits [B, T]`` gathered at
    ``lengths − 1``, never the padded end) and per prefix (all real positions).
    ``update(logits [B, T], prefix_label [B, T] | None, label [B], mask [B, T], lengths [B])``;
    ``compute()`` gives ``{"end", "prefix"}``, ``"prefix"`` only when some batch had prefix
    labels (a recognizer benchmark labels whole strings only)."""

    full_state_update = False

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        for name in ("end_ok", "ends", "prefix_ok", "prefixes"):
            self.add_state(name, torch.zeros((), dtype=torch.float64), dist_reduce_fx="sum")

    def update(
        self, logits: Tensor, prefix_label: Tensor | None, label: Tensor, mask: Tensor, lengths: Tensor
    ) -> None:
        last = logits.gather(1, (lengths - 1).clamp_min(0)[:, None])[:, 0]
        self.end_ok += ((last > 0) == label.bool()).sum()
        self.ends += label.numel()
        if prefix_label is not None:
            self.prefix_ok += (((logits > 0) == prefix_label.bool()) & mask).sum()
            self.prefixes += mask.sum()

    def compute(self) -> dict[str, Tensor]:
        out = {"end": self.end_ok / self.ends.clamp_min(1)}
        if self.prefixes > 0:
            out["prefix"] = self.prefix_ok / self.prefixes
        return out


class PerLengthStats(Metric):
    """Sums of per-string statistics bucketed by string length, for length-generalization
    curves out of one evaluation run.  ``update(stats [B, S], lengths [B])`` adds each row to
    its length's bucket (lengths above ``max_length`` go to the last bucket); ``compute()``
    returns the ``[max_length + 1, S]`` float64 sums and ``[max_length + 1]`` string counts.
    Sum-reduced: exact under DDP."""

    full_state_update = False

    def __init__(self, names: tuple[str, ...], max_length: int = 1024, **kwargs) -> None:
        super().__init__(**kwargs)
        self.names, self.max_length = tuple(names), max_length
        self.add_state(
            "sums", torch.zeros(max_length + 1, len(self.names), dtype=torch.float64), dist_reduce_fx="sum"
        )
        self.add_state("counts", torch.zeros(max_length + 1, dtype=torch.float64), dist_reduce_fx="sum")

    def update(self, stats: Tensor, lengths: Tensor) -> None:
        if stats.shape != (lengths.shape[0], len(self.names)):
            raise ValueError(
                f"stats must be [B, {len(self.names)}] for {self.names}, got {tuple(stats.shape)}"
            )
        idx = lengths.clamp(max=self.max_length).to(self.sums.device)
        self.sums.index_add_(0, idx, stats.double())
        self.counts.index_add_(0, idx, torch.ones_like(idx, dtype=torch.float64))

    def compute(self) -> tuple[Tensor, Tensor]:
        return self.sums, self.counts
