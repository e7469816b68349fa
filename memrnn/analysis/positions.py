"""Accuracy by output position: which outputs of a transduction (Delétang et al. 2023's tasks,
:mod:`memrnn.languages.chomsky`) a model gets right.

The paper's score averages the per-token accuracy over every output of every test length, which
hides *where* a model fails.  By output position it shows, e.g., what a stack of bounded depth
does to a reversal: output ``j`` (0-based) of the reverse of ``n`` symbols is input ``n - 1 - j``,
pushed ``j`` pushes before the last, so a stack of ``D`` cells holding one symbol each keeps
outputs ``j < D`` and must guess the rest (``scripts/chomsky_positions.py``).
"""

from __future__ import annotations

import torch
from torch import Tensor

from memrnn.data.datamodule import IGNORE_INDEX


def output_position_accuracy(
    prediction: Tensor, target: Tensor, output_start: Tensor
) -> tuple[Tensor, Tensor]:
    """``(accuracy [L], count [L])`` over a batch, by output position ``j = t - output_start[b]``.

    Args:
        prediction: predicted classes ``[B, T]`` (e.g. ``logits.argmax(-1)``).
        target: target classes ``[B, T]``, ``IGNORE_INDEX`` (-100) where a position is not scored.
        output_start: ``[B]``, each row's first output step (the input length ``n`` for a
            transduction read after its input; 0 for an aligned task).

    ``L`` is the largest ``T - output_start[b]``; ``count[j]`` is how many rows score position
    ``j`` and ``accuracy[j]`` the fraction of them predicted right (NaN where ``count`` is 0).
    """
    if prediction.shape != target.shape or prediction.dim() != 2:
        raise ValueError(
            f"prediction and target must both be [B, T], got {tuple(prediction.shape)} and {tuple(target.shape)}"
        )
    B, T = target.shape
    if output_start.shape != (B,):
        raise ValueError(f"output_start must be [B] = [{B}], got {tuple(output_start.shape)}")
    start = output_start.to(device=target.device, dtype=torch.long)
    if bool(((start < 0) | (start > T)).any()):
        bad = start[(start < 0) | (start > T)][0]
        raise ValueError(f"output_start {int(bad)} lies outside the {T} steps")
    j = torch.arange(T, device=target.device)[None, :] - start[:, None]
    scored = (target != IGNORE_INDEX) & (j >= 0)
    L = int((T - start).max()) if B else 0
    idx = j[scored]
    count = torch.zeros(L, dtype=torch.long, device=target.device).index_add_(0, idx, torch.ones_like(idx))
    right = (prediction == target)[scored].to(torch.long)
    correct = torch.zeros(L, dtype=torch.long, device=target.device).index_add_(0, idx, right)
    accuracy = torch.where(
        count > 0, correct / count.clamp(min=1), torch.full((L,), float("nan"), device=target.device)
    )
    return accuracy, count
