"""Helpers for recurrent states.

A state is a ``NamedTuple`` whose fields are tensors with the batch as their leading
dimension (``[B, ...]``).  The helpers below map over those fields, so every layer can use
one definition of masking, detaching and indexing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import torch
from torch import Tensor

S = TypeVar("S")


def state_map(fn: Callable[[Tensor], Tensor], state: S) -> S:
    """Apply ``fn`` to every tensor of ``state`` and return a state of the same type."""
    if isinstance(state, Tensor):
        return fn(state)  # type: ignore[return-value]
    if isinstance(state, tuple):
        mapped = [state_map(fn, s) for s in state]
        return type(state)(*mapped) if hasattr(state, "_fields") else type(state)(mapped)  # type: ignore[return-value]
    if state is None:
        return state
    raise TypeError(f"state leaves must be tensors or tuples of tensors, got {type(state).__name__}")


def state_zip(fn: Callable[..., Tensor], *states: S) -> S:
    """Apply ``fn`` leaf-wise to several states of the same structure."""
    first = states[0]
    if isinstance(first, Tensor):
        return fn(*states)  # type: ignore[return-value]
    if isinstance(first, tuple):
        mapped = [state_zip(fn, *leaves) for leaves in zip(*states, strict=True)]
        return type(first)(*mapped) if hasattr(first, "_fields") else type(first)(mapped)  # type: ignore[return-value]
    if first is None:
        return first
    raise TypeError(f"state leaves must be tensors or tuples of tensors, got {type(first).__name__}")


def state_leaves(state: Any) -> list[Tensor]:
    """The tensors of ``state`` in field order."""
    if isinstance(state, Tensor):
        return [state]
    if isinstance(state, tuple):
        return [t for s in state for t in state_leaves(s)]
    if state is None:
        return []
    raise TypeError(f"state leaves must be tensors or tuples of tensors, got {type(state).__name__}")


def state_where(cond: Tensor, new: S, old: S) -> S:
    """Row-wise select: ``new`` where ``cond[b]`` is True, else ``old``.

    ``cond`` is a bool tensor ``[B]``; it broadcasts over the trailing dimensions of each leaf.
    """

    def pick(n: Tensor, o: Tensor) -> Tensor:
        c = cond.reshape(cond.shape[0], *([1] * (n.dim() - 1)))
        return torch.where(c, n, o)

    return state_zip(pick, new, old)


def state_detach(state: S) -> S:
    """Detach every tensor (truncated back-propagation between chunks)."""
    return state_map(Tensor.detach, state)


def state_index(state: S, index: Tensor | slice | int | Sequence[int]) -> S:
    """Select batch rows of every tensor: ``leaf[index]`` (the batch is the leading dimension)."""
    if isinstance(index, int):
        index = slice(index, index + 1)
    return state_map(lambda t: t[index], state)


def state_stack(states: Sequence[S], dim: int = 1) -> S:
    """Stack a sequence of states along a new dimension (``dim=1`` gives ``[B, T, ...]``)."""
    return state_zip(lambda *ts: torch.stack(ts, dim), *states)


def state_batch_size(state: Any) -> int | None:
    """The common leading dimension of the state's tensors, or None for an empty state."""
    leaves = state_leaves(state)
    if not leaves:
        return None
    sizes = {t.shape[0] for t in leaves}
    if len(sizes) != 1:
        raise ValueError(f"state tensors disagree on the batch size: {sorted(sizes)}")
    return sizes.pop()
