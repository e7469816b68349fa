"""Real-time counter machines compiled into ReLU Elman RNNs and LSTMs (Weiss, Goldberg & Yahav 2018, sections 3-4), with an accept readout.

Weiss et al. 2018 says how one counter lives in a network: an LSTM cell counts with ``i = f = 1`` and
``c̃ = ±1`` (eq. 12), resets with ``i = f = 0``, and exposes the count through ``h = o·g(c)``
(eq. 13); a ReLU RNN (eq. 3) counts in non-negative units and compares with 0.  It leaves the
*finite-state control* (transitions that read ``COMP0`` of the counters) informal.  This module
compiles a whole :class:`~memrnn.languages.automata.CounterMachine` into one recurrent layer:

1. **Signs into the control.**  The machine is first rewritten so that every counter holds its
   magnitude ``|c_j| >= 0``, its sign living in the state: states ``(q, σ)`` with ``σ ∈ {±1}^k``
   (reachable ones only).  A zero counter takes the sign of its next ``INC``/``DEC``; a non-zero
   one changes magnitude by ``σ_j · op_j``.  A magnitude is 0 exactly when the counter is, and
   because it is never negative, "counter ``j`` is 0" becomes a *linear* test
   ``relu(condition − |c_j|)``: this is what lets one ReLU layer branch on ``COMP0``.  (Weiss's
   two monotone units per counter, INC on one and DEC on the other, compare their difference with
   0 only *after* the recurrence, in an MLP; their difference can be negative, and
   ``[c = 0 ∧ state]`` of a signed, unbounded ``c`` is not a single ReLU of a linear function.)
2. **Guard units.**  ``G(Q, a, S)_t = [state_{t−1} = Q ∧ x_t = a ∧ |c_j|_{t−1} = 0 ∀ j ∈ S]``:
   one unit per (state, symbol, set of counters tested zero) that some transition needs.  A
   transition with zero pattern ``z`` is the inclusion-exclusion sum
   ``Σ_{S' ⊆ nonzero(z)} (−1)^{|S'|} G(Q, a, zero(z) ∪ S')``; transitions with the same target and
   the same counter moves are merged, so ``a^n b^n`` needs 5 guard units.  The current state and
   every counter move are then *linear* functions of the guard units: ``s_t = T g_t``,
   ``Δ_t = D g_t``.
3. **Counter units lag by one step.**  ``M_j`` holds ``|c_j|`` after step ``t − 1``
   (``M_t = M_{t−1} + D g_{t−1}``), so ``|c_j|_t = M_{j,t} + (D g_t)_j`` is linear in ``h_t``.
   ``counter_values`` reads the configuration back.
4. **Start and reset.**  A unit ``R`` is 1 from the first step on (``1 − R`` is "nothing read
   yet": the zero initial state is the start state), a unit ``U`` is 1 right after ``BOS``;
   ``BOS`` anywhere resets the control to the start state and the counters to 0 (the LSTM closes
   its gates; the ReLU layer subtracts ``L = 2^53`` (``2^14`` in float16), so ReLU counters reset
   exactly below ``L``).
5. **Accept readout.**  Acceptance reads the state *and* the counters' zero pattern after the
   last symbol, a conjunction, so the readout is a one-hidden-layer ReLU MLP (Weiss et al. 2018: "the
   SRNN with ReLU activation followed by an MLP classifier"): one hidden unit
   ``relu(s_Q − Σ_{j∈S} |c_j|)`` per (state, tested set), inclusion-exclusion in the output row,
   ``logit = scale · (accept − 1/2)``.

ReLU layer (:class:`~memrnn.layers.ElmanRNN`, ``activation="relu"``): integer weights; every
unit is an exact integer in any float format while counts fit its mantissa (``2^24`` float32,
``2^8`` bfloat16).

LSTM (:class:`~memrnn.layers.LSTMLayer`, torch's ``g = tanh``): every boolean unit is an LSTM
unit with ``c = 1`` and its value in the output gate (``h = tanh(1)·o``); a counter unit has
``i = f = 1``, ``c̃ = tanh(β·Δ) ∈ {−1, 0, 1}`` and ``o = 1``, so ``h = tanh(|c|)``.  The zero test
of ``|c_t| = M_t + Δ_t`` through ``g = tanh`` is ``z̃ = tanh(M_t) + tanh(1)·Δ_t``, which is 0 when
the counter is and at least ``tanh 2 − tanh 1 = 0.2024`` otherwise (``Δ = −1`` only on a non-zero
magnitude).  Gates take pre-activations of magnitude ``>= beta/2`` (default 100); saturated
gates and ``tanh`` are exactly 0/1 in float32, and within ``e^{−50}`` in float64.
``g = identity`` (Weiss et al. 2018 footnote 3) is :class:`~memrnn.layers.CounterLSTM`'s counter cells;
see :func:`encode_counter_machine`'s ``kind="counter_lstm"``.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import torch
from torch import Tensor, nn

from memrnn.constructions.result import BOS, Construction
from memrnn.languages.automata import (
    CounterMachine,
    anbmcnm_counter_machine,
    anbn_counter_machine,
    anbncn_counter_machine,
    dyck1_counter_machine,
)
from memrnn.layers.counters import CounterLSTM
from memrnn.layers.elman import ElmanRNN
from memrnn.layers.gated import LSTMLayer

GAMMA = math.tanh(1.0)
AugState = tuple[str, tuple[int, ...]]

READY_MADE: dict[str, Callable[[], CounterMachine]] = {
    "anbn": lambda: anbn_counter_machine(0),
    "anbncn": lambda: anbncn_counter_machine(0),
    "dyck1": dyck1_counter_machine,
    "anbmcnm": anbmcnm_counter_machine,
}


@dataclass(frozen=True)
class CounterProgram:
    """A counter machine in magnitude/sign form, as linear maps between guard units.

    Attributes:
        machine: the source machine.
        states: reachable ``(q, σ)`` (``σ`` a ``±1`` per counter); ``states[0]`` is the start.
        guards: ``(state index, symbol index, counters tested zero)`` per guard unit.
        transition: ``T [len(states), len(guards)]``: the state after a step is ``T g``.
        delta: ``D [k, len(guards)]``: the magnitude moves of a step are ``D g``.
        accept: ``(state index, counters tested zero, coefficient)`` per readout unit; the
            acceptance indicator is ``Σ coefficient · [state ∧ tested counters are 0]``.
    """

    machine: CounterMachine
    states: tuple[AugState, ...]
    guards: tuple[tuple[int, int, frozenset[int]], ...]
    transition: np.ndarray = field(repr=False)
    delta: np.ndarray = field(repr=False)
    accept: tuple[tuple[int, frozenset[int], float], ...]

    @property
    def k(self) -> int:
        return self.machine.k


def _subsets(items: Sequence[int]):
    for r in range(len(items) + 1):
        yield from itertools.combinations(items, r)


def counter_program(machine: CounterMachine) -> CounterProgram:
    """Rewrite ``machine`` with magnitudes and signs (module docstring, points 1-2)."""
    k = machine.k
    start: AugState = (machine.start, (1,) * k)
    states, index, frontier = [start], {start: 0}, [start]
    moves: dict[tuple[int, int, int, tuple[int, ...]], dict[frozenset[int], float]] = {}
    while frontier:
        nxt = []
        for aug in frontier:
            q, sigma = aug
            for ai, a in enumerate(machine.alphabet):
                for z in itertools.product((True, False), repeat=k):
                    hit = machine.delta.get((q, a, z))
                    if hit is None:
                        continue
                    q2, ops = hit
                    mag = tuple(abs(o) if zj else s * o for zj, s, o in zip(z, sigma, ops, strict=True))
                    sig = tuple(
                        (1 if o >= 0 else -1) if zj else s for zj, s, o in zip(z, sigma, ops, strict=True)
                    )
                    target = (q2, sig)
                    if target not in index:
                        index[target] = len(states)
                        states.append(target)
                        nxt.append(target)
                    coef = moves.setdefault((index[aug], ai, index[target], mag), {})
                    zero = [j for j in range(k) if z[j]]
                    nonzero = [j for j in range(k) if not z[j]]
                    for extra in _subsets(nonzero):
                        key = frozenset(zero) | frozenset(extra)
                        coef[key] = coef.get(key, 0.0) + (-1.0) ** len(extra)
        frontier = nxt
    guards: list[tuple[int, int, frozenset[int]]] = []
    gindex: dict[tuple[int, int, frozenset[int]], int] = {}
    for (qi, ai, _, _), coef in moves.items():
        for s, c in coef.items():
            if c != 0 and (qi, ai, s) not in gindex:
                gindex[(qi, ai, s)] = len(guards)
                guards.append((qi, ai, s))
    T = np.zeros((len(states), len(guards)))
    D = np.zeros((k, len(guards)))
    for (qi, ai, target, mag), coef in moves.items():
        for s, c in coef.items():
            if c != 0:
                g = gindex[(qi, ai, s)]
                T[target, g] += c
                D[:, g] += c * np.asarray(mag, dtype=float)
    acc: dict[tuple[int, frozenset[int]], float] = {}
    for qi, (q, _) in enumerate(states):
        for z in itertools.product((True, False), repeat=k):
            if (q, z) in machine.accepting:
                zero = [j for j in range(k) if z[j]]
                for extra in _subsets([j for j in range(k) if not z[j]]):
                    key = (qi, frozenset(zero) | frozenset(extra))
                    acc[key] = acc.get(key, 0.0) + (-1.0) ** len(extra)
    accept = tuple((qi, s, c) for (qi, s), c in acc.items() if c != 0)
    return CounterProgram(machine, tuple(states), tuple(guards), T, D, accept)


def _kind(c: Construction) -> Literal["relu", "lstm", "counter_lstm"]:
    """Which of :func:`encode_counter_machine`'s layers ``c`` carries."""
    if not isinstance(c, Construction) or not isinstance(c.source, CounterMachine):
        raise ValueError(
            f"expected a counter-machine Construction (encode_counter_machine), got {type(c).__name__}"
        )
    if isinstance(c.layer, CounterLSTM):
        return "counter_lstm"
    return "lstm" if isinstance(c.layer, LSTMLayer) else "relu"


def counter_units(c: Construction) -> list[int]:
    """Indices of the counter (magnitude) units ``M_j`` in the layer's output."""
    return [i for i, u in enumerate(c.units) if u.startswith("M")]


@torch.no_grad()
def counter_magnitudes(c: Construction, ids: Tensor, mask: Tensor | None = None) -> Tensor:
    """The counter units' raw values ``[B, T, k]`` of an :func:`encode_counter_machine` network:
    ``|c_j|`` after the *previous* position (the units lag by one step).  Read from the cell state
    for the LSTMs (``h = tanh(|c|)`` saturates past ``|c| ≈ 18``)."""
    kind = _kind(c)
    x = c.inputs(ids)
    mask = None if mask is None else mask.to(x.device)
    if kind == "relu":
        h, _ = c.layer(x, mask=mask)
        return h[..., counter_units(c)]
    trace = c.layer.trace(x, mask=mask)
    if kind == "lstm":
        return trace["c"][..., -1, :][..., counter_units(c)]
    return trace["counters"]


@torch.no_grad()
def counter_values(c: Construction, ids: Tensor, mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """The machine configuration decoded from an :func:`encode_counter_machine` network after
    every position: ``(state index [B, T] (−1: dead; an index of counter_program(c.source).states),
    signed counters [B, T, k])``."""
    kind = _kind(c)
    prog = counter_program(c.source)
    ng = len(prog.guards)
    h, _ = c.hidden(ids, mask=mask)
    hd = h.double()
    scale = 1.0 if kind == "relu" else GAMMA
    g = hd[..., :ng] / scale
    T = torch.as_tensor(prog.transition, dtype=torch.float64, device=h.device)
    D = torch.as_tensor(prog.delta, dtype=torch.float64, device=h.device)
    s = g @ T.T
    u, r = hd[..., c.units.index("U")] / scale, hd[..., c.units.index("R")] / scale
    s[..., 0] += u + 1 - r
    # the ReLU layer's magnitudes are its own output units; the LSTMs' are read from their cells
    raw = hd[..., counter_units(c)] if kind == "relu" else counter_magnitudes(c, ids, mask).double()
    mag = raw + g @ D.T
    dead = torch.full_like(s[..., 0], -1, dtype=torch.long)
    state = torch.where(s.max(-1).values > 0.5, s.argmax(-1), dead)
    signs = torch.tensor([sg for _, sg in prog.states], dtype=torch.float64, device=h.device)
    return state, signs[state.clamp(min=0)] * mag


def _unit_names(prog: CounterProgram) -> list[str]:
    names = []
    for qi, ai, s in prog.guards:
        q, sig = prog.states[qi]
        sg = "".join("+" if x > 0 else "-" for x in sig)
        names.append(f"G[{q}{sg},{prog.machine.alphabet[ai]},{sorted(s)}]")
    names += [f"M{j}" for j in range(prog.k)]
    return [*names, "U", "R"]


def _readout_mlp(
    prog: CounterProgram, hidden_size: int, first: np.ndarray, bias: np.ndarray, scale: float, dtype, device
) -> nn.Sequential:
    width = max(1, len(prog.accept))  # a machine that accepts nothing keeps one idle unit
    mlp = nn.Sequential(
        nn.Linear(hidden_size, width, device=device, dtype=dtype),
        nn.ReLU(),
        nn.Linear(width, 1, device=device, dtype=dtype),
        nn.Flatten(-2),  # [.., 1] -> [..]: the accept score
    )
    with torch.no_grad():
        mlp[0].weight.zero_()
        mlp[0].bias.zero_()
        mlp[2].weight.zero_()
        mlp[0].weight[: len(prog.accept)] = torch.from_numpy(first)
        mlp[0].bias[: len(prog.accept)] = torch.from_numpy(bias)
        mlp[2].weight[0, : len(prog.accept)] = torch.tensor([scale * c for _, _, c in prog.accept])
        mlp[2].bias.fill_(-scale / 2)
    return mlp


def encode_counter_machine(
    machine: CounterMachine | str,
    kind: Literal["relu", "lstm", "counter_lstm"] = "relu",
    *,
    beta: float = 100.0,
    readout_scale: float = 20.0,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> Construction:
    """Compile a real-time counter machine (or a ready-made name: ``anbn``, ``anbncn``, ``dyck1``,
    ``anbmcnm``) into a recurrent layer with an accept readout (module docstring).

    Args:
        machine: the :class:`CounterMachine`, or a key of ``READY_MADE``.
        kind: ``"relu"`` (Elman, eq. 3), ``"lstm"`` (eqs. 8-13, ``g = tanh``) or
            ``"counter_lstm"`` (``g = identity`` counter cells, footnote 3).
        beta: gate scale of the LSTMs (pre-activations ``>= beta/2`` in magnitude).
        readout_scale: the accept logit is ``readout_scale · (accept − 1/2)``.
        dtype, device: of the weights.

    Units: ``len(guards) + k + 2`` (guards, counter magnitudes ``M_j``, ``U``, ``R``).

    Returns an acceptor :class:`~memrnn.constructions.Construction`: the layer reads one-hot
    ``(*machine.alphabet, BOS)`` (``ids`` puts ``BOS`` first), the readout gives the accept score
    ``[B, T]``, ``source`` is the machine; :func:`counter_values` decodes its configuration.
    """
    if isinstance(machine, str):
        if machine not in READY_MADE:
            raise ValueError(
                f"unknown ready-made counter machine {machine!r}; choose one of {sorted(READY_MADE)}"
            )
        machine = READY_MADE[machine]()
    if not isinstance(machine, CounterMachine):
        raise ValueError(f"machine must be a CounterMachine or a name, got {type(machine).__name__}")
    if kind not in ("relu", "lstm", "counter_lstm"):
        raise ValueError(f"kind must be 'relu', 'lstm' or 'counter_lstm', got {kind!r}")
    if not beta > 0 or not readout_scale > 0:
        raise ValueError(f"beta and readout_scale must be positive, got {beta}, {readout_scale}")
    prog = counter_program(machine)
    units = _unit_names(prog)
    if kind == "counter_lstm":  # the layer's output is [control units, counter cells]
        units = [u for u in units if not u.startswith("M")] + [u for u in units if u.startswith("M")]
    build = {"relu": _relu, "lstm": _lstm, "counter_lstm": _counter_lstm}[kind]
    layer, readout = build(prog, beta, readout_scale, dtype, device)
    return Construction(
        layer, readout, vocabulary=(*machine.alphabet, BOS), source=machine, units=units, task="acceptor"
    )


def _reset_constant(dtype: torch.dtype) -> float:
    return float(min(2.0**53, 2.0 ** (math.floor(math.log2(torch.finfo(dtype).max)) - 2)))


def _relu(prog: CounterProgram, beta: float, scale: float, dtype, device):
    ng, k, n_sym = len(prog.guards), prog.k, len(prog.machine.alphabet)
    d = ng + k + 2
    iM, iU, iR = ng, ng + k, ng + k + 1
    bos = n_sym
    U = np.zeros((d, d))
    V = np.zeros((d, n_sym + 1))
    b = np.zeros(d)
    T, D = prog.transition, prog.delta
    for gi, (qi, ai, s) in enumerate(prog.guards):
        # s_{t-1}[Q] + x_a − 1 − Σ_{j∈S} |c_j|_{t-1}
        U[gi, :ng] = T[qi] - sum((D[j] for j in s), np.zeros(ng))
        for j in s:
            U[gi, iM + j] = -1.0
        if qi == 0:  # the start state: + U + (1 − R)
            U[gi, iU] += 1.0
            U[gi, iR] -= 1.0
            b[gi] += 1.0
        V[gi, ai] = 1.0
        b[gi] -= 1.0
    for j in range(k):
        U[iM + j, iM + j] = 1.0
        U[iM + j, :ng] = D[j]
        V[iM + j, bos] = -_reset_constant(dtype)
    V[iU, bos] = 1.0
    b[iR] = 1.0
    layer = ElmanRNN(n_sym + 1, d, activation="relu", device=device, dtype=dtype)
    with torch.no_grad():
        layer.weight_hh.copy_(torch.from_numpy(U))
        layer.weight_ih.copy_(torch.from_numpy(V))
        layer.bias.copy_(torch.from_numpy(b))
    # readout: relu(s_T[Q] − Σ_{j∈S} |c_j|_T)
    first = np.zeros((len(prog.accept), d))
    fb = np.zeros(len(prog.accept))
    for r, (qi, s, _) in enumerate(prog.accept):
        first[r, :ng] = T[qi] - sum((D[j] for j in s), np.zeros(ng))
        for j in s:
            first[r, iM + j] = -1.0
        if qi == 0:
            first[r, iU] += 1.0
            first[r, iR] -= 1.0
            fb[r] += 1.0
    return layer, _readout_mlp(prog, d, first, fb, scale, dtype, device)


def _lstm(prog: CounterProgram, beta: float, scale: float, dtype, device):
    """nn.LSTM gate order ``i, f, g (c̃), o``; booleans read as ``h / γ``."""
    ng, k, n_sym = len(prog.guards), prog.k, len(prog.machine.alphabet)
    d = ng + k + 2
    iM, iU, iR = ng, ng + k, ng + k + 1
    bos = n_sym
    big = beta / 2
    W_hh = np.zeros((4, d, d))
    W_ih = np.zeros((4, d, n_sym + 1))
    bias = np.zeros((4, d))
    I, Fg, G, O = range(4)
    T, D = prog.transition, prog.delta
    K = 10.0  # z̃ >= 0.2024 for a non-zero counter: −K z̃ <= −2
    for gi, (qi, ai, s) in enumerate(prog.guards):
        bias[I, gi], bias[Fg, gi], bias[G, gi] = big, -big, big  # c = 1, h = γ·o
        # o = σ(β (s_{t−1}[Q] + x_a − 1.5 − K Σ_{j∈S} z̃_j)),  z̃_j = h_Mj + (D g)_j γ
        row = T[qi] / GAMMA - K * sum((D[j] for j in s), np.zeros(ng))
        W_hh[O, gi, :ng] = beta * row
        for j in s:
            W_hh[O, gi, iM + j] = -beta * K
        if qi == 0:
            W_hh[O, gi, iU] += beta / GAMMA
            W_hh[O, gi, iR] -= beta / GAMMA
            bias[O, gi] += beta
        W_ih[O, gi, ai] = beta
        bias[O, gi] -= 1.5 * beta
    for j in range(k):
        m = iM + j
        bias[I, m], W_ih[I, m, bos] = big, -2 * big  # i = f = 1, 0 on BOS (reset)
        bias[Fg, m], W_ih[Fg, m, bos] = big, -2 * big
        W_hh[G, m, :ng] = beta * D[j] / GAMMA  # c̃ = tanh(β Δ) ∈ {−1, 0, 1}
        bias[O, m] = big
    bias[I, iU], bias[Fg, iU], bias[G, iU] = big, -big, big
    W_ih[O, iU, bos], bias[O, iU] = 2 * beta, -beta  # o = [BOS]
    bias[I, iR], bias[Fg, iR], bias[G, iR], bias[O, iR] = big, -big, big, big
    layer = LSTMLayer(n_sym + 1, d, device=device, dtype=dtype)
    with torch.no_grad():
        layer.rnn.weight_hh_l0.copy_(torch.from_numpy(W_hh.reshape(4 * d, d)))
        layer.rnn.weight_ih_l0.copy_(torch.from_numpy(W_ih.reshape(4 * d, n_sym + 1)))
        layer.rnn.bias_ih_l0.copy_(torch.from_numpy(bias.reshape(4 * d)))
        layer.rnn.bias_hh_l0.zero_()
    # readout: relu(1 − 2 (1 − s_T[Q]) − K Σ_{j∈S} z̃_j)
    first = np.zeros((len(prog.accept), d))
    fb = np.full(len(prog.accept), -1.0)
    for r, (qi, s, _) in enumerate(prog.accept):
        first[r, :ng] = 2 * T[qi] / GAMMA - K * sum((D[j] for j in s), np.zeros(ng))
        for j in s:
            first[r, iM + j] = -K
        if qi == 0:
            first[r, iU] += 2 / GAMMA
            first[r, iR] -= 2 / GAMMA
            fb[r] += 2.0
    return layer, _readout_mlp(prog, d, first, fb, scale, dtype, device)


def _counter_lstm(prog: CounterProgram, beta: float, scale: float, dtype, device):
    """A :class:`CounterLSTM`: the control (guards, ``U``, ``R``) in its LSTM units, each
    magnitude in a counter cell with ``g = identity`` (so ``|c|_t`` is linear: no tanh trick)."""
    ng, k, n_sym = len(prog.guards), prog.k, len(prog.machine.alphabet)
    hs = ng + 2  # control units: guards, U, R; the layer's output is [control, counters]
    iU, iR = ng, ng + 1
    bos = n_sym
    big = beta / 2
    layer = CounterLSTM(n_sym + 1, hs, k, cell_activation="identity", device=device, dtype=dtype)
    d_in = n_sym + 1
    W = np.zeros((4, hs, d_in + hs + k))  # controller gates read [x, h, e]
    bb = np.zeros((4, hs))
    I, Fg, G, O = range(4)
    T, D = prog.transition, prog.delta
    for gi, (qi, ai, s) in enumerate(prog.guards):
        bb[I, gi], bb[Fg, gi], bb[G, gi] = big, -big, big
        # o = σ(β (s_{t−1}[Q] + x_a − 1.5 − 2 Σ_{j∈S} |c_j|_{t−1})),  |c_j| = e_j + (D g)_j
        W[O, gi, d_in : d_in + ng] = beta * (T[qi] - 2 * sum((D[j] for j in s), np.zeros(ng))) / GAMMA
        for j in s:
            W[O, gi, d_in + hs + j] = -2 * beta
        if qi == 0:
            W[O, gi, d_in + iU] += beta / GAMMA
            W[O, gi, d_in + iR] -= beta / GAMMA
            bb[O, gi] += beta
        W[O, gi, ai] = beta
        bb[O, gi] -= 1.5 * beta
    bb[I, iU], bb[Fg, iU], bb[G, iU] = big, -big, big
    W[O, iU, bos], bb[O, iU] = 2 * beta, -beta
    bb[I, iR], bb[Fg, iR], bb[G, iR], bb[O, iR] = big, -big, big, big
    # counter cells: i = f = 1 (0 on BOS), direction tanh(β Δ), o = 1
    Wk = np.zeros((4, k, d_in + hs + k))
    bk = np.zeros((4, k))
    for j in range(k):
        bk[I, j], Wk[I, j, bos] = big, -2 * big
        bk[Fg, j], Wk[Fg, j, bos] = big, -2 * big
        Wk[G, j, d_in : d_in + ng] = beta * D[j] / GAMMA
        bk[O, j] = big
    with torch.no_grad():
        layer.weight.copy_(torch.from_numpy(W.reshape(4 * hs, -1)))
        layer.bias.copy_(torch.from_numpy(bb.reshape(-1)))
        layer.counter_weight.copy_(torch.from_numpy(Wk.reshape(4 * k, -1)))
        layer.counter_bias.copy_(torch.from_numpy(bk.reshape(-1)))
    d = hs + k
    first = np.zeros((len(prog.accept), d))
    fb = np.full(len(prog.accept), -1.0)
    for r, (qi, s, _) in enumerate(prog.accept):
        first[r, :ng] = (2 * T[qi] - 2 * sum((D[j] for j in s), np.zeros(ng))) / GAMMA
        for j in s:
            first[r, hs + j] = -2.0
        if qi == 0:
            first[r, iU] += 2 / GAMMA
            first[r, iR] -= 2 / GAMMA
            fb[r] += 2.0
    return layer, _readout_mlp(prog, d, first, fb, scale, dtype, device)
