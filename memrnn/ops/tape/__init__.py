"""The tape of Delétang et al.'s (2023) Tape-RNN as one batched step: O(M) shifts of ``M`` cells
(two rolls), never the ``M × M`` shift matrices of the paper's implementation
(:mod:`memrnn.ops.tape.reference` is the literal version it is tested against).  The tape is
circular: nothing leaves it, so there is no overflow."""

from __future__ import annotations

import torch
from torch import Tensor

from memrnn.ops.tape.reference import tape_reference


def tape_step(tape: Tensor, actions: Tensor, written: Tensor) -> Tensor:
    """Write ``written [B, m]`` into the head's cell of ``tape [B, M, m]`` (head first), then move
    by ``actions [B, 3]`` (stay, left, right); returns the new tape ``[B, M, m]``."""
    W = torch.cat([written[:, None], tape[:, 1:]], 1)
    stay, left, right = (a[:, None, None] for a in actions.unbind(-1))
    return stay * W + left * torch.roll(W, -1, 1) + right * torch.roll(W, 1, 1)


__all__ = ["tape_reference", "tape_step"]
