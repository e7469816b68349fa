"""Whole-sequence recurrences with hand-written backpropagation through time.

Autograd over a per-step loop records ~15 nodes per step and replays them one by one; these
:class:`torch.autograd.Function` s run the forward loop without a graph, keep what the backward
needs in ``[T, B, ·]`` buffers, compute the local derivatives for blocks of :data:`BLOCK` steps
at once (a block's buffers stay in cache, so time stays linear in ``T``), and leave
only a few fused operations and one matrix product per step in the backward loop.  The weight
gradients are a few large matrix products (per block or per sequence).  Masks are the caller's business: the
recurrences run over every step and the caller masks outputs and picks each row's final state
with :func:`memrnn.ops.buckets.final_by_length` (right padding makes this exact).

The backward passes are first order (``once_differentiable``: differentiating them again raises);
the layers' ``fused=False`` runs the reference loop under autograd for second derivatives.

All are checked against the layers' reference ``step`` loops in ``tests/layers/test_fast_paths.py``
(outputs, final states and all gradients, float64 to rounding, float32, right padding).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from memrnn.ops.autograd import first_order


def _derivative(fn: Callable[[Tensor], Tensor], a: Tensor) -> Tensor:
    """Elementwise derivative ``fn'(a)`` for all entries at once (``fn`` elementwise), with the
    same subgradient conventions as autograd uses in the reference loop."""
    with torch.enable_grad():
        leaf = a.detach().requires_grad_()
        (d,) = torch.autograd.grad(fn(leaf), leaf, torch.ones_like(leaf))
    return d


BLOCK = 64  # steps whose local derivatives the backward passes compute at once (cache-sized)


def _blocks(T: int) -> list[tuple[int, int]]:
    """``(lo, hi)`` step ranges of at most :data:`BLOCK` steps, last block first."""
    return [(max(0, hi - BLOCK), hi) for hi in range(T, 0, -BLOCK)]


def _time_major(x: Tensor) -> Tensor:
    """``[B, T, n]`` -> contiguous ``[T·B, n]`` (time-major rows)."""
    return x.transpose(0, 1).reshape(-1, x.shape[-1])


def _input_grads_block(gb, x, w_in, lo, hi, grad_w_in, grad_b, grad_xt) -> None:
    """Accumulate, for steps ``lo..hi−1``, the gradients of a transposed input projection
    ``W_in x_tᵀ + b`` from ``gb = ∂L/∂(W_in x_tᵀ + b)`` ``[hi−lo, G, B]``: into ``grad_w_in
    [G, n]``, ``grad_b [G]`` and ``grad_xt[lo:hi]`` ``[hi−lo, n, B]`` (each skipped when None)."""
    if grad_w_in is not None:
        grad_w_in += torch.bmm(gb, x[:, lo:hi].transpose(0, 1)).sum(0)
    if grad_b is not None:
        grad_b += gb.sum((0, 2))
    if grad_xt is not None:
        torch.bmm(w_in.t().expand(hi - lo, -1, gb.shape[1]), gb, out=grad_xt[lo:hi])


def _input_grads(ctx, ga: Tensor, xt: Tensor, w_in: Tensor, B: int, T: int):
    """Gradients of ``pre = x w_inᵀ + b`` from ``∂pre`` time-major ``[T·B, G]``."""
    need_x, need_w, need_b = ctx.needs_input_grad[:3]
    grad_x = (ga @ w_in).view(T, B, -1).transpose(0, 1) if need_x else None
    grad_w = ga.t() @ xt if need_w else None
    grad_b = ga.sum(0) if need_b else None
    return grad_x, grad_w, grad_b


class LSTMSequence(torch.autograd.Function):
    """An LSTM whose units expose ``tanh(c)`` (the first ``tanh_units``) or ``c`` itself (the rest:
    Weiss et al.'s (2018) counter cells, footnote 3).

    ``x [B, T, n]``, ``w_in [4N, n]``, ``b [4N]``, ``w_rec [4N, N]`` (gate blocks in the order
    **o, i, f, g**: the three sigmoids first), ``h0``, ``c0`` ``[B, N]`` -> ``hs``, ``cs``
    ``[B, T+1, N]`` (initial state first)::

        o, i, f, g = σ, σ, σ, tanh (x_t w_inᵀ + b + h_{t−1} w_recᵀ)
        c_t = f c_{t−1} + i g,   h_t = o X(c_t),   X = tanh on the first tanh_units, identity after

    The recurrence runs transposed, on ``[units, batch]`` columns (``gatesᵀ = w_rec hᵀ``), so
    that every gate block of a step is one contiguous tensor and the elementwise kernels run at
    full vector width (row slices of ``[B, 4N]`` gates cost 3–5x more on CPU).  Forward: the
    input projection for all steps in one batched product, then per step one in-place
    ``addmm`` and six or seven elementwise kernels.  Backward: one ``addmm`` and four
    elementwise kernels per step (``∂h/∂c``, the gate derivatives and the products that do not
    depend on the incoming gradient are computed for :data:`BLOCK` steps at a time); the weight
    gradients are one matrix product each.  The returned ``hs``, ``cs`` are ``[B, T+1, N]``
    views of ``[T+1, N, B]`` buffers.
    """

    @staticmethod
    def forward(ctx, x, w_in, b, w_rec, h0, c0, tanh_units):  # type: ignore[override]
        B, T, _ = x.shape
        N = w_rec.shape[1]
        u = tanh_units
        ctx.set_materialize_grads(False)
        T_, n_in = x.shape[1], x.shape[2]
        acts = torch.bmm(w_in.expand(T_, -1, n_in), x.permute(1, 2, 0)).add_(b[:, None])  # [T, 4N, B]
        hs = x.new_empty(T + 1, N, B)
        cs = x.new_empty(T + 1, N, B)
        xs = x.new_empty(T, N, B)
        hs[0], cs[0] = h0.t(), c0.t()
        a_, sig_, g_ = acts.unbind(0), acts[:, : 3 * N].unbind(0), acts[:, 3 * N :].unbind(0)
        o_, i_, f_ = (acts[:, j * N : (j + 1) * N].unbind(0) for j in range(3))
        h_, c_, x_ = hs.unbind(0), cs.unbind(0), xs.unbind(0)
        cu_, xu_ = cs[:, :u].unbind(0), xs[:, :u].unbind(0)
        cl_, xl_ = cs[:, u:].unbind(0), xs[:, u:].unbind(0)
        for s in range(T):
            a_[s].addmm_(w_rec, h_[s])
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
        return hs.permute(2, 0, 1), cs.permute(2, 0, 1)

    @staticmethod
    @first_order
    def backward(ctx, grad_hs, grad_cs):  # type: ignore[override]
        x, w_in, w_rec, acts, hs, cs, xs = ctx.saved_tensors
        T, G, B = acts.shape
        N, u = G // 4, ctx.tanh_units
        ghs = None if grad_hs is None else grad_hs.permute(1, 2, 0).contiguous().unbind(0)
        gcs = None if grad_cs is None else grad_cs.permute(1, 2, 0).contiguous().unbind(0)
        zeros = hs.new_zeros(N, B)
        g_h = zeros if ghs is None else ghs[T]
        g_c = zeros if gcs is None else gcs[T]
        ga = acts.new_empty(T, 4, N, B)
        ga_, gah_, gac_ = ga.view(T, G, B).unbind(0), ga[:, 0].unbind(0), ga[:, 1:].unbind(0)
        w_rec_t = w_rec.t()
        need_x, need_w, need_b = ctx.needs_input_grad[:3]
        grad_w_rec = w_rec.new_zeros(G, N)
        grad_w_in = w_in.new_zeros(w_in.shape) if need_w else None
        grad_b = w_in.new_zeros(G) if need_b else None
        grad_xt = x.new_empty(T, x.shape[2], B) if need_x else None  # [T, n, B]
        for lo, hi in _blocks(T):
            # Local derivatives of steps lo..hi−1 at once: k[:, 0] multiplies ∂h_t, k[:, 1:]
            # ∂c_t; dh_dc = ∂h_t/∂c_t = o X'(c_t).
            o, i, f, g = acts[lo:hi].view(hi - lo, 4, N, B).unbind(1)
            xb = xs[lo:hi]
            k = acts.new_empty(hi - lo, 4, N, B)  # σ' = σ − σ², tanh' = 1 − tanh², one pass each
            torch.addcmul(o, o, o, value=-1, out=k[:, 0]).mul_(xb)
            torch.addcmul(i, i, i, value=-1, out=k[:, 1]).mul_(g)
            torch.addcmul(f, f, f, value=-1, out=k[:, 2]).mul_(cs[lo:hi])
            torch.addcmul(i, i * g, g, value=-1, out=k[:, 3])
            dh_dc = o.clone()
            dh_dc[:, :u].addcmul_(dh_dc[:, :u] * xb[:, :u], xb[:, :u], value=-1)
            kh_, kc_, f_, dhdc_ = k[:, 0].unbind(0), k[:, 1:].unbind(0), f.unbind(0), dh_dc.unbind(0)
            for s in range(hi - 1, lo - 1, -1):
                j = s - lo
                g_c = torch.addcmul(g_c, g_h, dhdc_[j])
                torch.mul(kh_[j], g_h, out=gah_[s])
                torch.mul(kc_[j], g_c[None], out=gac_[s])
                g_c = g_c * f_[j] if gcs is None else torch.addcmul(gcs[s], g_c, f_[j])
                g_h = torch.mm(w_rec_t, ga_[s]) if ghs is None else torch.addmm(ghs[s], w_rec_t, ga_[s])
            # the block's share of the weight and input gradients, while it is in cache
            gb = ga[lo:hi].view(hi - lo, G, B)
            grad_w_rec += torch.bmm(gb, hs[lo:hi].transpose(1, 2)).sum(0)
            _input_grads_block(gb, x, w_in, lo, hi, grad_w_in, grad_b, grad_xt)
        grad_x = None if grad_xt is None else grad_xt.permute(2, 0, 1)
        return grad_x, grad_w_in, grad_b, grad_w_rec, g_h.t(), g_c.t(), None


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
    @first_order
    def backward(ctx, grad_rs, grad_moves):  # type: ignore[override]
        xt, w_in, w_rec, pres, rs = ctx.saved_tensors
        T, B, G = pres.shape
        H = ctx.hidden
        N = rs.shape[-1]
        k = N - H
        spread = torch.cat([torch.arange(N), torch.arange(H, N)]).to(pres.device)
        grs = None if grad_rs is None else grad_rs.transpose(0, 1).unbind(0)
        gms = None if grad_moves is None else grad_moves.transpose(0, 1)
        g_r = rs.new_zeros(B, N) if grs is None else grs[T].clone()
        ga = torch.empty_like(pres)
        ga_ = ga.unbind(0)
        for lo, hi in _blocks(T):
            # d: ∂(h, e_t through inc, e_t through dec)/∂a_t for steps lo..hi−1 at once;
            # extra: ∂L/∂moves · relu'.
            pb = pres[lo:hi]
            d = torch.empty_like(pb)
            d[..., :H] = _derivative(ctx.activation, pb[..., :H])
            on = pb[..., H:] > 0
            d[..., H : H + k] = on[..., :k]
            d[..., H + k :] = on[..., k:]
            d[..., H + k :].neg_()
            extra = torch.zeros_like(pb)
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
        return (*_input_grads(ctx, ga2, xt, w_in, B, T), grad_w_rec, g_r, None, None)


class JordanSequence(torch.autograd.Function):
    """The Jordan recurrence of :class:`memrnn.layers.JordanRNN` (Cotterell et al. 2023) over precomputed input
    pre-activations.

    ``pre [T, B, H]`` (time-major ``x_t Vᵀ + b``), ``weight_fb`` ``U [H, F]``, ``weight_out``
    ``E [F, H]``, ``r0 [B, F]`` -> ``hs [T, B, H]`` and ``rs [T+1, B, F]`` (initial first)::

        h_t = σ(pre_t + r_{t−1} Uᵀ),   r_t = σ_o(h_t Eᵀ)

    ``σ`` elementwise, ``σ_o`` elementwise, ``identity`` or ``softmax`` (the last dimension).
    Forward: per step one ``addmm``, one ``mm`` and two activation kernels; backward: one
    ``addmm``, one ``mm`` (two with a gradient on ``rs``) and two elementwise kernels, the
    activation derivatives computed for :data:`BLOCK` steps at a time.
    """

    @staticmethod
    def forward(ctx, pre, weight_fb, weight_out, r0, activation, output_activation, out_name):  # type: ignore[override]
        T, B, H = pre.shape
        Fb = weight_fb.shape[1]
        ctx.set_materialize_grads(False)
        acts = pre.clone()  # σ's pre-activations, completed in place
        hs = pre.new_empty(T, B, H)
        outs = None if out_name in ("identity", "softmax") else pre.new_empty(T, B, Fb)
        rs = pre.new_empty(T + 1, B, Fb)
        rs[0] = r0
        u_t, e_t = weight_fb.t(), weight_out.t()
        act_out = _OUT_FNS.get(getattr(activation, "__name__", ""))
        a_, h_, r_ = acts.unbind(0), hs.unbind(0), rs.unbind(0)
        o_ = None if outs is None else outs.unbind(0)
        for s in range(T):
            a_[s].addmm_(r_[s], u_t)
            if act_out is not None:
                act_out(a_[s], out=h_[s])
            else:
                h_[s].copy_(activation(a_[s]))
            if out_name == "identity":
                torch.mm(h_[s], e_t, out=r_[s + 1])
            elif out_name == "softmax":
                torch.softmax(torch.mm(h_[s], e_t), -1, out=r_[s + 1])
            else:
                torch.mm(h_[s], e_t, out=o_[s])
                r_[s + 1].copy_(output_activation(o_[s]))
        ctx.activation, ctx.output_activation, ctx.out_name = activation, output_activation, out_name
        ctx.save_for_backward(weight_fb, weight_out, acts, hs, rs, outs)
        return hs, rs

    @staticmethod
    @first_order
    def backward(ctx, grad_hs, grad_rs):  # type: ignore[override]
        weight_fb, weight_out, acts, hs, rs, outs = ctx.saved_tensors
        T, B, H = acts.shape
        out_name = ctx.out_name
        g_r = rs.new_zeros(B, rs.shape[-1]) if grad_rs is None else grad_rs[T].clone()
        ga = torch.empty_like(acts)
        ga_ = ga.unbind(0)
        grad_fb = torch.zeros_like(weight_fb)
        grad_out = torch.zeros_like(weight_out)
        for lo, hi in _blocks(T):
            d_ = _derivative(ctx.activation, acts[lo:hi]).unbind(0)
            do_ = None
            if outs is not None:
                do_ = _derivative(ctx.output_activation, outs[lo:hi]).unbind(0)
            go_block = rs.new_empty(hi - lo, B, rs.shape[-1])
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
                g_h = torch.mm(go, weight_out) if grad_hs is None else torch.addmm(grad_hs[s], go, weight_out)
                torch.mul(g_h, d_[j], out=ga_[s])
                g_r = torch.mm(ga_[s], weight_fb)
                if grad_rs is not None:
                    g_r += grad_rs[s]
            n = (hi - lo) * B
            grad_fb += ga[lo:hi].reshape(n, H).t() @ rs[lo:hi].reshape(n, -1)
            grad_out += go_block.reshape(n, -1).t() @ hs[lo:hi].reshape(n, H)
        return ga, grad_fb, grad_out, g_r, None, None, None


class GRUSequence(torch.autograd.Function):
    """One layer of torch's GRU (``nn.GRU``'s equations and parameter layout), run transposed on
    ``[units, batch]`` columns like :class:`LSTMSequence`.

    ``x [B, T, n]``, ``w_ih [3H, n]``, ``b_ih [3H]``, ``w_hh [3H, H]``, ``b_hh [3H]`` (gate blocks
    ``r, z, n``), ``h0 [B, H]`` -> ``hs [B, T+1, H]`` (initial first)::

        r, z = σ(W_i{r,z} x_t + b_i{r,z} + W_h{r,z} h_{t−1} + b_h{r,z})
        n = tanh(W_in x_t + b_in + r ⊙ (W_hn h_{t−1} + b_hn)),   h_t = n + z ⊙ (h_{t−1} − n)

    Forward: the input projection for all steps in one batched product, then per step one
    ``addmm`` and five elementwise kernels (the last a ``lerp``).  Backward: one ``addmm`` and
    four elementwise kernels per step, the local derivatives for :data:`BLOCK` steps at once, the
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
        for lo, hi in _blocks(T):
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
            _input_grads_block(gib, x, w_ih, lo, hi, grad_w_ih, grad_b_ih, grad_xt)
        grad_x = None if grad_xt is None else grad_xt.permute(2, 0, 1)
        return grad_x, grad_w_ih, grad_b_ih, grad_w_hh, grad_b_hh, g.t()
