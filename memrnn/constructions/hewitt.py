"""Explicit Dyck-(k,m) stacks in Simple RNNs and LSTMs (Hewitt et al. 2020, appendices D–G).

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
from torch import Tensor, nn

from memrnn.core.checks import finite_float
from memrnn.core.registry import register_layer
from memrnn.core.serialization import allow_in_checkpoints
from memrnn.layers.elman import ElmanRNN
from memrnn.layers.gated import LSTMLayer

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
    for name, v in (("k", k), ("m", m)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ValueError(f"Hewitt's constructions need a positive integer {name}, got {name}={v!r}")
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


# -- layers ----------------------------------------------------------------------------------------
def _target_rnn(module: nn.Module) -> tuple[str, nn.Module]:
    if isinstance(module, LSTMLayer):
        if module.num_layers != 1:
            raise ValueError(f"hewitt_init_ needs a one-layer LSTM, got num_layers={module.num_layers}")
        return "lstm", module.rnn
    if isinstance(module, nn.LSTM):
        if module.num_layers != 1 or module.bidirectional or module.proj_size:
            raise ValueError("hewitt_init_ needs a one-layer, unidirectional nn.LSTM without proj_size")
        return "lstm", module
    if isinstance(module, ElmanRNN):
        if module.activation != "sigmoid":
            raise ValueError(
                f"Hewitt's Simple RNN uses the sigmoid (Definition 2); this ElmanRNN has activation={module.activation!r}"
            )
        return "srnn", module
    raise TypeError(
        f"hewitt_init_ sets an nn.LSTM, LSTMLayer or sigmoid ElmanRNN, got {type(module).__name__}"
    )


def hewitt_init_(
    module: nn.Module,
    k: int,
    m: int,
    *,
    encoding: Encoding = "log",
    scale: float = 1.0,
    embedding: nn.Embedding | None = None,
    readout: nn.Linear | None = None,
    beta: float = 20.0,
    lam: float | None = None,
    zeta: float | None = None,
) -> HewittSpec:
    """Set Hewitt's construction into an existing recurrent module, in place.

    ``module``: an ``nn.LSTM`` or :class:`~memrnn.layers.LSTMLayer` (one layer; the LSTM
    construction) or a sigmoid :class:`~memrnn.layers.ElmanRNN` (the Simple RNN one).  Its
    hidden size must be at least the construction's (:func:`hewitt_units`); the construction
    takes the first units and the rest get zero weights (inert in an LSTM: ``c`` stays 0).

    Inputs: with ``embedding`` (an ``nn.Embedding`` with ``≥ 2k+2`` rows and
    ``embedding_dim == input_size ≥ 3 + d``), its rows become the compact token features
    (zero-padded) and the module reads them; without one, the module's ``input_size`` must be
    ``2k+2`` (the paper's one-hot inputs, ``E = I``).  ``readout`` (``nn.Linear`` to ``2k+1``
    outputs) gets ``V`` and ``b_v``.

    ``scale`` multiplies every recurrent, input and readout weight (not the embedding): the
    gates' margins become ``scale·β``.  ``scale = 1`` is the exact construction (gates
    saturated: ``σ'(±β) ≈ e^{−β} = 2·10⁻⁹``, so gradients through them vanish); ``scale ≈ 0.1``
    (margins ``±2``, ``σ'(2) = 0.10``) starts training near the construction with gradients
    that flow.  Returns the :class:`HewittSpec` that was set.
    """
    arch, rnn = _target_rnn(module)
    hidden = rnn.hidden_size
    input_size = rnn.input_size
    if embedding is not None:
        inputs = "compact"
        if embedding.embedding_dim != input_size:
            raise ValueError(
                f"embedding_dim={embedding.embedding_dim} must equal the module's input_size={input_size}"
            )
    elif input_size == 2 * k + 2:
        inputs = "one_hot"
    else:
        raise ValueError(
            f"without an embedding the module must read one-hot tokens: input_size must be 2k+2 = {2 * k + 2}, "
            f"got {input_size}; pass embedding= to use compact features"
        )
    spec = hewitt_spec(k, m, arch, encoding, inputs=inputs, beta=beta, lam=lam, zeta=zeta, scale=scale)
    H, e = spec.hidden_size, spec.input_size
    if hidden < H:
        raise ValueError(
            f"Dyck-({k},{m}) with the {encoding} encoding needs {H} hidden units in a {arch}; the module has {hidden}"
        )
    if input_size < e:
        raise ValueError(
            f"the construction reads {e} input features; the module's input_size is {input_size}"
        )
    if embedding is not None and embedding.num_embeddings < spec.vocab_size:
        raise ValueError(
            f"the embedding has {embedding.num_embeddings} rows; Dyck-({k},{m}) needs {spec.vocab_size} (2k + END + BOS)"
        )
    if readout is not None and (readout.out_features != 2 * k + 1 or readout.in_features < H):
        raise ValueError(
            f"the readout must map >= {H} features to 2k+1 = {2 * k + 1} symbols, got "
            f"{readout.in_features} -> {readout.out_features}"
        )
    w = spec.dense()
    gates = 4 if arch == "lstm" else 1
    with torch.no_grad():
        if arch == "lstm":
            w_ih, w_hh, b_ih, b_hh = rnn.weight_ih_l0, rnn.weight_hh_l0, rnn.bias_ih_l0, rnn.bias_hh_l0
        else:
            w_ih, w_hh, b_ih, b_hh = rnn.weight_ih, rnn.weight_hh, rnn.bias, None
        for p in (w_ih, w_hh, b_ih, b_hh):
            if p is not None:
                p.zero_()
        for g in range(gates):
            rows = slice(g * hidden, g * hidden + H)
            src = slice(g * H, (g + 1) * H)
            w_ih[rows, :e] = w.weight_ih[src].to(w_ih)
            w_hh[rows, :H] = w.weight_hh[src].to(w_hh)
            if b_ih is None:
                raise ValueError("the construction needs biases; the module was built with bias=False")
            b_ih[rows] = w.bias[src].to(b_ih)
        if embedding is not None:
            embedding.weight.zero_()
            embedding.weight[: spec.vocab_size, :e] = w.features.to(embedding.weight)
        if readout is not None:
            readout.weight.zero_()
            readout.weight[:, :H] = w.readout_weight.to(readout.weight)
            readout.bias.copy_(w.readout_bias.to(readout.bias))
    return spec


class _HewittMixin:
    """What the constructed layers share: the spec, the embedding and the readout."""

    spec: HewittSpec

    def token_features(self) -> Tensor:
        """The token features ``[2k+2, input_size]`` this layer reads (rows are token ids)."""
        p = next(self.parameters())
        out = torch.zeros(self.spec.vocab_size, self.input_size, dtype=p.dtype, device=p.device)
        out[:, : self.spec.input_size] = self.spec.features().to(out)
        return out

    def make_embedding(self, freeze: bool = False) -> nn.Embedding:
        """An ``nn.Embedding`` holding :meth:`token_features`."""
        return nn.Embedding.from_pretrained(self.token_features(), freeze=freeze)

    def make_readout(self) -> nn.Linear:
        """An ``nn.Linear(hidden_size, 2k+1)`` holding ``V``, ``b_v`` (F.1)."""
        p = next(self.parameters())
        w = self.spec.dense()
        lin = nn.Linear(self.hidden_size, self.spec.num_symbols, device=p.device, dtype=p.dtype)
        with torch.no_grad():
            lin.weight.copy_(w.readout_weight.to(lin.weight))
            lin.bias.copy_(w.readout_bias.to(lin.bias))
        return lin


def _build_spec(cls_name, input_size, k, m, arch, encoding, inputs, beta, lam, zeta):
    spec = hewitt_spec(k, m, arch, encoding, inputs=inputs, beta=beta, lam=lam, zeta=zeta)
    if input_size is None:
        input_size = spec.input_size
    if input_size < spec.input_size:
        raise ValueError(
            f"{cls_name}(k={k}, m={m}, encoding={encoding!r}) reads {spec.input_size} features; input_size={input_size}"
        )
    return spec, input_size


# The interface suite compares float32 gradients of the fused and reference paths at 1e-5; at
# β = 20 the weights reach ~150 and float32 rounding of the saturated gates alone exceeds that,
# so the registered tiny variants use β = 2 (the same construction, unsaturated).  Exactness at
# the default β is tests/constructions/test_hewitt.py's job.
@register_layer("hewitt_lstm", tiny={"k": 3, "m": 2, "beta": 2.0})
class HewittLSTM(_HewittMixin, LSTMLayer):
    """An :class:`~memrnn.layers.LSTMLayer` carrying Hewitt's Dyck-(k,m) stack (Theorems 3, 5):
    ``mk`` or ``3m⌈log2 k⌉ − m`` units, ``W_c̃ = 0``.  ``self.rnn`` is a plain ``nn.LSTM``.

    Args:
        input_size: features read (default: the construction's, ``3 + d`` compact or ``2k+2``
            one-hot); larger sizes get zero columns.
        k, m, encoding, inputs, beta, lam, zeta: the construction (module docstring).
        fused: as :class:`~memrnn.layers.LSTMLayer`.
    """

    def __init__(
        self,
        input_size: int | None = None,
        k: int = 2,
        m: int = 3,
        encoding: Encoding = "log",
        inputs: Literal["compact", "one_hot"] = "compact",
        beta: float = 20.0,
        lam: float | None = None,
        zeta: float | None = None,
        fused: bool = True,
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        spec, input_size = _build_spec(
            "HewittLSTM", input_size, k, m, "lstm", encoding, inputs, beta, lam, zeta
        )
        super().__init__(input_size, spec.hidden_size, fused=fused, device=device, dtype=dtype)
        self._set(spec, input_size)

    def _set(self, spec: HewittSpec, input_size: int) -> None:
        w = spec.dense()
        H, e = spec.hidden_size, spec.input_size
        with torch.no_grad():
            self.rnn.weight_ih_l0.zero_()
            self.rnn.weight_ih_l0[:, :e] = w.weight_ih.to(self.rnn.weight_ih_l0)
            self.rnn.weight_hh_l0.copy_(w.weight_hh.to(self.rnn.weight_hh_l0))
            self.rnn.bias_ih_l0.copy_(w.bias.to(self.rnn.bias_ih_l0))
            self.rnn.bias_hh_l0.zero_()
        self.spec = spec
        del H

    def reset_parameters(self) -> None:
        """Back to the construction (not torch's random initialisation)."""
        if hasattr(self, "spec"):
            self._set(self.spec, self.input_size)
        else:
            super().reset_parameters()


@register_layer("hewitt_srnn", tiny={"k": 3, "m": 2, "beta": 2.0})
class HewittSimpleRNN(_HewittMixin, ElmanRNN):
    """A sigmoid :class:`~memrnn.layers.ElmanRNN` carrying Hewitt's Dyck-(k,m) stack
    (Theorems 2, 4): ``2mk`` or ``6m⌈log2 k⌉ − 2m`` units.  Arguments as :class:`HewittLSTM`."""

    def __init__(
        self,
        input_size: int | None = None,
        k: int = 2,
        m: int = 3,
        encoding: Encoding = "log",
        inputs: Literal["compact", "one_hot"] = "compact",
        beta: float = 20.0,
        lam: float | None = None,
        zeta: float | None = None,
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        spec, input_size = _build_spec(
            "HewittSimpleRNN", input_size, k, m, "srnn", encoding, inputs, beta, lam, zeta
        )
        self.spec = spec
        super().__init__(input_size, spec.hidden_size, activation="sigmoid", device=device, dtype=dtype)

    def reset_parameters(self) -> None:
        """The construction (``ElmanRNN.__init__`` calls this)."""
        w = self.spec.dense()
        e = self.spec.input_size
        with torch.no_grad():
            self.weight_ih.zero_()
            self.weight_ih[:, :e] = w.weight_ih.to(self.weight_ih)
            self.weight_hh.copy_(w.weight_hh.to(self.weight_hh))
            self.bias.copy_(w.bias.to(self.bias))


allow_in_checkpoints(HewittLSTM)
allow_in_checkpoints(HewittSimpleRNN)


# -- generators -------------------------------------------------------------------------------------
class HewittGenerator(nn.Module):
    """A complete Dyck-(k,m) generator: embedding -> constructed layer -> readout (F.1).

    ``forward(ids [B, T], state=None, mask=None)`` -> ``(logits [B, T, 2k+1], state)``: the
    logits at ``t`` give ``p(w_{t+1} | w_{≤t})`` (feed ``BOS`` first).  :meth:`to_torch` gives the
    same network as plain torch modules.  Build with :func:`hewitt_generator`.
    """

    def __init__(self, layer: HewittLSTM | HewittSimpleRNN) -> None:
        super().__init__()
        self.layer = layer
        self.embedding = layer.make_embedding()
        self.readout = layer.make_readout()

    @property
    def spec(self) -> HewittSpec:
        return self.layer.spec

    def forward(self, ids: Tensor, state=None, mask: Tensor | None = None):
        spec = self.spec
        if ids.dim() != 2:
            raise ValueError(f"ids must be [batch, time], got shape {tuple(ids.shape)}")
        bad = (ids < 0) | (ids >= spec.vocab_size)
        if bool(bad.any()):
            b, t = (int(v) for v in bad.nonzero()[0])
            raise ValueError(
                f"unknown token id {int(ids[b, t])} at [{b}, {t}]; Dyck-({spec.k},{spec.m}) inputs are 0..{spec.vocab_size - 1}"
            )
        h, state = self.layer(self.embedding(ids), state, mask)
        return self.readout(h), state

    def to_torch(self) -> TorchGenerator:
        """The same network as ``nn.Embedding`` -> ``nn.LSTM`` / ``nn.RNN`` -> ``nn.Linear``.

        The Simple RNN becomes a ``tanh`` ``nn.RNN`` exactly: with ``h_σ = (1 + h_τ)/2``,
        ``σ(z) = (1 + tanh(z/2))/2`` gives ``W_τ = W/4``, ``U_τ = U/2``,
        ``b_τ = b/2 + W·1/4``, ``V_τ = V/2``, ``b_v,τ = b_v + V·1/2``; torch's ``h_0 = 0`` is
        ``h_σ = 1/2``, which the ``BOS`` reset column clears."""
        p = next(self.layer.parameters())
        fk = {"device": p.device, "dtype": p.dtype}
        emb = nn.Embedding.from_pretrained(self.embedding.weight.detach().clone(), freeze=False)
        lin = nn.Linear(self.readout.in_features, self.readout.out_features, **fk)
        if isinstance(self.layer, HewittLSTM):
            rnn = nn.LSTM(self.layer.input_size, self.layer.hidden_size, batch_first=True, **fk)
            rnn.load_state_dict(self.layer.rnn.state_dict())
            lin.load_state_dict(self.readout.state_dict())
        else:
            layer = self.layer
            rnn = nn.RNN(layer.input_size, layer.hidden_size, nonlinearity="tanh", batch_first=True, **fk)
            with torch.no_grad():
                w = layer.weight_hh
                rnn.weight_hh_l0.copy_(w / 4)
                rnn.weight_ih_l0.copy_(layer.weight_ih / 2)
                rnn.bias_ih_l0.copy_(layer.bias / 2 + w.sum(1) / 4)
                rnn.bias_hh_l0.zero_()
                v = self.readout.weight
                lin.weight.copy_(v / 2)
                lin.bias.copy_(self.readout.bias + v.sum(1) / 2)
        return TorchGenerator(emb, rnn, lin)


class TorchGenerator(nn.Module):
    """``readout(rnn(embedding(ids)))`` with plain torch modules (batch first)."""

    def __init__(self, embedding: nn.Embedding, rnn: nn.LSTM | nn.RNN, readout: nn.Linear) -> None:
        super().__init__()
        self.embedding, self.rnn, self.readout = embedding, rnn, readout

    def forward(self, ids: Tensor) -> Tensor:
        """``ids [B, T]`` (``BOS`` first) -> logits ``[B, T, 2k+1]``."""
        y, _ = self.rnn(self.embedding(ids))
        return self.readout(y)


def hewitt_generator(
    k: int,
    m: int,
    arch: Arch = "lstm",
    encoding: Encoding = "log",
    *,
    inputs: Literal["compact", "one_hot"] = "compact",
    beta: float = 20.0,
    lam: float | None = None,
    zeta: float | None = None,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> HewittGenerator:
    """Build one of the four constructions as a :class:`HewittGenerator`."""
    cls = HewittLSTM if arch == "lstm" else HewittSimpleRNN
    if arch not in ARCHS:
        raise ValueError(f"unknown arch {arch!r}; choose 'srnn' or 'lstm'")
    layer = cls(
        k=k, m=m, encoding=encoding, inputs=inputs, beta=beta, lam=lam, zeta=zeta, device=device, dtype=dtype
    )
    return HewittGenerator(layer)
