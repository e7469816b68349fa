"""The stratification stack and the neural queue (Grefenstette et al. 2015) as one batched step
with no loop over elements: the pop and the reading are cumulative sums over the strengths
(:mod:`memrnn.ops.stratification.reference` is the literal version it is tested against).

Layout: ``capacity`` elements, **newest first** (index 0 is the element pushed last), values
``[B, C, m]`` and strengths ``[B, C]``; empty slots have strength 0 and so take part in no sum.
The paper's sums over the elements pushed after ``i`` (stack) or before ``i`` (queue) are then
exclusive prefix (stack) or suffix (queue) sums.  Each step pushes one element, so after more
than ``capacity`` steps the oldest element leaves the window; the step reports its strength
(``overflow [B]``), which is 0 exactly when the window still equals the paper's unbounded
structure (with ``capacity ≥ T`` it always does).
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

from memrnn.ops.stratification.reference import stratification_reference


def _suffix(x: Tensor, dim: int) -> Tensor:
    """Inclusive suffix sums along ``dim``."""
    return torch.flip(torch.cumsum(torch.flip(x, (dim,)), dim), (dim,))


def covered(s: Tensor, kind: str, dim: int = -1) -> Tensor:
    """For each element along ``dim`` (newest first), the total strength of the elements that are
    popped and read before it: newer ones for a stack (exclusive prefix sum), older ones for a
    queue (exclusive suffix sum).  Each is a running sum in its own direction, never ``total −
    prefix``, so the first element of a stack and the last of a queue are covered by exactly 0."""
    return (torch.cumsum(s, dim) if kind == "stack" else _suffix(s, dim)) - s


def covered_transpose(g: Tensor, kind: str, dim: int = -1) -> Tensor:
    """The transpose of :func:`covered` (a linear map along ``dim``) applied to ``g``: what a
    gradient ``g`` of the covered sums gives the strengths."""
    return (_suffix(g, dim) if kind == "stack" else torch.cumsum(g, dim)) - g


def stratification_step(
    values: Tensor,
    strengths: Tensor,
    pop: Tensor,
    push: Tensor,
    value: Tensor,
    kind: Literal["stack", "queue"] = "stack",
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """One step of Grefenstette et al.'s (2015) equations 1–3 (stack) or their queue.

    Args:
        values: ``[B, C, m]``, strengths ``[B, C]``: the structure, newest first.
        pop, push: ``u``, ``d`` ``[B]``.
        value: ``v`` ``[B, m]``, pushed with strength ``d`` after the pop.

    Returns:
        ``(values [B, C, m], strengths [B, C], reading [B, m], overflow [B])``.
    """
    popped = torch.clamp_min(strengths - torch.clamp_min(pop[:, None] - covered(strengths, kind), 0), 0)
    overflow = popped[:, -1]
    strengths = torch.cat([push[:, None], popped[:, :-1]], 1)
    values = torch.cat([value[:, None], values[:, :-1]], 1)
    weight = torch.minimum(strengths, torch.clamp_min(1 - covered(strengths, kind), 0))
    reading = torch.einsum("bc,bcm->bm", weight, values)
    return values, strengths, reading, overflow


__all__ = ["covered", "covered_transpose", "stratification_reference", "stratification_step"]
