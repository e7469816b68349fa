"""The superposition stack of Joulin & Mikolov (2015), transcribed literally: an unbounded list
per batch row, every cell updated by its own Python expression (section 3.1, equations 5–6).

With actions ``a = (push, pop, no-op)`` (a distribution) and the pushed vector ``v``:

    s'[0] = push · v      + pop · s[1]   + no-op · s[0]
    s'[i] = push · s[i−1] + pop · s[i+1] + no-op · s[i]     (i ≥ 1)

cells past the end are the zero vector (the empty stack).  The list grows by one cell per step;
it is the obviously right version :func:`memrnn.ops.superposition.superposition_step` is tested
against, not a fast path.
"""

from __future__ import annotations

import torch
from torch import Tensor


def superposition_reference(actions: Tensor, pushed: Tensor) -> tuple[Tensor, list[list[Tensor]]]:
    """Run the stack over ``actions [B, T, 3]`` (push, pop, no-op; each row sums to 1) and
    ``pushed [B, T, m]`` from the empty stack.

    Returns ``readings [B, T, m]`` (the top cell after each step) and, per row, the final list of
    cells (top first, ``T`` of them)."""
    B, T, m = pushed.shape
    readings = []
    finals = []
    for b in range(B):
        cells: list[Tensor] = []
        row = []
        for t in range(T):
            push, pop, noop = actions[b, t, 0], actions[b, t, 1], actions[b, t, 2]

            def cell(i: int, cells: list[Tensor] = cells) -> Tensor:
                return (
                    cells[i]
                    if 0 <= i < len(cells)
                    else torch.zeros(m, dtype=pushed.dtype, device=pushed.device)
                )

            new = [push * pushed[b, t] + pop * cell(1) + noop * cell(0)]
            for i in range(1, len(cells) + 1):
                new.append(push * cell(i - 1) + pop * cell(i + 1) + noop * cell(i))
            cells = new
            row.append(cells[0])
        readings.append(torch.stack(row) if row else pushed.new_zeros(0, m))
        finals.append(cells)
    return torch.stack(readings), finals
