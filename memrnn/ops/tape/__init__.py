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


def tape_jump_step(tape: Tensor, actions: Tensor, written: Tensor, jumps: Tensor) -> Tensor:
    """:func:`tape_step` with the two jumps of Delétang et al.'s Tape-RNN: ``actions [B, 5]``
    (stay, left, right, jump left, jump right), ``jumps [B]`` each row's jump in cells (its input
    length; rounded to the nearest whole number, any dtype; not differentiable).  A jump by ``L`` is one gather with indices ``(i ± L) mod M``."""
    W = torch.cat([written[:, None], tape[:, 1:]], 1)
    B, M, m = W.shape
    stay, left, right, jump_left, jump_right = (a[:, None, None] for a in actions.unbind(-1))
    i = torch.arange(M, device=W.device)
    L = torch.round(jumps.detach()).to(torch.long)[:, None]

    def shifted(by: Tensor) -> Tensor:
        return W.gather(1, ((i + by) % M)[..., None].expand(B, M, m))

    return (
        stay * W
        + left * torch.roll(W, -1, 1)
        + right * torch.roll(W, 1, 1)
        + jump_left * shifted(L)
        + jump_right * shifted(-L)
    )


__all__ = ["tape_jump_step", "tape_reference", "tape_step"]
