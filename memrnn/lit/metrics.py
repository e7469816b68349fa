"""torchmetrics metrics for language models of formal languages."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor
from torchmetrics import Metric

from memrnn.data.datamodule import IGNORE_INDEX


class CrossEntropyGap(Metric):
    """Model cross-entropy per token, the exact cross-entropy of the generating distribution on
    the same tokens, and their difference, in nats.

    ``update(logits [B, T, V], target [B, T], ref_logprob [B, T])``: ``target`` holds
    ``-100`` at padding; ``ref_logprob`` is the exact ``log p(w_t | w_<t)`` of the distribution
    the data were drawn from (``memrnn.languages``).  Sums are kept in float64 and reduced by
    summation, so the result is exact under DDP.  ``compute()`` returns
    ``{"ce", "ce_exact", "ce_gap"}``; ``ce_gap >= 0`` in expectation, since the generating
    distribution is the Bayes-optimal predictor.
    """

    full_state_update = False

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.add_state("model_nll", torch.zeros((), dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("exact_nll", torch.zeros((), dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("tokens", torch.zeros((), dtype=torch.float64), dist_reduce_fx="sum")

    def update(self, logits: Tensor, target: Tensor, ref_logprob: Tensor) -> None:
        real = target != IGNORE_INDEX
        nll = F.cross_entropy(logits.flatten(0, 1).double(), target.flatten(), reduction="none")
        self.model_nll += nll.sum()
        self.exact_nll += -(ref_logprob.double() * real).sum()
        self.tokens += real.sum()

    def compute(self) -> dict[str, Tensor]:
        n = self.tokens.clamp_min(1)
        ce, exact = self.model_nll / n, self.exact_nll / n
        return {"ce": ce, "ce_exact": exact, "ce_gap": ce - exact}
