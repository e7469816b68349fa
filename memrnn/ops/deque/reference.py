"""The neural DeQue of Grefenstette et al. (2015, "Learning to transduce with unbounded memory",
section 3.3), transcribed literally: per batch row a list of values and strengths indexed from the
bottom, every strength and both readings by explicit Python sums.

The DeQue takes a pop strength, a push strength and a value for each end (``top``, ``bot``).
Step ``t`` pops from the top, then from the bottom (what the top pop left), then pushes ``v_bot``
below the bottom and ``v_top`` above the top, and reads both ends:

    s'[i]   = max(0, s_{t−1}[i] − max(0, u_top − Σ_{j>i} s_{t−1}[j]))
    s''[i]  = max(0, s'[i] − max(0, u_bot − Σ_{j<i} s'[j]))
    V_t     = [v_bot, V_{t−1}, v_top],  s_t = [d_bot, s'', d_top]
    r_top   = Σ_i min(s_t[i], max(0, 1 − Σ_{j>i} s_t[j])) · V_t[i]
    r_bot   = Σ_i min(s_t[i], max(0, 1 − Σ_{j<i} s_t[j])) · V_t[i]
"""

from __future__ import annotations

import torch
from torch import Tensor


def _sum(xs: list[Tensor], like: Tensor) -> Tensor:
    return sum(xs, torch.zeros((), dtype=like.dtype))


def deque_reference(
    pops_top: Tensor,
    pops_bot: Tensor,
    pushes_top: Tensor,
    pushes_bot: Tensor,
    values_top: Tensor,
    values_bot: Tensor,
) -> tuple[Tensor, Tensor, Tensor]:
    """Run from the empty DeQue: pop and push strengths ``[B, T]`` for each end, pushed values
    ``[B, T, m]`` for each end.  Returns the readings ``r_top``, ``r_bot`` ``[B, T, m]`` and the
    final strengths ``[B, 2T]``, bottom first."""
    B, T, m = values_top.shape
    tops, bots, finals = [], [], []
    for b in range(B):
        V: list[Tensor] = []
        s: list[Tensor] = []
        row_top, row_bot = [], []
        for t in range(T):
            u_top, u_bot = pops_top[b, t], pops_bot[b, t]
            after_top = [
                torch.clamp_min(s[i] - torch.clamp_min(u_top - _sum(s[i + 1 :], values_top), 0), 0)
                for i in range(len(s))
            ]
            after_bot = [
                torch.clamp_min(after_top[i] - torch.clamp_min(u_bot - _sum(after_top[:i], values_top), 0), 0)
                for i in range(len(s))
            ]
            s = [pushes_bot[b, t], *after_bot, pushes_top[b, t]]
            V = [values_bot[b, t], *V, values_top[b, t]]
            r_top = torch.zeros(m, dtype=values_top.dtype)
            r_bot = torch.zeros(m, dtype=values_top.dtype)
            for i in range(len(s)):
                r_top = (
                    r_top + torch.minimum(s[i], torch.clamp_min(1 - _sum(s[i + 1 :], values_top), 0)) * V[i]
                )
                r_bot = r_bot + torch.minimum(s[i], torch.clamp_min(1 - _sum(s[:i], values_top), 0)) * V[i]
            row_top.append(r_top)
            row_bot.append(r_bot)
        tops.append(torch.stack(row_top))
        bots.append(torch.stack(row_bot))
        finals.append(torch.stack(s))
    return torch.stack(tops), torch.stack(bots), torch.stack(finals)
