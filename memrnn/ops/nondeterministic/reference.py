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
(every other inner weight is 0); with ``depth ≥ T`` it is the unlimited stack.  DuSell & Chiang's
code names the window by the start times it keeps, ``window_size = D``: ``j − D ≤ i ≤ j − 1``
(``LimitedNondeterministicStack.update``), the same window as ``depth = D − 1``; the reference
takes either (``window_size`` bounds the sums over ``i`` as their code does).

The bottom symbol.  The start above is the fix of DuSell & Chiang's 2023 code (their
``NondeterministicStack``, default ``original_bottom_symbol_behavior=False``): a fake push from
step −1 puts the bottom on the stack at step 0, so a pop can uncover it again.  The code that
produced the published NS-RNN (CoNLL 2020) and RNS-RNN (ICLR 2022) numbers
(``nsrnn/models/nondeterministic_stack.py`` at tags ``conll2020``, ``iclr2022``; kept as
``OldNondeterministicStack``, ``original_bottom_symbol_behavior=True``, in the 2023 code) starts
from ``α[0]`` alone: with ``bottom_symbol="original"`` there is no ``α[−1]`` and no ``γ[−1 → j]``,
the sums over ``i`` start at 0.  Step 1 can then only push (no replace of the bottom), and the
element it pushes is never popped (popping it needs a run from a start time before 0): once a
symbol is pushed the bottom is never on top again.  Its vector stack
(``OldVectorNondeterministicStack``) has no bottom vector: no ``ζ[−1 → j]``.

The vector RNS-RNN (DuSell & Chiang 2023, "The Surprising Computational Power of Nondeterministic
Stack RNNs") attaches a vector in ``(0, 1)^m`` to every stack element: a push at step ``j``
pushes the controller's ``v_j``, a replace changes the symbol and keeps the vector, a pop uncovers
the vector below; the bottom element holds ``v_0``.  ``ζ[i → j][q, x → r, y] ∈ R^m`` is the
weighted sum of the top vectors of the runs that ``γ[i → j]`` counts, ``η[j][r, y]`` that of the
runs that ``α[j]`` counts, and the reading is the expected top vector per ``(r, y)``::

    ζ[−1 → 0][0,0→0,0] = v_0            ζ[j−1 → j] = push_j · v_j
    ζ[i → j][q,x→r,y] = Σ_{s,z} ζ[i → j−1][q,x→s,z] repl_j[s,z→r,y]
                       + Σ_{k=i+1}^{j−2} Σ_{t} ζ[i → k][q,x→t,y] Σ_{s,z} γ[k → j−1][t,y→s,z] pop_j[s,z→r]
    η[j][r,y] = Σ_{i=−1}^{j−1} Σ_{q,x} α[i][q,x] ζ[i → j][q,x→r,y]
    reading_j[r,y] = η[j][r,y] / Σ_{r',y'} α[j][r',y']
"""

from __future__ import annotations

import itertools

import torch
from torch import Tensor


def nondeterministic_reference(
    push: Tensor,
    repl: Tensor,
    pop: Tensor,
    depth: int | None = None,
    bottom_symbol: str = "fixed",
    *,
    window_size: int | None = None,
) -> Tensor:
    """Forward weights of the nondeterministic stack from the log transition weights
    ``push, repl [B, T, Q, S, Q, S]`` and ``pop [B, T, Q, S, Q]`` of steps ``1..T``.

    Returns ``log α [B, T, Q, S]`` (steps ``1..T``).  ``depth``: the memory-limited window
    (``None``: unlimited), or ``window_size``: the same window as DuSell & Chiang's code names it
    (module docstring; at most one of the two); ``bottom_symbol``: ``"fixed"`` (the 2023 code) or
    ``"original"`` (the 2020/2022 code: no start time −1; module docstring)."""
    window = _window(depth, window_size)
    return _literal(push, repl, pop, None, None, window, _original(bottom_symbol))[0]


def vector_nondeterministic_reference(
    push: Tensor,
    repl: Tensor,
    pop: Tensor,
    vectors: Tensor,
    bottom: Tensor | None = None,
    depth: int | None = None,
    bottom_symbol: str = "fixed",
    *,
    window_size: int | None = None,
) -> tuple[Tensor, Tensor]:
    """The vector RNS-RNN's stack (module docstring) from the log transition weights as in
    :func:`nondeterministic_reference`, the log pushed vectors ``vectors [B, T, m]`` of steps
    ``1..T`` and the log bottom vector ``bottom [m]`` (``None``: the zero vector; with
    ``bottom_symbol="original"`` there is no bottom element to hold one, and it must be None);
    ``depth`` or ``window_size`` as there.

    Returns ``(log α [B, T, Q, S], reading [B, T, Q, S, m])`` (steps ``1..T``)."""
    original = _original(bottom_symbol)
    if original and bottom is not None:
        raise ValueError("bottom_symbol='original' has no bottom vector (no ζ[−1 → j]); pass bottom=None")
    if bottom is None:
        bottom = torch.full(vectors.shape[-1:], float("-inf"), dtype=vectors.dtype)
    return _literal(push, repl, pop, vectors, bottom, _window(depth, window_size), original)


def _window(depth: int | None, window_size: int | None) -> int | None:
    """The start times kept per step (DuSell & Chiang's ``window_size``) from ``depth`` or
    ``window_size``; None: every one (the unlimited stack)."""
    if depth is not None and window_size is not None:
        raise ValueError(f"give depth or window_size, not both (got {depth!r} and {window_size!r})")
    return window_size if depth is None else depth + 1


def _original(bottom_symbol: str) -> bool:
    """Whether ``bottom_symbol`` (``"fixed"`` or ``"original"``) is the 2020/2022 behaviour."""
    if bottom_symbol not in ("fixed", "original"):
        raise ValueError(f"bottom_symbol must be one of fixed, original, got {bottom_symbol!r}")
    return bottom_symbol == "original"


def _literal(push, repl, pop, vectors, bottom, window, original=False):
    """The recurrences of the module docstring, one batch row at a time; ``window``: the start
    times kept per step (``i ≥ j − window``, DuSell & Chiang's ``window_size``; None: all);
    ``vectors`` None: no ``ζ``, ``η`` (the readings returned are then None); ``original``: no
    start time −1 (no ``α[−1]``, ``γ[−1 → j]``, ``ζ[−1 → j]``), as the 2020/2022 code."""
    B, T, Q, S = push.shape[:4]
    push, repl, pop = push.exp(), repl.exp(), pop.exp()
    states = list(itertools.product(range(Q), range(S)))
    zero = push.new_zeros(())
    with_vectors = vectors is not None
    if with_vectors:
        vectors, bottom = vectors.exp(), bottom.exp()
        zero_v = vectors.new_zeros(vectors.shape[-1])
    out, readings = [], []
    for b in range(B):
        gamma: dict[tuple[int, int], dict[tuple[int, int, int, int], Tensor]] = {}
        zeta: dict[tuple[int, int], dict[tuple[int, int, int, int], Tensor]] = {}
        start = {(q, x): (push.new_ones(()) if q == x == 0 else zero) for q, x in states}
        first = 0 if original else -1  # the earliest start time
        alpha = {0: start} if original else {-1: start, 0: start}
        if not original:
            gamma[(-1, 0)] = {
                (q, x, r, y): (push.new_ones(()) if q == x == r == y == 0 else zero)
                for q, x in states
                for r, y in states
            }
        if with_vectors and not original:
            zeta[(-1, 0)] = {
                (q, x, r, y): (bottom if q == x == r == y == 0 else zero_v)
                for q, x in states
                for r, y in states
            }

        def g(i: int, j: int, key: tuple[int, int, int, int], gamma=gamma) -> Tensor:
            return gamma[(i, j)][key] if (i, j) in gamma else zero

        def zt(i: int, j: int, key: tuple[int, int, int, int], zeta=zeta) -> Tensor:
            return zeta[(i, j)][key] if (i, j) in zeta else zero_v

        row, row_readings = [], []
        for j in range(1, T + 1):
            pu, re, po = push[b, j - 1], repl[b, j - 1], pop[b, j - 1]
            lo = first if window is None else max(first, j - window)
            for i in range(lo, j):
                col, zcol = {}, {}
                for (q, x), (r, y) in itertools.product(states, states):
                    if i == j - 1:
                        col[(q, x, r, y)] = pu[q, x, r, y]
                        if with_vectors:
                            zcol[(q, x, r, y)] = pu[q, x, r, y] * vectors[b, j - 1]
                        continue
                    total = zero
                    ztotal = zero_v if with_vectors else None
                    for s, z in states:
                        total = total + g(i, j - 1, (q, x, s, z)) * re[s, z, r, y]
                        if with_vectors:
                            ztotal = ztotal + zt(i, j - 1, (q, x, s, z)) * re[s, z, r, y]
                    for k in range(i + 1, j - 1):
                        for t in range(Q):
                            inner = zero
                            for s, z in states:
                                inner = inner + g(k, j - 1, (t, y, s, z)) * po[s, z, r]
                            total = total + g(i, k, (q, x, t, y)) * inner
                            if with_vectors:
                                ztotal = ztotal + zt(i, k, (q, x, t, y)) * inner
                    col[(q, x, r, y)] = total
                    if with_vectors:
                        zcol[(q, x, r, y)] = ztotal
                gamma[(i, j)] = col
                if with_vectors:
                    zeta[(i, j)] = zcol
            a, eta = {}, {}
            for r, y in states:
                total = zero
                ztotal = zero_v if with_vectors else None
                for i in range(lo, j):
                    for q, x in states:
                        total = total + alpha[i][(q, x)] * gamma[(i, j)][(q, x, r, y)]
                        if with_vectors:
                            ztotal = ztotal + alpha[i][(q, x)] * zeta[(i, j)][(q, x, r, y)]
                a[(r, y)] = total
                eta[(r, y)] = ztotal
            alpha[j] = a
            row.append(torch.stack([torch.stack([a[(r, y)] for y in range(S)]) for r in range(Q)]))
            if with_vectors:
                norm = sum(a.values())
                row_readings.append(
                    torch.stack([torch.stack([eta[(r, y)] / norm for y in range(S)]) for r in range(Q)])
                )
        out.append(torch.stack(row))
        if with_vectors:
            readings.append(torch.stack(row_readings))
    return torch.stack(out).log(), (torch.stack(readings) if with_vectors else None)
