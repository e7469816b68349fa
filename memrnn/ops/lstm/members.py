"""The LSTM recurrence of :mod:`memrnn.ops.lstm` with a member dimension: M independent LSTMs
(M runs trained as one model, ``docs/design.md``, "Members"), each with its own weights, on
inputs ``[M, B, T, n]``.  :class:`LSTMMemberSequence` is :class:`memrnn.ops.lstm.cpu.LSTMSequence`
with every matrix product batched over the members (``baddbmm``/``bmm``), so that one step costs
the kernels of one LSTM whatever M is; :func:`lstm_member_reference` is the loop over members of
the plain reference."""

from __future__ import annotations

import torch
from torch import Tensor

from memrnn.ops.autograd import first_order
from memrnn.ops.bptt import blocks
from memrnn.ops.lstm.reference import lstm_reference


def lstm_member_reference(
    x: Tensor, w_in: Tensor, b: Tensor, w_rec: Tensor, h0: Tensor, c0: Tensor, tanh_units: int
) -> tuple[Tensor, Tensor]:
    """Member ``m`` is :func:`memrnn.ops.lstm.reference.lstm_reference` on ``x[m]`` with
    ``w_in[m]``, ``b[m]``, ``w_rec[m]``, ``h0[m]``, ``c0[m]``: ``x [M, B, T, n]``, ``w_in [M, 4N,
    n]``, ``b [M, 4N]``, ``w_rec [M, 4N, N]``, ``h0``, ``c0`` ``[M, B, N]`` -> ``hs``, ``cs``
    ``[M, B, T+1, N]``."""
    runs = [
        lstm_reference(*(t[m] for t in (x, w_in, b, w_rec, h0, c0)), tanh_units) for m in range(x.shape[0])
    ]
    return torch.stack([h for h, _ in runs]), torch.stack([c for _, c in runs])


class LSTMMemberSequence(torch.autograd.Function):
    """M LSTMs at once, shapes as :func:`lstm_member_reference` (gate blocks ``o, i, f, g``).

    The buffers are ``[T(+1), M, units, B]`` (:class:`memrnn.ops.lstm.cpu.LSTMSequence`'s
    transposed layout with the members second); per step one ``baddbmm`` over the members and
    the same elementwise kernels as one LSTM's.  Backward by hand, one ``baddbmm`` per step."""

    @staticmethod
    def forward(ctx, x, w_in, b, w_rec, h0, c0, tanh_units):  # type: ignore[override]
        M, B, T, _ = x.shape
        N = w_rec.shape[2]
        u = tanh_units
        ctx.set_materialize_grads(False)
        # [T, M, 4N, B]: every step's input projection in one product per member
        n_in = x.shape[3]
        proj = torch.baddbmm(b[:, :, None], w_in, x.permute(0, 3, 2, 1).reshape(M, n_in, T * B))
        acts = proj.view(M, 4 * N, T, B).permute(2, 0, 1, 3).contiguous()
        hs = x.new_empty(T + 1, M, N, B)
        cs = x.new_empty(T + 1, M, N, B)
        xs = x.new_empty(T, M, N, B)
        hs[0], cs[0] = h0.transpose(1, 2), c0.transpose(1, 2)
        a_, sig_, g_ = acts.unbind(0), acts[:, :, : 3 * N].unbind(0), acts[:, :, 3 * N :].unbind(0)
        o_, i_, f_ = (acts[:, :, j * N : (j + 1) * N].unbind(0) for j in range(3))
        h_, c_, x_ = hs.unbind(0), cs.unbind(0), xs.unbind(0)
        cu_, xu_ = cs[:, :, :u].unbind(0), xs[:, :, :u].unbind(0)
        cl_, xl_ = cs[:, :, u:].unbind(0), xs[:, :, u:].unbind(0)
        for s in range(T):
            a_[s].baddbmm_(w_rec, h_[s])
            sig_[s].sigmoid_()
            g_[s].tanh_()
            torch.mul(f_[s], c_[s], out=c_[s + 1])
            c_[s + 1].addcmul_(i_[s], g_[s])
            torch.tanh(cu_[s + 1], out=xu_[s])
            if u < N:
                xl_[s].copy_(cl_[s + 1])
            torch.mul(o_[s], x_[s], out=h_[s + 1])
        ctx.tanh_units = u
        ctx.save_for_backward(x, w_in, w_rec, acts, hs, cs, xs)
        return hs.permute(1, 3, 0, 2), cs.permute(1, 3, 0, 2)

    @staticmethod
    @first_order
    def backward(ctx, grad_hs, grad_cs):  # type: ignore[override]
        x, w_in, w_rec, acts, hs, cs, xs = ctx.saved_tensors
        T, M, G, B = acts.shape
        N, u = G // 4, ctx.tanh_units
        # [M, B, T+1, N] -> [T+1, M, N, B]
        ghs = None if grad_hs is None else grad_hs.permute(2, 0, 3, 1).contiguous().unbind(0)
        gcs = None if grad_cs is None else grad_cs.permute(2, 0, 3, 1).contiguous().unbind(0)
        zeros = hs.new_zeros(M, N, B)
        g_h = zeros if ghs is None else ghs[T]
        g_c = zeros if gcs is None else gcs[T]
        ga = acts.new_empty(T, M, 4, N, B)
        ga_, gah_, gac_ = ga.view(T, M, G, B).unbind(0), ga[:, :, 0].unbind(0), ga[:, :, 1:].unbind(0)
        w_rec_t = w_rec.transpose(1, 2)
        need_x, need_w, need_b = ctx.needs_input_grad[:3]
        grad_w_rec = w_rec.new_zeros(M, G, N)
        grad_w_in = w_in.new_zeros(w_in.shape) if need_w else None
        grad_b = w_in.new_zeros(M, G) if need_b else None
        n_in = x.shape[3]
        grad_xt = x.new_empty(T, M, n_in, B) if need_x else None
        for lo, hi in blocks(T):
            o, i, f, g = acts[lo:hi].view(hi - lo, M, 4, N, B).unbind(2)
            xb = xs[lo:hi]
            k = acts.new_empty(hi - lo, M, 4, N, B)
            torch.addcmul(o, o, o, value=-1, out=k[:, :, 0]).mul_(xb)
            torch.addcmul(i, i, i, value=-1, out=k[:, :, 1]).mul_(g)
            torch.addcmul(f, f, f, value=-1, out=k[:, :, 2]).mul_(cs[lo:hi])
            torch.addcmul(i, i * g, g, value=-1, out=k[:, :, 3])
            dh_dc = o.clone()
            dh_dc[:, :, :u].addcmul_(dh_dc[:, :, :u] * xb[:, :, :u], xb[:, :, :u], value=-1)
            kh_, kc_, f_, dhdc_ = k[:, :, 0].unbind(0), k[:, :, 1:].unbind(0), f.unbind(0), dh_dc.unbind(0)
            for s in range(hi - 1, lo - 1, -1):
                j = s - lo
                g_c = torch.addcmul(g_c, g_h, dhdc_[j])
                torch.mul(kh_[j], g_h, out=gah_[s])
                torch.mul(kc_[j], g_c[:, None], out=gac_[s])
                g_c = g_c * f_[j] if gcs is None else torch.addcmul(gcs[s], g_c, f_[j])
                g_h = torch.bmm(w_rec_t, ga_[s]) if ghs is None else torch.baddbmm(ghs[s], w_rec_t, ga_[s])
            # the block's share of the weight and input gradients: one product per member over
            # the block's steps and rows ([M, G, steps·B])
            L = hi - lo
            gb = ga[lo:hi].view(L, M, G, B).permute(1, 2, 0, 3).reshape(M, G, L * B)
            grad_w_rec.baddbmm_(gb, hs[lo:hi].permute(1, 0, 3, 2).reshape(M, L * B, N))
            if grad_w_in is not None:
                grad_w_in.baddbmm_(gb, x[:, :, lo:hi].transpose(1, 2).reshape(M, L * B, n_in))
            if grad_b is not None:
                grad_b += gb.sum(2)
            if grad_xt is not None:
                grad_xt[lo:hi] = torch.bmm(w_in.transpose(1, 2), gb).view(M, n_in, L, B).permute(2, 0, 1, 3)
        grad_x = None if grad_xt is None else grad_xt.permute(1, 3, 0, 2)
        return grad_x, grad_w_in, grad_b, grad_w_rec, g_h.transpose(1, 2), g_c.transpose(1, 2), None
