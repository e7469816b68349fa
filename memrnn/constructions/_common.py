"""What the DFA and PDA constructions share: vocabularies and the state
graph read from a network's step (both extraction methods)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Literal

import torch
from torch import Tensor


def check_vocabulary(
    alphabet: Sequence[str], vocabulary: Sequence[str] | None, ignore: Iterable[str]
) -> tuple:
    """The input symbols in id order (default ``alphabet``): every automaton symbol present, and
    every other symbol listed in ``ignore``."""
    vocabulary = tuple(alphabet if vocabulary is None else vocabulary)
    ignore = set(ignore)
    if len(set(vocabulary)) != len(vocabulary):
        raise ValueError(f"duplicate symbols in vocabulary {vocabulary}")
    for a in vocabulary:
        if a not in alphabet and a not in ignore:
            raise ValueError(
                f"vocabulary symbol {a!r} is not in the automaton's alphabet {tuple(alphabet)}; "
                f"list it in ignore= to give it identity transitions"
            )
    missing = [a for a in alphabet if a not in vocabulary]
    if missing:
        raise ValueError(f"the vocabulary {vocabulary} lacks the automaton's symbols {missing}")
    return vocabulary


def state_graph(
    successors: Callable[[Tensor], Tensor],
    start: Tensor,
    *,
    method: Literal["basis", "reachable"],
    threshold: float,
    names: Sequence[str] | None = None,
) -> tuple[list[str], Tensor, list[tuple[int, int, int]]]:
    """The states and transitions a network's step implements.

    Args:
        successors: state codes ``[S, n]`` -> next states ``[S, M, n]`` under each of ``M``
            moves (inputs, or input × stack reading).
        start: the layer's start state ``[n]``.
        method: ``"basis"``: the states are the ``n`` one-hot codes (named by ``names``, default
            ``q0, q1, ...``) and a move leads to the largest unit of the next state;
            ``"reachable"``: breadth-first from ``start`` rounded at ``threshold``, every next
            state rounded the same way, states named ``s0, s1, ...`` in discovery order.
        threshold: a next state none of whose units exceeds it is a missing transition (dead).

    Returns:
        ``(names, codes [S, n], edges)`` with ``edges`` the live ``(state, move, next state)``.
    """
    n = start.shape[-1]
    if method == "basis":
        names = list(names) if names is not None else [f"q{i}" for i in range(n)]
        if len(names) != n:
            raise ValueError(f"states has {len(names)} names but the layer has {n} state units")
        codes = torch.eye(n, dtype=torch.float64)
        nxt = successors(codes)
        edges = [
            (j, move, int(nxt[j, move].argmax()))
            for j in range(n)
            for move in range(nxt.shape[1])
            if float(nxt[j, move].max()) > threshold
        ]
        return names, codes, edges
    if method != "reachable":
        raise ValueError(f"unknown method {method!r}; choose 'basis' or 'reachable'")
    first = (start.detach().cpu() > threshold).to(torch.float64)
    found, index, edges, frontier = [first], {tuple(first.tolist()): 0}, [], [0]
    while frontier:
        nxt = successors(torch.stack([found[i] for i in frontier]))
        new_frontier = []
        for f, j in enumerate(frontier):
            for move in range(nxt.shape[1]):
                code = (nxt[f, move] > threshold).to(torch.float64)
                if not bool(code.any()):
                    continue
                key = tuple(code.tolist())
                if key not in index:
                    index[key] = len(found)
                    found.append(code)
                    new_frontier.append(index[key])
                edges.append((j, move, index[key]))
        frontier = new_frontier
    return [f"s{i}" for i in range(len(found))], torch.stack(found), edges


def accepting(
    names: Sequence[str], codes: Tensor, accept: Iterable[str] | Callable[[Tensor], bool]
) -> list[str]:
    """The accepting states: those whose code satisfies the predicate ``accept``, or the named ones."""
    if callable(accept):
        return [a for a, code in zip(names, codes, strict=True) if accept(code)]
    wanted = set(accept)
    return [a for a in names if a in wanted]
