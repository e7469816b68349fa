"""Echo state network reservoirs (Paaßen, Schulz & Hammer 2021, section 4): frozen
recurrent layers whose weights are drawn or constructed, never trained.

Every reservoir is ``(U, W, σ)`` with a leak rate ``α`` (``α = 1``: the plain ESN of Paaßen et al. 2021)::

    h_t = (1 − α) h_{t−1} + α σ(U x_t + W h_{t−1})            U [m, n], W [m, m]

Three kinds:

* ``rand``: ``W`` Gaussian, rescaled to spectral radius ``ρ``; ``U`` Gaussian times the input
  scaling; ``σ = tanh``.
* ``crj``: the cycle reservoir with jumps (Rodan & Tiňo 2012): a unidirectional cycle of weight
  ``w_c`` (``W[i, i−1] = W[0, m−1] = w_c``) plus bidirectional jumps of length ``l`` and weight
  ``w_j`` (``W[i, i+l] = W[i+l, i] = w_j`` for ``i = 0, l, 2l, … < m − l``, indices mod m); every
  input weight has magnitude ``v`` and the sign of the decimal digits of π (0–4 negative, 5–9
  positive) read row by row; ``σ = tanh``.
* ``ldn``: the Legendre delay network (Voelker, Kajić & Eliasmith 2019): per input channel a
  linear block of order ``q`` that holds the last ``θ`` steps of the channel in Legendre
  coordinates, ``A[i, j] = (2i+1)(−1 if j > i else (−1)^{i−j+1})``, ``b[i] = (2i+1)(−1)^i``,
  discretised by zero-order hold with window ``θ``: ``A_d = expm(A/θ)``,
  ``b_d = A^{−1}(A_d − I) b``; ``σ`` = identity.  ``u(t − θ')`` for ``0 ≤ θ' ≤ θ`` is read
  back linearly with the shifted Legendre polynomials (:func:`legendre_readout`).

The weights are buffers (saved in ``state_dict``, moved by ``.to``, never trained); the layer has
no parameters.  ``forward`` hoists ``U x`` out of the time loop.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Literal, NamedTuple

import torch
from torch import Tensor

from memrnn.core.activations import ACTIVATIONS, resolve_activation
from memrnn.core.checks import finite_float, nonnegative_int, positive_int
from memrnn.core.layer import MemoryLayer
from memrnn.core.registry import register_layer
from memrnn.ops.buckets import final_by_length, masked_outputs
from memrnn.ops.elman import elman_sequence

ReservoirKind = Literal["rand", "crj", "ldn"]
#: the reservoir's activations (Paaßen et al. 2021: tanh; the Legendre delay network is linear)
RESERVOIR_ACTIVATIONS = ("tanh", "identity")


# -- constructions ---------------------------------------------------------------------------
@lru_cache(maxsize=8)
def _pi_string(n: int) -> str:
    """The first ``n`` decimal digits of π ("314159…"), by Machin's formula in integers."""
    guard = 10
    scale = 10 ** (n + guard)

    def arctan_inv(x: int) -> int:  # scale · arctan(1/x)
        term = scale // x
        total, x2, k, sign = term, x * x, 1, -1
        while term:
            term //= x2
            total += sign * (term // (2 * k + 1))
            sign, k = -sign, k + 1
        return total

    pi = 4 * (4 * arctan_inv(5) - arctan_inv(239))
    parts, chunk = [], 10**1000  # str(int) is limited to 4300 digits: convert in chunks
    while pi:
        pi, rest = divmod(pi, chunk)
        parts.append(f"{rest:01000d}")
    return "".join(reversed(parts)).lstrip("0")[:n]


def pi_digits(n: int) -> list[int]:
    """The first ``n`` decimal digits of π, starting with the 3: ``[3, 1, 4, 1, 5, 9, …]``."""
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    return [int(c) for c in _pi_string(max(n, 1))[:n]]


def crj_weights(
    units: int,
    input_size: int,
    cycle_weight: float = 0.5,
    jump_weight: float = 0.5,
    jump_length: int = 2,
    input_weight: float = 1.0,
    *,
    sign_order: Literal["neurons", "inputs"] = "neurons",
    dtype: torch.dtype = torch.float64,
) -> tuple[Tensor, Tensor]:
    """The cycle reservoir with jumps: returns ``(U [units, input_size], W [units, units])``.

    ``W[i, i−1] = W[0, m−1] = w_c``; ``W[i, (i+l) mod m] = W[(i+l) mod m, i] = w_j`` for
    ``i = 0, l, 2l, … < m − l``; ``U[r, c] = ±v`` with the sign of π's ``(r·n + c)``-th digit
    (``0–4 → −``, ``5–9 → +``; ``sign_order="neurons"``, docs/references.md's row-by-row reading)
    or of its ``(c·m + r)``-th digit (``"inputs"``: each input's column is a run of digits).
    ``jump_length = 0`` gives the plain cycle (SCR).

    With few neurons the reading matters: for ``m = 5, n = 3`` (the a^n b^n example of Paaßen et al. 2021)
    the row-by-row reading gives inputs 2 and 3 the same column ``(−, +, +, +, +)``, so the
    reservoir cannot tell them apart; the ``"inputs"`` reading gives three distinct columns.
    """
    if sign_order not in ("neurons", "inputs"):
        raise ValueError(f"sign_order must be 'neurons' or 'inputs', got {sign_order!r}")
    positive_int("units", units)
    positive_int("input_size", input_size)
    nonnegative_int("jump_length", jump_length)
    W = torch.zeros(units, units, dtype=dtype)
    if units > 1:
        W[0, units - 1] = cycle_weight
        idx = torch.arange(1, units)
        W[idx, idx - 1] = cycle_weight
    if jump_length > 0:
        for i in range(0, units - jump_length, jump_length):
            j = (i + jump_length) % units
            W[i, j] = W[j, i] = jump_weight
    digits = torch.tensor(pi_digits(units * input_size), dtype=dtype)
    digits = digits.view(units, input_size) if sign_order == "neurons" else digits.view(input_size, units).T
    U = torch.where(digits >= 5, 1.0, -1.0).to(dtype) * input_weight
    return U, W


def legendre_matrices(order: int) -> tuple[Tensor, Tensor]:
    """The continuous-time LDN ``(A [q, q], b [q])`` in float64."""
    if order < 1:
        raise ValueError(f"order must be >= 1, got {order}")
    i = torch.arange(order, dtype=torch.float64)[:, None]
    j = torch.arange(order, dtype=torch.float64)[None, :]
    sign = torch.where(j > i, -1.0, (-1.0) ** (i - j + 1))
    A = (2 * i + 1) * sign
    b = (2 * torch.arange(order, dtype=torch.float64) + 1) * (-1.0) ** torch.arange(order)
    return A, b


def legendre_discrete(order: int, theta: float) -> tuple[Tensor, Tensor]:
    """Zero-order-hold LDN with window ``θ`` steps: ``(A_d [q, q], b_d [q])`` in float64.

    ``A_d = expm(A/θ)``, ``b_d = A^{−1}(A_d − I) b``, both read off one exponential of the
    augmented matrix ``[[A, b], [0, 0]] / θ`` (no inverse of ``A`` needed)."""
    if not theta > 0:
        raise ValueError(f"theta must be > 0, got {theta}")
    A, b = legendre_matrices(order)
    aug = torch.zeros(order + 1, order + 1, dtype=torch.float64)
    aug[:order, :order], aug[:order, order] = A / theta, b / theta
    e = torch.linalg.matrix_exp(aug)
    return e[:order, :order], e[:order, order]


def legendre_readout(order: int, delays: Tensor | list[float], theta: float) -> Tensor:
    """Weights ``[len(delays), q]`` that decode ``u(t − θ')`` from one LDN block's state:
    ``u(t − θ') ≈ Σ_i P_i(θ'/θ) h_i`` with the shifted Legendre polynomials
    ``P_i(r) = (−1)^i Σ_k C(i,k) C(i+k,k) (−r)^k`` (Voelker et al. 2019, eq. 8).

    With the zero-order hold, the input ``d`` steps back is held over ``θ' ∈ [d, d+1)``: decode
    it at ``θ' = d + 1/2``."""
    r = torch.as_tensor(delays, dtype=torch.float64).reshape(-1) / theta
    out = torch.zeros(r.numel(), order, dtype=torch.float64)
    for i in range(order):
        p = torch.zeros_like(r)
        for k in range(i + 1):
            p = p + math.comb(i, k) * math.comb(i + k, k) * (-r) ** k
        out[:, i] = (-1) ** i * p
    return out


def random_weights(
    units: int,
    input_size: int,
    spectral_radius: float = 0.9,
    input_scaling: float = 1.0,
    *,
    generator: torch.Generator | None = None,
    dtype: torch.dtype = torch.float64,
) -> tuple[Tensor, Tensor]:
    """Gaussian ``U``, ``W`` with ``W`` rescaled to the given spectral radius."""
    positive_int("units", units)
    positive_int("input_size", input_size)
    W = torch.randn(units, units, generator=generator, dtype=torch.float64)
    radius = torch.linalg.eigvals(W).abs().max()
    W = W * (spectral_radius / radius)
    U = torch.randn(units, input_size, generator=generator, dtype=torch.float64) * input_scaling
    return U.to(dtype), W.to(dtype)


# -- the layer --------------------------------------------------------------------------------
class ReservoirState(NamedTuple):
    """State of a :class:`Reservoir`: ``h [B, units]``, batch first.  One layer, no layer dimension:
    a reservoir is frozen (no dropout to train with) and one of Paaßen et al.'s (2021) kinds, so it
    takes no ``num_layers``, ``dropout`` or ``bidirectional``."""

    h: Tensor


class Reservoir(MemoryLayer[ReservoirState]):
    """A frozen echo state network reservoir (module docstring), batch first.

    Args:
        input_size: ``n``, features of ``x_t``.
        units: ``m``.  For ``ldn`` it is ``order · input_size``; give ``order`` or ``units``
            (then ``order = units // input_size``, and ``output_size`` is ``order · input_size``).
        kind: ``rand``, ``crj`` or ``ldn``.
        spectral_radius, input_scaling: ``rand``.
        cycle_weight, jump_weight, jump_length, input_weight: ``crj`` (w_c, w_j, l, v);
            sign_order: how π's digits fill U (:func:`crj_weights`).
        order, theta: ``ldn`` (q per channel, window θ in steps).
        leak: ``α`` in ``(0, 1]``.
        activation: ``tanh`` or ``identity``; default ``tanh`` except ``identity`` for ``ldn``.
        seed: seeds the ``rand`` draw (``None``: torch's global generator).

    Buffers: ``input_weight [m, n]`` (U), ``recurrent_weight [m, m]`` (W).
    ``trace`` reports the pre-activation ``drive [B, T, m]``.  The weights are constants, so the
    layer computes in the input's dtype (``dtype_policy = "follow"``; float64 inputs to a float32
    reservoir run in float64).
    """

    dtype_policy = "follow"

    def __init__(
        self,
        input_size: int,
        units: int | None = None,
        kind: ReservoirKind = "rand",
        *,
        spectral_radius: float = 0.9,
        input_scaling: float = 1.0,
        cycle_weight: float = 0.5,
        jump_weight: float = 0.5,
        jump_length: int = 2,
        input_weight: float = 1.0,
        sign_order: Literal["neurons", "inputs"] = "neurons",
        order: int | None = None,
        theta: float = 20.0,
        leak: float = 1.0,
        activation: str | None = None,
        seed: int | None = None,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        positive_int("input_size", input_size)
        if sign_order not in ("neurons", "inputs"):
            raise ValueError(f"sign_order must be 'neurons' or 'inputs', got {sign_order!r}")
        if kind not in ("rand", "crj", "ldn"):
            raise ValueError(f"unknown reservoir kind {kind!r}; choose 'rand', 'crj' or 'ldn'")
        if kind == "ldn":
            if order is None:
                if units is None:
                    raise ValueError("an ldn reservoir needs units or order")
                order = units // input_size
            if order < 1:
                raise ValueError(
                    f"ldn order must be >= 1 (units={units} < input_size={input_size}?), got {order}"
                )
            units = order * input_size
        else:
            positive_int("units", units)
        if not 0 < finite_float("leak", leak) <= 1:
            raise ValueError(f"leak must be in (0, 1], got {leak}")
        theta = finite_float("theta", theta, positive=True)
        spectral_radius = finite_float("spectral_radius", spectral_radius, nonnegative=True)
        for name, value in (
            ("input_scaling", input_scaling),
            ("cycle_weight", cycle_weight),
            ("jump_weight", jump_weight),
            ("input_weight", input_weight),
        ):
            finite_float(name, value)
        nonnegative_int("jump_length", jump_length)
        if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
            raise ValueError(f"seed must be an int or None, got {seed!r}")
        activation = activation or ("identity" if kind == "ldn" else "tanh")
        activation = resolve_activation(activation, RESERVOIR_ACTIVATIONS)
        self.input_size, self.units, self.output_size, self.kind = input_size, units, units, kind
        self.spectral_radius, self.input_scaling = spectral_radius, input_scaling
        self.cycle_weight, self.jump_weight, self.jump_length = cycle_weight, jump_weight, jump_length
        self.input_weight_scale, self.order, self.theta = input_weight, order, theta
        self.sign_order = sign_order
        self.leak, self.activation_name, self.seed = leak, activation, seed
        self.activation = ACTIVATIONS[activation]
        factory = {"device": device, "dtype": dtype or torch.get_default_dtype()}
        self.register_buffer("input_weight", torch.empty(units, input_size, **factory))
        self.register_buffer("recurrent_weight", torch.empty(units, units, **factory))
        self.reset_parameters()

    def build_weights(self) -> tuple[Tensor, Tensor]:
        """``(U, W)`` in float64 for this configuration (deterministic except ``rand`` with
        ``seed=None``)."""
        n, m = self.input_size, self.units
        if self.kind == "rand":
            gen = None
            if self.seed is not None:
                gen = torch.Generator().manual_seed(self.seed)
            return random_weights(m, n, self.spectral_radius, self.input_scaling, generator=gen)
        if self.kind == "crj":
            return crj_weights(
                m,
                n,
                self.cycle_weight,
                self.jump_weight,
                self.jump_length,
                self.input_weight_scale,
                sign_order=self.sign_order,
            )
        assert self.order is not None
        Ad, bd = legendre_discrete(self.order, self.theta)
        eye = torch.eye(n, dtype=torch.float64)
        return torch.kron(eye, bd[:, None]) * self.input_scaling, torch.kron(eye, Ad)

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """Draw (``rand``) or construct (``crj``, ``ldn``) the weights again."""
        U, W = self.build_weights()
        self.input_weight.copy_(U)
        self.recurrent_weight.copy_(W)

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.units}, kind={self.kind!r}"
        if self.kind == "rand":
            s += f", spectral_radius={self.spectral_radius}, input_scaling={self.input_scaling}"
        elif self.kind == "crj":
            s += (
                f", cycle_weight={self.cycle_weight}, jump_weight={self.jump_weight}, "
                f"jump_length={self.jump_length}, input_weight={self.input_weight_scale}"
            )
            if self.sign_order != "neurons":
                s += f", sign_order={self.sign_order!r}"
        else:
            s += f", order={self.order}, theta={self.theta}"
        if self.leak != 1:
            s += f", leak={self.leak}"
        return s + f", activation={self.activation_name!r}"

    def initial_state(
        self, batch_size: int, *, device: torch.device | str | None = None, dtype: torch.dtype | None = None
    ) -> ReservoirState:
        return ReservoirState(torch.zeros(batch_size, self.units, **self._default_factory(device, dtype)))

    def project(self, x: Tensor) -> Tensor:
        """``U x``: ``[..., n] -> [..., m]``."""
        return x @ self.input_weight.to(x.dtype).T

    def cell(self, drive_in: Tensor, h: Tensor) -> Tensor:
        """One update from the projected input ``U x [B, m]`` and ``h [B, m]``."""
        pre = drive_in + h @ self.recurrent_weight.to(h.dtype).T
        new = self.activation(pre)
        return new if self.leak == 1 else (1 - self.leak) * h + self.leak * new

    def step(self, x_t: Tensor, state: ReservoirState) -> tuple[Tensor, ReservoirState]:
        h = self.cell(self.project(x_t), state.h)
        return h, ReservoirState(h)

    def trace_step(
        self, x_t: Tensor, state: ReservoirState
    ) -> tuple[Tensor, ReservoirState, dict[str, Tensor]]:
        drive = self.project(x_t) + state.h @ self.recurrent_weight.to(x_t.dtype).T
        y, new = self._unchecked_step(x_t, state)
        return y, new, {"drive": drive}

    def forward(
        self, x: Tensor, state: ReservoirState | None = None, mask: Tensor | None = None
    ) -> tuple[Tensor, ReservoirState]:
        """``x [B, T, n] -> (h [B, T, m], final state)``; ``U x`` is computed for all steps at
        once, then :func:`memrnn.ops.elman.elman_sequence` runs the leaky recurrence (the
        reference loop is ``MemoryLayer.forward``, also inside :func:`memrnn.reference_paths`)."""
        state, mask = self.check_inputs(x, state, mask)
        hs = elman_sequence(
            self.project(x),
            self.recurrent_weight.to(x.dtype),
            state.h,
            self.activation_name,
            self.activation,
            float(self.leak),
        )
        y, lengths = masked_outputs(hs[:, 1:], mask)
        return y, ReservoirState(final_by_length(hs, lengths))


register_layer("reservoir_rand", tiny={"input_size": 3, "units": 5, "kind": "rand"}, cls=Reservoir)
register_layer(
    "reservoir_crj",
    tiny={"input_size": 3, "units": 5, "kind": "crj", "cycle_weight": 0.7, "jump_weight": 0.4},
    cls=Reservoir,
)
register_layer(
    "reservoir_ldn", tiny={"input_size": 2, "kind": "ldn", "order": 3, "theta": 4.0}, cls=Reservoir
)
