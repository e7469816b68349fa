"""The tape of the Tape-RNN of Delétang et al. (2023, "Neural networks and the Chomsky hierarchy",
section 4 and appendix B), transcribed literally: a circular list of ``M`` cells per batch row,
the head on cell 0, every cell of the new tape written by its own Python expression.

Each step writes ``w`` into the head's cell and then moves the tape by a distribution over the
actions ``stay``, ``left`` and ``right`` (with ``W = [w, c_1, …, c_{M−1}]`` the tape after the
write, indices mod ``M``):

    c'_i = stay · W_i + left · W_{i+1} + right · W_{i−1}

The head reads ``c'_0``.  The paper's model (``TapeInputLengthJumpCore`` in the authors' code) also
jumps by the input's length ``L`` (one per batch row here): with ``jumps`` and the two actions
``jump_left`` and ``jump_right``,

    c'_i = stay · W_i + left · W_{i+1} + right · W_{i−1} + jump_left · W_{i+L} + jump_right · W_{i−L}
"""

from __future__ import annotations

import torch
from torch import Tensor


def tape_reference(
    actions: Tensor, written: Tensor, cells: int, jumps: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """Run a tape of ``cells`` cells from all zeros over ``actions [B, T, 3]`` (stay, left,
    right; ``[B, T, 5]`` with jump left and jump right when ``jumps [B]``, each row's input
    length, is given) and ``written [B, T, m]``.  Returns ``readings [B, T, m]`` (the head's cell
    after each step) and the final tape ``[B, cells, m]`` (head first)."""
    B, T, m = written.shape
    readings, finals = [], []
    for b in range(B):
        tape = [torch.zeros(m, dtype=written.dtype, device=written.device) for _ in range(cells)]
        row = []
        for t in range(T):
            stay, left, right = actions[b, t, 0], actions[b, t, 1], actions[b, t, 2]
            W = [written[b, t], *tape[1:]]
            tape = [
                stay * W[i] + left * W[(i + 1) % cells] + right * W[(i - 1) % cells] for i in range(cells)
            ]
            if jumps is not None:
                L = int(jumps[b])
                jump_left, jump_right = actions[b, t, 3], actions[b, t, 4]
                tape = [
                    tape[i] + jump_left * W[(i + L) % cells] + jump_right * W[(i - L) % cells]
                    for i in range(cells)
                ]
            row.append(tape[0])
        readings.append(torch.stack(row) if row else written.new_zeros(0, m))
        finals.append(torch.stack(tape))
    return torch.stack(readings), torch.stack(finals)
