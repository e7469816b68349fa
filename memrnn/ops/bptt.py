"""Whole-sequence recurrences with hand-written backpropagation through time.

Autograd over a per-step loop records ~15 nodes per step and replays them one by one; these
:class:`torch.autograd.Function` s run the forward loop without a graph, keep what the backward
needs in ``[T, B, ·]`` buffers, compute every local derivative for all steps at once, and leave
only a few fused operations and one matrix product per step in the backward loop.  The weight
gradients are one matrix product over all steps.  Masks are the caller's business: the
recurrences run over every step and the caller masks outputs and picks each row's final state
with :func:`memrnn.ops.buckets.final_by_length` (right padding makes this exact).

Both are checked against the layers' reference ``step`` loops in ``tests/layers/test_fast_paths.py``
(outputs, final states and all gradients, float64 to rounding, float32, right padding).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable


def _derivative(fn: Callable[[Tensor], Tensor], a: Tensor) -> Tensor:
    """Elementwise derivative ``fn'(a)`` for all entries at once (``fn`` elementwise), with the
    same subgradient conventions as autograd uses in the reference loop."""
    with torch.enable_grad():
        leaf = a.detach().requires_grad_()
        (d,) = torch.autograd.grad(fn(leaf), leaf, torch.ones_like(leaf))
    return d


def _time_major(x: Tensor) -> Tensor:
    """``[B, T, n]`` -> contiguous ``[T·B, n]`` (time-major rows)."""
    return x.transpose(0, 1).reshape(-1, x.shape[-1])


def _input_grads(ctx, ga: Tensor, xt: Tensor, w_in: Tensor, B: int, T: int):
    """Gradients of ``pre = x w_inᵀ + b`` from ``∂pre`` time-major ``[T·B, G]``."""
    need_x, need_w, need_b = ctx.needs_input_grad[:3]
    grad_x = (ga @ w_in).view(T, B, -1).transpose(0, 1) if need_x else None
    grad_w = ga.t() @ xt if need_w else None
    grad_b = ga.sum(0) if need_b else None
    return grad_x, grad_w, grad_b


class LSTMSequence(torch.autograd.Function):
    """An LSTM whose units expose ``tanh(c)`` (the first ``tanh_units``) or ``c`` itself (the rest:
    seed 004's counter cells, footnote 3).

    ``x [B, T, n]``, ``w_in [4N, n]``, ``b [4N]``, ``w_rec [4N, N]`` (gate blocks in the order
    **o, i, f, g**: the three sigmoids first), ``h0``, ``c0`` ``[B, N]`` -> ``hs``, ``cs``
    ``[B, T+1, N]`` (initial state first)::

        o, i, f, g = σ, σ, σ, tanh (x_t w_inᵀ + b + h_{t−1} w_recᵀ)
        c_t = f c_{t−1} + i g,   h_t = o X(c_t),   X = tanh on the first tanh_units, identity after

    Forward: the input projection for all steps in one matrix product, then per step one
    in-place ``addmm`` and six or seven elementwise kernels.  Backward: one ``addmm`` and four
    elementwise kernels per step (``∂h/∂c``, the gate derivatives and the products that do not
    depend on the incoming gradient are computed for all steps first); the weight gradients are
    one matrix product each.
    """

    @staticmethod
    def forward(ctx, x, w_in, b, w_rec, h0, c0, tanh_units):  # type: ignore[override]
        B, T, _ = x.shape
        G, N = w_rec.shape
        u = tanh_units
        ctx.set_materialize_grads(False)
        xt = _time_major(x)
        acts = torch.addmm(b, xt, w_in.t()).view(T, B, G)
        hs = x.new_empty(T + 1, B, N)
        cs = x.new_empty(T + 1, B, N)
        xs = x.new_empty(T, B, N)
        hs[0], cs[0] = h0, c0
        w_t = w_rec.t()
        a_, sig_, g_ = acts.unbind(0), acts[..., : 3 * N].unbind(0), acts[..., 3 * N :].unbind(0)
        o_, i_, f_ = (acts[..., j * N : (j + 1) * N].unbind(0) for j in range(3))
        h_, c_, x_ = hs.unbind(0), cs.unbind(0), xs.unbind(0)
        cu_, xu_ = cs[..., :u].unbind(0), xs[..., :u].unbind(0)
        cl_, xl_ = cs[..., u:].unbind(0), xs[..., u:].unbind(0)
        for s in range(T):
            a_[s].addmm_(h_[s], w_t)
            sig_[s].sigmoid_()
            g_[s].tanh_()
            torch.mul(f_[s], c_[s], out=c_[s + 1])
            c_[s + 1].addcmul_(i_[s], g_[s])
            torch.tanh(cu_[s + 1], out=xu_[s])
            if u < N:
                xl_[s].copy_(cl_[s + 1])
            torch.mul(o_[s], x_[s], out=h_[s + 1])
        ctx.tanh_units = u
        ctx.save_for_backward(xt, w_in, w_rec, acts, hs, cs, xs)
        return hs.transpose(0, 1), cs.transpose(0, 1)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_hs, grad_cs):  # type: ignore[override]
        xt, w_in, w_rec, acts, hs, cs, xs = ctx.saved_tensors
        T, B, G = acts.shape
        N, u = G // 4, ctx.tanh_units
        o, i, f, g = acts.view(T, B, 4, N).unbind(2)
        # Local derivatives for all steps: k[:, :, 0] multiplies ∂h_t, k[:, :, 1:] multiply ∂c_t.
        k = acts.new_empty(T, B, 4, N)
        torch.mul(xs, o * (1 - o), out=k[:, :, 0])
        torch.mul(g, i * (1 - i), out=k[:, :, 1])
        torch.mul(cs[:-1], f * (1 - f), out=k[:, :, 2])
        torch.mul(i, 1 - g * g, out=k[:, :, 3])
        dh_dc = o.clone()  # ∂h_t/∂c_t = o X'(c_t)
        dh_dc[..., :u] *= 1 - xs[..., :u] ** 2
        ghs = None if grad_hs is None else grad_hs.transpose(0, 1).contiguous().unbind(0)
        gcs = None if grad_cs is None else grad_cs.transpose(0, 1).contiguous().unbind(0)
        zeros = hs.new_zeros(B, N)
        g_h = zeros if ghs is None else ghs[T]
        g_c = zeros if gcs is None else gcs[T]
        ga = acts.new_empty(T, B, 4, N)
        ga_, gah_, gac_ = ga.view(T, B, G).unbind(0), ga[:, :, 0].unbind(0), ga[:, :, 1:].unbind(0)
        kh_, kc_, f_, dhdc_ = k[:, :, 0].unbind(0), k[:, :, 1:].unbind(0), f.unbind(0), dh_dc.unbind(0)
        for s in range(T - 1, -1, -1):
            g_c = torch.addcmul(g_c, g_h, dhdc_[s])
            torch.mul(kh_[s], g_h, out=gah_[s])
            torch.mul(kc_[s], g_c[:, None], out=gac_[s])
            g_c = g_c * f_[s] if gcs is None else torch.addcmul(gcs[s], g_c, f_[s])
            g_h = torch.mm(ga_[s], w_rec) if ghs is None else torch.addmm(ghs[s], ga_[s], w_rec)
        ga2 = ga.view(T * B, G)
        grad_w_rec = ga2.t() @ hs[:-1].reshape(T * B, N)
        return (*_input_grads(ctx, ga2, xt, w_in, B, T), grad_w_rec, g_h, g_c, None)


_OUT_FNS: dict[str, Callable[..., Tensor]] = {
    "tanh": torch.tanh,
    "sigmoid": torch.sigmoid,
    "relu": lambda a, out: torch.clamp_min(a, 0, out=out),
}


class CounterRNNSequence(torch.autograd.Function):
    """The ReLU-counter recurrence of :class:`memrnn.layers.ReLUCounter`.

    ``x [B, T, n]``, ``w_in [H + 2k, n]``, ``b [H + 2k]`` (controller, INC, DEC rows),
    ``w_rec [H + 2k, H + k]`` (acting on ``r = [h; e]``), ``r0 [B, H + k]`` -> ``rs [B, T+1, H + k]``
    (initial first) and the moves ``[inc; dec]`` ``[B, T, 2k]``::

        a_t = x_t w_inᵀ + b + r_{t−1} w_recᵀ,  h_t = σ(a_t[:H]),  [inc; dec] = relu(a_t[H:]),
        e_t = e_{t−1} + inc − dec

    Forward: the input projection for all steps in one matrix product, then per step one
    in-place ``addmm`` and four elementwise kernels; backward: one ``addmm`` and three.
    """

    @staticmethod
    def forward(ctx, x, w_in, b, w_rec, r0, hidden, activation):  # type: ignore[override]
        B, T, _ = x.shape
        G, N = w_rec.shape
        H, k = hidden, N - hidden
        ctx.set_materialize_grads(False)
        xt = _time_major(x)
        pres = torch.addmm(b, xt, w_in.t()).view(T, B, G)
        rs = x.new_empty(T + 1, B, N)
        moves = x.new_empty(T, B, 2 * k)
        rs[0] = r0
        w_t = w_rec.t()
        out_fn = _OUT_FNS.get(getattr(activation, "__name__", ""))
        a_, ah_, am_ = pres.unbind(0), pres[..., :H].unbind(0), pres[..., H:].unbind(0)
        r_, rh_, re_ = rs.unbind(0), rs[..., :H].unbind(0), rs[..., H:].unbind(0)
        m_, inc_, dec_ = moves.unbind(0), moves[..., :k].unbind(0), moves[..., k:].unbind(0)
        for s in range(T):
            a_[s].addmm_(r_[s], w_t)
            if out_fn is not None:
                out_fn(ah_[s], out=rh_[s + 1])
            else:
                rh_[s + 1].copy_(activation(ah_[s]))
            torch.clamp_min(am_[s], 0, out=m_[s])  # relu (torch.relu has no out=)
            torch.add(re_[s], inc_[s], out=re_[s + 1])
            re_[s + 1].sub_(dec_[s])
        ctx.hidden, ctx.activation = H, activation
        ctx.save_for_backward(xt, w_in, w_rec, pres, rs)
        return rs.transpose(0, 1), moves.transpose(0, 1)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_rs, grad_moves):  # type: ignore[override]
        xt, w_in, w_rec, pres, rs = ctx.saved_tensors
        T, B, G = pres.shape
        H = ctx.hidden
        N = rs.shape[-1]
        k = N - H
        # d: ∂(h, e_t through inc, e_t through dec)/∂a_t for all steps; extra: ∂L/∂moves · relu'.
        d = torch.empty_like(pres)
        d[..., :H] = _derivative(ctx.activation, pres[..., :H])
        on = pres[..., H:] > 0
        d[..., H : H + k] = on[..., :k]
        d[..., H + k :] = on[..., k:]
        d[..., H + k :].neg_()
        extra = torch.zeros_like(pres)
        if grad_moves is not None:
            extra[..., H:] = grad_moves.transpose(0, 1) * on
        spread = torch.cat([torch.arange(N), torch.arange(H, N)]).to(pres.device)
        grs = None if grad_rs is None else grad_rs.transpose(0, 1).contiguous().unbind(0)
        g_r = rs.new_zeros(B, N) if grs is None else grs[T].clone()
        ga = torch.empty_like(pres)
        ga_, d_, x_ = ga.unbind(0), d.unbind(0), extra.unbind(0)
        for s in range(T - 1, -1, -1):
            torch.addcmul(x_[s], d_[s], g_r.index_select(1, spread), out=ga_[s])
            g_e = g_r[:, H:]
            g_r = torch.mm(ga_[s], w_rec) if grs is None else torch.addmm(grs[s], ga_[s], w_rec)
            g_r[:, H:] += g_e
        ga2 = ga.view(T * B, G)
        grad_w_rec = ga2.t() @ rs[:-1].reshape(T * B, N)
        return (*_input_grads(ctx, ga2, xt, w_in, B, T), grad_w_rec, g_r, None, None)
