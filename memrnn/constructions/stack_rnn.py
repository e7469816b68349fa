"""A deterministic PDA written into the weights of a superposition-stack RNN (Joulin & Mikolov
2015's stack driven by a sigmoid Elman controller, :class:`memrnn.layers.StackRNN`), so that users
can start a stack RNN from a known PDA, as :func:`memrnn.constructions.encode_pda` does for the
nnPDA.

The construction (real-time DPDAs, :class:`memrnn.languages.DPDA`: one transition per symbol):

* **one controller unit per transition** ``u = (q, a, X)`` (``X`` a stack symbol or the empty
  reading), plus a ``start`` unit that reads ``BOS`` and one ``hold`` unit per (state, ignored
  symbol).  With ``s_q(h) = Σ_{u → q} h_u`` (the units whose transition ends in ``q``; ``start``
  ends in the start state) and gain ``G``, unit ``u`` computes

      h_u = σ(G · (s_q(h_{t−1}) + x_a + r_X − 5/2))            (X a stack symbol)
      h_u = σ(G · (s_q(h_{t−1}) + x_a − Σ_Y r_Y − 3/2))          (X the empty reading)

  so exactly the unit of the transition the PDA takes fires (margin ``G/2``); in a dead run no
  unit fires again.
* **the stack head** reads ``h_t``: action logits ``G · Σ_u h_u · e_{op(u)}`` over (push, pop,
  no-op) and the pushed vector ``σ(G · (Σ_u h_u · e_{γ(u)} − 1/2))``, one-hot over Γ: the
  superposition stack then holds one-hot cells, the top reads ``e_X`` or 0 when empty (popping an
  empty stack leaves it empty, as the DPDA's Definition B.3).
* **the readout**: ``Σ_{u → F} h_u − 1/2``, positive exactly when the state reached is accepting.

Every leak is ``O(e^{−G/2})`` per step; the tests run every string up to length 10 and long
random strings of thousands of steps.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch
from torch import nn

from memrnn.constructions._common import check_vocabulary
from memrnn.constructions.result import BOS, Construction
from memrnn.languages.automata import DPDA, EMPTY
from memrnn.layers.stack_rnn import StackRNN

_ACTIONS = ("push", "pop", "noop")  # the superposition stack's head order


def encode_superposition_pda(
    pda: DPDA,
    *,
    gain: float = 30.0,
    depth: int = 32,
    vocabulary: Sequence[str] | None = None,
    ignore: Iterable[str] = (),
    strict: bool = False,
    dtype: torch.dtype = torch.float64,
    device: torch.device | str | None = None,
) -> Construction:
    """A :class:`~memrnn.layers.StackRNN` (sigmoid Elman controller, superposition stack of
    width ``|Γ|``) whose weights run ``pda`` (module docstring), as an acceptor
    :class:`~memrnn.constructions.Construction` that reads ``BOS`` first.

    Args:
        pda: a deterministic real-time PDA; missing transitions are the dead state.
        gain: ``G``; every unit is within ``σ(−G/2)`` of 0 or 1.
        depth: the stack window (``strict=True`` raises if a string needs more).
        vocabulary: input symbols in input-id order (default ``pda.alphabet`` then ``BOS``);
            it must hold ``BOS``.
        ignore: vocabulary symbols outside ``pda.alphabet`` that leave state and stack as they
            are (``BOS`` is always the start signal, never ignored).

    ``units`` names each controller unit: ``start``, ``q,a,X->q2:op`` or ``hold q,b``.
    """
    if vocabulary is None:
        vocabulary = (*pda.alphabet, BOS)
    ignore = set(ignore)
    vocab = check_vocabulary(pda.alphabet, vocabulary, ignore | {BOS})
    if BOS not in vocab:
        raise ValueError(f"the vocabulary {tuple(vocab)} must hold {BOS!r}: the start unit reads it")
    if gain <= 0:
        raise ValueError(f"gain must be positive, got {gain}")
    col = {a: i for i, a in enumerate(vocab)}
    gamma = {z: i for i, z in enumerate(pda.stack_alphabet)}
    V, m = len(vocab), len(pda.stack_alphabet)
    # the units: (name, state read, input read, top read, next state, op)
    units: list[tuple[str, str | None, str, str | None, str, tuple]] = [
        ("start", None, BOS, None, pda.start, ("noop", None))
    ]
    for (q, a, top), (q2, op) in sorted(
        pda.delta.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2] or "")
    ):
        if a not in col:
            continue
        name = (
            f"{q},{a},{'empty' if top is EMPTY else top}->{q2}:{op[0]}{'' if op[1] is None else ' ' + op[1]}"
        )
        units.append((name, q, a, top, q2, op))
    for q in pda.states:
        for b in vocab:
            if b in ignore and b != BOS:
                units.append((f"hold {q},{b}", q, b, "*", q, ("noop", None)))
    H = len(units)
    net = StackRNN(
        V,
        H,
        "superposition",
        "elman",
        width=m,
        depth=depth,
        strict=strict,
        controller_args={"activation": "sigmoid"},
        device=device,
        dtype=dtype,
    )
    G = float(gain)
    w_ih = torch.zeros(H, V + m, dtype=torch.float64)
    w_hh = torch.zeros(H, H, dtype=torch.float64)
    bias = torch.zeros(H, dtype=torch.float64)
    head_w = torch.zeros(3 + m, H, dtype=torch.float64)
    head_b = torch.zeros(3 + m, dtype=torch.float64)
    head_b[3:] = -G / 2
    readout = torch.zeros(H, dtype=torch.float64)
    ends_in = {q: [j for j, u in enumerate(units) if u[4] == q] for q in pda.states}
    for i, (_, q, a, top, q2, op) in enumerate(units):
        w_ih[i, col[a]] = G
        if q is None:  # start: BOS alone
            bias[i] = -G / 2
        else:
            w_hh[i, ends_in[q]] = G
            if top == "*":  # hold: whatever the top
                bias[i] = -1.5 * G
            elif top is EMPTY:
                w_ih[i, V:] = -G
                bias[i] = -1.5 * G
            else:
                w_ih[i, V + gamma[top]] = G
                bias[i] = -2.5 * G
        head_w[_ACTIONS.index(op[0]), i] = G
        if op[0] == "push":
            head_w[3 + gamma[op[1]], i] = G
        readout[i] = 1.0 if q2 in pda.accept else 0.0
    with torch.no_grad():
        net.controller.weight_ih.copy_(w_ih)
        net.controller.weight_hh.copy_(w_hh)
        net.controller.bias.copy_(bias)
        net.memory.head.weight.copy_(head_w)
        net.memory.head.bias.copy_(head_b)
    score = nn.Sequential(nn.Linear(H, 1, device=device, dtype=dtype), nn.Flatten(-2))  # [.., H] -> [..]
    with torch.no_grad():
        score[0].weight.copy_(readout[None])
        score[0].bias.fill_(-0.5)
    return Construction(
        net,
        score,
        vocabulary=vocab,
        source=pda,
        units=[u[0] for u in units],
        task="acceptor",
        bos=BOS,
    )


__all__ = ["encode_superposition_pda"]
