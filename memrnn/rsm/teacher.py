"""Teacher signals for the reservoir stack machine (Paaßen et al. 2021, section 3.2): Algorithm 4's 5-tuples
``(x̄, J, A, ρ, Y)`` as padded batches.

* :func:`lr_batch`: from an LR(1) automaton's parse (Algorithm 1) of each word.
* :func:`copy_actions` / :func:`transduction_batch`: section 4's heuristic for copy and repeat
  copy: always shift; at the first end-of-sequence token push the placeholder ``S`` until the stack
  holds ``fill`` symbols; at a later one pop (one symbol per action) until no end-of-sequence
  token is on the stack.  Then the symbol to copy always sits ``fill`` symbols below the top.

Conventions (those of :class:`memrnn.rsm.machine.ReservoirStackMachine`): ``pushes`` is ``0`` for
none and ``k + 1`` for nonterminal ``k``; each step's actions end with a ``(0, 0)`` action.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor

from memrnn.languages.lr import LRAutomaton


def _pad_actions(actions: list[list[list[tuple[int, int]]]]) -> tuple[Tensor, Tensor]:
    """``actions[b][t]`` lists of ``(j, a)`` -> ``pops, pushes [B, T+1, M]``."""
    B = len(actions)
    T1 = max((len(a) for a in actions), default=0)
    M = max((len(s) for a in actions for s in a), default=1)
    # nested lists padded with (0, 0), then one tensor (not one element assignment per action)
    none = [(0, 0)] * M
    pad = [[[*acts, *none[len(acts) :]] for acts in seq] + [none] * (T1 - len(seq)) for seq in actions]
    both = torch.tensor(pad, dtype=torch.long).reshape(B, T1, M, 2)
    return both[..., 0].contiguous(), both[..., 1].contiguous()


def lr_batch(automaton: LRAutomaton, words: Sequence[Sequence[str]]) -> dict[str, Tensor]:
    """Parse every word and return the padded teacher signals.

    Returns ``ids [B, T]`` (index in ``automaton.terminals``; 0 at padding), ``lengths [B]``,
    ``pops``/``pushes [B, T+1, M]``, ``shift [B, T+1]``, ``outputs [B, T+1]`` (1 iff the stack
    is one accepting nonterminal after step t's reductions: Paaßen et al.'s (2021) ``y``) and
    ``accepted [B]``.
    """
    index = {s: i for i, s in enumerate(automaton.terminals)}
    B = len(words)
    T = max((len(w) for w in words), default=0)
    # rows as padded lists, each made a tensor once (not a tensor assignment per row)
    ids, outputs, shift, accepted, actions = [], [], [], [], []
    for w in words:
        trace = automaton.parse(w)
        pad = [0] * (T - len(w))
        ids.append([index[s] for s in w] + pad)
        outputs.append(trace.output.tolist() + pad)
        shift.append(trace.shift.tolist() + pad)
        accepted.append(bool(trace.accepted))
        n, j, a = trace.num_actions.tolist(), trace.pops.tolist(), trace.pushes.tolist()
        actions.append([[(j[t][k], a[t][k] + 1) for k in range(n[t])] for t in range(len(w) + 1)])
    ids = torch.tensor(ids, dtype=torch.long).reshape(B, T)
    outputs = torch.tensor(outputs, dtype=torch.long).reshape(B, T + 1)
    shift = torch.tensor(shift, dtype=torch.long).reshape(B, T + 1)
    accepted = torch.tensor(accepted, dtype=torch.bool)
    pops, pushes = _pad_actions(actions)
    if pops.shape[1] < T + 1:  # only when every word is empty and B == 0
        pops = torch.zeros(B, T + 1, 1, dtype=torch.long)
        pushes = torch.zeros_like(pops)
    lengths = torch.tensor([len(w) for w in words], dtype=torch.long)
    return {
        "ids": ids,
        "lengths": lengths,
        "pops": pops,
        "pushes": pushes,
        "shift": shift,
        "outputs": outputs,
        "accepted": accepted,
    }


def copy_actions(x: np.ndarray, fill: int = 20, eos_channel: int = -1) -> list[list[tuple[int, int]]]:
    """Section 4's stack heuristic for copy / repeat copy on one input ``x [T, n]`` (the
    end-of-sequence token is ``x[t, eos_channel] > 0``).  Returns per step (``T + 1`` steps, the
    end step included) the actions ``(j, a)`` ending with ``(0, 0)``; nonterminal ``S`` is ``a = 1``.

    The stack is simulated: before shifting an end-of-sequence token, if one is already on the
    stack, pop one symbol at a time until none is; otherwise push ``S`` until the stack holds
    ``fill`` symbols.
    """
    stack: list[str] = []  # "x" data, "S" placeholder, "E" end-of-sequence token
    out = []
    for t in range(len(x) + 1):
        acts: list[tuple[int, int]] = []
        is_eos = t < len(x) and x[t, eos_channel] > 0
        if is_eos:
            if "E" in stack:
                while "E" in stack:
                    stack.pop()
                    acts.append((1, 0))
            else:
                while len(stack) < fill:
                    stack.append("S")
                    acts.append((0, 1))
        acts.append((0, 0))
        out.append(acts)
        stack.append("E" if is_eos else "x")
    return out


def transduction_batch(samples: Sequence[dict[str, np.ndarray]], fill: int = 20) -> dict[str, Tensor]:
    """Copy / repeat-copy samples (``input [T, n]``, ``target [T, L]``, ``loss_mask [T]``, as
    :class:`memrnn.data.tasks.CopyTask` makes them) -> padded teacher signals: ``x [B, T, n]``,
    ``lengths``, ``pops``/``pushes [B, T+1, M]``, ``shift [B, T+1]`` (all 1), ``outputs
    [B, T+1, L]`` (the target, then 0 at the end step) and ``loss_mask [B, T+1]``."""
    B = len(samples)
    T = max(len(s["input"]) for s in samples)
    n, L = samples[0]["input"].shape[1], samples[0]["target"].shape[1]
    x = torch.zeros(B, T, n)
    outputs = torch.zeros(B, T + 1, L)
    loss_mask = torch.zeros(B, T + 1, dtype=torch.bool)
    shift = torch.zeros(B, T + 1, dtype=torch.long)
    actions = []
    for b, s in enumerate(samples):
        k = len(s["input"])
        x[b, :k] = torch.as_tensor(s["input"])
        outputs[b, :k] = torch.as_tensor(s["target"])
        loss_mask[b, :k] = torch.as_tensor(s["loss_mask"])
        shift[b, : k + 1] = 1
        actions.append(copy_actions(s["input"], fill))
    pops, pushes = _pad_actions(actions)
    lengths = torch.tensor([len(s["input"]) for s in samples], dtype=torch.long)
    return {
        "x": x,
        "lengths": lengths,
        "pops": pops,
        "pushes": pushes,
        "shift": shift,
        "outputs": outputs,
        "loss_mask": loss_mask,
    }
