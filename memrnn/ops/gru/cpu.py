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

    Members (M runs as one model): every argument with the member dimension first (``x [M, B, T,
    n]``, ``w_ih [M, 3H, n]``, ``b_ih [M, 3H]``, ``w_hh [M, 3H, H]``, ``b_hh [M, 3H]``, ``h0 [M, B,
    H]``) -> ``hs [M, B, T+1, H]``; the buffers are ``[T(+1), M, units, B]`` and every product is
    batched over the members (``baddbmm`` for ``addmm``, one weight-gradient product per member
    and block), so a step launches the kernels of one GRU whatever M is.
    """

    @staticmethod
    def forward(ctx, x, w_ih, b_ih, w_hh, b_hh, h0):  # type: ignore[override]
        members = w_hh.dim() == 3  # [M, 3H, H]: M runs at once, every buffer [T(+1), M, units, B]
        lead = (x.shape[0],) if members else ()
        B, T, n_in = x.shape[-3:]
        H = w_hh.shape[-1]
        ctx.set_materialize_grads(False)
        if members:  # one product per member over every step and row
            proj = torch.baddbmm(b_ih[:, :, None], w_ih, x.permute(0, 3, 2, 1).reshape(*lead, n_in, T * B))
            acts = proj.view(*lead, 3 * H, T, B).permute(2, 0, 1, 3).contiguous()  # [T, M, 3H, B]
        else:
            acts = torch.bmm(w_ih.expand(T, -1, n_in), x.permute(1, 2, 0)).add_(b_ih[:, None])  # [T, 3H, B]
        ghs = x.new_empty(T, *lead, 3 * H, B)  # W_hh h + b_hh per step (its n block is needed backward)
        hs = x.new_empty(T + 1, *lead, H, B)
        hs[0] = h0.transpose(-2, -1)
        bias = b_hh[..., None].expand(*lead, -1, B)
        rz_, r_, z_, n_ = (
            acts[..., a:b, :].unbind(0) for a, b in ((0, 2 * H), (0, H), (H, 2 * H), (2 * H, 3 * H))
        )
        gh_, ghrz_, ghn_ = ghs.unbind(0), ghs[..., : 2 * H, :].unbind(0), ghs[..., 2 * H :, :].unbind(0)
        h_ = hs.unbind(0)
        addmm = torch.baddbmm if members else torch.addmm
        for s in range(T):
            addmm(bias, w_hh, h_[s], out=gh_[s])
            rz_[s].add_(ghrz_[s]).sigmoid_()
            n_[s].addcmul_(r_[s], ghn_[s]).tanh_()
            torch.lerp(n_[s], h_[s], z_[s], out=h_[s + 1])
        ctx.save_for_backward(x, w_ih, w_hh, acts, ghs, hs)
        return hs.permute(*((1, 3, 0, 2) if members else (2, 0, 1)))

    @staticmethod
    @first_order
    def backward(ctx, grad_hs):  # type: ignore[override]
        x, w_ih, w_hh, acts, ghs, hs = ctx.saved_tensors
        members = w_hh.dim() == 3
        T, G, B = acts.shape[0], acts.shape[-2], acts.shape[-1]
        lead = acts.shape[1:-2]  # (M,) with members
        H = G // 3
        if grad_hs is None:
            return None, None, None, None, None, None
        time_major = (2, 0, 3, 1) if members else (1, 2, 0)
        gext = grad_hs.permute(*time_major).contiguous().unbind(0)  # [T+1] × [(M,) H, B]
        g = gext[T]
        gi = acts.new_empty(T, *lead, 3, H, B)  # ∂L/∂(W_ih x + b_ih): r, z, n blocks
        gh = acts.new_empty(T, *lead, 3, H, B)  # ∂L/∂(W_hh h + b_hh)
        gi_, gh_ = gi.unbind(0), gh.unbind(0)
        w_hh_t = w_hh.transpose(-2, -1)
        addmm_ = torch.Tensor.baddbmm_ if members else torch.Tensor.addmm_
        need_x, need_wi, need_bi = ctx.needs_input_grad[:3]
        grad_w_hh, grad_b_hh = w_hh.new_zeros(*lead, G, H), w_hh.new_zeros(*lead, G)
        grad_w_ih = w_ih.new_zeros(w_ih.shape) if need_wi else None
        grad_b_ih = w_ih.new_zeros(*lead, G) if need_bi else None
        grad_xt = x.new_empty(T, *lead, x.shape[-1], B) if need_x else None  # [T, (M,) n, B]
        for lo, hi in blocks(T):
            r, z, n = acts[lo:hi].view(hi - lo, *lead, 3, H, B).unbind(-3)
            ghn = ghs[lo:hi, ..., 2 * H :, :]
            # ∂h_t/∂(pre-activations) for the block: k0 for r, k1 for z, k2 for n
            k = acts.new_empty(hi - lo, *lead, 3, H, B)
            k0, k1, k2 = k.unbind(-3)
            b_n = (1 - n * n).mul_(1 - z)  # ∂h_t/∂(n's pre-activation) = (1 − z)(1 − n²)
            k2.copy_(b_n)
            torch.addcmul(r, r, r, value=-1, out=k0).mul_(ghn).mul_(b_n)  # r(1 − r) gh_n b_n
            torch.addcmul(z, z, z, value=-1, out=k1).mul_(hs[lo:hi] - n)  # z(1 − z)(h − n)
            d_n = b_n * r  # ∂h_t/∂(gh_n)
            k_, dn_, z_ = k.unbind(0), d_n.unbind(0), z.unbind(0)
            for s in range(hi - 1, lo - 1, -1):
                j = s - lo
                torch.mul(k_[j], g.unsqueeze(-3), out=gi_[s])
                gh_[s][..., :2, :, :] = gi_[s][..., :2, :, :]
                torch.mul(dn_[j], g, out=gh_[s][..., 2, :, :])
                g = addmm_(torch.addcmul(gext[s], g, z_[j]), w_hh_t, gh_[s].view(*lead, G, B))
            L = hi - lo
            ghb, gib = gh[lo:hi].view(L, *lead, G, B), gi[lo:hi].view(L, *lead, G, B)
            if not members:
                grad_w_hh += torch.bmm(ghb, hs[lo:hi].transpose(1, 2)).sum(0)
                grad_b_hh += ghb.sum((0, 2))
                input_grads_block(gib, x, w_ih, lo, hi, grad_w_ih, grad_b_ih, grad_xt)
                continue
            M, n_in = lead[0], x.shape[-1]  # one product per member over the block's steps and rows
            ghm = ghb.permute(1, 2, 0, 3).reshape(M, G, L * B)
            gim = gib.permute(1, 2, 0, 3).reshape(M, G, L * B)
            grad_w_hh.baddbmm_(ghm, hs[lo:hi].permute(1, 0, 3, 2).reshape(M, L * B, H))
            grad_b_hh += ghm.sum(2)
            if grad_w_ih is not None:
                grad_w_ih.baddbmm_(gim, x[:, :, lo:hi].transpose(1, 2).reshape(M, L * B, n_in))
            if grad_b_ih is not None:
                grad_b_ih += gim.sum(2)
            if grad_xt is not None:
                grad_xt[lo:hi] = torch.bmm(w_ih.transpose(1, 2), gim).view(M, n_in, L, B).permute(2, 0, 1, 3)
        batch_first = (1, 3, 0, 2) if members else (2, 0, 1)
        grad_x = None if grad_xt is None else grad_xt.permute(*batch_first)
        return grad_x, grad_w_ih, grad_b_ih, grad_w_hh, grad_b_hh, g.transpose(-2, -1)
