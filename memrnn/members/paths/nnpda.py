"""The nnPDA's member path: :class:`memrnn.layers.NNPDA` (Sun et al. 1993; Stogin, Mali & Giles
2020, Definition 3.6).

One-hot inputs (what each member's layer would take its indexed path on) run
:func:`memrnn.ops.nnpda.nnpda_sequence` with the member dimension (on CPU
:class:`~memrnn.ops.nnpda.cpu.NNPDASequence`: every member's rows and weight slices in one
bucketed product per step); dense inputs (a learned embedding's) run the layer's dense step under
autograd, each step's third-order contraction one product batched over the members and the stack
operator π of Definition 3.2 on every member's rows at once.  ``strict`` raises as each member's
layer would, naming the member."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from memrnn.layers import NNPDA
from memrnn.layers.nnpda import NNPDAState, StackOverflowError
from memrnn.members.layer import MemberPath, register_member_path
from memrnn.members.paths.common import check_dtype, lengths_final, member_ids
from memrnn.ops.nnpda import activate_actions, nnpda_sequence
from memrnn.ops.stack import stack_reading


def _run(layer: NNPDA, x: Tensor, state: Any, mask: Tensor | None) -> tuple[Tensor, NNPDAState]:
    M, B, T, _ = x.shape
    check_dtype("NNPDA", x, layer.weight_q)
    if T == 0:
        return x.new_zeros(M, B, 0, layer.output_size), state
    weight = torch.cat(
        [layer.weight_q, layer.weight_push[:, None], layer.weight_pop[:, None], layer.weight_c], 1
    )
    ids = member_ids(x, mask, layer.one_hot_input, "NNPDA")
    if ids is not None:
        Q, K, tails, push = nnpda_sequence(weight, layer.sensitivity, *state, ids, layer.action)
    else:
        Q, K, tails, push = _dense(layer, weight, x, state)
    if layer.strict:  # the steps that pushed onto a full window, as each member's layer checks them
        flags = (push > 0.5) & (K[:, :, :-1, -1].amax(-1) > 0.5)
        flags = flags if mask is None else flags & mask
        for m in range(M):
            try:
                layer._raise_overflow(flags[m])
            except StackOverflowError as e:
                raise StackOverflowError(f"member {m}: {e}") from None
    y = (
        Q[:, :, 1:]
        if layer.output == "state"
        else torch.cat([Q[:, :, 1:], stack_reading(K[:, :, 1:, 0])], -1)
    )
    lengths = None
    if mask is not None:
        y, lengths = y.masked_fill(~mask[..., None], 0), mask.sum(-1)
    return y, NNPDAState(*(lengths_final(v, lengths) for v in (Q, K, tails)))


def _dense(
    layer: NNPDA, weight: Tensor, x: Tensor, state: NNPDAState
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Definition 3.6 on dense inputs ``x [M, B, T, m1]`` under autograd (the layer's
    :func:`memrnn.ops.nnpda.nnpda_step` with the members batched), ``weight [M, n + 2 + m2, n, m1,
    m2 + 1]`` -> ``Q [M, B, T+1, n]``, ``K [M, B, T+1, D, m2]``, ``tail [M, B, T+1, m2]``, ``p+
    [M, B, T]`` (detached)."""
    M, B, _, m1 = x.shape
    O, n, _, L = weight.shape[1:]
    w = weight.permute(0, 2, 4, 1, 3).reshape(M, n * L, O * m1)  # [M, (j, l), (o, k)]
    h = layer.sensitivity.view(M, 1, 1)
    q, stack, tail = state
    qs, stacks, tails, pushes = [q], [stack], [tail], []
    for x_t in x.unbind(2):
        qr = (q[..., :, None] * stack_reading(stack[:, :, 0])[..., None, :]).reshape(M, B, n * L)
        z = (torch.bmm(qr, w).view(M, B, O, m1) @ x_t[..., None])[..., 0]  # [M, B, O]
        a = activate_actions(z[..., n:], layer.action, h)
        pp, pm = a[..., 0, None, None], a[..., 1, None, None]
        above = torch.cat([a[..., None, 2:], stack[:, :, :-1]], 2)  # K_{i−1}, with C above the top
        below = torch.cat([stack[:, :, 1:], tail[:, :, None]], 2)  # K_{i+1}, the tail below the window
        mixed = pp * above + pm * below + (1 - pp - pm) * stack
        stack = torch.sigmoid(h[..., None] * (mixed - 0.5))
        tail = torch.sigmoid(h * (tail - 0.5))
        q = torch.sigmoid(h * (z[..., :n] - 0.5))
        qs.append(q)
        stacks.append(stack)
        tails.append(tail)
        pushes.append(a[..., 0])
    return torch.stack(qs, 2), torch.stack(stacks, 2), torch.stack(tails, 2), torch.stack(pushes, 2).detach()


def _initial(layer: NNPDA, batch_size: int, x: Tensor) -> NNPDAState:
    M = x.shape[0]
    q = layer.start.to(x.dtype)[:, None].expand(-1, batch_size, -1).clone()
    return NNPDAState(
        q,
        x.new_zeros(M, batch_size, layer.depth, layer.stack_symbols),
        x.new_zeros(M, batch_size, layer.stack_symbols),
    )


register_member_path(
    NNPDA, MemberPath("nnpda_sequence (members batched)", lambda layer: None, _run, _initial)
)
