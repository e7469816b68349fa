"""The GRU's recurrence on the CPU: :class:`GRUSequence`, forward without a graph and hand-written
backpropagation through time (the method: :mod:`memrnn.ops.bptt`)."""

from __future__ import annotations

import torch

from memrnn.ops.autograd import first_order
from memrnn.ops.bptt import blocks, input_grads_block


class GRUSequence(torch.autograd.Function):
    """One layer of torch's GRU (``nn.GRU``'s equations and parameter layout), run transposed on
    ``[units, batch]`` columns like :class:`LSTMSequence`.

    ``x [B, T, n]``, ``w_ih [3H, n]``, ``b_ih [3H]``, ``w_hh [3H, H]``, ``b_hh [3H]`` (gate blocks
    ``r, z, n``), ``h0 [B, H]`` -> ``hs [B, T+1, H]`` (initial first)::

        r, z = σ(W_i{r,z} x_t + b_i{r,z} + W_h{r,z} h_{t−1} + b_h{r,z})
        n = tanh(W_in x_t + b_in + r ⊙ (W_hn h_{t−1} + b_hn)),   h_t = n + z ⊙ (h_{t−1} − n)

    Forward: the input projection for all steps in one batched product, then per step one
    ``addmm`` and five elementwise kernels (the last a ``lerp``).  Backward: one ``addmm`` and
    four elementwise kernels per step, the local derivatives for :data:`memrnn.ops.bptt.BLOCK` steps at once, the
    weight gradients as batched products per block.
    """

    @staticmethod
    def forward(ctx, x, w_ih, b_ih, w_hh, b_hh, h0):  # type: ignore[override]
        B, T, n_in = x.shape
        H = w_hh.shape[1]
        ctx.set_materialize_grads(False)
        acts = torch.bmm(w_ih.expand(T, -1, n_in), x.permute(1, 2, 0)).add_(b_ih[:, None])  # [T, 3H, B]
        ghs = x.new_empty(T, 3 * H, B)  # W_hh h + b_hh per step (its n block is needed backward)
        hs = x.new_empty(T + 1, H, B)
        hs[0] = h0.t()
        bias = b_hh[:, None].expand(-1, B)
        rz_, r_, z_, n_ = (
            acts[:, a:b].unbind(0) for a, b in ((0, 2 * H), (0, H), (H, 2 * H), (2 * H, 3 * H))
        )
        gh_, ghrz_, ghn_ = ghs.unbind(0), ghs[:, : 2 * H].unbind(0), ghs[:, 2 * H :].unbind(0)
        h_ = hs.unbind(0)
        for s in range(T):
            torch.addmm(bias, w_hh, h_[s], out=gh_[s])
            rz_[s].add_(ghrz_[s]).sigmoid_()
            n_[s].addcmul_(r_[s], ghn_[s]).tanh_()
            torch.lerp(n_[s], h_[s], z_[s], out=h_[s + 1])
        ctx.save_for_backward(x, w_ih, w_hh, acts, ghs, hs)
        return hs.permute(2, 0, 1)

    @staticmethod
    @first_order
    def backward(ctx, grad_hs):  # type: ignore[override]
        x, w_ih, w_hh, acts, ghs, hs = ctx.saved_tensors
        T, G, B = acts.shape
        H = G // 3
        if grad_hs is None:
            return None, None, None, None, None, None
        gext = grad_hs.permute(1, 2, 0).contiguous().unbind(0)  # [T+1] × [H, B]
        g = gext[T]
        gi = acts.new_empty(T, 3, H, B)  # ∂L/∂(W_ih x + b_ih): r, z, n blocks
        gh = acts.new_empty(T, 3, H, B)  # ∂L/∂(W_hh h + b_hh)
        gi_, gh_ = gi.unbind(0), gh.unbind(0)
        w_hh_t = w_hh.t()
        need_x, need_wi, need_bi = ctx.needs_input_grad[:3]
        grad_w_hh, grad_b_hh = w_hh.new_zeros(G, H), w_hh.new_zeros(G)
        grad_w_ih = w_ih.new_zeros(w_ih.shape) if need_wi else None
        grad_b_ih = w_ih.new_zeros(G) if need_bi else None
        grad_xt = x.new_empty(T, x.shape[2], B) if need_x else None
        for lo, hi in blocks(T):
            r, z, n = acts[lo:hi].view(hi - lo, 3, H, B).unbind(1)
            ghn = ghs[lo:hi, 2 * H :]
            # ∂h_t/∂(pre-activations) for the block: k[:, 0] for r, k[:, 1] for z, k[:, 2] for n
            k = acts.new_empty(hi - lo, 3, H, B)
            b_n = (1 - n * n).mul_(1 - z)  # ∂h_t/∂(n's pre-activation) = (1 − z)(1 − n²)
            k[:, 2] = b_n
            torch.addcmul(r, r, r, value=-1, out=k[:, 0]).mul_(ghn).mul_(b_n)  # r(1 − r) gh_n b_n
            torch.addcmul(z, z, z, value=-1, out=k[:, 1]).mul_(hs[lo:hi] - n)  # z(1 − z)(h − n)
            d_n = b_n * r  # ∂h_t/∂(gh_n)
            k_, dn_, z_ = k.unbind(0), d_n.unbind(0), z.unbind(0)
            for s in range(hi - 1, lo - 1, -1):
                j = s - lo
                torch.mul(k_[j], g[None], out=gi_[s])
                gh_[s][:2] = gi_[s][:2]
                torch.mul(dn_[j], g, out=gh_[s][2])
                g = torch.addcmul(gext[s], g, z_[j]).addmm_(w_hh_t, gh_[s].view(G, B))
            ghb, gib = gh[lo:hi].view(hi - lo, G, B), gi[lo:hi].view(hi - lo, G, B)
            grad_w_hh += torch.bmm(ghb, hs[lo:hi].transpose(1, 2)).sum(0)
            grad_b_hh += ghb.sum((0, 2))
            input_grads_block(gib, x, w_ih, lo, hi, grad_w_ih, grad_b_ih, grad_xt)
        grad_x = None if grad_xt is None else grad_xt.permute(2, 0, 1)
        return grad_x, grad_w_ih, grad_b_ih, grad_w_hh, grad_b_hh, g.t()
