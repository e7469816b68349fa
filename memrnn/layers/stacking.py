"""Stacking and directions shared by the recurrent layers (:class:`memrnn.layers.LSTMLayer`,
:class:`memrnn.layers.GRULayer`, :class:`memrnn.layers.ElmanRNN`): the checks of ``dropout`` and
flags, dropout between stacked layers, the reversal of padded rows, and the reference loops of
stacked (``nn.RNN``'s order) and bidirectional layers."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from memrnn.core.checks import finite_float
from memrnn.core.layer import MemoryLayer
from memrnn.ops.buckets import final_by_length


def check_dropout(dropout: Any, num_layers: int) -> float:
    """``dropout`` between stacked layers as a float in ``[0, 1)``, else a ``ValueError`` naming it;
    also one when it is > 0 with ``num_layers=1``, where it would act on nothing (``nn.LSTM`` warns
    and ignores it there; memrnn refuses, so that a configured dropout always drops)."""
    p = finite_float("dropout", dropout)
    if not 0.0 <= p < 1.0:
        raise ValueError(f"dropout must be in [0, 1), got {p}")
    if p > 0 and num_layers == 1:
        raise ValueError(
            f"dropout={p} acts between stacked layers (on the outputs of every layer but the last, as in "
            f"nn.LSTM), so it needs num_layers > 1, got num_layers=1 (nn.LSTM warns and ignores it); for "
            f"dropout on this layer's outputs, apply it after the layer"
        )
    return p


def check_flag(name: str, value: Any) -> bool:
    """``value`` if it is a bool, else a ``ValueError`` naming ``name`` and the value."""
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be True or False, got {value!r}")
    return value


def stepless_error(layer: MemoryLayer, what: str = "run step by step") -> ValueError:
    """The error of a bidirectional layer asked for what needs ``step``."""
    return ValueError(
        f"{type(layer).__name__}(bidirectional=True) cannot {what}: its backward direction reads each "
        f"sequence backwards from its last real token, so it needs the whole sequence at once. Call it "
        f"on whole (right-padded) sequences, layer(x, mask=mask) or layer.outputs(x, mask=mask); "
        f"generation, a StackRNN controller and anything else that steps needs bidirectional=False"
    )


def layer_dropout(y: Tensor, p: float, training: bool) -> Tensor:
    """Dropout between stacked layers, as ``nn.LSTM``/``nn.GRU``/``nn.RNN`` apply it, on a layer's
    outputs ``y [B, T, F]``: in training mode each element is zeroed with probability ``p`` and the
    others scaled by ``1/(1 − p)``; outside it, ``y`` unchanged.  The mask is drawn over the
    time-major layout ``[T, B, F]`` in memory order, as torch's layers draw it: on CPU, from the
    same seed, an unpadded batch gets ``nn.RNN``'s mask (padded batches: torch draws over the
    packed sequence, memrnn over the whole padded tensor)."""
    if not training or p == 0.0:
        return y
    return F.dropout(y.transpose(0, 1).contiguous(), p, True).transpose(0, 1)


def reverse_padded(x: Tensor, lengths: Tensor | None) -> Tensor:
    """``x [B, T, ...]`` with each row's first ``lengths[b]`` steps in reverse order and its padding
    left in place (all ``T`` steps reversed when ``lengths`` is None): the input of a backward
    direction, which starts at each row's own last real token as with ``pack_padded_sequence``.
    Its own inverse."""
    if lengths is None:
        return x.flip(1)
    t = torch.arange(x.shape[1], device=x.device)
    n = lengths.to(t.dtype)[:, None]
    idx = torch.where(t < n, n - 1 - t, t)  # [B, T]
    return x.gather(1, idx.view(*idx.shape, *([1] * (x.dim() - 2))).expand_as(x))


def stacked_sequence(
    x: Tensor,
    h0: Tensor,
    lengths: Tensor | None,
    run: Callable[[int, int, Tensor, Tensor], Tensor],
    *,
    num_layers: int,
    num_directions: int,
    dropout: float,
    training: bool,
) -> tuple[Tensor, Tensor]:
    """A stack of one-field recurrences (Elman, GRU), layer by layer as ``nn.RNN`` runs them.

    ``x [B, T, input]``, ``h0 [B, num_layers * num_directions, H]`` (``nn.RNN``'s order: layer,
    then direction), ``lengths [B]`` or None; ``run(layer, direction, inputs [B, T, n], h0 [B, H])``
    returns ``hs [B, T+1, H]`` (``h0`` first, every row run over all ``T`` steps).  The backward
    direction reads :func:`reverse_padded` inputs; each layer's input is the previous layer's
    directions concatenated, through :func:`layer_dropout`.  Returns ``(y [B, T, D·H], final [B,
    L·D, H])``: ``y`` at real positions (past a row's length: anything; mask it) and each row's
    state after its last real token (the backward direction's: after its first)."""
    inp, finals = x, []
    h0s = h0.unbind(1)
    for layer in range(num_layers):
        if layer:
            inp = layer_dropout(inp, dropout, training)
        outs = []
        for direction in range(num_directions):
            seq = inp if direction == 0 else reverse_padded(inp, lengths)
            hs = run(layer, direction, seq, h0s[layer * num_directions + direction])
            finals.append(final_by_length(hs, lengths))
            outs.append(hs[:, 1:] if direction == 0 else reverse_padded(hs[:, 1:], lengths))
        inp = outs[0] if num_directions == 1 else torch.cat(outs, -1)
    return inp, torch.stack(finals, 1)


Cell = Callable[[int, int, Tensor, tuple[Tensor, ...]], tuple[Tensor, tuple[Tensor, ...], dict[str, Tensor]]]


def bidirectional_loop(
    layer: MemoryLayer, x: Tensor, state: Any, mask: Tensor | None, cell: Cell, *, with_trace: bool
) -> tuple[Tensor, Any, dict[str, Tensor]]:
    """The reference loop of a bidirectional layer (``MemoryLayer._loop``'s contract): layer by
    layer, each direction's step loop over time, the backward one over each row's real tokens
    reversed (:func:`reverse_padded`), so that it starts at the row's own last real token;
    masked steps freeze the state and give zero outputs.  ``cell(layer, direction, x_t [B, n],
    leaves)`` is one step of one layer and direction on the state fields' slices ``[B, H]``; it
    returns ``(h_t, new leaves, diagnostics)``.  Every state field is ``[B, num_layers · 2, H]``
    in ``nn.LSTM``'s order; traced fields and diagnostics ``[B, T, num_layers · 2, H]`` hold,
    for the backward direction, its state after reading ``x_t`` (from the row's end)."""
    num_layers, dropout = layer.num_layers, layer.dropout  # type: ignore[attr-defined]
    batch, steps = x.shape[:2]
    lengths = None if mask is None else mask.sum(1)
    masks = mask.unbind(1) if mask is not None else [None] * steps
    finals: list[tuple[Tensor, ...]] = []
    traced: list[dict[str, Tensor]] = []  # per (layer, direction): {name: [B, T, H]}
    inp = x
    for lay in range(num_layers):
        if lay:
            inp = layer_dropout(inp, dropout, layer.training)
        outs = []
        for direction in (0, 1):
            k = lay * 2 + direction
            leaves = tuple(t[:, k] for t in state)
            seq = inp if direction == 0 else reverse_padded(inp, lengths)
            ys, seen = [], []
            for x_t, m_t in zip(seq.unbind(1), masks, strict=True):
                y_t, new, diag = cell(lay, direction, x_t, leaves)
                if m_t is not None:
                    new = tuple(torch.where(m_t[:, None], n, o) for n, o in zip(new, leaves, strict=True))
                    y_t = torch.where(m_t[:, None], y_t, torch.zeros_like(y_t))
                    diag = {key: torch.where(m_t[:, None], v, torch.zeros_like(v)) for key, v in diag.items()}
                leaves = new
                ys.append(y_t)
                if with_trace:
                    seen.append(
                        {**{f"state.{n}": v for n, v in zip(state._fields, new, strict=True)}, **diag}
                    )
            y = torch.stack(ys, 1) if ys else seq.new_zeros(batch, 0, layer.hidden_size)  # type: ignore[attr-defined]
            outs.append(y if direction == 0 else reverse_padded(y, lengths))
            finals.append(leaves)
            if with_trace and seen:
                per = {key: torch.stack([s[key] for s in seen], 1) for key in seen[0]}
                traced.append(
                    {key: v if direction == 0 else reverse_padded(v, lengths) for key, v in per.items()}
                )
        inp = torch.cat(outs, -1)
    final = type(state)(*(torch.stack(leaves, 1) for leaves in zip(*finals, strict=True)))
    extra = {key: torch.stack([t[key] for t in traced], 2) for key in traced[0]} if traced else {}
    return inp, final, extra
