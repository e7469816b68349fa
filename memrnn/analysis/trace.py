"""Run a layer over token strings and collect its per-step internals, the raw material of every
comparison with an automaton (:meth:`memrnn.core.MemoryLayer.trace`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from memrnn.core.layer import MemoryLayer
from memrnn.data.datamodule import bos_inputs


@torch.no_grad()
def layer_trace(
    embedding: Callable[[Tensor], Tensor],
    layer: MemoryLayer,
    strings: Sequence[Sequence[int]],
    bos_id: int,
) -> tuple[dict[str, Tensor], Tensor]:
    """``(trace, mask)``: ``layer.trace`` on ``BOS w_1 .. w_n`` for each complete string (its
    final ``END`` dropped), embedded by ``embedding`` (token ids ``[B, T]`` -> ``[B, T, D]``),
    every key ``[B, T, ...]`` on the CPU (``T`` = the longest string's length), and the ``[B, T]``
    bool mask."""
    modules = [m for m in (embedding, layer) if isinstance(m, torch.nn.Module)]
    tensors = [t for m in modules for t in (*m.parameters(), *m.buffers())]
    device = tensors[0].device if tensors else torch.device("cpu")
    inp, mask, _ = bos_inputs([s[:-1] for s in strings], bos_id)
    inp, mask = inp.to(device), mask.to(device)
    trace = layer.trace(embedding(inp), mask=mask)
    return {k: v.detach().cpu() for k, v in trace.items()}, mask.cpu()
