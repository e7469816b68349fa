"""The neural network pushdown automaton (nnPDA) of seed 001 (Stogin, Mali, Giles), Definition 3.6.

State ``(Q^t, K^t)``: a state vector and a differentiable stack (Definition 3.1).  One step, for
the input ``I^{t+1}``:

* ``R^t = (K^t_0, 1 − ‖K^t_0‖∞)``  (stack reading, Definition 3.4);
* ``Q^{t+1}_i = h_H(Σ_jkl (W_Q)_i^{jkl} Q^t_j I^{t+1}_k R^t_l − 1/2)``        (equation 1);
* ``p±^{t+1} = Σ_jkl (W_{p±})^{jkl} Q^t_j I^{t+1}_k R^t_l``,
  ``C^{t+1}_i = Σ_jkl (W_C)_i^{jkl} Q^t_j I^{t+1}_k R^t_l``;
* ``K^{t+1} = π(p+^{t+1}, p−^{t+1}, C^{t+1}) K^t``                            (equation 2).

The stack is stored as a window of ``depth`` cells plus the common value of all deeper cells
(``memrnn.ops.stack``); this is exactly the paper's infinite stack while the encoded stack
never holds more than ``depth`` symbols.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

import torch
from torch import Tensor, nn
from torch.autograd.function import once_differentiable

from memrnn.core.layer import MemoryLayer
from memrnn.core.registry import register_layer
from memrnn.layers.second_order import SensitivityMixin, input_ids, one_hot_ids, positive_int, use_buckets
from memrnn.ops.buckets import TokenBuckets, final_by_length
from memrnn.ops.stack import h_sigmoid, stack_op, stack_overflow, stack_reading, stack_size
from memrnn.ops.tensor import third_order

Action = Literal["identity", "sigmoid", "clamp"]
ACTIONS = ("identity", "sigmoid", "clamp")


def _reading_grad(top: Tensor, g_reading: Tensor) -> Tensor:
    """Backward of :func:`stack_reading` ``R = (K_0, 1 − max K_0)``: ``∂/∂K_0 [B, m2]``, the
    max's gradient split evenly over ties (as ``torch.amax``)."""
    m2 = top.shape[-1]
    at_max = (top == top.amax(-1, keepdim=True)).to(top.dtype)
    return g_reading[:, :m2] - g_reading[:, m2:] * at_max / at_max.sum(-1, keepdim=True)


class _NNPDASequence(torch.autograd.Function):
    """Definition 3.6 over a whole one-hot sequence with hand-written backpropagation through time.

    Forward, per step: ``R^t``, ``z = W[·,·,k_t,·] (Q^t ⊗ R^t)`` as one bucketed ``bmm``
    (:class:`memrnn.ops.buckets.TokenBuckets`), ``Q^{t+1} = h_H(z_Q − 1/2)``, the actions and
    ``π(p+, p−, C)`` as three ``addcmul`` over the shifted windows of ``[C; K; tail]``
    (one buffer per step), with no autograd graph.  Returns every state: ``Q [B, T+1, n]``,
    ``K [B, T+1, D, m2]``, ``tail [B, T+1, m2]`` (index 0: the initial state).  Backward: the
    transposed step by hand (the mix as ``bmm``s, the ``h_H`` derivatives, the reading's
    max), ``∂W`` once per sequence.  ``H`` is a constant here (a learned ``H`` takes the
    autograd path).  Equal to the reference loop (``tests/layers/test_fast_paths.py``)."""

    @staticmethod
    def forward(ctx, weight, sensitivity, q0, stack0, tail0, buckets, action):  # type: ignore[override]
        O, n, m1, L = weight.shape
        B, D, m2 = stack0.shape
        T = buckets.slots.shape[0]
        H = float(sensitivity)
        wk = weight.permute(2, 1, 3, 0).reshape(m1, n * L, O)  # wk[k, j·L + l, o] = W[o, j, k, l]
        mix = weight.new_tensor([[1.0, -1.0, 0.0], [0.0, -1.0, 1.0]])  # (p+, p−) -> mix weights
        e1 = weight.new_tensor([0.0, 1.0, 0.0])
        Q = q0.new_empty(B, T + 1, n)
        P = stack0.new_zeros(B, T + 1, D + 2, m2)  # [C_{t+1}; K^t; tail^t] per step
        Z = q0.new_empty(B, T, O)
        Wmix = q0.new_empty(B, T, 3)
        Q[:, 0], P[:, 0, 1 : D + 1], P[:, 0, D + 1] = q0, stack0, tail0
        q, const = q0, q0.new_full((1, 1, 1), -H / 2)
        for t in range(T):
            Pt = P[:, t]
            r = stack_reading(Pt[:, 1])
            z = buckets.contract(t, (q[:, :, None] * r[:, None, :]).reshape(B, n * L), wk)
            Z[:, t] = z
            q = torch.sigmoid(z[:, :n] * H - H / 2)
            a = z[:, n:]
            if action == "sigmoid":
                a = torch.sigmoid(a * H - H / 2)
            elif action == "clamp":
                a = a.clamp(0.0, 1.0)
            Pt[:, 0] = a[:, 2:]
            w = torch.addmm(e1, a[:, :2], mix)  # (p+, 1 − p+ − p−, p−) [B, 3]
            Wmix[:, t] = w
            wh = (w * H)[:, :, None, None]
            mixed = torch.addcmul(const, Pt[:, 1 : D + 1], wh[:, 1])  # H·(mix − 1/2)
            mixed.addcmul_(Pt[:, :D], wh[:, 0]).addcmul_(Pt[:, 2:], wh[:, 2])
            P[:, t + 1, 1 : D + 1] = torch.sigmoid(mixed)
            P[:, t + 1, D + 1] = torch.sigmoid(Pt[:, D + 1] * H - H / 2)
            Q[:, t + 1] = q
        ctx.buckets, ctx.action, ctx.H = buckets, action, H
        ctx.save_for_backward(weight, Q, P, Z, Wmix)
        return Q, P[:, :, 1 : D + 1], P[:, :, D + 1]

    @staticmethod
    @once_differentiable
    def backward(ctx, gQ, gK, gtail):  # type: ignore[override]
        weight, Q, P, Z, Wmix = ctx.saved_tensors
        buckets: TokenBuckets = ctx.buckets
        H, action = ctx.H, ctx.action
        sig_back = torch.ops.aten.sigmoid_backward
        O, n, m1, L = weight.shape
        B, T1, D2, m2 = P.shape
        T, D = T1 - 1, D2 - 2
        wkt = weight.permute(2, 0, 1, 3).reshape(m1, O, n * L)  # [m1, O, n·L]
        mix_t = weight.new_tensor([[1.0, 0.0], [-1.0, -1.0], [0.0, 1.0]])
        GZ = torch.empty_like(Z)
        gq, gs, gt = gQ[:, T], gK[:, T], gtail[:, T]
        for t in range(T, 0, -1):
            Pt, w, z, q = P[:, t - 1], Wmix[:, t - 1], Z[:, t - 1], Q[:, t - 1]
            gmix = (sig_back(gs, P[:, t, 1 : D + 1]) * H).reshape(B, D * m2, 1)
            windows = [Pt[:, i : i + D].reshape(B, 1, D * m2) for i in range(3)]  # above, K, below
            gw = torch.cat([torch.bmm(v, gmix)[:, 0] for v in windows], 1)  # ∂/∂(p+, 1 − p+ − p−, p−)
            G = torch.bmm(w[:, :, None], gmix.view(B, 1, D * m2)).view(B, 3, D, m2)
            g_stack = G[:, 1]
            g_stack[:, :-1] += G[:, 0, 1:]
            g_stack[:, 1:] += G[:, 2, :-1]
            g_tail = sig_back(gt, P[:, t, D + 1]) * H + G[:, 2, -1]
            ga = torch.cat([gw @ mix_t, G[:, 0, 0]], 1)
            if action == "sigmoid":
                ga = sig_back(ga, torch.sigmoid(z[:, n:] * H - H / 2)) * H
            elif action == "clamp":
                ga = ga * ((z[:, n:] >= 0) & (z[:, n:] <= 1)).to(ga.dtype)
            gz = torch.cat([sig_back(gq, Q[:, t]) * H, ga], 1)
            GZ[:, t - 1] = gz
            top = Pt[:, 1]
            gqr = buckets.contract(t - 1, gz, wkt).view(B, n, L)
            g_stack[:, 0] += _reading_grad(top, (gqr * q[:, :, None]).sum(1))
            gq = gQ[:, t - 1] + (gqr * stack_reading(top)[:, None, :]).sum(-1)
            gs = gK[:, t - 1] + g_stack
            gt = gtail[:, t - 1] + g_tail
        R = stack_reading(P[:, :-1, 1])  # [B, T, L]
        QR = (Q[:, :-1, :, None] * R[:, :, None, :]).reshape(B, T, n * L)
        dwk = buckets.weight_grad(QR, GZ)  # [m1, n·L, O]
        grad_w = dwk.view(m1, n, L, O).permute(3, 1, 0, 2)
        return grad_w, None, gq, gs, gt, None, None


class NNPDAState(NamedTuple):
    """State of ``NNPDA``: ``q`` ``Q [B, num_states]``, ``stack`` ``K_0..K_{D−1} [B, depth,
    stack_symbols]`` (top first) and ``tail`` ``[B, stack_symbols]`` (every deeper cell)."""

    q: Tensor
    stack: Tensor
    tail: Tensor


class StackOverflowError(ValueError):
    """A push onto a full stack window under ``strict=True``."""


@register_layer("nnpda", tiny={"input_size": 3, "num_states": 3, "stack_symbols": 2, "depth": 4})
class NNPDA(SensitivityMixin, MemoryLayer[NNPDAState]):
    """Third-order neural network pushdown automaton (seed 001 Definition 3.6).

    Outputs ``y_t = (Q^{t+1}, R^{t+1})`` ``[B, T, num_states + stack_symbols + 1]``: the state and
    the reading of the new stack top (with its "empty" component), so a linear readout can
    express acceptance by final state and by empty stack; ``output="state"`` gives ``Q`` only.

    Args:
        input_size: ``m1``, size of the input ``I`` (the input alphabet for one-hot input).
        num_states: ``n``, size of ``Q``.
        stack_symbols: ``m2``, size of each stack cell ``K_i``.
        depth: cells kept in the stack window (see ``memrnn.ops.stack``).
        sensitivity: ``H``.  Theorem 3.7: large enough ``H`` keeps an encoded PDA within ε.
        learn_sensitivity: make ``H`` a parameter.
        action: how ``p+``, ``p−`` and ``C`` come from their contractions ``z``:
            ``"identity"`` is Definition 3.6 (``p = z``; right for encoded weights, unbounded when
            training); ``"sigmoid"`` uses ``h_H(z − 1/2)`` like the state units (keeps them in
            ``[0, 1]``, within ``h_H(−1/2)`` of the ideal values for encoded weights);
            ``"clamp"`` clips ``z`` to ``[0, 1]``.  The paper specifies only the first; it
            does not discuss training, nor ``p+ + p− ≤ 1``.
        one_hot_input: ``None`` (default, auto), ``True`` (inputs must be one-hot; no gradient
            to ``x``) or ``False`` (always dense), as for :class:`SecondOrderRNN`.
        strict: raise :class:`StackOverflowError`, naming the step and batch row, when a push
            (``p+ > 1/2``) meets a full window (``‖K_{D−1}‖∞ > 1/2``).  Otherwise the bottom
            cell is dropped and ``trace`` reports ``overflow``.
        output: ``"state_and_reading"`` (default) or ``"state"``.
        fused: one-hot sequences run as one :class:`_NNPDASequence` (bucketed contraction,
            hand-written backward; the default) unless ``strict`` or a learned ``H`` asks for the
            step-by-step path under autograd; ``False`` always takes that path.  Same numbers.

    Parameters (index order as in the paper: output, state ``j``, input ``k``, reading ``l``):
    ``weight_q`` ``(W_Q)_i^{jkl}`` ``[n, n, m1, m2+1]``, ``weight_push`` / ``weight_pop``
    ``(W_{p±})^{jkl}`` ``[n, m1, m2+1]``, ``weight_c`` ``(W_C)_i^{jkl}`` ``[m2, n, m1, m2+1]``;
    buffers ``sensitivity`` and ``start`` (``Q^0``, state 0 on; set by ``encode_pda``).
    """

    def __init__(
        self,
        input_size: int,
        num_states: int,
        stack_symbols: int,
        depth: int = 32,
        sensitivity: float = 10.0,
        learn_sensitivity: bool = False,
        action: Action = "identity",
        one_hot_input: bool | None = None,
        strict: bool = False,
        output: Literal["state_and_reading", "state"] = "state_and_reading",
        fused: bool = True,
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        for name, v in (
            ("input_size", input_size),
            ("num_states", num_states),
            ("stack_symbols", stack_symbols),
            ("depth", depth),
        ):
            positive_int(name, v)
        if action not in ACTIONS:
            raise ValueError(f"unknown action {action!r}; choose one of {', '.join(ACTIONS)}")
        if output not in ("state_and_reading", "state"):
            raise ValueError(f"unknown output {output!r}; choose 'state_and_reading' or 'state'")
        self.input_size, self.num_states, self.stack_symbols, self.depth = (
            input_size,
            num_states,
            stack_symbols,
            depth,
        )
        self.action, self.one_hot_input, self.strict, self.output, self.fused = (
            action,
            one_hot_input,
            strict,
            output,
            fused,
        )
        self.output_size = num_states + (stack_symbols + 1 if output == "state_and_reading" else 0)
        n, m1, L = num_states, input_size, stack_symbols + 1
        fk = {"device": device, "dtype": dtype}
        self.weight_q = nn.Parameter(torch.empty(n, n, m1, L, **fk))
        self.weight_push = nn.Parameter(torch.empty(n, m1, L, **fk))
        self.weight_pop = nn.Parameter(torch.empty(n, m1, L, **fk))
        self.weight_c = nn.Parameter(torch.empty(stack_symbols, n, m1, L, **fk))
        self._init_sensitivity(sensitivity, learn_sensitivity, fk)
        start = torch.zeros(n, **fk)
        start[0] = 1.0
        self.register_buffer("start", start)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Every weight uniform in ``[0, 2/n]``: with one-hot ``Q``, ``I`` and ``R`` each
        contraction starts near ``1/n``, inside the sensitive range of ``h_H(· − 1/2)``."""
        for p in (self.weight_q, self.weight_push, self.weight_pop, self.weight_c):
            nn.init.uniform_(p, 0.0, 2.0 / self.num_states)

    def extra_repr(self) -> str:
        return (
            f"{self.input_size}, num_states={self.num_states}, stack_symbols={self.stack_symbols}, "
            f"depth={self.depth}, sensitivity={float(self.sensitivity):g}, action={self.action!r}, "
            f"one_hot_input={self.one_hot_input}, strict={self.strict}, output={self.output!r}, fused={self.fused}"
        )

    def initial_state(self, batch_size: int, *, device=None, dtype=None) -> NNPDAState:
        """``Q^0 = start``, empty stack ``K^0 = 0`` (window and tail)."""
        fk = self._default_factory(device, dtype)
        q = self.start.to(**fk).expand(batch_size, -1).clone()
        return NNPDAState(
            q,
            torch.zeros(batch_size, self.depth, self.stack_symbols, **fk),
            torch.zeros(batch_size, self.stack_symbols, **fk),
        )

    def weight(self) -> Tensor:
        """All four tensors stacked along the output index ``[n + 2 + m2, n, m1, m2 + 1]``:
        rows ``Q``, then ``p+``, ``p−``, then ``C``."""
        return torch.cat([self.weight_q, self.weight_push[None], self.weight_pop[None], self.weight_c], 0)

    def _act(self, z: Tensor) -> Tensor:
        if self.action == "identity":
            return z
        if self.action == "sigmoid":
            return h_sigmoid(z - 0.5, self.sensitivity)
        return z.clamp(0.0, 1.0)

    def _advance(
        self,
        weight: Tensor,
        state: NNPDAState,
        x_t: Tensor | None,
        ids_t: Tensor | None,
        diagnostics: bool = True,
    ) -> tuple[Tensor, NNPDAState, dict[str, Tensor]]:
        n = self.num_states
        reading = stack_reading(state.stack[:, 0])
        z = third_order(weight, state.q, reading, x=x_t, tokens=ids_t)
        q = h_sigmoid(z[:, :n] - 0.5, self.sensitivity)
        p_push, p_pop, push_vector = self._act(z[:, n]), self._act(z[:, n + 1]), self._act(z[:, n + 2 :])
        overflow = stack_overflow(state.stack, p_push) if diagnostics or self.strict else None
        stack, tail = stack_op(state.stack, state.tail, p_push, p_pop, push_vector, self.sensitivity)
        new = NNPDAState(q, stack, tail)
        y = q if self.output == "state" else torch.cat([q, stack_reading(stack[:, 0])], -1)
        if not diagnostics:
            return y, new, {} if overflow is None else {"overflow": overflow}
        diag = {
            "push": p_push,
            "pop": p_pop,
            "push_vector": push_vector,
            "reading": reading,
            "overflow": overflow.to(q.dtype),
            "size": stack_size(stack).to(q.dtype),
        }
        return y, new, diag

    def _ids_or_x(self, x_t: Tensor) -> tuple[Tensor | None, Tensor | None]:
        if self.one_hot_input is True:
            return None, one_hot_ids(x_t, None, type(self).__name__)
        return x_t, None

    def _raise_overflow(self, flags: Tensor) -> None:
        """``flags [B, T]`` (or ``[B]``): raise naming the first overflowing row and step."""
        hit = flags.nonzero()
        if len(hit):
            first = hit[hit[:, -1].argmin()].tolist() if flags.dim() == 2 else hit[0].tolist()
            where = (
                f"step t={first[1]} (0-based), batch row {first[0]}"
                if flags.dim() == 2
                else f"batch row {first[0]}"
            )
            raise StackOverflowError(
                f"nnPDA stack overflow at {where}: push onto a full window of depth={self.depth} "
                f"(strict=True); raise depth"
            )

    def step(self, x_t: Tensor, state: NNPDAState) -> tuple[Tensor, NNPDAState]:
        """``x_t [B, input_size]`` -> ``(y [B, output_size], next state)``."""
        y, new, diag = self._advance(self.weight(), state, *self._ids_or_x(x_t), diagnostics=False)
        if self.strict:
            self._raise_overflow(diag["overflow"])
        return y, new

    def trace_step(self, x_t: Tensor, state: NNPDAState) -> tuple[Tensor, NNPDAState, dict[str, Tensor]]:
        """``step`` plus ``push``, ``pop`` ``[B]``, ``push_vector`` ``[B, m2]``, ``reading``
        (``R^t``, read before the step) ``[B, m2 + 1]``, ``overflow`` (1.0 where a push dropped a
        symbol) and ``size`` (the stack size ``s`` the new cells encode) ``[B]``."""
        return self._advance(self.weight(), state, *self._ids_or_x(x_t))

    def forward(
        self, x: Tensor, state: NNPDAState | None = None, mask: Tensor | None = None
    ) -> tuple[Tensor, NNPDAState]:
        """Fast path: the four weight tensors are concatenated once per call (not per step),
        one-hot ids are checked and extracted once, and ``strict`` costs one host sync at the
        end rather than one per step."""
        state, mask = self.check_inputs(x, state, mask)
        if x.shape[1] == 0:
            return x.new_zeros(x.shape[0], 0, self.output_size), state
        weight = self.weight()
        flags: list[Tensor] = []
        ids = input_ids(x, mask, self.one_hot_input, type(self).__name__)
        if ids is not None and self.fused and not self.strict and not self.sensitivity.requires_grad:
            buckets = TokenBuckets(ids, self.input_size)
            if use_buckets(buckets, x.shape[0]):
                return self._fused(weight, buckets, state, mask)
        if ids is not None:
            seq = ids[..., None]

            def split(v: Tensor) -> tuple[Tensor | None, Tensor | None]:
                return None, v[:, 0]
        else:
            seq = x

            def split(v: Tensor) -> tuple[Tensor | None, Tensor | None]:
                return v, None

        def step(v: Tensor, st: NNPDAState) -> tuple[Tensor, NNPDAState]:
            y, new, diag = self._advance(weight, st, *split(v), diagnostics=False)
            if self.strict:
                flags.append(diag["overflow"])
            return y, new

        y, state, _ = self._loop(seq, state, mask, with_trace=False, step=step)
        if self.strict:
            f = torch.stack(flags, 1)
            self._raise_overflow(f if mask is None else f & mask)
        return y, state

    def _fused(
        self, weight: Tensor, buckets: TokenBuckets, state: NNPDAState, mask: Tensor | None
    ) -> tuple[Tensor, NNPDAState]:
        """:class:`_NNPDASequence`, then the outputs and each row's final state (right padding:
        the state after the row's last real step)."""
        Q, K, tails = _NNPDASequence.apply(
            weight, self.sensitivity, state.q, state.stack, state.tail, buckets, self.action
        )
        y = Q[:, 1:] if self.output == "state" else torch.cat([Q[:, 1:], stack_reading(K[:, 1:, 0])], -1)
        lengths = None
        if mask is not None:
            y, lengths = y * mask[..., None], mask.sum(1)
        final = NNPDAState(*(final_by_length(v, lengths) for v in (Q, K, tails)))
        return y, final

    def trace(
        self, x: Tensor, state: NNPDAState | None = None, mask: Tensor | None = None
    ) -> dict[str, Tensor]:
        """Per-step diagnostics (``trace_step``); with ``strict=True`` an overflow raises."""
        out = super().trace(x, state, mask)
        if self.strict and "overflow" in out:
            self._raise_overflow(out["overflow"] > 0)
        return out
