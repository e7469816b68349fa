"""What the member paths share: each row's final state, dtype checks, learned initial states, a
state's members' rows as one batch."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch
from torch import Tensor

from memrnn.layers.second_order import input_ids, one_hot_ids
from memrnn.ops.buckets import final_by_length


def member_rows(state: NamedTuple) -> NamedTuple:
    """A state's fields ``[M, B, ...]`` -> ``[M·B, ...]``: the members' rows as one batch (what a
    memory without weights runs on)."""
    return type(state)(*(f.flatten(0, 1) for f in state))


def member_blocks(state: NamedTuple, M: int) -> NamedTuple:
    """:func:`member_rows`' inverse: fields ``[M·B, ...]`` -> ``[M, B, ...]``."""
    return type(state)(*(f.unflatten(0, (M, -1)) for f in state))


def lengths_final(states: Tensor, lengths: Tensor | None) -> Tensor:
    """``states [M, B, T+1, N]`` -> each row's state after its last real step ``[M, B, N]``."""
    flat = None if lengths is None else lengths.flatten()  # the members' rows as one batch
    return final_by_length(states.flatten(0, 1), flat).view(*states.shape[:2], *states.shape[3:])


def check_dtype(name: str, x: Tensor, weight: Tensor) -> None:
    """A ``ValueError`` when the inputs' dtype is not the layer's."""
    if x.dtype != weight.dtype:
        raise ValueError(f"MemberLayer({name}): inputs are {x.dtype} but the layer is {weight.dtype}")


def learned_or_zeros(
    h0_input: Tensor | None, fn: Callable[[Tensor], Tensor], M: int, B: int, rows: int, H: int, x: Tensor
) -> Tensor:
    """``[M, B, rows, H]``: zeros, or ``fn(h0_input [M, rows, H])`` copied to every batch row."""
    if h0_input is None:
        return x.new_zeros(M, B, rows, H)
    h0 = fn(h0_input).to(x.dtype)
    return h0[:, None].expand(M, B, rows, H).contiguous()


def member_ids(x: Tensor, mask: Tensor | None, mode: bool | None, layer: str) -> Tensor | None:
    """:func:`memrnn.layers.second_order.input_ids` for members: ``x [M, B, T, m]``, ``mask [M, B,
    T]`` or None -> ids ``[M, B, T]`` or None (the dense path).  ``mode=True`` checks each member's
    input as its layer would, the error naming the member, row and step."""
    if mode is True:
        return torch.stack(
            [
                one_hot_ids(x[m], None if mask is None else mask[m], f"{layer} member {m}")
                for m in range(len(x))
            ]
        )
    return input_ids(x, mask, mode, layer)
