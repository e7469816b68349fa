"""Minsky's construction: a deterministic PFSA as a Heaviside Elman RNN language model (Cotterell et al. 2023),
its inverse (reading the PFSA back out of the network), Theorem 1's naive Dyck-(k,m) generator,
and tightness checks for softmax RNN language models.

Minsky (Cotterell et al. 2023, "Example: Deterministic PFSA Encoded via Minsky Construction"): one unit per
``(q, a)`` pair, on when the automaton was in ``q`` and has just read ``a`` (so it is now in
``δ(q, a)``), as the paper's worked example's ``U`` has it:

* ``U[(q', a'), (q, a)] = 1`` iff ``q' = δ(q, a)`` (every pair leaving the current state),
  ``V[(q', a'), y] = 1`` iff ``a' = y``, ``b = −1``, ``h_t = H(U h_{t−1} + V[y_t] + b)`` with
  ``H(0) = 0``: exactly one unit is on, ``(q_{t−1}, y_t)``;
* the output matrix's column for ``(q, a)`` holds ``log p(y | δ(q, a))`` (``log final`` for
  ``END``): ``softmax(E h_t)`` is the PFSA's next-symbol distribution.  (The paper's example
  fills it with the distribution of ``q`` instead, so its "sampling step from (q0, b)" gives
  ``P(a) = 0.7`` where the PFSA, now in ``q1``, gives ``P(a) = 1``: an erratum.)

memrnn additions: one *start* unit (``h_0`` is not a pair; ``BOS`` — and ``END`` — switch it on:
``V[start, BOS] = 2``), so the layer starts from the zero state like every memrnn layer; and
``log 0`` is written as ``log_zero`` (default ``−1000``: ``exp`` underflows to 0 in float32 and
float64) because ``0 · (−∞)`` is NaN inside a matrix product.  ``activation="sigmoid"`` gives
Theorem 1's Simple RNN: weights ``×2β``, bias ``−3β``, so ``σ(2β(z − 1/2))`` saturates to ``H(z)``
on the integer ``z`` the Heaviside version sees.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from memrnn.constructions.result import BOS, END, Construction
from memrnn.languages.automata import PFSA
from memrnn.languages.dyck import DyckKM
from memrnn.layers.elman import ElmanRNN

BOUNDED = {
    "tanh": (-1.0, 1.0),
    "sigmoid": (0.0, 1.0),
    "heaviside": (0.0, 1.0),
    "saturated_linear": (0.0, 1.0),
}


def encode_pfsa(
    pfsa: PFSA,
    *,
    activation: Literal["heaviside", "sigmoid"] = "heaviside",
    beta: float = 20.0,
    log_zero: float = -1000.0,
    prune: bool = False,
    dtype: torch.dtype = torch.float64,
    device: torch.device | str | None = None,
) -> Construction:
    """Minsky's construction of ``pfsa`` (module docstring): ``|Q|·|Σ| + 1`` units, or with
    ``prune=True`` one per transition of positive probability (plus the start unit).

    Returns a generator :class:`~memrnn.constructions.Construction`: an :class:`ElmanRNN` reading
    one-hot ``(*pfsa.alphabet, END, BOS)``, the ``nn.Linear`` readout to ``(*pfsa.alphabet, END)``,
    ``source`` the PFSA, ``units`` named ``(q, a)`` then ``(start, BOS)``; a symbol is impossible
    below ``log_zero / 2``.
    """
    if activation not in ("heaviside", "sigmoid"):
        raise ValueError(f"activation must be 'heaviside' or 'sigmoid', got {activation!r}")
    if not log_zero < 0:
        raise ValueError(f"log_zero must be negative, got {log_zero}")
    states, alphabet = pfsa.states, pfsa.alphabet
    delta = pfsa.dfa.delta
    units = [(q, a) for q in states for a in alphabet if not prune or (q, a) in delta]
    units.append(("start", "BOS"))
    index = {u: i for i, u in enumerate(units)}
    D, S = len(units), len(alphabet)
    a_index = {a: i for i, a in enumerate(alphabet)}

    def current(u: tuple[str, str]) -> str | None:
        """The state the automaton is in while unit ``u`` is on: ``δ(q, a)``."""
        return pfsa.start if u == ("start", "BOS") else delta.get(u)

    U = np.zeros((D, D))
    for j, u in enumerate(units):
        q = current(u)
        if q is None:  # a zero-probability pair: never on
            continue
        for a in alphabet:
            if (q, a) in index:
                U[index[(q, a)], j] = 1.0
    V = np.zeros((D, S + 2))
    for i, (_, a) in enumerate(units[:-1]):
        V[i, a_index[a]] = 1.0
    V[D - 1, S] = V[D - 1, S + 1] = 2.0  # END and BOS switch the start unit on
    b = -np.ones(D)
    E = np.full((S + 1, D), log_zero)
    for j, u in enumerate(units):
        q = current(u)
        if q is not None:
            E[:, j] = np.maximum(pfsa.next_log_probs(q), log_zero)
    if activation == "sigmoid":
        U, V, b = 2 * beta * U, 2 * beta * V, 2 * beta * (b - 0.5)
    layer = ElmanRNN(S + 2, D, activation=activation, device=device, dtype=dtype)
    readout = nn.Linear(D, S + 1, device=device, dtype=dtype)
    with torch.no_grad():
        layer.weight_hh.copy_(torch.from_numpy(U))
        layer.weight_ih.copy_(torch.from_numpy(V))
        layer.bias.copy_(torch.from_numpy(b))
        readout.weight.copy_(torch.from_numpy(E))
        readout.bias.zero_()
    return Construction(
        layer,
        readout,
        vocabulary=(*alphabet, END, BOS),
        source=pfsa,
        units=[f"({q}, {a})" for q, a in units],
        task="generator",
        min_log_prob=log_zero / 2,
    )


def dyck_pfsa(language: DyckKM) -> PFSA:
    """Dyck-(k,m)'s generating distribution (H.1, no length window) as a PFSA over the ``2k``
    brackets: one state per stack (named ``""``, ``"0"``, ``"0,1"``, …), ``END`` as the final
    probability of the empty stack."""
    k, m = language.k, language.m
    stacks = language.reachable_states()

    def name(s: tuple[int, ...]) -> str:
        return ",".join(map(str, s))

    sym = language.symbols
    trans = []
    final = {}
    for st in stacks:
        p_open = 0.5 / k if len(st) < m else 0.0
        p_close = 0.0 if not st else (1.0 if len(st) == m else 0.5)
        if len(st) < m:
            trans += [(name(st), sym[i], name((*st, i)), p_open) for i in range(k)]
        if st:
            trans.append((name(st), sym[k + st[-1]], name(st[:-1]), p_close))
        else:
            final[name(st)] = 0.5
    return PFSA([name(s) for s in stacks], sym[:-1], trans, name(()), final)


def naive_dyck_generator(
    k: int, m: int, *, activation: Literal["heaviside", "sigmoid"] = "sigmoid", beta: float = 20.0, prune: bool = False,
    dtype: torch.dtype = torch.float64,
) -> Construction:  # fmt: skip
    """Theorem 1: the Dyck-(k,m) DFA (with H.1's probabilities) in a Simple RNN by Minsky's
    construction, ``|Q|·2k + 1`` units with ``|Q| = Σ_{i≤m} k^i`` (``O(k^{m+1})``).  It generates
    H.1's distribution exactly (Definition 5 with ``ε = 1/(4k)``).  Appendix F.3 says "one unit per
    DFA state"; a first-order RNN cannot do that in general (the next state is an AND of the
    state and the symbol, an XOR-like function of one layer's inputs), hence the pairs."""
    return encode_pfsa(dyck_pfsa(DyckKM(k, m)), activation=activation, beta=beta, prune=prune, dtype=dtype)


# -- reading the automaton back ------------------------------------------------------------------------
def minimize_pfsa(pfsa: PFSA, decimals: int = 9) -> PFSA:
    """The smallest PFSA with the same string probabilities (Moore partition refinement on the
    reachable states: same final and next-symbol probabilities to ``decimals``, and successors in
    the same blocks).  Blocks are named ``m0`` (the start's), ``m1``, … in breadth-first order."""
    states, alphabet, delta = pfsa.states, pfsa.alphabet, pfsa.dfa.delta

    def sig0(q: str) -> tuple:
        return (
            round(pfsa.final.get(q, 0.0), decimals),
            *tuple(round(pfsa.prob.get((q, a), 0.0), decimals) for a in alphabet),
        )

    block = {q: sig0(q) for q in states}
    while True:
        new = {q: (block[q], *(block.get(delta.get((q, a))) for a in alphabet)) for q in states}
        if len(set(new.values())) == len(set(block.values())):
            break
        block = new
    names: dict[tuple, str] = {}
    order = [pfsa.start]
    names[block[pfsa.start]] = "m0"
    i = 0
    while i < len(order):
        q = order[i]
        for a in alphabet:
            q2 = delta.get((q, a))
            if q2 is not None and block[q2] not in names:
                names[block[q2]] = f"m{len(names)}"
                order.append(q2)
        i += 1
    rep = {names[block[q]]: q for q in order}
    trans = [
        (n, a, names[block[delta[(q, a)]]], pfsa.prob[(q, a)])
        for n, q in rep.items()
        for a in alphabet
        if (q, a) in pfsa.prob
    ]
    return PFSA(
        list(rep), alphabet, trans, "m0", {n: pfsa.final.get(q, 0.0) for n, q in rep.items()}, atol=1e-6
    )


def extract_pfsa(
    rnn: Construction | tuple[ElmanRNN, nn.Linear, Sequence[str]],
    *,
    max_states: int = 100_000,
    minimize: bool = True,
) -> PFSA:
    """The PFSA a finite-state RNN LM computes, by enumerating its reachable hidden states.

    ``rnn``: a generator :class:`~memrnn.constructions.Construction` over an Elman layer (from
    :func:`encode_pfsa`), or ``(layer, readout, alphabet)`` for any Elman RNN with
    one-hot inputs ``alphabet + [END, BOS]`` whose hidden states after rounding to 6 decimals are
    finitely many (Heaviside RNNs: binary).  From the state after ``BOS``, every symbol with
    positive probability is followed (breadth first); states are named ``s0`` (start), ``s1``, ….
    Raises when more than ``max_states`` states are reached (the network is not finite-state
    enough).  ``minimize`` (default) merges equivalent states (:func:`minimize_pfsa`): a Minsky
    network has one hidden state per ``(q, a)`` pair, its PFSA one per ``q``.
    """
    if isinstance(rnn, Construction):
        if rnn.task != "generator":
            raise ValueError("extract_pfsa needs a generator construction, got an acceptor")
        layer, readout, alphabet = rnn.layer, rnn.readout, list(rnn.outputs[:-1])
    else:
        layer, readout, alphabet = rnn
        alphabet = list(alphabet)
    S = len(alphabet)
    if layer.input_size != S + 2:
        raise ValueError(f"the layer reads {layer.input_size} inputs; alphabet + END + BOS is {S + 2}")
    p = layer.weight_hh

    def key(h: Tensor) -> tuple:
        return tuple(np.round(h.double().cpu().numpy(), 6).tolist())

    with torch.no_grad():
        x_bos = F.one_hot(torch.tensor([S + 1]), S + 2).to(p)
        h0 = layer.step(x_bos, layer.initial_state(1, dtype=p.dtype, device=p.device))[1]
        seen = {key(h0.h[0]): 0}
        order = [h0]
        trans, final = [], {}
        i = 0
        while i < len(order):
            st = order[i]
            probs = readout(st.h).double().softmax(-1)[0]
            final[f"s{i}"] = float(probs[S])
            xs = F.one_hot(torch.arange(S), S + 2).to(p)
            _, nxt = layer.step(xs, type(st)(st.h.expand(S, -1)))
            for a in range(S):
                if probs[a] <= 0:
                    continue
                kk = key(nxt.h[a])
                if kk not in seen:
                    if len(order) >= max_states:
                        raise ValueError(f"more than max_states={max_states} hidden states are reachable")
                    seen[kk] = len(order)
                    order.append(type(st)(nxt.h[a : a + 1]))
                trans.append((f"s{i}", alphabet[a], f"s{seen[kk]}", float(probs[a])))
            i += 1
    names = [f"s{j}" for j in range(len(order))]
    out = PFSA(names, alphabet, trans, "s0", final, atol=1e-6)
    return minimize_pfsa(out) if minimize else out


def finite_mass(pfsa: PFSA) -> float:
    """The total probability of finite strings, ``Σ_w p(w, END)``: ``x = f + T x`` solved on the
    states that can still end (the others contribute 0).  ``1`` iff the PFSA is tight."""
    idx = pfsa.dfa.q_index
    n = len(pfsa.states)
    T = np.zeros((n, n))
    for (q, a), p in pfsa.prob.items():
        T[idx[q], idx[pfsa.dfa.delta[(q, a)]]] += p
    f = np.array([pfsa.final.get(q, 0.0) for q in pfsa.states])
    can_end = f > 0
    for _ in range(n):  # states with a path to a final one
        grown = can_end | ((T > 0) & can_end[None, :]).any(1)
        if (grown == can_end).all():
            break
        can_end = grown
    sub = np.nonzero(can_end)[0]
    if idx[pfsa.start] not in set(sub.tolist()):
        return 0.0
    x = np.linalg.solve(np.eye(len(sub)) - T[np.ix_(sub, sub)], f[sub])
    return float(x[list(sub).index(idx[pfsa.start])])


@dataclass
class TightnessReport:
    """Cotterell et al.'s (2023) bounded-dynamics theorem for a softmax RNN LM: ``bounded`` (the hidden state
    lies in a box ``[lo, hi]^D``), ``log_min_end`` (a lower bound on ``log p(END | h)`` over the
    whole box; finite means tight: every step ends with probability ``≥ e^{log_min_end}``),
    ``s = max_y ‖e(y) − e(END)‖`` (Cotterell et al.'s constant) and, when hidden states were given,
    ``condition_holds`` (``s‖h_t‖₂ ≤ log t`` for every ``t ≥ 2``, Cotterell et al.'s sufficient condition
    for unbounded activations) — ``None`` when not checked."""

    bounded: bool
    box: tuple[float, float] | None
    log_min_end: float | None
    s: float
    condition_holds: bool | None = None

    @property
    def tight(self) -> bool | None:
        """True when a sufficient condition holds; None when none could be checked."""
        if self.bounded and self.log_min_end is not None and math.isfinite(self.log_min_end):
            return True
        return self.condition_holds


def tightness(
    activation: str, readout: nn.Linear, end_id: int, hidden: Tensor | None = None
) -> TightnessReport:
    """Check tightness of ``softmax(readout(h_t))`` for an RNN whose units use ``activation``
    (``tanh``/``sigmoid``/``heaviside``/``saturated_linear``: bounded; ``lstm``/``gru`` outputs:
    ``[−1, 1]``; ``relu``: unbounded).  ``hidden [T, D]``: a trajectory for Cotterell et al.'s
    ``s‖h_t‖ ≤ log t`` condition."""
    boxes = {**BOUNDED, "lstm": (-1.0, 1.0), "gru": (-1.0, 1.0)}
    w, b = readout.weight.detach().double(), readout.bias.detach().double()
    diff = w - w[end_id]
    s = float(diff.norm(dim=1).max())
    box = boxes.get(activation)
    log_min_end = None
    if box is not None:
        lo, hi = box
        worst = torch.maximum(diff * lo, diff * hi).sum(1) + (b - b[end_id])  # max_h (l_y − l_END)
        log_min_end = float(-torch.logsumexp(worst, 0))
    cond = None
    if hidden is not None:
        norms = hidden.detach().double().norm(dim=-1)
        t = torch.arange(1, len(norms) + 1, dtype=torch.float64)
        cond = bool((s * norms[1:] <= t[1:].log() + 1e-12).all())
    return TightnessReport(box is not None, box, log_min_end, s, cond)
