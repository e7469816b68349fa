"""The ReLU counter RNN's recurrence on the CPU: :class:`CounterRNNSequence`, forward without a graph and hand-written
backpropagation through time (the method: :mod:`memrnn.ops.bptt`)."""

from __future__ import annotations

import torch

from memrnn.ops.autograd import first_order
from memrnn.ops.bptt import OUT_FNS, blocks, derivative, from_output, input_grads, time_major


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
        xt = time_major(x)
        pres = torch.addmm(b, xt, w_in.t()).view(T, B, G)
        rs = x.new_empty(T + 1, B, N)
        moves = x.new_empty(T, B, 2 * k)
        rs[0] = r0
        w_t = w_rec.t()
        out_fn = OUT_FNS.get(getattr(activation, "__name__", ""))
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
        ctx.hidden, ctx.activation, ctx.dh = H, activation, from_output(activation)
        # where σ' is a function of σ's output (bptt.from_output) the backward reads it from rs and
        # relu's from the moves, and the pre-activations are not kept
        ctx.save_for_backward(xt, w_in, w_rec, rs, None if ctx.dh else pres, moves if ctx.dh else None)
        return rs.transpose(0, 1), moves.transpose(0, 1)

    @staticmethod
    @first_order
    def backward(ctx, grad_rs, grad_moves):  # type: ignore[override]
        xt, w_in, w_rec, rs, pres, moves = ctx.saved_tensors
        H = ctx.hidden
        T1, B, N = rs.shape
        T, k = T1 - 1, N - H
        G = H + 2 * k
        spread = torch.cat([torch.arange(N), torch.arange(H, N)]).to(rs.device)
        grs = None if grad_rs is None else grad_rs.transpose(0, 1).unbind(0)
        gms = None if grad_moves is None else grad_moves.transpose(0, 1)
        g_r = rs.new_zeros(B, N) if grs is None else grs[T].clone()
        ga = rs.new_empty(T, B, G)
        ga_ = ga.unbind(0)
        for lo, hi in blocks(T):
            # d: ∂(h, e_t through inc, e_t through dec)/∂a_t for steps lo..hi−1 at once;
            # extra: ∂L/∂moves · relu'.
            d = rs.new_empty(hi - lo, B, G)
            if ctx.dh:
                d[..., :H] = ctx.dh(rs[lo + 1 : hi + 1, :, :H])
                on = moves[lo:hi] > 0  # relu(a) > 0 exactly where a > 0
            else:
                pb = pres[lo:hi]
                d[..., :H] = derivative(ctx.activation, pb[..., :H])
                on = pb[..., H:] > 0
            d[..., H : H + k] = on[..., :k]
            d[..., H + k :] = on[..., k:]
            d[..., H + k :].neg_()
            extra = torch.zeros_like(d)
            if gms is not None:
                extra[..., H:] = gms[lo:hi] * on
            d_, x_ = d.unbind(0), extra.unbind(0)
            for s in range(hi - 1, lo - 1, -1):
                torch.addcmul(x_[s - lo], d_[s - lo], g_r.index_select(1, spread), out=ga_[s])
                g_e = g_r[:, H:]
                g_r = torch.mm(ga_[s], w_rec) if grs is None else torch.addmm(grs[s], ga_[s], w_rec)
                g_r[:, H:] += g_e
        ga2 = ga.view(T * B, G)
        grad_w_rec = ga2.t() @ rs[:-1].reshape(T * B, N)
        return (*input_grads(ctx, ga2, xt, w_in, B, T), grad_w_rec, g_r, None, None)
