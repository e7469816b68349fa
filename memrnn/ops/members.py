"""The member references' one loop: a recurrence's reference run once per member on its slices.

Members are M runs trained as one model (``docs/guide/members.md``): every parameter and input
carries a leading member dimension ``[M, ...]``.  Each op's member path is tested against its
``*_member_reference``, which is the op's single reference run member by member; that loop is
:func:`per_member`.  :func:`member_rows` is the members' embedding lookup.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor


def member_slice(arg: Any, m: int) -> Any:
    """``arg``'s member ``m``: a tensor's ``[m]`` slice, a tuple or list's items each sliced
    (nested: a value MLP's ``((w, b), ...)``) and a dict's values, anything else (None, a number, a function) as is."""
    if isinstance(arg, Tensor):
        return arg[m]
    if isinstance(arg, (tuple, list)):
        return type(arg)(member_slice(a, m) for a in arg)
    if isinstance(arg, dict):
        return {k: member_slice(v, m) for k, v in arg.items()}
    return arg


def _stacked(results: list[Any]) -> Any:
    first = results[0]
    if first is None:
        return None
    if isinstance(first, Tensor):
        return torch.stack(results)
    return tuple(_stacked(list(parts)) for parts in zip(*results, strict=True))


def per_member(fn: Callable[..., Any], members: int, *args: Any, **kwargs: Any) -> Any:
    """``fn`` run on member ``m``'s slices (:func:`member_slice` of every argument) for ``m`` in
    ``range(members)``, its results stacked along a new first dimension: a tensor ``[M, ...]``, a
    tuple of them (each result field stacked; a field that is None stays None).  Every tensor
    argument, at any depth of a tuple or list, must have the member dimension first."""
    if members < 1:
        raise ValueError(f"per_member needs at least one member, got {members}")
    return _stacked([fn(*member_slice(args, m), **member_slice(kwargs, m)) for m in range(members)])


def member_rows(table: Tensor, ids: Tensor, *, per_member: bool) -> Tensor:
    """The members' rows of ``table [M, V, n]`` at token ids: ``ids [...]`` read by every member
    or, with ``per_member``, ``[M, ...]`` (each member its own) -> ``[M, ..., n]``, member ``m``'s
    ``table[m][ids]``; one gather over the ``M·V`` rows (its backward accumulates the rows in
    order).  The ids must lie in ``0..V−1`` (an id past ``V`` would read the next member's row):
    the callers check them."""
    M, V = table.shape[0], table.shape[1]
    ids = ids if per_member else ids[None]
    offsets = torch.arange(M, device=ids.device).view(M, *([1] * (ids.dim() - 1))) * V
    return table.reshape(M * V, -1)[ids + offsets]
