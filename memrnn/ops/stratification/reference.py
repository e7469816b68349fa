"""The stratification stack and the neural queue of Grefenstette et al. (2015, "Learning to
transduce with unbounded memory", equations 1–3 and section 3.2), transcribed literally: per
batch row a list of values and strengths, indices ``1..t`` as in the paper (bottom / front
first), every strength and the reading by explicit Python sums.

Stack, step ``t`` with pop strength ``u``, push strength ``d`` and value ``v``:

    V_t[i] = V_{t−1}[i] (i < t),  V_t[t] = v
    s_t[i] = max(0, s_{t−1}[i] − max(0, u − Σ_{j=i+1}^{t−1} s_{t−1}[j])) (i < t),  s_t[t] = d
    r_t    = Σ_{i=1}^{t} min(s_t[i], max(0, 1 − Σ_{j=i+1}^{t} s_t[j])) · V_t[i]

The queue takes the sums over ``j < i`` instead of ``j > i`` (it pops and reads from the front).
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor


def stratification_reference(
    pops: Tensor, pushes: Tensor, values: Tensor, kind: Literal["stack", "queue"] = "stack"
) -> tuple[Tensor, Tensor]:
    """Run from the empty structure: ``pops``, ``pushes`` ``[B, T]`` (``u``, ``d``), ``values
    [B, T, m]``.  Returns ``readings [B, T, m]`` and the final strengths ``[B, T]`` (element
    ``i`` pushed at step ``i``)."""
    if kind not in ("stack", "queue"):
        raise ValueError(f"kind must be 'stack' or 'queue', got {kind!r}")
    B, T, m = values.shape
    readings, finals = [], []
    for b in range(B):
        V: list[Tensor] = []
        s: list[Tensor] = []
        row = []
        for t in range(T):
            u = pops[b, t]
            new_s = []
            for i in range(len(s)):
                others = s[i + 1 :] if kind == "stack" else s[:i]
                covered = sum(others, torch.zeros((), dtype=values.dtype))
                new_s.append(torch.clamp_min(s[i] - torch.clamp_min(u - covered, 0), 0))
            s = [*new_s, pushes[b, t]]
            V = [*V, values[b, t]]
            r = torch.zeros(m, dtype=values.dtype)
            for i in range(len(s)):
                others = s[i + 1 :] if kind == "stack" else s[:i]
                covered = sum(others, torch.zeros((), dtype=values.dtype))
                r = r + torch.minimum(s[i], torch.clamp_min(1 - covered, 0)) * V[i]
            row.append(r)
        readings.append(torch.stack(row))
        finals.append(torch.stack(s))
    return torch.stack(readings), torch.stack(finals)
