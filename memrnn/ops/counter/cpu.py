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

    Members (M runs as one model): every argument with the member dimension first (``x [M, B, T,
    n]``, ``w_in [M, H + 2k, n]``, ``b [M, H + 2k]``, ``w_rec [M, H + 2k, H + k]``, ``r0 [M, B, H +
    k]``) -> ``rs [M, B, T+1, H + k]``, moves ``[M, B, T, 2k]``; the buffers are ``[T(+1), M, B, ·]``
    and every product is batched over the members (``baddbmm`` for ``addmm``, one weight-gradient
    product per member), so a step launches the kernels of one sequence whatever M is.
    """

    @staticmethod
    def forward(ctx, x, w_in, b, w_rec, r0, hidden, activation):  # type: ignore[override]
        members = w_rec.dim() == 3  # [M, G, N]: M runs at once, every buffer [T(+1), M, B, ·]
        lead = (x.shape[0],) if members else ()
        B, T, _ = x.shape[-3:]
        G, N = w_rec.shape[-2:]
        H, k = hidden, N - hidden
        ctx.set_materialize_grads(False)
        if members:  # one product per member over every step and row, then time-major
            xt = x.transpose(1, 2).reshape(lead[0], T * B, x.shape[-1])
            pres = torch.baddbmm(b[:, None], xt, w_in.transpose(1, 2)).view(*lead, T, B, G)
            pres = pres.transpose(0, 1).contiguous()  # [T, M, B, G]
        else:
            xt = time_major(x)
            pres = torch.addmm(b, xt, w_in.t()).view(T, B, G)
        rs = x.new_empty(T + 1, *lead, B, N)
        moves = x.new_empty(T, *lead, B, 2 * k)
        rs[0] = r0
        w_t = w_rec.transpose(-2, -1)
        addmm_ = torch.Tensor.baddbmm_ if members else torch.Tensor.addmm_
        out_fn = OUT_FNS.get(getattr(activation, "__name__", ""))
        a_, ah_, am_ = pres.unbind(0), pres[..., :H].unbind(0), pres[..., H:].unbind(0)
        r_, rh_, re_ = rs.unbind(0), rs[..., :H].unbind(0), rs[..., H:].unbind(0)
        m_, inc_, dec_ = moves.unbind(0), moves[..., :k].unbind(0), moves[..., k:].unbind(0)
        for s in range(T):
            addmm_(a_[s], r_[s], w_t)
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
        batch_first = (1, 2, 0, 3) if members else (1, 0, 2)
        return rs.permute(*batch_first), moves.permute(*batch_first)

    @staticmethod
    @first_order
    def backward(ctx, grad_rs, grad_moves):  # type: ignore[override]
        xt, w_in, w_rec, rs, pres, moves = ctx.saved_tensors
        H = ctx.hidden
        members = w_rec.dim() == 3
        T1, N = rs.shape[0], rs.shape[-1]
        rows = rs.shape[1:-1]  # ([M,] B)
        T, k = T1 - 1, N - H
        G = H + 2 * k
        time_first = (2, 0, 1, 3) if members else (1, 0, 2)
        spread = torch.cat([torch.arange(N), torch.arange(H, N)]).to(rs.device)
        grs = None if grad_rs is None else grad_rs.permute(*time_first).unbind(0)
        gms = None if grad_moves is None else grad_moves.permute(*time_first)
        g_r = rs.new_zeros(*rows, N) if grs is None else grs[T].clone()
        ga = rs.new_empty(T, *rows, G)
        ga_ = ga.unbind(0)
        mm, addmm = (torch.bmm, torch.baddbmm) if members else (torch.mm, torch.addmm)
        for lo, hi in blocks(T):
            # d: ∂(h, e_t through inc, e_t through dec)/∂a_t for steps lo..hi−1 at once;
            # extra: ∂L/∂moves · relu'.
            d = rs.new_empty(hi - lo, *rows, G)
            if ctx.dh:
                d[..., :H] = ctx.dh(rs[lo + 1 : hi + 1, ..., :H])
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
                torch.addcmul(x_[s - lo], d_[s - lo], g_r.index_select(-1, spread), out=ga_[s])
                g_e = g_r[..., H:]
                g_r = mm(ga_[s], w_rec) if grs is None else addmm(grs[s], ga_[s], w_rec)
                g_r[..., H:] += g_e
        if not members:
            B = rows[0]
            ga2 = ga.view(T * B, G)
            grad_w_rec = ga2.t() @ rs[:-1].reshape(T * B, N)
            return (*input_grads(ctx, ga2, xt, w_in, B, T), grad_w_rec, g_r, None, None)
        M, B = rows
        ga_m = ga.transpose(0, 1).reshape(M, T * B, G)  # per member, time-major rows
        grad_w_rec = torch.bmm(ga_m.transpose(1, 2), rs[:-1].transpose(0, 1).reshape(M, T * B, N))
        need_x, need_w, need_b = ctx.needs_input_grad[:3]
        grad_x = torch.bmm(ga_m, w_in).view(M, T, B, w_in.shape[-1]).transpose(1, 2) if need_x else None
        grad_w = torch.bmm(ga_m.transpose(1, 2), xt) if need_w else None
        grad_b = ga_m.sum(1) if need_b else None
        return grad_x, grad_w, grad_b, grad_w_rec, g_r, None, None
