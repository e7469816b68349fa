"""The Jordan RNN's recurrence on the CPU: :class:`JordanSequence`, forward without a graph and hand-written
backpropagation through time (the method: :mod:`memrnn.ops.bptt`)."""

from __future__ import annotations

import torch

from memrnn.ops.autograd import first_order
from memrnn.ops.bptt import OUT_FNS, blocks, derivative, from_output


class JordanSequence(torch.autograd.Function):
    """The Jordan recurrence of :class:`memrnn.layers.JordanRNN` (Cotterell et al. 2023) over precomputed input
    pre-activations.

    ``pre [T, B, H]`` (time-major ``x_t Vᵀ + b``), ``weight_fb`` ``U [H, F]``, ``weight_out``
    ``E [F, H]``, ``r0 [B, F]`` -> ``hs [T, B, H]`` and ``rs [T+1, B, F]`` (initial first)::

        h_t = σ(pre_t + r_{t−1} Uᵀ),   r_t = σ_o(h_t Eᵀ)

    ``σ`` elementwise, ``σ_o`` elementwise, ``identity`` or ``softmax`` (the last dimension).
    Forward: per step one ``addmm``, one ``mm`` and two activation kernels; backward: one
    ``addmm``, one ``mm`` (two with a gradient on ``rs``) and two elementwise kernels, the
    activation derivatives computed for :data:`memrnn.ops.bptt.BLOCK` steps at a time.

    Members (M runs as one model): ``pre [M, T, B, H]``, ``weight_fb [M, H, F]``, ``weight_out
    [M, F, H]``, ``r0 [M, B, F]`` -> ``hs [M, T, B, H]``, ``rs [M, T+1, B, F]`` (member ``m`` the call
    on its ``[m]`` slices), views of ``[T(+1), M, B, ·]`` buffers; every product is batched over the
    members (``baddbmm`` for ``addmm``, ``bmm`` for ``mm``, one weight-gradient product per member
    and block), so a step launches the kernels of one sequence whatever M is.
    """

    @staticmethod
    def forward(ctx, pre, weight_fb, weight_out, r0, activation, output_activation, out_name):  # type: ignore[override]
        members = weight_fb.dim() == 3  # [M, H, F]: M runs at once, every buffer [T(+1), M, B, ·]
        Fb = weight_fb.shape[-1]
        ctx.set_materialize_grads(False)
        # σ's pre-activations (time-major with members), a copy completed in place
        acts = pre.transpose(0, 1).clone(memory_format=torch.contiguous_format) if members else pre.clone()
        T, rows, H = acts.shape[0], acts.shape[1:-1], acts.shape[-1]  # rows: ([M,] B)
        hs = pre.new_empty(T, *rows, H)
        outs = None if out_name in ("identity", "softmax") else pre.new_empty(T, *rows, Fb)
        rs = pre.new_empty(T + 1, *rows, Fb)
        rs[0] = r0
        u_t, e_t = weight_fb.transpose(-2, -1), weight_out.transpose(-2, -1)
        addmm_ = torch.Tensor.baddbmm_ if members else torch.Tensor.addmm_
        mm = torch.bmm if members else torch.mm
        act_out = OUT_FNS.get(getattr(activation, "__name__", ""))
        a_, h_, r_ = acts.unbind(0), hs.unbind(0), rs.unbind(0)
        o_ = None if outs is None else outs.unbind(0)
        for s in range(T):
            addmm_(a_[s], r_[s], u_t)
            if act_out is not None:
                act_out(a_[s], out=h_[s])
            else:
                h_[s].copy_(activation(a_[s]))
            if out_name == "identity":
                mm(h_[s], e_t, out=r_[s + 1])
            elif out_name == "softmax":
                torch.softmax(mm(h_[s], e_t), -1, out=r_[s + 1])
            else:
                mm(h_[s], e_t, out=o_[s])
                r_[s + 1].copy_(output_activation(o_[s]))
        ctx.activation, ctx.output_activation, ctx.out_name = activation, output_activation, out_name
        # σ's and σ_o's derivatives from their outputs hs and rs where they are functions of them
        # (bptt.from_output): then neither pre-activation buffer is kept
        ctx.dh = from_output(activation)
        ctx.do = None if outs is None else from_output(output_activation)
        keep_acts = None if ctx.dh else acts
        keep_outs = None if ctx.do else outs
        ctx.save_for_backward(weight_fb, weight_out, keep_acts, hs, rs, keep_outs)
        return (hs.transpose(0, 1), rs.transpose(0, 1)) if members else (hs, rs)

    @staticmethod
    @first_order
    def backward(ctx, grad_hs, grad_rs):  # type: ignore[override]
        weight_fb, weight_out, acts, hs, rs, outs = ctx.saved_tensors
        members = weight_fb.dim() == 3
        T, rows, H = hs.shape[0], hs.shape[1:-1], hs.shape[-1]  # rows: ([M,] B)
        B = rows[-1]
        if members:  # time-major views of the [M, T(+1), B, ·] gradients
            grad_hs = None if grad_hs is None else grad_hs.transpose(0, 1)
            grad_rs = None if grad_rs is None else grad_rs.transpose(0, 1)
        out_name = ctx.out_name
        g_r = rs.new_zeros(*rows, rs.shape[-1]) if grad_rs is None else grad_rs[T].clone()
        ga = torch.empty_like(hs)
        ga_ = ga.unbind(0)
        grad_fb = torch.zeros_like(weight_fb)
        grad_out = torch.zeros_like(weight_out)
        mm, addmm = (torch.bmm, torch.baddbmm) if members else (torch.mm, torch.addmm)
        for lo, hi in blocks(T):
            d_ = (ctx.dh(hs[lo:hi]) if ctx.dh else derivative(ctx.activation, acts[lo:hi])).unbind(0)
            do_ = None
            if ctx.do:
                do_ = ctx.do(rs[lo + 1 : hi + 1]).unbind(0)
            elif outs is not None:
                do_ = derivative(ctx.output_activation, outs[lo:hi]).unbind(0)
            go_block = rs.new_empty(hi - lo, *rows, rs.shape[-1])
            for s in range(hi - 1, lo - 1, -1):
                j = s - lo
                # r_{s+1} = σ_o(h_s Eᵀ): ∂L/∂(h_s Eᵀ)
                if out_name == "identity":
                    go = go_block[j].copy_(g_r)
                elif out_name == "softmax":
                    go = torch._softmax_backward_data(g_r, rs[s + 1], -1, g_r.dtype)
                    go_block[j] = go
                else:
                    go = torch.mul(g_r, do_[j], out=go_block[j])
                g_h = mm(go, weight_out) if grad_hs is None else addmm(grad_hs[s], go, weight_out)
                torch.mul(g_h, d_[j], out=ga_[s])
                g_r = mm(ga_[s], weight_fb)
                if grad_rs is not None:
                    g_r += grad_rs[s]
            n = (hi - lo) * B
            if members:  # one product per member over the block's steps and rows
                M, Fb = rows[0], rs.shape[-1]
                ga_m = ga[lo:hi].transpose(0, 1).reshape(M, n, H)
                go_m = go_block.transpose(0, 1).reshape(M, n, Fb)
                grad_fb += torch.bmm(ga_m.transpose(1, 2), rs[lo:hi].transpose(0, 1).reshape(M, n, Fb))
                grad_out += torch.bmm(go_m.transpose(1, 2), hs[lo:hi].transpose(0, 1).reshape(M, n, H))
            else:
                grad_fb += ga[lo:hi].reshape(n, H).t() @ rs[lo:hi].reshape(n, -1)
                grad_out += go_block.reshape(n, -1).t() @ hs[lo:hi].reshape(n, H)
        return (ga.transpose(0, 1) if members else ga), grad_fb, grad_out, g_r, None, None, None
