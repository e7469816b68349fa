"""What the member paths share: each row's final state, dtype checks, learned initial states."""

from __future__ import annotations

from collections.abc import Callable

from torch import Tensor

from memrnn.ops.buckets import final_by_length


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
