"""The nondeterministic stack of DuSell & Chiang (NS-RNN 2020, section 3; the renormalizing
RNS-RNN 2022, section 3; the memory-limited variant 2022, section 5), transcribed literally: per
batch row the inner weights ``γ[i → j][q, x → r, y]`` and forward weights ``α[j][r, y]`` in a
Python dict, every sum an explicit loop, in real (not log) space.

A weighted PDA with states ``Q`` and stack symbols ``S`` reads one transition-weight triple per
step ``j = 1..T``: ``push[q, x, r, y]`` (``q, x → r, xy``), ``repl[q, x, r, y]`` (``q, x → r, y``)
and ``pop[q, x, r]`` (``q, x → r, ε``).  ``γ[i → j][q, x → r, y]`` is the total weight of the runs
from step ``i`` (state ``q``, ``x`` on top) to step ``j`` (state ``r``, ``y`` on top of that
``x``, which is never popped in between); ``α[j][r, y]`` is the total weight of the runs that end
at step ``j`` in state ``r`` with ``y`` on top.  With the start ``α[−1] = α[0] = γ[−1 → 0] =
1[q = r = 0, x = y = 0]`` (state 0, the bottom symbol 0, which may be replaced but never popped)::

    γ[j−1 → j] = push_j
    γ[i → j][q,x→r,y] = Σ_{s,z} γ[i → j−1][q,x→s,z] repl_j[s,z→r,y]
                       + Σ_{k=i+1}^{j−2} Σ_{t} γ[i → k][q,x→t,y] Σ_{s,z} γ[k → j−1][t,y→s,z] pop_j[s,z→r]
    α[j][r,y] = Σ_{i=−1}^{j−1} Σ_{q,x} α[i][q,x] γ[i → j][q,x→r,y]

The memory-limited variant with window ``depth`` keeps only ``γ[i → j]`` with ``j − i ≤ depth + 1``
(every other inner weight is 0); with ``depth ≥ T`` it is the unlimited stack.
"""

from __future__ import annotations

import itertools

import torch
from torch import Tensor


def nondeterministic_reference(push: Tensor, repl: Tensor, pop: Tensor, depth: int | None = None) -> Tensor:
    """Forward weights of the nondeterministic stack from the log transition weights
    ``push, repl [B, T, Q, S, Q, S]`` and ``pop [B, T, Q, S, Q]`` of steps ``1..T``.

    Returns ``log α [B, T, Q, S]`` (steps ``1..T``).  ``depth``: the memory-limited window
    (``None``: unlimited)."""
    B, T, Q, S = push.shape[:4]
    push, repl, pop = push.exp(), repl.exp(), pop.exp()
    states = list(itertools.product(range(Q), range(S)))
    zero = push.new_zeros(())
    out = []
    for b in range(B):
        gamma: dict[tuple[int, int], dict[tuple[int, int, int, int], Tensor]] = {}
        start = {(q, x): (push.new_ones(()) if q == x == 0 else zero) for q, x in states}
        alpha = {-1: start, 0: start}
        gamma[(-1, 0)] = {
            (q, x, r, y): (push.new_ones(()) if q == x == r == y == 0 else zero)
            for q, x in states
            for r, y in states
        }

        def g(i: int, j: int, key: tuple[int, int, int, int], gamma=gamma) -> Tensor:
            return gamma[(i, j)][key] if (i, j) in gamma else zero

        row = []
        for j in range(1, T + 1):
            pu, re, po = push[b, j - 1], repl[b, j - 1], pop[b, j - 1]
            lo = -1 if depth is None else max(-1, j - depth - 1)
            for i in range(lo, j):
                col = {}
                for (q, x), (r, y) in itertools.product(states, states):
                    if i == j - 1:
                        col[(q, x, r, y)] = pu[q, x, r, y]
                        continue
                    total = zero
                    for s, z in states:
                        total = total + g(i, j - 1, (q, x, s, z)) * re[s, z, r, y]
                    for k in range(i + 1, j - 1):
                        for t in range(Q):
                            inner = zero
                            for s, z in states:
                                inner = inner + g(k, j - 1, (t, y, s, z)) * po[s, z, r]
                            total = total + g(i, k, (q, x, t, y)) * inner
                    col[(q, x, r, y)] = total
                gamma[(i, j)] = col
            a = {}
            for r, y in states:
                total = zero
                for i in range(lo, j):
                    for q, x in states:
                        total = total + alpha[i][(q, x)] * gamma[(i, j)][(q, x, r, y)]
                a[(r, y)] = total
            alpha[j] = a
            row.append(torch.stack([torch.stack([a[(r, y)] for y in range(S)]) for r in range(Q)]))
        out.append(torch.stack(row))
    return torch.stack(out).log()
