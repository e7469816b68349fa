"""The stack RNNs' member path: :class:`memrnn.layers.StackRNN` whose ``forward`` runs
:func:`memrnn.ops.stack_rnn.stack_rnn_sequence` (a one-layer LSTM with biases or a tanh, sigmoid or
relu Elman controller with a bias, over the superposition (Joulin & Mikolov 2015), stratification
(Grefenstette et al. 2015), queue, DeQue, tape or jump tape (Delétang et al. 2023) memories, a
tape's write MLP included), through that op with the member dimension: the memory, which has no
weights, runs once on the members' rows as one batch, the controller's, head's and value MLP's
products are batched over the members (:class:`memrnn.ops.stack_rnn.cpu.StackRNNSequence` with
members); on CUDA the two Triton kernels run every member in one launch each (a grid of row tiles ×
members, :mod:`memrnn.ops.stack_rnn.triton`), but with a write MLP (which the kernels do not
have).  The nondeterministic stacks (DuSell & Chiang 2020, 2022, 2023) take their own path
(:mod:`memrnn.members.paths.nondeterministic`); a GRU or other controller, and ``strict``, run the
loop over members."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from memrnn.layers import StackRNN
from memrnn.members.layer import MEMBER_PATHS, MemberPath, register_member_path
from memrnn.members.paths import elman, gated  # noqa: F401  (the controllers' paths: their initial states)
from memrnn.members.paths.common import check_dtype, member_blocks, member_rows
from memrnn.members.paths.nondeterministic import MEMORIES as NONDETERMINISTIC
from memrnn.members.paths.nondeterministic import nondeterministic_path
from memrnn.ops.lstm import sigmoids_first
from memrnn.ops.stack_rnn import stack_rnn_sequence
from memrnn.ops.stack_rnn.specs import MEMORIES as _FUSED_MEMORIES


def _stack_rnn_why_not(layer: nn.Module) -> str | None:
    if layer.memory.kind not in _FUSED_MEMORIES:
        return f"the {layer.memory.kind} memory has no fused sequence"
    if layer.strict:
        return "strict (overflow checked member by member)"
    if layer._fusable() is None:
        return (
            f"controller {type(layer.controller).__name__} is not a one-layer LSTM with biases or a tanh, "
            f"sigmoid or relu Elman RNN with a bias"
        )
    return None


def _stack_rnn_run(
    layer: StackRNN, x: Tensor, state: Any, mask: Tensor | None, *, finals: bool = True
) -> tuple[Tensor, Any]:
    head = layer.memory.head
    check_dtype("StackRNN", x, head.weight)
    kind, activation = layer._fusable()
    lstm = kind == "lstm"
    c = layer.controller
    if lstm:
        w_ih, w_hh, b_ih, b_hh = c._weights(0)  # as the single layer's forward (its _fused_weights)
        w_in, b, w_rec = (sigmoids_first(w, 1) for w in (w_ih, b_ih + b_hh, w_hh))
    else:
        w_in, b, w_rec = c.weight_ih, c.bias, c.weight_hh
    cs, ms = layer.split(state)
    # the memory's own check (a jump tape's jumps), on the members' rows as one batch; a failure
    # is named by member and by the row within it
    try:
        layer.memory.check_state(member_rows(ms))
    except ValueError:
        for m in range(x.shape[0]):
            try:
                layer.memory.check_state(type(ms)(*(f[m] for f in ms)))
            except ValueError as err:
                raise ValueError(f"member {m}: {err}") from None
        raise
    hs, rs, h, cc, *rest = stack_rnn_sequence(
        x,
        w_in,
        b,
        w_rec,
        head.weight,
        head.bias,
        cs.h[:, :, 0] if lstm else cs.h,
        cs.c[:, :, 0] if lstm else None,
        tuple(ms),
        controller=kind,
        activation=activation,
        memory=layer.memory.kind,
        value_activation=layer.memory.value_activation,
        lengths=None if mask is None else mask.sum(-1),
        value_mlp=layer.memory.value_layers(),
        finals=finals,
    )
    memory = rest[:-1]
    y = hs if layer.output == "hidden" else torch.cat([hs, rs], -1)
    if mask is not None:
        y = y.masked_fill(~mask[..., None], 0)
    if not finals:
        return y, None
    controller = (h[:, :, None], cc[:, :, None]) if lstm else (h,)
    return y, layer.State(*controller, *memory)


def _stack_rnn_initial(layer: StackRNN, batch_size: int, x: Tensor) -> Any:
    """The controller's member path's initial state (learned ones included), then the empty memory
    (no weights: one ``initial_state`` for the members' rows, ``[M, B, ...]``)."""
    M = x.shape[0]
    controller = MEMBER_PATHS[type(layer.controller)].initial(layer.controller, batch_size, x)
    memory = layer.memory.initial_state(M * batch_size, device=x.device, dtype=x.dtype)
    return layer.State(*controller, *member_blocks(memory, M))


def _stack_rnn_output_at(layer: StackRNN, state: Any) -> Tensor:
    """The members' outputs at ``state`` ``[M, B, output_size]``: the controller's member path's
    (:meth:`StackRNN.output_at`), with the memory's reading (no weights: read on the members'
    rows as one batch) for ``output="hidden+reading"``."""
    cs, ms = layer.split(state)
    h = MEMBER_PATHS[type(layer.controller)].output_at(layer.controller, cs)
    if layer.output == "hidden":
        return h
    reading = layer.memory.read(member_rows(ms))
    return torch.cat([h, reading.unflatten(0, h.shape[:2])], -1)


def _stack_rnn_outputs(layer: StackRNN, x: Tensor, state: Any, mask: Tensor | None) -> Tensor:
    """The outputs alone (``finals=False``: the superposition stack trims its window to the cells
    that can still be read, as :meth:`StackRNN.outputs` does)."""
    return _stack_rnn_run(layer, x, state, mask, finals=False)[0]


#: the nondeterministic stacks' own path (:mod:`memrnn.members.paths.nondeterministic`)
_NONDETERMINISTIC_PATH = nondeterministic_path(_stack_rnn_output_at)


def _select(layer: StackRNN) -> MemberPath | None:
    return _NONDETERMINISTIC_PATH if layer.memory.kind in NONDETERMINISTIC else None


register_member_path(
    StackRNN,
    MemberPath(
        "stack_rnn_sequence (members batched)",
        _stack_rnn_why_not,
        _stack_rnn_run,
        _stack_rnn_initial,
        _stack_rnn_output_at,
        outputs=_stack_rnn_outputs,
        select=_select,
    ),
)
