"""The nondeterministic stack RNNs' member path: :class:`memrnn.layers.StackRNN` over DuSell &
Chiang's nondeterministic stacks (the NS-RNN 2020, RNS-RNN 2022, vector RNS-RNN 2023) under a
one-layer LSTM with biases or a one-layer unidirectional Elman controller, through
:func:`memrnn.ops.nondeterministic.sequence.nondeterministic_sequence` with the member dimension.

The stack has no weights: it runs once on the members' ``M·B`` rows as one batch (one
:class:`memrnn.ops.nondeterministic.NondeterministicRun`: C++ on CPU, Triton kernels on CUDA,
the torch step elsewhere).  The controller's products and the stack's head are batched over the
members (``bmm`` on each member's weights), every ``x_t``'s product taken at once before the loop.
A learned bottom vector (the vector stack's) is each member's own in its initial state.  ``strict``
and other controllers (a GRU, a stacked one) run the loop over members."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import torch
from torch import Tensor, nn

from memrnn.core.activations import ACTIVATIONS
from memrnn.core.state import state_zip
from memrnn.layers import ElmanRNN, LSTMLayer, StackRNN
from memrnn.layers.gated import lstm_pointwise
from memrnn.members.layer import MEMBER_PATHS, MemberPath
from memrnn.members.paths import elman, gated  # noqa: F401  (the controllers' paths: their initial states)
from memrnn.members.paths.common import check_dtype, member_blocks, member_rows
from memrnn.members.stacking import member_view
from memrnn.ops.nondeterministic.sequence import nondeterministic_sequence

#: the memories this path covers
MEMORIES = ("nondeterministic", "vector_nondeterministic")


def _why_not(layer: StackRNN) -> str | None:
    if layer.strict:
        return "strict (overflow checked member by member)"
    c = layer.controller
    if isinstance(c, LSTMLayer) and c.num_layers == 1 and not c.bidirectional and c.rnn.bias:
        return None
    if isinstance(c, ElmanRNN) and c._single:
        return None
    return (
        f"controller {type(c).__name__} is not a one-layer LSTM with biases or a one-layer "
        f"unidirectional Elman RNN"
    )


def _bmm(x: Tensor, w: Tensor, b: Tensor | None = None) -> Tensor:
    """``x [M, R, k] @ w[M, n, k]ᵀ (+ b [M, n])`` -> ``[M, R, n]``: each member's linear map."""
    if b is None:
        return torch.bmm(x, w.transpose(1, 2))
    return torch.baddbmm(b[:, None], x, w.transpose(1, 2))


def _controller_steps(
    layer: StackRNN, x: Tensor
) -> Callable[[int, Tensor, NamedTuple], tuple[Tensor, NamedTuple]]:
    """The members' controller step ``(t, reading [M·B, width], cs) -> (h_t [M·B, N], new cs)``
    on ``[x_t ; reading]``, each member's weights: ``x [M, B, T, n]``'s products taken at once."""
    M, B, T, n = x.shape
    c = layer.controller
    N = c.hidden_size
    if isinstance(c, LSTMLayer):
        w_ih, w_hh, b_ih, b_hh = c._weights(0)  # [M, 4N, n + width], [M, 4N, N], [M, 4N] × 2
        w_x, w_r = w_ih.split([n, layer.width], 2)
        # one view per step at once: indexing step t of the whole tensor would make its backward
        # write a zero-filled [M, B, T, 4N] gradient at every step
        gates_x = _bmm(x.flatten(1, 2), w_x, b_ih + b_hh).view(M, B, T, -1).unbind(2)

        def lstm_step(t: int, reading: Tensor, cs: NamedTuple) -> tuple[Tensor, NamedTuple]:
            gates = torch.baddbmm(gates_x[t], reading.view(M, B, -1), w_r.transpose(1, 2))
            gates = torch.baddbmm(gates, cs.h.view(M, B, N), w_hh.transpose(1, 2))
            h, cc, _ = lstm_pointwise(gates.flatten(0, 1), cs.c[:, 0])
            return h, type(cs)(h[:, None], cc[:, None])

        return lstm_step
    w_x, w_r = c.weight_ih.split([n, layer.width], 2)
    pre_x = _bmm(x.flatten(1, 2), w_x, c.bias).view(M, B, T, N).unbind(2)
    act = ACTIVATIONS[c.activation]

    def elman_step(t: int, reading: Tensor, cs: NamedTuple) -> tuple[Tensor, NamedTuple]:
        pre = torch.baddbmm(pre_x[t], reading.view(M, B, -1), w_r.transpose(1, 2))
        h = act(torch.baddbmm(pre, cs.h.view(M, B, N), c.weight_hh.transpose(1, 2)).flatten(0, 1))
        return h, type(cs)(h)

    return elman_step


class _MemberHeads:
    """The stack's heads (:class:`memrnn.ops.nondeterministic.sequence.StackHeads`) with each
    member's head weights on the members' rows ``[M·B, ...]``; the rest is the memory's own (it
    has no weights)."""

    def __init__(self, memory: nn.Module, members: int) -> None:
        self.memory, self.members, self.states = memory, members, memory.states

    def transitions(self, h: Tensor) -> tuple[Tensor, ...]:
        head = self.memory.head
        out = _bmm(h.view(self.members, -1, h.shape[-1]), head.weight, head.bias)
        return self.memory.from_head(out.flatten(0, 1))

    def reading(self, out: Any) -> Tensor:
        return self.memory.reading(out)

    def read(self, state: Any) -> Tensor:
        return self.memory.read(state)

    def update(self, state: Any, actions: tuple[Tensor, ...]) -> tuple[Any, Tensor]:
        return self.memory.update(state, actions)


def _sequence(layer: StackRNN, x: Tensor, state: Any, mask: Tensor | None, final: bool) -> tuple[Tensor, Any]:
    check_dtype("StackRNN", x, layer.memory.head.weight)
    M, B, T = x.shape[:3]
    if T == 0:  # nothing to run: the state as it came
        return x.new_zeros(M, B, 0, layer.output_size), state
    cs, ms = layer.split(state)
    hidden = layer.output == "hidden"
    h, r, cs, ms = nondeterministic_sequence(
        x.flatten(0, 1),
        _controller_steps(layer, x),
        member_rows(cs),
        _MemberHeads(layer.memory, M),
        member_rows(ms),
        None if mask is None else mask.flatten(0, 1),
        readings=not hidden,
        final=final,
    )
    y = (h if hidden else torch.cat([h, r], -1)).unflatten(0, (M, B))
    return y, (None if ms is None else layer.State(*member_blocks(cs, M), *member_blocks(ms, M)))


def _run(layer: StackRNN, x: Tensor, state: Any, mask: Tensor | None) -> tuple[Tensor, Any]:
    return _sequence(layer, x, state, mask, final=True)


def _outputs(layer: StackRNN, x: Tensor, state: Any, mask: Tensor | None) -> Tensor:
    """The outputs alone: the run never builds the final ``[M·B, depth, depth, QS, QS]`` window."""
    return _sequence(layer, x, state, mask, final=False)[0]


def _initial(layer: StackRNN, batch_size: int, x: Tensor) -> Any:
    """The controller's member path's initial state, then the empty stack: one ``initial_state``
    on the members' rows, but for a learned bottom vector (each member's own, its gradient kept)."""
    M = x.shape[0]
    controller = MEMBER_PATHS[type(layer.controller)].initial(layer.controller, batch_size, x)
    memory = layer.memory
    if getattr(memory, "bottom_kind", None) == "learned":  # the vector stack's learned bottom vector
        per_member = []
        for m in range(M):
            with member_view(memory, m) as one:
                per_member.append(one.initial_state(batch_size, device=x.device, dtype=x.dtype))
        fields = state_zip(lambda *ts: torch.stack(ts), *per_member)
    else:
        fields = member_blocks(memory.initial_state(M * batch_size, device=x.device, dtype=x.dtype), M)
    return layer.State(*controller, *fields)


def nondeterministic_path(output_at: Callable[[nn.Module, Any], Tensor]) -> MemberPath:
    """The path, with the stack RNNs' ``output_at`` (which reads any memory on the members' rows)."""
    return MemberPath(
        "nondeterministic_sequence (members batched)", _why_not, _run, _initial, output_at, outputs=_outputs
    )
