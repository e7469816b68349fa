"""The specification of the explicit Dyck-(k,m) stacks in Simple RNNs and LSTMs (Hewitt et al. 2020,
appendices D–G): sizes, stack codes, constants, every weight (:class:`HewittSpec`) and the
reference run of the stack correspondence lemmas (:func:`ideal_states`).  The modules that carry
these weights are in :mod:`memrnn.constructions.hewitt`.

Four constructions, each exact per Definition 5 (the next tokens with probability ``≥ ε`` are
exactly the allowed ones, at every prefix):

================  ==============================  =====================================
``arch``          ``encoding="one_hot"``          ``encoding="log"`` (``L = ⌈log2 k⌉``)
================  ==============================  =====================================
``"srnn"``        ``2mk`` units (Theorem 2, D)    ``6mL − 2m`` units (Theorem 4, G.1)
``"lstm"``        ``mk`` units (Theorem 3, E.6)   ``3mL − m`` units (Theorem 5, G.2)
================  ==============================  =====================================

Constants, named as in appendix G.3: ``β`` the saturation threshold (``σ(x) = 1`` for
``x ≥ β``, C.1), ``γ = tanh(1)``, ``λ = 2β/γ`` (the LSTM's scale; E.6 needs ``λγ/2 ≥ β``) and
``ζ`` (the readout's scale, F.1; the paper needs ``ζ > 2.4/γ``; the default
``ζ = ln(2000·k)/γ`` leaves at most ``10⁻³`` of the mass on disallowed tokens at any valid prefix,
since every allowed logit is ``≥ ζγ/2`` and every disallowed one ``≤ −ζγ/2``).
``ε = 1/(2(k+1))`` (F.1).

A stack slot holds the *code* ``ψ⁻¹(⟨_i)`` of its bracket: ``e_i`` (one-hot) or, for the log
encoding with bits ``p⁽ⁱ⁾`` of ``i``, ``[p; 1−p; 1_{L−1}]`` (Simple RNN, G.1) or
``[p; 1−p; −1_{L−1}]`` (LSTM, G.5).  The readout uses *read* rows (``read_i · code_j = 1`` if
``i = j`` and ``≤ 0`` otherwise) and a *count* row (``count · code_j = 1`` for every ``j``):
:class:`StackCodes`.

Memrnn's vocabulary: opens ``0..k−1``, closes ``k..2k−1``, ``END = 2k`` and the input-only
``BOS = 2k+1``.  The paper's embedding is ``E = I`` over the ``2k`` brackets; memrnn also gives
``END`` and ``BOS`` an input column, a *reset* to the empty stack (forget gates closed; Simple
RNN units driven to 0), so a model reads ``BOS w_1 … w_T`` from any state and strings can be
concatenated.  By default the layers read *compact* token features
``x = [open, close, reset, code]`` (``3 + d`` of them; :meth:`HewittSpec.features`), an exact
factorisation ``U_paper = U · F`` that keeps ``k = 100 000`` small;
``inputs="one_hot"`` gives the paper's one-hot inputs.

Errata found while implementing (``tests/constructions/test_hewitt.py`` exercises 1–4, 6 through
the codes, 8 and 9):

1. D.4/D.5 swap ``M_pop`` and ``M_push``: D.14 needs ``(M_push)_{i,j} = 2β`` iff ``i = j + k``
   (a push moves every slot one towards the bottom).
2. D.1 lists the bottom of the stack first, but the Simple RNN's dynamics (D.17, D.20) keep the
   top in slot 1: ``R(q) = [ψ(top), …, ψ(bottom), 0, …]``.
3. E.39 writes ``U_i = −λγ Σ x_⟨``; the proof of E.18 (and E.40's use) needs ``+λγ``.
4. E.24 sums ``x_⟨``; E.25/E.27 need the *close* brackets: ``U_o = +λγ Σ x_⟩``.
5. G.1 puts ``ζ`` inside the code; the code is ``{0,1}``-valued (``ζ`` belongs to ``V``).
6. G.2: the LSTM code has ``−1`` entries, so "``ψ* ∈ {0,1}^{3L−1}``" is false; the LSTM only
   needs ``1ᵀψ = 1`` and ``tanh``'s oddness.  And G.7/G.8's rows ``−ζ[1; −1]`` give
   ``−ζ(2L−1)`` against ``[p; 1−p; −1]``: the right rows are ``−ζ·1`` (as for one-hot codes),
   and the close rows are ``ζ[p; 1−p; +1]``.
7. Lemma 5 (F.1): the full-stack partition function has one allowed symbol, not ``k``
   (``Z_f ≤ e^{ζγ/2} + 2k e^{−ζγ/2}``); the conclusion survives because a disallowed token's
   probability is then ``≤ 1/(2k + e^{ζγ})``.
8. B.1 and section 4 count ``k^{m+1} + 1`` (and ``k^{m+1} − 1``) DFA states; there are
   ``Σ_{i≤m} k^i = (k^{m+1} − 1)/(k − 1)`` stack states plus accept and reject.
9. F.1 gives the Simple RNN the close rows ``ζ e_i``, but its slots hold ``e_i`` itself (no
   ``tanh``), so the allowed close gets the logit ``ζ(1 − γ/2) = 0.62ζ`` against ``ζγ/2 = 0.38ζ``
   for the allowed opens: as ``ζ`` grows the opens' probability goes to 0 and falls below ``ε``
   (at the default ζ for k = 2 it is 0.065 < ε = 1/6), so Lemma 5 fails for the Simple RNN.  Rows
   ``ζγ e_i`` restore the symmetric logits ``±ζγ/2`` of the LSTM.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Literal, NamedTuple

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from memrnn.core.checks import finite_float, positive_int

GAMMA = math.tanh(1.0)
Arch = Literal["srnn", "lstm"]
Encoding = Literal["one_hot", "log"]
ARCHS = ("srnn", "lstm")
ENCODINGS = ("one_hot", "log")
#: compact input features: columns of :meth:`HewittSpec.features`
OPEN, CLOSE, RESET, CODE = 0, 1, 2, 3


def log_bits(k: int) -> int:
    """``L = ⌈log2 k⌉`` for ``k ≥ 2`` (integer arithmetic, no float rounding)."""
    return (k - 1).bit_length()


def _check_km(k: int, m: int, encoding: str = "one_hot") -> None:
    positive_int("k", k)
    positive_int("m", m)
    if encoding not in ENCODINGS:
        raise ValueError(f"unknown encoding {encoding!r}; choose 'one_hot' or 'log'")
    if encoding == "log" and k < 2:
        raise ValueError(f"the log encoding needs k >= 2 (Theorems 4-5), got k={k}; use encoding='one_hot'")


def slot_size(k: int, encoding: Encoding) -> int:
    """Units per stack slot: ``k`` (one-hot) or ``3⌈log2 k⌉ − 1`` (log, G.1)."""
    _check_km(k, 1, encoding)
    return k if encoding == "one_hot" else 3 * log_bits(k) - 1


def hewitt_units(k: int, m: int, arch: Arch = "lstm", encoding: Encoding = "log") -> int:
    """Hidden units of a construction: ``2mk``, ``mk``, ``6m⌈log2 k⌉ − 2m`` or ``3m⌈log2 k⌉ − m``."""
    _check_km(k, m, encoding)
    if arch not in ARCHS:
        raise ValueError(f"unknown arch {arch!r}; choose 'srnn' or 'lstm'")
    return (2 if arch == "srnn" else 1) * m * slot_size(k, encoding)


def dyck_state_count(k: int, m: int) -> int:
    """Stack states of the Dyck-(k,m) DFA: ``Σ_{i=0..m} k^i`` (accept and reject not counted)."""
    return sum(k**i for i in range(m + 1))


def construction_sizes(k: int, m: int) -> dict[str, float]:
    """Every size for one ``(k, m)``: the four constructions (Theorems 2–5), the naive
    construction of Theorem 1 (Minsky's on the DFA: ``|Q|·|Σ| + 1`` units, ``|Q|`` the stack
    states and ``|Σ| = 2k``; the ``+1`` is the start unit ``BOS`` sets) and Theorem 6's lower
    bound ``m·log2 k`` bits of memory (units at one bit each; ``/p`` for ``p``-bit units)."""
    _check_km(k, m)
    out: dict[str, float] = {"k": k, "m": m, "dfa_states": dyck_state_count(k, m)}
    out["naive"] = dyck_state_count(k, m) * 2 * k + 1
    out["srnn_one_hot"] = hewitt_units(k, m, "srnn", "one_hot")
    out["lstm_one_hot"] = hewitt_units(k, m, "lstm", "one_hot")
    if k >= 2:
        out["srnn_log"] = hewitt_units(k, m, "srnn", "log")
        out["lstm_log"] = hewitt_units(k, m, "lstm", "log")
    out["lower_bound_bits"] = m * math.log2(k)
    return out


# -- codes --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class StackCodes:
    """How a construction writes and reads brackets (Definitions 9 and 11).

    ``write(ids) [N, d]``: the slot code ``ψ⁻¹(⟨_i)`` of open brackets ``ids``;
    ``read(s) [N, k]``: ``s @ readᵀ`` for slot contents ``s [N, d]``, where ``read_i · write_j``
    is 1 for ``i = j`` and ``≤ 0`` otherwise; ``count [d]``: ``count · write_j = 1`` for all ``j``.
    One-hot codes are never materialised (``k = 10⁵`` would need ``10¹⁰`` entries).
    """

    k: int
    encoding: Encoding
    arch: Arch
    write_table: Tensor | None = field(default=None, repr=False)  # [k, d] for the log encoding
    read_table: Tensor | None = field(default=None, repr=False)  # [k, d]
    count: Tensor = field(default=None, repr=False)  # [d]

    @property
    def d(self) -> int:
        return slot_size(self.k, self.encoding)

    def write(self, ids: Tensor, dtype: torch.dtype) -> Tensor:
        if self.write_table is None:
            return F.one_hot(ids, self.k).to(dtype)
        return self.write_table.to(device=ids.device, dtype=dtype)[ids]

    def read(self, s: Tensor) -> Tensor:
        if self.read_table is None:
            return s
        return s @ self.read_table.to(device=s.device, dtype=s.dtype).T

    def dense(self) -> tuple[Tensor, Tensor, Tensor]:
        """``(write [k, d], read [k, d], count [d])`` in float64."""
        if self.write_table is None:
            eye = torch.eye(self.k, dtype=torch.float64)
            return eye, eye, self.count
        return self.write_table, self.read_table, self.count


@lru_cache(maxsize=64)
def stack_codes(k: int, encoding: Encoding = "log", arch: Arch = "lstm") -> StackCodes:
    """The slot codes of a construction (E.2 one-hot; G.1 Simple RNN and G.5 LSTM log codes);
    cached (treat the tensors as read-only)."""
    _check_km(k, 1, encoding)
    if arch not in ARCHS:
        raise ValueError(f"unknown arch {arch!r}; choose 'srnn' or 'lstm'")
    if encoding == "one_hot":
        return StackCodes(k, encoding, arch, None, None, torch.ones(k, dtype=torch.float64))
    L = log_bits(k)
    i = torch.arange(k)
    bits = ((i[:, None] >> torch.arange(L - 1, -1, -1)[None]) & 1).to(torch.float64)  # p⁽ⁱ⁾, MSB first
    tail = torch.ones(k, L - 1, dtype=torch.float64)
    sign = 1.0 if arch == "srnn" else -1.0  # G.1: +1 tail; G.5: −1 tail
    write = torch.cat([bits, 1 - bits, sign * tail], 1)
    read = torch.cat([bits, 1 - bits, -sign * tail], 1)
    count = torch.cat(
        [torch.ones(2 * L, dtype=torch.float64), -sign * torch.ones(L - 1, dtype=torch.float64)]
    )
    return StackCodes(k, encoding, arch, write, read, count)


# -- constants and the specification -------------------------------------------------------------
@dataclass(frozen=True)
class HewittConstants:
    """G.3's constants: ``beta`` (β), ``lam`` (λ), ``zeta`` (ζ); ``gamma = tanh(1)``; ``epsilon``
    the truncation threshold ``1/(2(k+1))`` of Definition 5 (F.1)."""

    beta: float
    lam: float
    zeta: float
    epsilon: float
    gamma: float = GAMMA


def hewitt_constants(
    k: int, beta: float = 20.0, lam: float | None = None, zeta: float | None = None
) -> HewittConstants:
    """β (default 20: ``σ(20)`` rounds to 1 in float32, and in float64 the gates miss 0/1 by
    ``2·10⁻⁹``, an error each step contracts by ``≈ 4βe^{−β}``), ``λ = 2β/γ`` unless given
    (must be ``≥ 2β/γ``), ``ζ = ln(2000k)/γ`` unless given (must exceed ``2.4/γ``)."""
    beta = finite_float("beta", beta, positive=True)
    lam = 2 * beta / GAMMA if lam is None else finite_float("lam", lam)
    if lam < 2 * beta / GAMMA * (1 - 1e-12):
        raise ValueError(
            f"lam={lam} is below 2*beta/gamma = {2 * beta / GAMMA:.6g}; the gates would not saturate (E.6)"
        )
    zeta = math.log(2000.0 * k) / GAMMA if zeta is None else finite_float("zeta", zeta)
    if not zeta > 2.4 / GAMMA:
        raise ValueError(f"zeta={zeta} must exceed 2.4/gamma = {2.4 / GAMMA:.6g} (F.1)")
    return HewittConstants(float(beta), lam, zeta, 1.0 / (2 * (k + 1)))


class DenseWeights(NamedTuple):
    """A construction's weights as dense float64 tensors.

    ``features [2k+2, e]`` the token features (the embedding ``E``; rows are token ids);
    ``weight_ih [G·H, e]``, ``weight_hh [G·H, H]``, ``bias [G·H]`` (``G = 4`` gates in torch's
    order ``i, f, g, o`` for the LSTM, ``G = 1`` for the Simple RNN); ``readout_weight [2k+1, H]``
    and ``readout_bias [2k+1]`` (``V``, ``b_v`` of F.1)."""

    features: Tensor
    weight_ih: Tensor
    weight_hh: Tensor
    bias: Tensor
    readout_weight: Tensor
    readout_bias: Tensor


@dataclass(frozen=True)
class HewittSpec:
    """One construction: ``arch``, ``k``, ``m``, ``encoding``, constants, ``inputs`` and an
    optional ``scale`` of every weight (``hewitt_init_``).  Builds the dense weights
    (:meth:`dense`) and runs the same network in ``O(m·d)`` per token (:meth:`run`)."""

    arch: Arch
    k: int
    m: int
    encoding: Encoding
    constants: HewittConstants
    inputs: Literal["compact", "one_hot"] = "compact"
    scale: float = 1.0

    def __post_init__(self) -> None:
        _check_km(self.k, self.m, self.encoding)
        if self.arch not in ARCHS:
            raise ValueError(f"unknown arch {self.arch!r}; choose 'srnn' or 'lstm'")
        if self.inputs not in ("compact", "one_hot"):
            raise ValueError(f"unknown inputs {self.inputs!r}; choose 'compact' or 'one_hot'")
        if not self.scale > 0:
            raise ValueError(f"scale must be positive, got {self.scale}")

    # sizes
    @property
    def d(self) -> int:
        return slot_size(self.k, self.encoding)

    @property
    def hidden_size(self) -> int:
        return hewitt_units(self.k, self.m, self.arch, self.encoding)

    @property
    def vocab_size(self) -> int:
        """Input ids: ``2k`` brackets, ``END``, ``BOS``."""
        return 2 * self.k + 2

    @property
    def num_symbols(self) -> int:
        return 2 * self.k + 1

    def unit_names(self) -> list[str]:
        """A name per hidden unit: ``slot{j}[{u}]``, unit ``u`` of stack slot ``j``'s code (LSTM:
        slot 0 is the bottom, E.6); the Simple RNN has a ``push:`` and a ``pop:`` copy of the
        slots, slot 0 the top (D.1, erratum 2)."""
        slots = [f"slot{j}[{u}]" for j in range(self.m) for u in range(self.d)]
        return slots if self.arch == "lstm" else [f"{half}:{s}" for half in ("push", "pop") for s in slots]

    @property
    def input_size(self) -> int:
        return 3 + self.d if self.inputs == "compact" else self.vocab_size

    @property
    def codes(self) -> StackCodes:
        return stack_codes(self.k, self.encoding, self.arch)

    # token features
    def compact_features(self) -> Tensor:
        """``[2k+2, 3+d]``: ``[open, close, reset, code]`` per id (``END``, ``BOS``: reset)."""
        k = self.k
        write, _, _ = self.codes.dense()
        out = torch.zeros(self.vocab_size, 3 + self.d, dtype=torch.float64)
        out[:k, OPEN] = 1.0
        out[:k, CODE:] = write
        out[k : 2 * k, CLOSE] = 1.0
        out[2 * k :, RESET] = 1.0
        return out

    def features(self) -> Tensor:
        """The embedding table ``[2k+2, input_size]``: compact features, or ``I`` (one-hot)."""
        if self.inputs == "one_hot":
            return torch.eye(self.vocab_size, dtype=torch.float64)
        return self.compact_features()

    # dense weights
    def dense(self) -> DenseWeights:
        """The construction's weights (float64), scaled by ``scale``."""
        u, w, b = self._lstm_recurrence() if self.arch == "lstm" else self._srnn_recurrence()
        if self.inputs == "one_hot":
            u = u @ self.compact_features().T  # U_paper = U · F
        v, bv = self._readout()
        s = self.scale
        return DenseWeights(self.features(), s * u, s * w, s * b, s * v, s * bv)

    def _lstm_recurrence(self) -> tuple[Tensor, Tensor, Tensor]:
        """E.6: ``W_o`` (E.22), ``W_f`` (E.30), ``W_i`` (E.37) as ``λ·(A ⊗ 1_{d×d})``;
        ``W_c̃ = 0``; ``U``, ``b`` as E.24–E.26, E.32–E.34, E.39–E.41, E.45 (errata 3–4), on the
        compact features; the reset column closes every forget and input gate."""
        m, d, c = self.m, self.d, self.constants
        lam, lg = c.lam, c.lam * c.gamma
        f64 = torch.float64
        jm = torch.arange(m)
        rel = jm[None, :] - jm[:, None]  # j' − j
        a_o = torch.where(rel < 0, 0.0, torch.where(rel <= 1, -1.0, -2.0)).to(f64)
        a_f = -torch.eye(m, dtype=f64)
        a_i = torch.zeros(m, m, dtype=f64)
        a_i[0, :] = -1.0
        a_i[jm[1:], jm[1:] - 1] = 1.0
        ones = torch.ones(d, d, dtype=f64)
        w_i, w_f, w_o = (lam * torch.kron(a, ones) for a in (a_i, a_f, a_o))
        w_g = torch.zeros(m * d, m * d, dtype=f64)
        e, h = 3 + d, m * d
        u_i, u_f, u_g, u_o = (torch.zeros(h, e, dtype=f64) for _ in range(4))
        u_i[:, OPEN] = lg
        u_f[:, CLOSE] = -lg
        u_f[:, RESET] = -2 * lg
        u_o[:, CLOSE] = lg
        u_g[:, CODE:] = lam * torch.eye(d, dtype=f64).repeat(m, 1)
        b_i = torch.full((h,), -1.5 * lg, dtype=f64)
        b_i[:d] = -0.5 * lg
        b_f = torch.full((h,), 1.5 * lg, dtype=f64)
        b_g = torch.zeros(h, dtype=f64)
        b_o = torch.full((h,), 0.5 * lg, dtype=f64)
        return (
            torch.cat([u_i, u_f, u_g, u_o]),
            torch.cat([w_i, w_f, w_g, w_o]),
            torch.cat([b_i, b_f, b_g, b_o]),
        )

    def _srnn_recurrence(self) -> tuple[Tensor, Tensor, Tensor]:
        """Appendix D: ``W = [M_push; M_pop]·[I I]`` (D.4–D.6, erratum 1), ``U`` (D.7) on the
        compact features, ``b = −β`` (D.8); the reset column is ``−5β`` (``W h ≤ 4β``)."""
        m, d, beta = self.m, self.d, self.constants.beta
        f64 = torch.float64
        down = torch.diag(torch.ones(m - 1, dtype=f64), -1)  # new slot j ← old slot j−1
        eye_d = torch.eye(d, dtype=f64)
        m_push = 2 * beta * torch.kron(down, eye_d)
        m_pop = 2 * beta * torch.kron(down.T.contiguous(), eye_d)
        w = torch.cat([torch.cat([m_push, m_push], 1), torch.cat([m_pop, m_pop], 1)])
        h = m * d
        u = torch.zeros(2 * h, 3 + d, dtype=f64)
        u[:d, CODE:] = 2 * beta * eye_d  # push slot 1 ← 2β·code
        u[:h, CLOSE] = -2 * beta
        u[h:, OPEN] = -2 * beta
        u[:, RESET] = -5 * beta
        b = torch.full((2 * h,), -beta, dtype=f64)
        return u, w, b

    def _readout(self) -> tuple[Tensor, Tensor]:
        """F.1 (errata 6): close rows read the top slot (every slot for the LSTM, where only the
        top is non-zero in ``h``; slot 1 of both halves for the Simple RNN), open rows the last
        slot's count, ``END`` every slot's count; biases ``∓ζγ/2``."""
        k, m, d, c = self.k, self.m, self.d, self.constants
        _, read, count = self.codes.dense()
        zeta = c.zeta
        v = torch.zeros(2 * k + 1, m, d, dtype=torch.float64)
        if self.arch == "lstm":
            v[k : 2 * k] = zeta * read[:, None, :]
        else:
            v[k : 2 * k, 0] = zeta * c.gamma * read  # erratum 9: ζγ, not ζ
        v[:k, m - 1] = -zeta * count
        v[2 * k] = -zeta * count
        v = v.reshape(2 * k + 1, m * d)
        if self.arch == "srnn":
            v = torch.cat([v, v], 1)  # read h_push + h_pop (D.3)
        b = torch.full((2 * k + 1,), 0.5 * zeta * c.gamma, dtype=torch.float64)
        b[k : 2 * k] = -0.5 * zeta * c.gamma
        return v, b

    # the structured evaluation ------------------------------------------------------------
    def initial_state(
        self, batch: int, dtype: torch.dtype = torch.float64, device=None
    ) -> tuple[Tensor, ...]:
        """Zero state: LSTM ``(h, c)`` each ``[B, m, d]``; Simple RNN ``(h,)`` ``[B, 2, m, d]``."""
        if self.arch == "lstm":
            z = torch.zeros(batch, self.m, self.d, dtype=dtype, device=device)
            return z, z.clone()
        return (torch.zeros(batch, 2, self.m, self.d, dtype=dtype, device=device),)

    def run(
        self, ids: Tensor, state: tuple[Tensor, ...] | None = None, *, logits: bool = True
    ) -> tuple[Tensor | None, tuple[Tensor, ...], Tensor]:
        """The network on token ids ``[B, T]`` without dense matrices: every weight block of
        the construction is ``λ·(A ⊗ 1)`` or ``2β·(S ⊗ I)``, so one step costs ``O(B·m·d)``
        (plus ``O(B·k·d)`` for the close logits).  Agrees with the dense layer to rounding
        (tested).  Returns ``(logits [B, T, 2k+1] or None, final state, hidden [B, T, H])``."""
        if ids.dim() != 2:
            raise ValueError(f"ids must be [batch, time], got shape {tuple(ids.shape)}")
        bad = (ids < 0) | (ids >= self.vocab_size)
        if bool(bad.any()):
            b, t = (int(v) for v in bad.nonzero()[0])
            raise ValueError(
                f"unknown token id {int(ids[b, t])} at [{b}, {t}]; Dyck-({self.k},{self.m}) inputs are 0..{self.vocab_size - 1}"
            )
        dtype = state[0].dtype if state is not None else torch.float64
        if state is None:
            state = self.initial_state(ids.shape[0], dtype, ids.device)
        k, codes = self.k, self.codes
        is_open = (ids < k).to(dtype)
        is_close = ((ids >= k) & (ids < 2 * k)).to(dtype)
        is_reset = (ids >= 2 * k).to(dtype)
        code = codes.write(ids.clamp(max=k - 1), dtype) * is_open[..., None]  # [B, T, d]
        hidden = []
        for t in range(ids.shape[1]):
            if self.arch == "lstm":
                state = self._lstm_step(state, is_open[:, t], is_close[:, t], is_reset[:, t], code[:, t])
                hidden.append(state[0].flatten(1))
            else:
                state = self._srnn_step(state, is_open[:, t], is_close[:, t], is_reset[:, t], code[:, t])
                hidden.append(state[0].flatten(1))
        hid = (
            torch.stack(hidden, 1) if hidden else torch.zeros(ids.shape[0], 0, self.hidden_size, dtype=dtype)
        )
        out = self.logits(hid) if logits else None
        return out, state, hid

    def _lstm_step(self, state, is_open, is_close, is_reset, code):
        h, cell = state
        c, s = self.constants, self.scale
        lam, lg = s * c.lam, s * c.lam * c.gamma
        S = h.sum(-1)  # [B, m]: slot sums; W_x h = λ (A ⊗ 1) h = λ A S, broadcast over the slot
        after = S.flip(-1).cumsum(-1).flip(-1)  # Σ_{j' ≥ j} S_j'
        m = S.shape[1]
        nxt = F.pad(S, (0, 1))[:, 1 : m + 1]  # S_{j+1} (0 past the last slot)
        beyond = F.pad(after, (0, 2))[:, 2 : m + 2]  # Σ_{j' > j+1}
        pre_o = -lam * (S + nxt) - 2 * lam * beyond + lg * is_close[:, None] + 0.5 * lg
        pre_f = -lam * S - lg * is_close[:, None] - 2 * lg * is_reset[:, None] + 1.5 * lg
        prev = F.pad(S, (1, 0))[:, :m]  # S_{j−1}
        pre_i = lam * prev + lg * is_open[:, None] - 1.5 * lg
        pre_i[:, 0] = -lam * S.sum(-1) + lg * is_open - 0.5 * lg
        g = torch.tanh(lam * code)  # [B, d], the same candidate for every slot (W_c̃ = 0)
        cell = torch.sigmoid(pre_f)[..., None] * cell + torch.sigmoid(pre_i)[..., None] * g[:, None, :]
        h = torch.sigmoid(pre_o)[..., None] * torch.tanh(cell)
        return h, cell

    def _srnn_step(self, state, is_open, is_close, is_reset, code):
        (h,) = state
        beta = self.scale * self.constants.beta
        both = h[:, 0] + h[:, 1]  # h' = h_push + h_pop, [B, m, d]
        reset = -5 * beta * is_reset[:, None, None]
        push = 2 * beta * F.pad(both[:, :-1], (0, 0, 1, 0))
        push[:, 0] = 2 * beta * code
        push = push - 2 * beta * is_close[:, None, None] - beta + reset
        pop = 2 * beta * F.pad(both[:, 1:], (0, 0, 0, 1)) - 2 * beta * is_open[:, None, None] - beta + reset
        return (torch.sigmoid(torch.stack([push, pop], 1)),)

    def logits(self, hidden: Tensor) -> Tensor:
        """The readout ``V h + b_v`` ``[..., 2k+1]`` of hidden states ``[..., H]``, structured."""
        m, d = self.m, self.d
        c, sc = self.constants, self.scale
        zeta, zg = sc * c.zeta, sc * c.zeta * c.gamma
        codes = self.codes
        count = codes.count.to(device=hidden.device, dtype=hidden.dtype)
        slots = hidden.reshape(*hidden.shape[:-1], -1, m, d)
        slots = slots.sum(-3)  # the Simple RNN reads h_push + h_pop; the LSTM has one part
        if self.arch == "lstm":  # h holds tanh(code) = γ·code in the top slot
            closes = zeta * codes.read(slots.sum(-2)) - 0.5 * zg
        else:  # h' holds the code itself in slot 1; rows ζγ·read (erratum 9)
            closes = zg * codes.read(slots[..., 0, :]) - 0.5 * zg
        opens = (-zeta * (slots[..., m - 1, :] @ count) + 0.5 * zg)[..., None].expand(*closes.shape)
        end = (-zeta * (slots @ count).sum(-1) + 0.5 * zg)[..., None]
        return torch.cat([opens, closes, end], -1)


def hewitt_spec(
    k: int,
    m: int,
    arch: Arch = "lstm",
    encoding: Encoding = "log",
    *,
    inputs: Literal["compact", "one_hot"] = "compact",
    beta: float = 20.0,
    lam: float | None = None,
    zeta: float | None = None,
    scale: float = 1.0,
) -> HewittSpec:
    """A :class:`HewittSpec` with :func:`hewitt_constants`."""
    _check_km(k, m, encoding)
    return HewittSpec(arch, k, m, encoding, hewitt_constants(k, beta, lam, zeta), inputs, scale)


# -- the reference: the stack correspondence lemmas -----------------------------------------------
def ideal_states(spec: HewittSpec, ids: Sequence[int]) -> list[dict[str, np.ndarray]]:
    """What Lemmas 3–4 say the network holds after each token, by running the stack in Python.

    LSTM (E.12–E.13): ``c`` holds the codes bottom-first in slots ``1..depth`` (zeros above),
    ``h`` is ``tanh(code(top))`` in slot ``depth`` and zero elsewhere.  Simple RNN (D.2,
    erratum 2): the stack top-first in the push half after an open bracket, in the pop half
    after a close bracket.  After ``END``/``BOS`` (reset) and at the start, all zeros.  Each
    entry: ``{"h": [H]}`` (+ ``"c"`` for the LSTM) as float64 arrays; raises on a string that
    leaves Dyck-(k,m) (where the lemmas say nothing).
    """
    k, m, d = spec.k, spec.m, spec.d
    write, _, _ = spec.codes.dense()
    stack: list[int] = []
    out = []
    for t, tok in enumerate(ids):
        tok = int(tok)
        if not 0 <= tok < spec.vocab_size:
            raise ValueError(f"unknown token id {tok} at position {t}")
        if tok < k:
            if len(stack) == m:
                raise ValueError(f"open bracket at position {t} exceeds the depth bound m={m}")
            stack.append(tok)
        elif tok < 2 * k:
            if not stack or stack[-1] != tok - k:
                raise ValueError(f"close bracket id {tok} at position {t} does not match the stack {stack}")
            stack.pop()
        else:
            stack = []
        slots = np.zeros((m, d))
        if spec.arch == "lstm":
            for j, sym in enumerate(stack):
                slots[j] = write[sym].numpy()
            h = np.zeros((m, d))
            if stack:
                h[len(stack) - 1] = np.tanh(slots[len(stack) - 1])
            out.append({"c": slots.reshape(-1), "h": h.reshape(-1)})
        else:
            for j, sym in enumerate(reversed(stack)):
                slots[j] = write[sym].numpy()
            halves = np.zeros((2, m, d))
            if tok < 2 * k:
                halves[0 if tok < k else 1] = slots
            out.append({"h": halves.reshape(-1)})
    return out
