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

from memrnn.core.checks import positive_int
from memrnn.core.layer import MemoryLayer
from memrnn.core.registry import register_layer
from memrnn.layers.second_order import SensitivityMixin, input_ids, one_hot_ids
from memrnn.ops.autograd import first_order
from memrnn.ops.buckets import TokenBuckets, final_by_length, masked_outputs, use_buckets
from memrnn.ops.stack import h_sigmoid, stack_op, stack_overflow, stack_reading, stack_size
from memrnn.ops.tensor import third_order

Action = Literal["identity", "sigmoid", "clamp"]
ACTIONS = ("identity", "sigmoid", "clamp")


class _NNPDASequence(torch.autograd.Function):
    """Definition 3.6 over a whole one-hot sequence with hand-written backpropagation through time.

    Forward, per step: ``R^t``, ``z = W[·,·,k_t,·] (Q^t ⊗ R^t)`` as one bucketed ``bmm``
    (:class:`memrnn.ops.buckets.TokenBuckets`), ``Q^{t+1} = h_H(z_Q − 1/2)``, the actions and
    ``π(p+, p−, C)`` as three ``addcmul`` over the shifted windows of ``[C; K; tail]``
    (one time-major buffer ``[T+1, B, D+2, m2]``), with no autograd graph (about 17 kernels).
    Returns every state: ``Q [B, T+1, n]``, ``K [B, T+1, D, m2]``, ``tail [B, T+1, m2]`` (index 0:
    the initial state).  Backward: the transposed step by hand (the windows' inner products as
    one ``vecdot`` over an overlapping view, the ``h_H`` derivatives, the reading's max with its
    tie split precomputed for all steps), ``∂W`` once per sequence; ``∂H`` (a learned sensitivity) as
    the sum over every ``h_H`` of its input's gradient times ``u − 1/2``.  Also returns ``p+`` of
    every step ``[B, T]`` (not differentiable) for ``strict``.  Equal to the reference loop
    (``tests/layers/test_fast_paths.py``)."""

    @staticmethod
    def forward(ctx, weight, sensitivity, q0, stack0, tail0, buckets, action):  # type: ignore[override]
        O, n, m1, L = weight.shape
        B, D, m2 = stack0.shape
        T = buckets.slots.shape[0]
        H = float(sensitivity)
        wk = weight.permute(2, 1, 3, 0).reshape(m1, n * L, O)  # wk[k, j·L + l, o] = W[o, j, k, l]
        mix = weight.new_tensor([[1.0, -1.0, 0.0], [0.0, -1.0, 1.0]]) * H  # (p+, p−) -> H·mix weights
        e1 = weight.new_tensor([0.0, H, 0.0])
        const = q0.new_full((), -H / 2)
        Q = q0.new_empty(T + 1, B, n)
        P = stack0.new_empty(T + 1, B, D + 2, m2)  # [C_{t+1}; K^t; tail^t] per step
        R = q0.new_empty(T, B, L)
        Z = q0.new_empty(T, B, O)
        Wh = q0.new_empty(T, B, 3)  # H · (p+, 1 − p+ − p−, p−)
        Q[0], P[0, :, 1 : D + 1], P[0, :, D + 1] = q0, stack0, tail0
        P[T, :, 0] = 0
        qr, mix_buf = q0.new_empty(B, n, L), q0.new_empty(B, D, m2)
        Q_, P_, R_, Z_, W_ = Q.unbind(0), P.unbind(0), R.unbind(0), Z.unbind(0), Wh.unbind(0)
        for s in range(T):
            Ps, Ps1 = P_[s], P_[s + 1]
            top = Ps[:, 1]
            r = torch.cat([top, 1 - top.amax(-1, keepdim=True)], -1, out=R_[s])
            torch.mul(Q_[s][:, :, None], r[:, None, :], out=qr)
            z = buckets.contract(s, qr.view(B, n * L), wk, out=Z_[s])
            torch.sigmoid(torch.add(const, z[:, :n], alpha=H), out=Q_[s + 1])
            a = z[:, n:]
            if action == "sigmoid":
                a = torch.sigmoid(torch.add(const, a, alpha=H))
            elif action == "clamp":
                a = a.clamp(0.0, 1.0)
            Ps[:, 0] = a[:, 2:]
            wh = torch.addmm(e1, a[:, :2], mix, out=W_[s])[:, :, None, None]
            mixed = torch.mul(Ps[:, 1 : D + 1], wh[:, 1], out=mix_buf)
            mixed.addcmul_(Ps[:, :D], wh[:, 0]).addcmul_(Ps[:, 2:], wh[:, 2]).sub_(H / 2)  # H·(mix − 1/2)
            torch.sigmoid(mixed, out=Ps1[:, 1 : D + 1])
            torch.sigmoid(torch.add(const, Ps[:, D + 1], alpha=H), out=Ps1[:, D + 1])
        ctx.buckets, ctx.action, ctx.H = buckets, action, H
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(weight, Q, P, R, Z, Wh)
        push = Wh[:, :, 0].t() / H  # p+ of every step [B, T], for strict's overflow check
        ctx.mark_non_differentiable(push)
        return Q.transpose(0, 1), P[:, :, 1 : D + 1].transpose(0, 1), P[:, :, D + 1].transpose(0, 1), push

    @staticmethod
    @first_order
    def backward(ctx, gQ, gK, gtail, _gpush):  # type: ignore[override]
        weight, Q, P, R, Z, Wh = ctx.saved_tensors
        learn_h = ctx.needs_input_grad[1]
        grad_h = Q.new_zeros(()) if learn_h else None
        buckets: TokenBuckets = ctx.buckets
        H, action = ctx.H, ctx.action
        sig_back = torch.ops.aten.sigmoid_backward
        O, n, m1, L = weight.shape
        T1, B, D2, m2 = P.shape
        T, D = T1 - 1, D2 - 2
        wkt = weight.permute(2, 0, 1, 3).reshape(m1, O, n * L)  # [m1, O, n·L]
        mix_t = weight.new_tensor([[1.0, 0.0], [-1.0, -1.0], [0.0, 1.0]]) * H
        # the reading's max: ∂(1 − max K_0)/∂K_0, split evenly over ties (as torch.amax), all steps
        tops = P[:-1, :, 1]
        at_max = (tops == tops.amax(-1, keepdim=True)).to(tops.dtype)
        tie = (at_max / at_max.sum(-1, keepdim=True)).unbind(0)
        # [C; K; tail] of step s seen as its three shifted windows (above, K, below) [B, 3, D·m2]
        st = P.stride()
        windows = P.as_strided((T, B, 3, D * m2), (st[0], st[1], m2, 1)).unbind(0)

        def time_major(g: Tensor | None, shape: tuple[int, ...]) -> tuple[Tensor, ...]:
            g = P.new_zeros(*shape) if g is None else g.transpose(0, 1)
            return g.unbind(0)

        gQ_, gK_, gt_ = (time_major(g, (T1, B, *sh)) for g, sh in ((gQ, (n,)), (gK, (D, m2)), (gtail, (m2,))))
        Q_, P_, R_, W_, Z_ = Q.unbind(0), P.unbind(0), R.unbind(0), Wh.unbind(0), Z.unbind(0)
        GZ = Z.new_empty(T, B, O)
        GZ_ = GZ.unbind(0)
        gq, gs, gt = gQ_[T], gK_[T], gt_[T]
        for s in range(T - 1, -1, -1):
            Ps1, wh, gz = P_[s + 1], W_[s], GZ_[s]
            gm = sig_back(gs, Ps1[:, 1 : D + 1])  # ∂/∂(H·mix)
            gw = torch.linalg.vecdot(windows[s], gm.reshape(B, 1, D * m2))  # ∂/∂(H·w)
            w0, w1, w2 = (wh[:, i, None, None] for i in range(3))
            g_stack = gm * w1
            g_stack[:, :-1].addcmul_(gm[:, 1:], w0)
            g_stack[:, 1:].addcmul_(gm[:, :-1], w2)
            g_tail_pre = sig_back(gt, Ps1[:, D + 1])  # ∂/∂(H·tail − H/2)
            g_tail = torch.addcmul(g_tail_pre * H, gm[:, -1], w2[:, 0])
            torch.mm(gw, mix_t, out=gz[:, n : n + 2])
            torch.mul(gm[:, 0], w0[:, 0], out=gz[:, n + 2 :])
            g_q_pre = sig_back(gq, Q_[s + 1])  # ∂/∂(H·z_Q − H/2)
            if learn_h:
                # every h_H(u − 1/2) = σ(H u − H/2) contributes Σ ∂pre · (u − 1/2); for the stack
                # cells u − 1/2 = (Σ_i wh_i window_i)/H − 1/2, and Σ gm·window_i is gw
                grad_h += (gw * wh).sum() / H - gm.sum() / 2
                grad_h += (g_tail_pre * (P_[s][:, D + 1] - 0.5)).sum()
                grad_h += (g_q_pre * (Z_[s][:, :n] - 0.5)).sum()
            if action == "sigmoid":
                za = Z_[s][:, n:]
                g_a_pre = sig_back(gz[:, n:], torch.sigmoid(za * H - H / 2))
                if learn_h:
                    grad_h += (g_a_pre * (za - 0.5)).sum()
                gz[:, n:] = g_a_pre * H
            elif action == "clamp":
                za = Z_[s][:, n:]
                gz[:, n:] *= ((za >= 0) & (za <= 1)).to(gz.dtype)
            torch.mul(g_q_pre, H, out=gz[:, :n])
            gqr = buckets.contract(s, gz, wkt).view(B, n, L)
            g_reading = torch.linalg.vecdot(gqr.transpose(1, 2), Q_[s][:, None, :])  # [B, L]
            g_stack[:, 0] += g_reading[:, :m2]
            g_stack[:, 0].addcmul_(g_reading[:, m2:], tie[s], value=-1)
            gq = gQ_[s] + torch.linalg.vecdot(gqr, R_[s][:, None, :])
            gs = gK_[s] + g_stack
            gt = gt_[s] + g_tail
        QR = (Q[:-1, :, :, None] * R[:, :, None, :]).reshape(T, B, n * L).transpose(0, 1)
        dwk = buckets.weight_grad(QR, GZ.transpose(0, 1))  # [m1, n·L, O]
        grad_w = dwk.view(m1, n, L, O).permute(3, 1, 0, 2)
        return grad_w, grad_h, gq, gs, gt, None, None


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
            step-by-step path under autograd; ``False`` always takes that path.  Same numbers; the
            fused backward is first order, so second derivatives need ``False``.

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
        if ids is not None and self.fused:
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
        Q, K, tails, push = _NNPDASequence.apply(
            weight, self.sensitivity, state.q, state.stack, state.tail, buckets, self.action
        )
        if self.strict:  # the steps that pushed onto a full window (stack_overflow), all at once
            flags = (push > 0.5) & (K[:, :-1, -1].amax(-1) > 0.5)
            self._raise_overflow(flags if mask is None else flags & mask)
        y = Q[:, 1:] if self.output == "state" else torch.cat([Q[:, 1:], stack_reading(K[:, 1:, 0])], -1)
        y, lengths = masked_outputs(y, mask)
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
