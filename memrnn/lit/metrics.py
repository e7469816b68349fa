"""torchmetrics metrics for language models of formal languages."""

from __future__ import annotations

from typing import Literal

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


ClosingPositions = Literal["code", "paper"]


class BracketClosingAccuracy(Metric):
    """The bracket-closing metric of Hewitt et al. 2020 (appendix H.4) and its side constraints.

    At a scored position, ``p(⟩_j | ⟩) = p(⟩_j) / Σ_i p(⟩_i)`` (eq. H.4) for the close bracket
    ``⟩_j`` of the open bracket on top of the stack counts as *confident* when it exceeds
    ``threshold`` (0.8).  ``p_ℓ`` is the rate of confident positions at distance ``ℓ``; the metric
    is ``mean_ℓ p_ℓ`` over the distances seen (each distance weighted equally), as the authors'
    ``report_results_dict`` and ``make_emnlp2020_plot.py`` aggregate it.  Which positions are
    scored and what ``ℓ`` is (``positions``):

    - ``"code"`` (default; what made the paper's Figure 3): the authors' code
      (``john-hewitt/dyckkm-learning``, ``rnns-stacks/reporter.py``, ``get_dyck_eval_dict``) scores
      **every** position whose stack is non-empty, whatever the next token is, against the top of
      the stack, with ``ℓ`` = the current input position minus the input position of the top
      open bracket (0 right after reading an open; inputs are ``BOS`` then the string, so the
      open at target position ``s`` is input ``s + 1``).  The scored distribution is the one
      after the current input, predicting the next token (``logits[:, t]``), as theirs.
    - ``"paper"``: the paper's text (H.4, "for each observed close bracket"): observed close
      brackets only, with ``ℓ`` = the close's position minus its open's (``distance``).

    Side constraints (docs/references.md; ``reporter.py``'s ``eval_can_*`` functions), each the
    fraction of positions where the mass is below ``side_threshold`` (0.2): close mass on an empty
    stack, open mass on a full stack, ``END`` mass on a non-empty stack; the same for both
    ``positions``.

    Ids follow memrnn's bracket layout (``DyckKM``, ``DyckN``): opens ``0..k-1``, closes
    ``k..2k-1``, ``END = 2k``.
    ``update(logits [B, T, V], target [B, T], distance [B, T], depth [B, T], full [B, T])``:
    ``target`` holds the next tokens (the string, ``END`` last; ``-100`` at padding);
    ``distance`` is ``t − (position of the matching open)`` at close brackets and 0 elsewhere
    (read by ``"paper"`` only: ``"code"`` rebuilds each row's stack from ``target``, so its rows
    must be whole Dyck strings from their start, padded at the end); ``depth`` the stack depth
    before token ``t`` (−1 at padding); ``full`` whether the stack is at its bound.  States are
    per-distance counts reduced by summation: exact under DDP.
    """

    full_state_update = False

    def __init__(self, bracket_types: int, threshold: float = 0.8, side_threshold: float = 0.2,
                 max_distance: int = 4096, positions: ClosingPositions = "code", **kwargs) -> None:  # fmt: skip
        super().__init__(**kwargs)
        positive_int("bracket_types", bracket_types)
        if positions not in ("code", "paper"):
            raise ValueError(
                f"positions must be 'code' (Hewitt et al.'s reporter.py: every position with a non-empty "
                f"stack) or 'paper' (H.4: observed close brackets), got {positions!r}"
            )
        self.k, self.threshold, self.side_threshold, self.max_distance = (
            bracket_types,
            threshold,
            side_threshold,
            max_distance,
        )
        self.positions = positions
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
        if self.positions == "code":
            d, correct = self._stack_tops(p, close_mass, target)
        else:
            at_close = distance > 0
            tgt = (target[at_close] - k).clamp(0, k - 1)
            correct = p[at_close][:, k : 2 * k].gather(1, tgt[:, None])[:, 0] / close_mass[at_close]
            d = distance[at_close]
        if d.numel():
            d = d.clamp(max=self.max_distance)
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

    def _stack_tops(self, p: Tensor, close_mass: Tensor, target: Tensor) -> tuple[Tensor, Tensor]:
        """``positions="code"``: each row's stack rebuilt from ``target [B, T]``; returns, for
        every real position ``t`` with a non-empty stack (``[N]`` each, row-major), the distance
        ``t − (input position of the top open)`` and ``p(close of the top) / Σ p(close)``
        (``p [B, T, V]``, ``close_mass [B, T]``).  The top at ``t`` is the last open before
        ``t`` that brought the depth to the current depth: found by one sort and one
        ``searchsorted`` over keys ``(row, depth, position)``, no loop over positions."""
        k, (rows, steps) = self.k, target.shape
        real = target != IGNORE_INDEX
        opens = real & (target >= 0) & (target < k)
        closes = real & (target >= k) & (target < 2 * k)
        step = opens.long() - closes.long()
        after = step.cumsum(1)  # depth after token t
        before = after - step  # depth before token t: the stack the logits at t see
        span = steps + 1
        row = torch.arange(rows, device=target.device)[:, None].expand(rows, steps)
        pos = torch.arange(steps, device=target.device)[None, :].expand(rows, steps)
        # ids outside the layout, or a close on an empty stack (the depth goes negative)
        invalid = (real & ~(opens | closes | (target == 2 * k))) | (closes & (before <= 0))
        keys, order = ((row * span + after.clamp(0, steps)) * span + pos)[opens].sort()
        open_type = target[opens][order]
        scored = real & (before > 0)  # before > 0 needs an open earlier: keys is non-empty
        query = ((row * span + before.clamp(0, steps)) * span + pos)[scored]
        top = (torch.searchsorted(keys, query) - 1).clamp_min(0)
        top_type = open_type[top]
        # the top is in the same row at the same depth, and an observed close closes it (else
        # the rows are no Dyck strings)
        found = keys[top] // span == query // span
        invalid[scored] |= ~found | (closes[scored] & (target[scored] - k != top_type))
        if bool(invalid.any()):
            b, t = (int(i) for i in invalid.nonzero()[0])
            raise ValueError(
                f"BracketClosingAccuracy(positions='code'): target id {int(target[b, t])} at row {b}, "
                f"position {t} does not continue a Dyck string with k={k} (opens 0..{k - 1}, closes "
                f"{k}..{2 * k - 1}, END {2 * k}): the code's positions rebuild each row's stack from "
                "its targets, which must be whole strings from their start; for targets at close "
                "positions only, use positions='paper'"
            )
        top_pos = keys[top] % span
        distance = pos[scored] - (top_pos + 1)
        flat = (row[scored] * steps + pos[scored]) * p.shape[-1] + k + top_type
        correct = p.reshape(-1)[flat] / close_mass[scored]
        return distance, correct

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


def length_curves_from(metric: PerLengthStats) -> dict[str, list[float]]:
    """The per-length curves (:meth:`memrnn.lit.SequenceModule.length_curves`) of an evaluation's ``PerLengthStats``,
    which is then reset."""
    sums, counts = (t.cpu() for t in metric.compute())
    metric.reset()
    seen = torch.nonzero(counts).flatten()
    col = {n: sums[seen, i] for i, n in enumerate(metric.names)}
    out: dict[str, list[float]] = {"length": seen.tolist(), "count": counts[seen].tolist()}
    if "nll" in col:
        tokens = col["tokens"].clamp_min(1)
        out["ce"] = (col["nll"] / tokens).tolist()
        if not col["nll_exact"].isnan().any():
            out["ce_gap"] = ((col["nll"] - col["nll_exact"]) / tokens).tolist()
        out["acc"] = (col["correct"] / tokens).tolist()
    if "next_set_ok" in col:
        out["next_set_sequence"] = (col["next_set_ok"] / col["next_set_rows"].clamp_min(1)).tolist()
    if "accept_ok" in col:
        out["accept_end"] = (col["accept_ok"] / counts[seen]).tolist()
    return out
