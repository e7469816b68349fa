"""The empirical form of Stogin et al.'s (2020) Theorem 3.7, random walks through a PDA, and a
trained nnPDA's stack actions against the language's PDA.

:func:`deviation_from_ideal` runs an nnPDA and the vectorized PDA of Definition B.9 with the
same weights in lockstep and returns, per string, ``max_t ‖Q^t − Q̄^t‖∞`` and
``max_t sup_i ‖K^t_i − K̄^t_i‖∞`` (every cell: the window and the tail standing for all deeper
cells), without storing the trajectories, so strings of 10^5 steps cost ``O(B·D)`` memory.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from memrnn.constructions.pda import ideal_step
from memrnn.core.state import state_where
from memrnn.languages.automata import DPDA, EMPTY
from memrnn.layers.nnpda import NNPDA
from memrnn.ops.stack import action_codes


@dataclass
class Deviation:
    """Per string ``[B]``: ``q_err`` = max over steps of ``‖Q − Q̄‖∞``, ``stack_err`` = max over
    steps of ``sup_i ‖K_i − K̄_i‖∞``, ``overflow`` (the ideal stack outgrew the window; the
    errors are then meaningless), and the final ``q`` and ideal ``q_bar`` ``[B, n]``."""

    q_err: Tensor
    stack_err: Tensor
    overflow: Tensor
    q: Tensor
    q_bar: Tensor


@torch.no_grad()
def deviation_from_ideal(layer: NNPDA, ids: Tensor, mask: Tensor | None = None) -> Deviation:
    """Run ``layer`` (one-hot input given as ``ids [B, T]``) and its ideal PDA side by side.

    The nnPDA step is the layer's own (``layer.step`` semantics, any ``action``); the ideal
    step is Definition B.9 with the layer's weights.  Padded steps (``mask`` False) freeze
    both.  Requires ``layer.one_hot_input``-style inputs: ids index the input slices.
    """
    b, steps = ids.shape
    w = layer.weight()
    dev = w.device
    ids = ids.to(dev)
    state = layer.initial_state(b, device=dev, dtype=w.dtype)
    q_bar, k_bar = state.q.clone(), state.stack.clone()
    q_err = torch.zeros(b, dtype=w.dtype, device=dev)
    k_err = torch.zeros(b, dtype=w.dtype, device=dev)
    overflow = torch.zeros(b, dtype=torch.bool, device=dev)
    mask = mask.to(dev) if mask is not None else None
    for t in range(steps):
        _, new, _ = layer._advance(w, state, None, ids[:, t], diagnostics=False)
        new_q_bar, new_k_bar, _, _, over = ideal_step(w, layer.num_states, q_bar, k_bar, ids[:, t])
        live = mask[:, t] if mask is not None else torch.ones(b, dtype=torch.bool, device=dev)
        overflow |= over & live
        state = state_where(live, new, state)
        q_bar, k_bar = state_where(live, (new_q_bar, new_k_bar), (q_bar, k_bar))
        q_err = torch.maximum(q_err, (state.q - q_bar).abs().amax(-1))
        cells = torch.maximum((state.stack - k_bar).abs().amax((-1, -2)), state.tail.abs().amax(-1))
        k_err = torch.maximum(k_err, cells)
    return Deviation(q_err, k_err, overflow, state.q, q_bar)


def pda_walks(
    pda: DPDA,
    rng: np.random.Generator,
    lengths: Sequence[int],
    *,
    noise: float = 0.02,
    end: str | None = "END",
    max_depth: int | None = None,
    steer: bool = False,
    mountain: bool = False,
) -> list[list[str]]:
    """Random strings that stay mostly inside a PDA's live configurations: each symbol is drawn
    uniformly from those with a transition from the current (state, stack top) (from any
    symbol with probability ``noise``, or when none is live); ``end`` is excluded from the body
    and appended at the end.  With ``max_depth``, pushes beyond it are avoided where possible;
    with ``steer``, pops are preferred once the remaining steps no longer exceed the stack
    size, so bracket strings end balanced about half of the time (parity decides); with
    ``mountain``, pushes are preferred in the first half of the body and anything else in the
    second (``a^n b^n``, ``w $ w^R`` and deep bracket nests, accepted when nothing else
    interferes)."""
    body = [a for a in pda.alphabet if a != end]
    out = []
    for length in lengths:
        q, stack, word = pda.start, [], []
        steps = length - (1 if end is not None else 0)
        for t in range(steps):
            top = stack[-1] if stack else EMPTY
            live = [a for a in body if (q, a, top) in pda.delta] if q is not None else []
            if mountain and q is not None:
                pushing = [a for a in live if pda.delta[(q, a, top)][1][0] == "push"]
                other = [a for a in live if a not in pushing]
                live = (pushing if 2 * t < steps - 1 else other) or live
            if steer and steps - t <= len(stack):
                live = [a for a in live if pda.delta[(q, a, top)][1][0] == "pop"] or live
            if max_depth is not None and len(stack) >= max_depth:
                live = [a for a in live if pda.delta[(q, a, top)][1][0] != "push"] or live
            if not live or rng.random() < noise:
                a = body[int(rng.integers(len(body)))]
            else:
                a = live[int(rng.integers(len(live)))]
            word.append(a)
            nxt = pda.delta.get((q, a, top)) if q is not None else None
            if nxt is None:
                q = None
                continue
            q, op = nxt
            if op[0] == "push":
                stack.append(op[1])
            elif op[0] == "pop" and stack:
                stack.pop()
        if end is not None:
            word.append(end)
        out.append(word)
    return out


# -- learned stack actions against the language's PDA --------------------------------------------
def pda_actions(
    language: Any, strings: Sequence[Sequence[int]], steps: int, pda: DPDA | None = None
) -> tuple[Tensor, Tensor]:
    """The language's PDA run on each string (``END`` dropped), as the nnPDA sees it after
    ``BOS``: ``([B, steps] action codes, [B, steps] pushed symbol)``; codes are +1 push, −1 pop,
    0 no-op (``BOS`` and padding: 0); the symbol is the pushed stack symbol's index (else −1).
    ``pda``: the language's, when the caller already built it."""
    pda = pda if pda is not None else language.pda()
    ops = torch.zeros(len(strings), steps, dtype=torch.long)
    syms = torch.full_like(ops, -1)
    for b, s in enumerate(strings):
        for t, step in enumerate(pda.run([language.symbols[i] for i in s[:-1]]), start=1):
            kind = step.op[0]
            ops[b, t] = 1 if kind == "push" else -1 if kind == "pop" else 0
            if kind == "push":
                syms[b, t] = pda.g_index[step.op[1]]
    return ops, syms


def stack_action_agreement(
    language: Any, strings: Sequence[Sequence[int]], trace: dict[str, Tensor], mask: Tensor
) -> tuple[dict[str, float], Tensor, Tensor]:
    """Compare an nnPDA's learned stack actions (``trace`` keys ``push`` (p+), ``pop`` (p−),
    ``push_vector`` (C), ``[B, T, ...]``; Stogin et al. 2020 Definition 3.6), quantized at 1/2,
    with the language's PDA at every real step of ``BOS w_1 .. w_n``.

    Returns ``(metrics, pda_codes [B, T], layer_codes [B, T])``; metrics: ``action_acc`` (all
    steps), ``push_acc``, ``pop_acc``, ``noop_acc`` (per PDA action, where it occurs) and
    ``symbol_acc`` (the pushed symbol, argmax C, under the best matching of the layer's stack
    symbols to the PDA's; only when their numbers agree)."""
    if not hasattr(language, "pda"):
        raise ValueError(f"stack_action_agreement needs a language with a PDA; {language} has none")
    missing = [k for k in ("push", "pop", "push_vector") if k not in trace]
    if missing:
        raise ValueError(
            f"stack_action_agreement needs a layer that traces {missing} (an NNPDA); it has {sorted(trace)}"
        )
    pda = language.pda()
    got = action_codes(trace["push"], trace["pop"])
    sym = trace["push_vector"].argmax(-1)
    ref_ops, ref_syms = pda_actions(language, strings, got.shape[1], pda)
    real = mask.bool()
    metrics = {"action_acc": float((got == ref_ops)[real].float().mean())}
    for name, code in (("push", 1), ("pop", -1), ("noop", 0)):
        sel = real & (ref_ops == code)
        if bool(sel.any()):
            metrics[f"{name}_acc"] = float((got == ref_ops)[sel].float().mean())
    both = real & (ref_ops == 1) & (got == 1)
    m2 = trace["push_vector"].shape[-1]
    if bool(both.any()) and m2 == len(pda.stack_alphabet):
        metrics["symbol_acc"] = max(
            float((torch.tensor(perm)[sym[both]] == ref_syms[both]).float().mean())
            for perm in itertools.permutations(range(m2))
        )
    return metrics, ref_ops, got


def pda_rules_table(pda: DPDA) -> dict[str, list[str]]:
    """A PDA's transition function as table columns ``state``, ``symbol``, ``top`` (``EMPTY``
    for the empty stack), ``next``, ``op`` (``push(X)``, ``pop``, ``noop``), sorted."""
    rows = sorted(pda.delta.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2] or ""))
    return {
        "state": [k[0] for k, _ in rows],
        "symbol": [k[1] for k, _ in rows],
        "top": [k[2] or "EMPTY" for k, _ in rows],
        "next": [v[0] for _, v in rows],
        "op": [v[1][0] + (f"({v[1][1]})" if v[1][1] else "") for _, v in rows],
    }
