"""The nnPDA recurrence (Stogin, Mali & Giles 2020, Definition 3.6) step by step under autograd:
the reference every fast path of :func:`memrnn.ops.nnpda.nnpda_sequence` is tested against.

It is written with the pure functions of :mod:`memrnn.ops.stack` (the operator π of
Definition 3.2 on the window-plus-tail stack, the reading R of Definition 3.4) and
:func:`memrnn.ops.tensor.third_order` (equation 1's contraction), which have literal
cell-by-cell transcriptions of their own (``tests/ops/test_stack.py``)."""

from __future__ import annotations

import torch
from torch import Tensor

from memrnn.ops.stack import h_sigmoid, stack_op, stack_reading
from memrnn.ops.tensor import third_order


def activate_actions(z: Tensor, action: str, sensitivity: Tensor | float) -> Tensor:
    """``p+``, ``p−`` and ``C`` from their contractions ``z [..., 2 + m2]``: ``"identity"``
    (Definition 3.6), ``"sigmoid"`` (``h_H(z − 1/2)``) or ``"clamp"`` (``z`` clipped to
    ``[0, 1]``); :class:`memrnn.layers.NNPDA` documents the choice."""
    if action == "identity":
        return z
    if action == "sigmoid":
        return h_sigmoid(z - 0.5, sensitivity)
    if action == "clamp":
        return z.clamp(0.0, 1.0)
    raise ValueError(f"unknown action {action!r}; choose one of identity, sigmoid, clamp")


def nnpda_reference(
    weight: Tensor,
    sensitivity: Tensor,
    q0: Tensor,
    stack0: Tensor,
    tail0: Tensor,
    ids: Tensor,
    action: str,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Definition 3.6 over ``ids [B, T]`` (one-hot input symbols), one step at a time.

    Args:
        weight: ``W [n + 2 + m2, n, m1, m2 + 1]``, rows ``Q``, ``p+``, ``p−``, ``C``.
        sensitivity: ``H`` (0-d; learned or not).
        q0 ``[B, n]``, stack0 ``[B, D, m2]``, tail0 ``[B, m2]``: the initial state.
        action: as :func:`activate_actions`.

    Returns:
        ``Q [B, T+1, n]``, ``K [B, T+1, D, m2]``, ``tail [B, T+1, m2]`` (index 0: the initial
        state) and ``p+ [B, T]`` of every step.
    """
    n = q0.shape[1]
    q, stack, tail = q0, stack0, tail0
    qs, stacks, tails, pushes = [q], [stack], [tail], []
    for ids_t in ids.unbind(1):
        z = third_order(weight, q, stack_reading(stack[:, 0]), tokens=ids_t)
        a = activate_actions(z[:, n:], action, sensitivity)
        stack, tail = stack_op(stack, tail, a[:, 0], a[:, 1], a[:, 2:], sensitivity)
        q = h_sigmoid(z[:, :n] - 0.5, sensitivity)
        qs.append(q)
        stacks.append(stack)
        tails.append(tail)
        pushes.append(a[:, 0])
    push = torch.stack(pushes, 1) if pushes else q0.new_zeros(q0.shape[0], 0)
    return torch.stack(qs, 1), torch.stack(stacks, 1), torch.stack(tails, 1), push.detach()
