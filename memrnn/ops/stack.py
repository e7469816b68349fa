"""The differentiable stack of Stogin, Mali & Giles 2020: the operator π(p+, p−, C) of
Definition 3.2, its idealized form π̄ of Definition B.5, and the stack reading R of
Definitions 3.4 / B.6.  Pure tensor functions, batched and vectorized over depth.

Representation
--------------
The paper's stack ``K = (K_0, K_1, ...)`` is infinite (Definition 3.1): ``K_i ∈ [0, 1]^{m2}``,
top first.  Because ``h_H(−1/2) > 0``, every cell of ``π K``, even below the stack's content,
is non-zero after one step, so the stack is never finitely supported.  It *is* finitely
representable: a cell ``i`` with ``i ≥ s_0 + t`` (``s_0`` the initial size) has had the same
three neighbours as every deeper cell at every step, so all those cells hold one common
value.  memrnn stores

* ``stack [B, D, m2]``: the cells ``K_0 .. K_{D−1}`` (``D`` = ``depth``, a constructor
  argument of the layers), and
* ``tail [B, m2]``: the common value of every cell ``K_i``, ``i ≥ D`` (0 at the start).

A pop moves ``tail`` into cell ``D − 1``; ``tail`` itself evolves as
``h_H(p+·tail + p−·tail + (1 − p+ − p−)·tail − 1/2) = h_H(tail − 1/2)``.  This is exactly the
paper's infinite stack as long as no push shifts a cell that differs from ``tail`` out of the
window, which holds whenever ``D ≥ s_0 + T`` for ``T`` steps.  With a smaller ``D`` a push
drops cell ``D − 1``: when that cell held a symbol (``‖K_{D−1}‖∞ > 1/2``) and the push is real
(``p+ > 1/2``), the idealized stack has overflowed; :func:`stack_overflow` reports it, and the
layers' ``strict=True`` turns it into an error.

Every function has a slow ``*_reference`` transcription (Python loops over cells and
components, exactly as the paper writes them) used by the tests.
"""

from __future__ import annotations

import torch
from torch import Tensor


def h_sigmoid(x: Tensor, sensitivity: Tensor | float) -> Tensor:
    """``h_H(x) = 1 / (1 + exp(−H x))`` (Stogin et al. 2020 section 3), elementwise."""
    return torch.sigmoid(sensitivity * x)


def stack_reading(top: Tensor) -> Tensor:
    """The stack reading ``R`` of Definition 3.4 (and B.6 for ideal stacks).

    Args:
        top: ``K_0`` ``[..., m2]``.

    Returns:
        ``R [..., m2 + 1]``: ``R_i = (K_0)_i`` for ``i < m2`` and ``R_{m2} = 1 − ‖K_0‖∞`` (the
        "empty" component).  ``‖·‖∞`` is the max of the components, which lie in ``[0, 1]``.
    """
    return torch.cat([top, 1 - top.amax(-1, keepdim=True)], -1)


def _check_stack_args(stack: Tensor, tail: Tensor, p_push: Tensor, p_pop: Tensor, push: Tensor) -> None:
    if stack.dim() != 3:
        raise ValueError(f"stack must be [batch, depth, m2], got shape {tuple(stack.shape)}")
    b, d, m = stack.shape
    if d < 1:
        raise ValueError("the stack needs depth >= 1")
    for name, t, shape in (
        ("tail", tail, (b, m)),
        ("p_push", p_push, (b,)),
        ("p_pop", p_pop, (b,)),
        ("push_vector", push, (b, m)),
    ):
        if tuple(t.shape) != shape:
            raise ValueError(
                f"{name} must have shape {shape} for a stack {tuple(stack.shape)}, got {tuple(t.shape)}"
            )


def stack_op(
    stack: Tensor,
    tail: Tensor,
    p_push: Tensor,
    p_pop: Tensor,
    push_vector: Tensor,
    sensitivity: Tensor | float,
) -> tuple[Tensor, Tensor]:
    """``K ↦ π(p+, p−, C) K`` (Stogin et al. 2020 Definition 3.2), vectorized over batch and depth.

    ``(πK)_i = h_H(p+ K_{i−1} + p− K_{i+1} + (1 − p+ − p−) K_i − 1/2)`` for ``i ≥ 1``, and the
    top ``(πK)_0`` uses ``C`` in place of ``K_{−1}``.

    Args:
        stack: ``K_0 .. K_{D−1}`` ``[B, D, m2]`` (top first).
        tail: the value of every deeper cell ``[B, m2]`` (module docstring).
        p_push, p_pop: ``p+``, ``p−`` ``[B]``.
        push_vector: ``C`` ``[B, m2]``.
        sensitivity: ``H`` (a float or a 0-d tensor).

    Returns:
        ``(stack [B, D, m2], tail [B, m2])`` after the operation.
    """
    _check_stack_args(stack, tail, p_push, p_pop, push_vector)
    above = torch.cat([push_vector[:, None], stack[:, :-1]], 1)  # K_{i−1}, with C above the top
    below = torch.cat([stack[:, 1:], tail[:, None]], 1)  # K_{i+1}, the tail below the window
    pp, pm = p_push[:, None, None], p_pop[:, None, None]
    mixed = pp * above + pm * below + (1 - pp - pm) * stack
    return h_sigmoid(mixed - 0.5, sensitivity), h_sigmoid(tail - 0.5, sensitivity)


def stack_op_reference(
    stack: Tensor,
    tail: Tensor,
    p_push: Tensor,
    p_pop: Tensor,
    push_vector: Tensor,
    sensitivity: float,
) -> tuple[Tensor, Tensor]:
    """Definition 3.2 transcribed literally, one row, cell and component at a time (slow);
    the tail stands for every cell ``K_D, K_{D+1}, ...``."""

    def h(x: Tensor) -> Tensor:
        return 1 / (1 + torch.exp(-sensitivity * x))

    b_size, depth, m2 = stack.shape
    rows, tails = [], []
    for b in range(b_size):
        p, q = p_push[b], p_pop[b]
        cells = [stack[b, i] for i in range(depth)] + [tail[b]]
        new_cells = []
        for i in range(depth):
            up = push_vector[b] if i == 0 else cells[i - 1]
            down = cells[i + 1]
            new_cells.append(
                torch.stack([h(p * up[j] + q * down[j] + (1 - p - q) * cells[i][j] - 0.5) for j in range(m2)])
            )
        rows.append(torch.stack(new_cells))
        t = tail[b]
        tails.append(torch.stack([h(p * t[j] + q * t[j] + (1 - p - q) * t[j] - 0.5) for j in range(m2)]))
    return torch.stack(rows), torch.stack(tails)


def long_stack_op_reference(
    cells: list[Tensor], p_push: float, p_pop: float, push_vector: Tensor, sensitivity: float
) -> list[Tensor]:
    """Definition 3.2 on a plain list of ``N`` cells of one example, with ``K_N = 0`` below it
    (no tail).  The influence of that artificial bottom rises one cell per step, so after ``T``
    steps from a stack that was zero below cell ``s_0`` the first ``N − T`` cells are exactly
    the paper's infinite stack: an independent check of the window-plus-tail representation."""
    zero = torch.zeros_like(push_vector)
    ext = [*cells, zero]
    out = []
    for i in range(len(cells)):
        up = push_vector if i == 0 else ext[i - 1]
        mixed = p_push * up + p_pop * ext[i + 1] + (1 - p_push - p_pop) * ext[i]
        out.append(1 / (1 + torch.exp(-sensitivity * (mixed - 0.5))))
    return out


def ideal_stack_op(stack: Tensor, p_push: Tensor, p_pop: Tensor, push_vector: Tensor) -> Tensor:
    """``K̄ ↦ π̄(p̄+, p̄−, C̄) K̄`` (Stogin et al. 2020 Definition B.5): the same linear combination as
    Definition 3.2 without ``h_H`` and the ``− 1/2``; for ``(p̄+, p̄−) ∈ {(1,0), (0,1), (0,0)}``
    and one-hot ``C̄`` it is exactly push(C̄), pop and the identity on one-hot stacks.

    Args:
        stack: ``[B, D, m2]`` one-hot cells (zero below the content); the cell below the window
            reads as empty.
        p_push, p_pop: ``[B]``; push_vector: ``[B, m2]``.

    Returns:
        ``[B, D, m2]``.  A push onto a full window drops the bottom cell (check
        :func:`stack_overflow` first).
    """
    _check_stack_args(stack, stack[:, 0], p_push, p_pop, push_vector)
    above = torch.cat([push_vector[:, None], stack[:, :-1]], 1)
    below = torch.cat([stack[:, 1:], torch.zeros_like(stack[:, :1])], 1)
    pp, pm = p_push[:, None, None], p_pop[:, None, None]
    return pp * above + pm * below + (1 - pp - pm) * stack


def stack_overflow(stack: Tensor, p_push: Tensor) -> Tensor:
    """``[B]`` bool: this operation pushes (``p+ > 1/2``) while the window's bottom cell holds a
    symbol (``‖K_{D−1}‖∞ > 1/2``), so the idealized stack it tracks would need more than
    ``D`` cells and its bottom symbol is lost."""
    return (p_push > 0.5) & (stack[:, -1].amax(-1) > 0.5)


def action_codes(p_push: Tensor, p_pop: Tensor, threshold: float = 0.5) -> Tensor:
    """The quantized stack action of ``(p+, p−)`` (any shape): 1 push (``p+ > threshold`` and
    ``p+ ≥ p−``), −1 pop (``p− > threshold``), 0 no-op; the rule PDA extraction and the
    action-agreement callback share."""
    is_push = (p_push > threshold) & (p_push >= p_pop)
    return torch.where(is_push, 1, torch.where(p_pop > threshold, -1, 0))


def stack_size(stack: Tensor) -> Tensor:
    """``[B]`` long: the number of cells from the top holding a symbol (``‖K_i‖∞ > 1/2``) before
    the first that does not: the stack size ``s`` of the idealized stack the cells encode."""
    full = (stack.amax(-1) > 0.5).long()
    return full.cumprod(-1).sum(-1)
