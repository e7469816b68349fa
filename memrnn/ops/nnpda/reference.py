"""The nnPDA recurrence (Stogin, Mali & Giles 2020, Definition 3.6) step by step under autograd:
the reference every fast path of :func:`memrnn.ops.nnpda.nnpda_sequence` is tested against.

It is written with the pure functions of :mod:`memrnn.ops.stack` (the operator π of
Definition 3.2 on the window-plus-tail stack, the reading R of Definition 3.4) and
:func:`memrnn.ops.tensor.third_order` (equation 1's contraction), which have literal
cell-by-cell transcriptions of their own (``tests/ops/test_stack.py``)."""

from __future__ import annotations

import torch
from torch import Tensor

from memrnn.ops.members import per_member
from memrnn.ops.stack import h_sigmoid, stack_op, stack_reading
from memrnn.ops.tensor import third_order

#: how ``p+``, ``p−`` and ``C`` come from their contractions (:func:`activate_actions`)
ACTIONS = ("identity", "sigmoid", "clamp")


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
    raise ValueError(f"unknown action {action!r}; choose one of {', '.join(ACTIONS)}")


def nnpda_step(
    weight: Tensor,
    sensitivity: Tensor | float,
    q: Tensor,
    stack: Tensor,
    tail: Tensor,
    action: str,
    *,
    x: Tensor | None = None,
    tokens: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """One step of Definition 3.6 for the input ``x [B, m1]`` (dense) or ``tokens [B]`` (ids).

    ``R^t = (K_0, 1 − ‖K_0‖∞)``; ``z = Σ_jkl W_·jkl Q_j I_k R_l``; ``Q^{t+1} = h_H(z_Q − 1/2)``;
    ``(p+, p−, C)`` from ``z`` by ``action``; ``K^{t+1} = π(p+, p−, C) K^t`` on the
    window-plus-tail stack.  Returns ``(Q^{t+1} [B, n], K^{t+1} [B, D, m2], tail [B, m2],
    (p+, p−, C) [B, 2 + m2], R^t [B, m2 + 1])``."""
    n = q.shape[1]
    reading = stack_reading(stack[:, 0])
    z = third_order(weight, q, reading, x=x, tokens=tokens)
    a = activate_actions(z[:, n:], action, sensitivity)
    stack, tail = stack_op(stack, tail, a[:, 0], a[:, 1], a[:, 2:], sensitivity)
    return h_sigmoid(z[:, :n] - 0.5, sensitivity), stack, tail, a, reading


def nnpda_reference(
    weight: Tensor,
    sensitivity: Tensor,
    q0: Tensor,
    stack0: Tensor,
    tail0: Tensor,
    ids: Tensor,
    action: str,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Definition 3.6 over ``ids [B, T]`` (one-hot input symbols), one :func:`nnpda_step` at a time.

    Args:
        weight: ``W [n + 2 + m2, n, m1, m2 + 1]``, rows ``Q``, ``p+``, ``p−``, ``C``.
        sensitivity: ``H`` (0-d; learned or not).
        q0 ``[B, n]``, stack0 ``[B, D, m2]``, tail0 ``[B, m2]``: the initial state.
        action: as :func:`activate_actions`.

    Returns:
        ``Q [B, T+1, n]``, ``K [B, T+1, D, m2]``, ``tail [B, T+1, m2]`` (index 0: the initial
        state) and ``p+ [B, T]`` of every step.
    """
    q, stack, tail = q0, stack0, tail0
    qs, stacks, tails, pushes = [q], [stack], [tail], []
    for ids_t in ids.unbind(1):
        q, stack, tail, a, _ = nnpda_step(weight, sensitivity, q, stack, tail, action, tokens=ids_t)
        qs.append(q)
        stacks.append(stack)
        tails.append(tail)
        pushes.append(a[:, 0])
    push = torch.stack(pushes, 1) if pushes else q0.new_zeros(q0.shape[0], 0)
    return torch.stack(qs, 1), torch.stack(stacks, 1), torch.stack(tails, 1), push.detach()


def nnpda_member_reference(
    weight: Tensor,
    sensitivity: Tensor,
    q0: Tensor,
    stack0: Tensor,
    tail0: Tensor,
    ids: Tensor,
    action: str,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Members: member ``μ`` is :func:`nnpda_reference` on its ``[μ]`` slices: ``weight [M, n + 2 +
    m2, n, m1, m2 + 1]``, ``sensitivity [M]``, ``q0 [M, B, n]``, ``stack0 [M, B, D, m2]``, ``tail0
    [M, B, m2]``, ``ids [M, B, T]`` -> ``Q [M, B, T+1, n]``, ``K [M, B, T+1, D, m2]``, ``tail [M,
    B, T+1, m2]``, ``p+ [M, B, T]``."""
    return per_member(nnpda_reference, weight.shape[0], weight, sensitivity, q0, stack0, tail0, ids, action)
