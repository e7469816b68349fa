"""How close a trained LSTM is to Hewitt et al.'s LSTM construction (Hewitt et al. 2020, E.6, G.2):
stack slots decoded from ``h`` and ``c``, gate saturation, and learned units matched one to one
with the construction's.  Plain functions over traces; :class:`memrnn.lit.HewittComparison` logs
them during training."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

from memrnn.analysis.matching import correlation, match_units
from memrnn.analysis.probe import fit_linear_probe
from memrnn.analysis.trace import layer_trace
from memrnn.constructions.hewitt import encode_dyck

GATES = ("i", "f", "o", "c", "h")


def dyck_slots(language: Any, strings: Sequence[Sequence[int]], steps: int) -> Tensor:
    """``[B, steps, m]`` long: the bracket in each stack slot (bottom first, the LSTM
    construction's layout; 0 = empty, ``i + 1`` = bracket ``i``) after ``BOS w_1 .. w_t``."""
    k, m = language.k, language.m
    out = torch.zeros(len(strings), steps, m, dtype=torch.long)
    for b, s in enumerate(strings):
        stack: list[int] = []
        for t, tok in enumerate(s[: steps - 1], start=1):
            if tok < k:
                stack.append(tok)
            elif tok < 2 * k and stack:
                stack.pop()
            for j, sym in enumerate(stack[:m]):
                out[b, t, j] = sym + 1
    return out


def construction_trace(language: Any, strings: Sequence[Sequence[int]]) -> dict[str, Tensor]:
    """The float64 trace of Hewitt's LSTM generator for ``language`` (log encoding for
    ``k >= 2``) on ``BOS w_1 .. w_n`` for each string."""
    enc = "log" if language.k >= 2 else "one_hot"
    g = encode_dyck(language.k, language.m, "lstm", enc, dtype=torch.float64)
    trace, _ = layer_trace(g.embedding, g.layer, strings, language.bos_id)
    return trace


def hewitt_agreement(
    language: Any, strings: Sequence[Sequence[int]], trace: dict[str, Tensor], mask: Tensor
) -> tuple[dict[str, float], dict[str, np.ndarray]]:
    """Compare an LSTM's ``trace`` (keys ``i``, ``f``, ``o``, ``c``, ``h``, ``[B, T, (layers,) H]``;
    the top layer is read) on ``strings`` of a Dyck-(k,m) ``language`` with the construction.

    Returns metrics and, per gate ``i``/``f``/``o``/``c``, the ``|corr|`` matrix of learned units
    (rows, in matched order) against the construction's units:

    * ``slot{j}_h_acc``, ``slot{j}_c_acc`` and their means ``slot_h_acc``, ``slot_c_acc``: held-out
      accuracy of a linear probe decoding stack slot ``j`` from ``h_t`` / ``c_t`` (fit on the
      first half of the strings, scored on the rest);
    * ``saturation_i``, ``_f``, ``_o``: the share of gate values within 0.05 of 0 or 1;
    * ``match_i``, ``_f``, ``_o``, ``_c``: mean ``|corr|`` of learned units with the construction's
      under an optimal one-to-one assignment (:func:`~memrnn.analysis.matching.match_units`).
    """
    if not (hasattr(language, "k") and hasattr(language, "m") and language.bracket_bound == language.m):
        raise ValueError(f"hewitt_agreement needs a Dyck-(k,m) language, got {language}")
    missing = [k for k in GATES if k not in trace]
    if missing:
        raise ValueError(
            f"hewitt_agreement needs an LSTM trace (keys {missing} missing; it has {sorted(trace)})"
        )
    real = mask.bool()
    top = {k: trace[k][..., -1, :] if trace[k].dim() == 4 else trace[k] for k in GATES}
    slots = dyck_slots(language, strings, real.shape[1])
    half = len(strings) // 2
    tr, te = real.clone(), real.clone()
    tr[half:], te[:half] = False, False
    metrics: dict[str, float] = {}
    for feat in ("h", "c"):
        accs = []
        for j in range(language.m):
            y = slots[..., j]
            res = fit_linear_probe(top[feat][tr], y[tr], top[feat][te], y[te], "class")
            metrics[f"slot{j + 1}_{feat}_acc"] = res.accuracy
            accs.append(res.accuracy)
        metrics[f"slot_{feat}_acc"] = float(np.mean(accs))
    for g in ("i", "f", "o"):
        v = top[g][real]
        metrics[f"saturation_{g}"] = float(((v < 0.05) | (v > 0.95)).double().mean())
    ref = construction_trace(language, strings)
    corr: dict[str, np.ndarray] = {}
    for g in ("i", "f", "o", "c"):
        a = top[g][real].double().numpy()
        b = ref[g][..., -1, :][real].numpy()
        rows, cols, r = match_units(a, b)
        metrics[f"match_{g}"] = float(r.mean())
        corr[g] = np.abs(correlation(a, b))[rows][:, np.argsort(cols)] if len(rows) else np.zeros((0, 0))
    return metrics, corr
