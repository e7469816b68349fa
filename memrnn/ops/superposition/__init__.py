"""The superposition stack (Joulin & Mikolov 2015, section 3.1) of bounded depth: one step for
the whole batch, no loop over depth (:mod:`memrnn.ops.superposition.reference` is the literal
version it is tested against).

The stack holds ``depth`` cells ``[B, depth, m]``, top first; every deeper cell of the paper's
unbounded stack is the zero vector (the empty stack) as long as nothing was pushed past the
window.  A push moves cell ``depth − 1`` out of the window: the step reports the mass it drops,
``overflow = push · max|s[depth−1]|`` ``[B]``, which is 0 exactly when the window still equals
the unbounded stack (with ``depth ≥ T`` it always does).
"""

from __future__ import annotations

import torch
from torch import Tensor

from memrnn.ops.superposition.reference import superposition_reference


def superposition_step(stack: Tensor, actions: Tensor, pushed: Tensor) -> tuple[Tensor, Tensor]:
    """One step of Joulin & Mikolov's (2015) equations 5–6 on a window of ``depth`` cells.

    Args:
        stack: ``[B, depth, m]``, top first.
        actions: ``[B, 3]``: push, pop, no-op (a distribution per row).
        pushed: ``[B, m]``: the vector a push writes on top.

    Returns:
        ``(new stack [B, depth, m], overflow [B])``: the mass a push moved out of the window.
    """
    push, pop, noop = (a[:, None, None] for a in actions.unbind(-1))
    down = torch.cat([pushed[:, None], stack[:, :-1]], 1)  # after a push: v on top, the rest one lower
    up = torch.cat([stack[:, 1:], torch.zeros_like(stack[:, :1])], 1)  # after a pop: the empty cell enters
    new = push * down + pop * up + noop * stack
    overflow = actions[:, 0] * stack[:, -1].abs().amax(-1)
    return new, overflow


__all__ = ["superposition_reference", "superposition_step"]
