"""The neural DeQue of Grefenstette et al. (2015, section 3.3) as one batched step with no loop
over elements: both pops and both readings are cumulative sums over the strengths
(:mod:`memrnn.ops.deque.reference` is the literal version it is tested against).

Layout: ``2 · capacity`` slots, **bottom first**: the first half holds the elements pushed at the
bottom, newest first (slot 0 is the bottom), the second half those pushed at the top, oldest first
(the last slot is the top).  Each step shifts each half outward by one slot and writes the new
elements at the two ends, so the slots between the oldest elements stay empty (strength 0, in no
sum) until the halves are full.  After more than ``capacity`` steps the oldest element of each half
leaves the window; the step reports their strength (``overflow [B]``), which is 0 exactly when the
window still equals the paper's unbounded DeQue (with ``capacity ≥ T`` it always does).
"""

from __future__ import annotations

import torch
from torch import Tensor

from memrnn.ops.deque.reference import deque_reference
from memrnn.ops.stratification import covered


def deque_step(
    values: Tensor,
    strengths: Tensor,
    pops: Tensor,
    pushes: Tensor,
    value_top: Tensor,
    value_bot: Tensor,
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """One step of Grefenstette et al.'s (2015) DeQue (section 3.3).

    Args:
        values: ``[B, 2C, m]``, strengths ``[B, 2C]``: the DeQue, bottom first (module docstring).
        pops: ``(u_top, u_bot)`` ``[B, 2]``; pushes: ``(d_top, d_bot)`` ``[B, 2]``.
        value_top, value_bot: ``[B, m]``, pushed after the pops.

    Returns:
        ``(values [B, 2C, m], strengths [B, 2C], r_top [B, m], r_bot [B, m], overflow [B])``.
    """
    C = strengths.shape[1] // 2
    # in bottom-first order the elements above i are after it: a queue's covered sums from the
    # top's side, a stack's from the bottom's (memrnn.ops.stratification.covered, newest first)
    s = torch.clamp_min(strengths - torch.clamp_min(pops[:, :1] - covered(strengths, "queue"), 0), 0)
    s = torch.clamp_min(s - torch.clamp_min(pops[:, 1:] - covered(s, "stack"), 0), 0)
    overflow = s[:, C - 1] + s[:, C]
    strengths = torch.cat([pushes[:, 1:], s[:, : C - 1], s[:, C + 1 :], pushes[:, :1]], 1)
    values = torch.cat([value_bot[:, None], values[:, : C - 1], values[:, C + 1 :], value_top[:, None]], 1)
    w_top = torch.minimum(strengths, torch.clamp_min(1 - covered(strengths, "queue"), 0))
    w_bot = torch.minimum(strengths, torch.clamp_min(1 - covered(strengths, "stack"), 0))
    r_top = torch.einsum("bc,bcm->bm", w_top, values)
    r_bot = torch.einsum("bc,bcm->bm", w_bot, values)
    return values, strengths, r_top, r_bot, overflow


__all__ = ["deque_reference", "deque_step"]
