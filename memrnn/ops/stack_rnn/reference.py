"""The reference of :func:`memrnn.ops.stack_rnn.stack_rnn_sequence`: the controller and the memory
stepped one step at a time under autograd, each memory by its spec's batched torch step
(:attr:`memrnn.ops.memory.MemorySpec.step`, built on ``memrnn.ops.<memory>``'s steps), the same
math as :class:`memrnn.layers.StackRNN`'s loop over ``step``.  Obviously right, slow, and twice
differentiable."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from memrnn.core.activations import ACTIVATIONS
from memrnn.ops.buckets import final_by_length
from memrnn.ops.members import per_member
from memrnn.ops.stack_rnn.specs import spec as memory_spec


def stack_rnn_reference(
    x: Tensor,
    w_in: Tensor,
    b: Tensor,
    w_rec: Tensor,
    w_head: Tensor,
    b_head: Tensor,
    h0: Tensor,
    c0: Tensor | None,
    memory0: tuple[Tensor, ...],
    *,
    controller: str,
    activation: str,
    memory: str,
    value_activation: str,
    lengths: Tensor | None = None,
    overflow: bool = False,
    value_mlp: Sequence[tuple[Tensor, Tensor]] = (),
) -> tuple[Tensor, ...]:
    """:func:`memrnn.ops.stack_rnn.stack_rnn_sequence`'s arguments and results (``x [B, T, n]`` ->
    ``h [B, T, N]``, ``r [B, T, m]``, final ``h``, ``c``, the memory's final fields at each row's
    length, ``overflow [B, T]``), as a loop over steps under autograd.  LSTM gate blocks o, i, f, g."""
    spec = memory_spec(memory)
    k = spec.n_actions
    B, T, _ = x.shape
    lstm = controller == "lstm"
    act = ACTIVATIONS[activation] if not lstm else None
    value_act = ACTIVATIONS[value_activation]
    h, c, state = h0, c0, tuple(memory0)
    reading = spec.read(state)
    hs, rs, cs, states, lost = [], [], [c0], [state], []
    for t in range(T):
        pre = torch.cat([x[:, t], reading], -1) @ w_in.t() + b + h @ w_rec.t()
        if lstm:
            o, i, f, g = pre.chunk(4, -1)
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
            h = torch.sigmoid(o) * torch.tanh(c)
            cs.append(c)
        else:
            h = act(pre)
        out = h @ w_head.t() + b_head
        actions, value = out[:, :k], out[:, k:]
        for j, (w, bias) in enumerate(value_mlp):  # the value's MLP, ReLU between its layers
            value = (h if j == 0 else torch.relu(value)) @ w.t() + bias
        actions = (
            torch.softmax(actions, -1) if spec.action_activation == "softmax" else torch.sigmoid(actions)
        )
        state, reading, dropped = spec.step(state, actions, value_act(value))
        hs.append(h)
        rs.append(reading)
        states.append(state)
        lost.append(dropped)
    if T == 0:
        h_all, r_all = x.new_zeros(B, 0, w_rec.shape[1]), x.new_zeros(B, 0, reading.shape[-1])
    else:
        h_all, r_all = torch.stack(hs, 1), torch.stack(rs, 1)
    h_fin = final_by_length(torch.stack([h0, *hs], 1), lengths)
    c_fin = final_by_length(torch.stack(cs, 1), lengths) if lstm else None
    finals = [final_by_length(torch.stack(field, 1), lengths) for field in zip(*states, strict=True)]
    ovf = torch.stack(lost, 1).detach() if overflow and T > 0 else x.new_zeros(B, T)
    return h_all, r_all, h_fin, c_fin, *finals, ovf


def stack_rnn_member_reference(
    x: Tensor,
    w_in: Tensor,
    b: Tensor,
    w_rec: Tensor,
    w_head: Tensor,
    b_head: Tensor,
    h0: Tensor,
    c0: Tensor | None,
    memory0: tuple[Tensor, ...],
    *,
    lengths: Tensor | None = None,
    value_mlp: Sequence[tuple[Tensor, Tensor]] = (),
    **options: object,
) -> tuple[Tensor, ...]:
    """:func:`stack_rnn_reference` with a member dimension (every argument ``[M, ...]``, ``x [M, B,
    T, n]``, ``lengths [M, B]``, the memory's fields ``[M, B, ...]``), as a loop over the members:
    member ``m``'s results are the reference's on its ``[m]`` slices, stacked."""
    return per_member(
        stack_rnn_reference, w_rec.shape[0], x, w_in, b, w_rec, w_head, b_head, h0, c0, memory0,
        lengths=lengths, value_mlp=tuple(value_mlp), **options,
    )  # fmt: skip
