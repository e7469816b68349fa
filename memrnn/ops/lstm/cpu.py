"""The LSTM recurrence with counter cells on the CPU: :class:`LSTMSequence`, forward without a graph and hand-written
backpropagation through time (the method: :mod:`memrnn.ops.bptt`)."""

from __future__ import annotations

import torch

from memrnn.ops import scratch
from memrnn.ops.autograd import first_order
from memrnn.ops.bptt import blocks, input_grads_block
from memrnn.ops.native import load


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
    depend on the incoming gradient are computed for :data:`memrnn.ops.bptt.BLOCK` steps at a time); the weight
    gradients are one matrix product each.  The returned ``hs``, ``cs`` are ``[B, T+1, N]``
    views of ``[T+1, N, B]`` buffers.

    Members (M runs as one model): every argument with the member dimension first (``x [M, B, T,
    n]``, ``w_rec [M, 4N, N]``, ``h0 [M, B, N]``, …) -> ``[M, B, T+1, N]``; the buffers are
    ``[T(+1), M, units, B]`` and every product is batched over the members (``baddbmm`` for
    ``addmm``), so a step launches the kernels of one LSTM whatever M is.

    ``native=True`` (:func:`memrnn.ops.lstm.lstm_sequence`'s default on CPU): the per-step loops
    of the forward and of each backward block run in C++ (``memrnn/ops/lstm/native_lstm.cpp``),
    the same ATen calls on the same views below the autograd layer, so the results are the Python
    loops' bit for bit (``tests/ops/test_lstm.py``); 0.6-1.1 ms less per forward and backward of
    ``train.py``'s default job (T = 40, 16 units, batch 16) at 1 or 10 members on this 2-core
    machine (the Python loop: 4.4-4.9 ms at 1, 15.7 at 10).
    """

    @staticmethod
    def forward(ctx, x, w_in, b, w_rec, h0, c0, tanh_units, native=False):  # type: ignore[override]
        members = w_rec.dim() == 3  # [M, 4N, N]: M runs at once, every buffer [T(+1), M, units, B]
        lead = (x.shape[0],) if members else ()
        B, T, n_in = x.shape[-3:]
        N = w_rec.shape[-1]
        u = tanh_units
        ctx.set_materialize_grads(False)
        if members:  # one product per member over every step and row
            proj = torch.baddbmm(b[:, :, None], w_in, x.permute(0, 3, 2, 1).reshape(*lead, n_in, T * B))
            acts = proj.view(*lead, 4 * N, T, B).permute(2, 0, 1, 3).contiguous()  # [T, M, 4N, B]
        else:
            acts = torch.bmm(w_in.expand(T, -1, n_in), x.permute(1, 2, 0)).add_(b[:, None])  # [T, 4N, B]
        hs = x.new_empty(T + 1, *lead, N, B)
        cs = x.new_empty(T + 1, *lead, N, B)
        xs = x.new_empty(T, *lead, N, B)
        hs[0], cs[0] = h0.transpose(-2, -1), c0.transpose(-2, -1)
        ctx.tanh_units, ctx.native = tanh_units, native
        ctx.save_for_backward(x, w_in, w_rec, acts, hs, cs, xs)
        batch_first = (1, 3, 0, 2) if members else (2, 0, 1)
        if native:  # the same calls from C++ (memrnn/ops/lstm/native_lstm.cpp)
            _native_ops().lstm_forward_steps(acts, w_rec, hs, cs, xs, u)
            return hs.permute(*batch_first), cs.permute(*batch_first)
        a_, sig_, g_ = acts.unbind(0), acts[..., : 3 * N, :].unbind(0), acts[..., 3 * N :, :].unbind(0)
        o_, i_, f_ = (acts[..., j * N : (j + 1) * N, :].unbind(0) for j in range(3))
        h_, c_, x_ = hs.unbind(0), cs.unbind(0), xs.unbind(0)
        cu_, xu_ = cs[..., :u, :].unbind(0), xs[..., :u, :].unbind(0)
        cl_, xl_ = cs[..., u:, :].unbind(0), xs[..., u:, :].unbind(0)
        addmm_ = torch.Tensor.baddbmm_ if members else torch.Tensor.addmm_
        for s in range(T):
            addmm_(a_[s], w_rec, h_[s])
            sig_[s].sigmoid_()
            g_[s].tanh_()
            torch.mul(f_[s], c_[s], out=c_[s + 1])
            c_[s + 1].addcmul_(i_[s], g_[s])
            torch.tanh(cu_[s + 1], out=xu_[s])
            if u < N:
                xl_[s].copy_(cl_[s + 1])
            torch.mul(o_[s], x_[s], out=h_[s + 1])
        return hs.permute(*batch_first), cs.permute(*batch_first)

    @staticmethod
    @first_order
    def backward(ctx, grad_hs, grad_cs):  # type: ignore[override]
        x, w_in, w_rec, acts, hs, cs, xs = ctx.saved_tensors
        members = w_rec.dim() == 3
        T, G, B = acts.shape[0], acts.shape[-2], acts.shape[-1]
        lead = acts.shape[1:-2]  # (M,) with members
        N, u = G // 4, ctx.tanh_units
        time_major = (2, 0, 3, 1) if members else (1, 2, 0)
        ghs_t = None if grad_hs is None else grad_hs.permute(*time_major).contiguous()
        gcs_t = None if grad_cs is None else grad_cs.permute(*time_major).contiguous()
        native = _native_ops() if ctx.native else None
        zeros = hs.new_zeros(*lead, N, B)
        g_h = zeros if ghs_t is None else ghs_t[T]
        g_c = zeros if gcs_t is None else gcs_t[T]
        ga = acts.new_empty(T, *lead, 4, N, B)
        if native is None:  # the Python loop's per-step views (the C++ loop takes its own)
            ghs = None if ghs_t is None else ghs_t.unbind(0)
            gcs = None if gcs_t is None else gcs_t.unbind(0)
            ga_, gah_, gac_ = (
                ga.view(T, *lead, G, B).unbind(0),
                ga[..., 0, :, :].unbind(0),
                ga[..., 1:, :, :].unbind(0),
            )
        w_rec_t = w_rec.transpose(-2, -1)
        mm, addmm = (torch.bmm, torch.baddbmm) if members else (torch.mm, torch.addmm)
        need_x, need_w, need_b = ctx.needs_input_grad[:3]
        grad_w_rec = w_rec.new_zeros(*lead, G, N)
        grad_w_in = w_in.new_zeros(w_in.shape) if need_w else None
        grad_b = w_in.new_zeros(*lead, G) if need_b else None
        grad_xt = x.new_empty(T, *lead, x.shape[-1], B) if need_x else None  # [T, (M,) n, B]
        for lo, hi in blocks(T):
            # Local derivatives of steps lo..hi−1 at once: k[..., 0, :, :] multiplies ∂h_t, the rest
            # ∂c_t; dh_dc = ∂h_t/∂c_t = o X'(c_t).
            o, i, f, g = acts[lo:hi].view(hi - lo, *lead, 4, N, B).unbind(-3)
            xb = xs[lo:hi]
            k = acts.new_empty(hi - lo, *lead, 4, N, B)  # σ' = σ − σ², tanh' = 1 − tanh², one pass each
            k0, k1, k2, k3 = k.unbind(-3)
            torch.addcmul(o, o, o, value=-1, out=k0).mul_(xb)
            torch.addcmul(i, i, i, value=-1, out=k1).mul_(g)
            torch.addcmul(f, f, f, value=-1, out=k2).mul_(cs[lo:hi])
            torch.addcmul(i, i * g, g, value=-1, out=k3)
            dh_dc = o.clone()
            dh_dc[..., :u, :].addcmul_(dh_dc[..., :u, :] * xb[..., :u, :], xb[..., :u, :], value=-1)
            if native is not None:  # the same calls from C++ (memrnn/ops/lstm/native_lstm.cpp)
                g_h, g_c = native.lstm_backward_steps(
                    lo, hi, k, f, dh_dc, ghs_t, gcs_t, w_rec_t, ga, g_h, g_c
                )
            else:
                kh_, kc_, f_, dhdc_ = k0.unbind(0), k[..., 1:, :, :].unbind(0), f.unbind(0), dh_dc.unbind(0)
                for s in range(hi - 1, lo - 1, -1):
                    j = s - lo
                    g_c = torch.addcmul(g_c, g_h, dhdc_[j])
                    torch.mul(kh_[j], g_h, out=gah_[s])
                    torch.mul(kc_[j], g_c.unsqueeze(-3), out=gac_[s])
                    g_c = g_c * f_[j] if gcs is None else torch.addcmul(gcs[s], g_c, f_[j])
                    g_h = mm(w_rec_t, ga_[s]) if ghs is None else addmm(ghs[s], w_rec_t, ga_[s])
            # the block's share of the weight and input gradients, while it is in cache
            L = hi - lo
            gb = ga[lo:hi].view(L, *lead, G, B)
            if not members:
                grad_w_rec += torch.bmm(gb, hs[lo:hi].transpose(1, 2)).sum(0)
                input_grads_block(gb, x, w_in, lo, hi, grad_w_in, grad_b, grad_xt)
                continue
            M, n_in = lead[0], x.shape[-1]  # one product per member over the block's steps and rows
            gbm = gb.permute(1, 2, 0, 3).reshape(M, G, L * B)
            grad_w_rec.baddbmm_(gbm, hs[lo:hi].permute(1, 0, 3, 2).reshape(M, L * B, N))
            if grad_w_in is not None:
                grad_w_in.baddbmm_(gbm, x[:, :, lo:hi].transpose(1, 2).reshape(M, L * B, n_in))
            if grad_b is not None:
                grad_b += gbm.sum(2)
            if grad_xt is not None:
                grad_xt[lo:hi] = torch.bmm(w_in.transpose(1, 2), gbm).view(M, n_in, L, B).permute(2, 0, 1, 3)
        batch_first = (1, 3, 0, 2) if members else (2, 0, 1)
        grad_x = None if grad_xt is None else grad_xt.permute(*batch_first)
        return grad_x, grad_w_in, grad_b, grad_w_rec, g_h.transpose(-2, -1), g_c.transpose(-2, -1), None, None


def _native_ops():
    """memrnn's compiled ops (:func:`memrnn.ops.native.load`; the caller chose ``native``, so they are built)."""
    return load()


#: the dtypes the fused cell's C++ loops take (others run :class:`LSTMSequence`)
FUSED_DTYPES = (torch.float32, torch.float64)


class FusedLSTMSequence(torch.autograd.Function):
    """:class:`LSTMSequence` with members (``x [M, B, T, n]``, ``w_in [M, 4N, n]``, ``b [M, 4N]``,
    ``w_rec [M, 4N, N]``, ``h0``, ``c0`` ``[M, B, N]`` -> ``hs``, ``cs`` ``[M, B, T+1, N]``, gate order
    o, i, f, g) through a fused cell in C++ (``lstm_fused_forward`` / ``lstm_fused_backward`` in
    ``memrnn/ops/lstm/native_lstm.cpp``): one pass per step and member over its ``[batch, 4N]`` gates does
    the recurrent product, the activations and the cell update (forward) or the local derivatives,
    the gate gradients and the product with ``w_rec`` (backward), where :class:`LSTMSequence`
    makes one batched product and six to eight elementwise ATen passes per step (and computes
    the local derivatives blockwise).  :func:`memrnn.ops.lstm.lstm_sequence`'s member path on CPU
    (``impl="native"``, float32 and float64).

    Its sigmoid, tanh and sums are its own, so it is not :class:`LSTMSequence` bit for bit: float64
    within 1e-12 of it, float32 within 1e-5 of the float64 loop, as close as :class:`LSTMSequence`'s
    float32 loop is (``tests/ops/test_lstm.py``).  The single-run path keeps :class:`LSTMSequence`'s
    ATen calls (``tests/ops/test_bitwise_fixture.py`` records them).

    The cell works batch first and row major, as the products around it read and write it (the
    projection ``[M, B, T, 4N]``, activated in place, and ``hs``, ``cs`` ``[M, B, T+1, N]``): every
    inner loop runs over a row's contiguous values and nothing is transposed.  The input and
    weight gradients are one batched product per member each over the whole sequence.
    """

    @staticmethod
    def forward(ctx, x, w_in, b, w_rec, h0, c0, tanh_units):  # type: ignore[override]
        M, B, T, n_in = x.shape
        ctx.set_materialize_grads(False)
        x_rows = x.reshape(M, B * T, n_in)
        # the projection (activated in place: the backward's gates) and, in the backward, its
        # gradient are MBs a call: buffers held between calls (memrnn.ops.scratch).  A bmm, not
        # baddbmm: baddbmm first copies the broadcast bias into its output, a pass of its own over
        # MBs out of cache (0.1-1.2 ms a step at the default job's shape); the C++ cell adds it
        proj = scratch.empty(x, M, B * T, w_in.shape[1])
        torch.bmm(x_rows, w_in.transpose(1, 2), out=proj)  # [M, B·T, 4N]
        w_rec = w_rec.contiguous()
        acts = proj.view(M, B, T, -1)  # activated in place
        h_out, c_out, xs, h_prev = _native_ops().lstm_fused_forward(
            acts, b.contiguous(), w_rec, h0.contiguous(), c0.contiguous(), tanh_units
        )
        ctx.tanh_units = tanh_units
        ctx.save_for_backward(x_rows, w_in, w_rec, acts, c_out, xs, h_prev)
        return h_out, c_out

    @staticmethod
    @first_order
    def backward(ctx, grad_hs, grad_cs):  # type: ignore[override]
        x_rows, w_in, w_rec, acts, c_out, xs, h_prev = ctx.saved_tensors
        M, B, T = h_prev.shape[:3]
        G = acts.shape[3]
        ghs = None if grad_hs is None else grad_hs.contiguous()
        gcs = None if grad_cs is None else grad_cs.contiguous()
        ga, g_h0, g_c0 = _native_ops().lstm_fused_backward(
            acts, c_out, xs, w_rec, ghs, gcs, ctx.tanh_units, scratch.empty(acts, *acts.shape), None, None
        )
        need_x, need_w, need_b = ctx.needs_input_grad[:3]
        ga = ga.view(M, B * T, G)
        # each product written with its long dimension (B·T or 4N) last, the result transposed
        # back as a view: BLAS's kernels for an output [4N, n] or [B·T, n] with n = 14 (the
        # default job's embedding) or 5-8 run 2-6x slower than for the transposed output (MKL,
        # this 2-core machine: benchmarks/results/members-cpu-2core.md); the same sums
        grad_w_rec = torch.bmm(h_prev.view(M, B * T, G // 4).transpose(1, 2), ga).transpose(1, 2)
        grad_w_in = torch.bmm(x_rows.transpose(1, 2), ga).transpose(1, 2) if need_w else None
        grad_b = ga.sum(1) if need_b else None
        grad_x = None
        if need_x:  # [M, n, B·T] -> batch first, contiguous (the embedding's backward reads it in order)
            grad_x = (
                torch.bmm(w_in.transpose(1, 2), ga.transpose(1, 2))
                .transpose(1, 2)
                .contiguous()
                .view(M, B, T, -1)
            )
        return grad_x, grad_w_in, grad_b, grad_w_rec, g_h0, g_c0, None


class FusedLSTMTokens(torch.autograd.Function):
    """:class:`FusedLSTMSequence` with its input projection read from token ids: ``table [M, V,
    4N]`` (each member's ``E w_inᵀ + b`` over its embedding ``E [V, n]``: the projection of every
    token), ``ids [B, T]`` (shared by the members) or ``[M, B, T]`` (``int64``), ``w_rec``, ``h0``,
    ``c0`` as there -> ``hs``, ``cs`` ``[M, B, T+1, N]``.

    An embedding followed by the LSTM's input projection is a linear map of one-hot inputs, so
    the projection of position ``t`` is row ``ids[t]`` of ``table``: the C++ cell reads that row
    where :class:`FusedLSTMSequence` reads the row of a product ``x w_inᵀ`` over all ``B·T``
    positions, and its backward adds each position's gate gradient into its token's row of the
    table's gradient (positions in order) where :class:`FusedLSTMSequence` multiplies it out
    into ``w_in``'s and ``x``'s gradients and the embedding's backward gathers ``x``'s back by
    token.  Autograd carries ``table``'s gradient on to ``E``, ``w_in`` and ``b`` (products of
    ``[V, 4N]``, V the vocabulary).  Three products of ``B·T`` rows per member go, two of them in
    the backward.  The same sums in another order: within rounding of the embedding then
    :class:`FusedLSTMSequence` (``tests/ops/test_lstm.py``).
    """

    @staticmethod
    def forward(ctx, table, ids, w_rec, h0, c0, tanh_units):  # type: ignore[override]
        M, G = table.shape[0], table.shape[2]
        B, T = ids.shape[-2:]
        ctx.set_materialize_grads(False)
        ids = ids.contiguous()
        w_rec = w_rec.contiguous()
        acts = scratch.empty(table, M, B, T, G)  # each row its token's, then the gates (activated)
        h_out, c_out, xs, h_prev = _native_ops().lstm_fused_forward_tokens(
            acts, table.contiguous(), ids, w_rec, h0.contiguous(), c0.contiguous(), tanh_units
        )
        ctx.tanh_units, ctx.vocab = tanh_units, table.shape[1]
        ctx.save_for_backward(ids, w_rec, acts, c_out, xs, h_prev)
        return h_out, c_out

    @staticmethod
    @first_order
    def backward(ctx, grad_hs, grad_cs):  # type: ignore[override]
        ids, w_rec, acts, c_out, xs, h_prev = ctx.saved_tensors
        M, B, T, G = acts.shape
        ghs = None if grad_hs is None else grad_hs.contiguous()
        gcs = None if grad_cs is None else grad_cs.contiguous()
        grad_table = acts.new_zeros(M, ctx.vocab, G)
        ga, g_h0, g_c0 = _native_ops().lstm_fused_backward(
            acts,
            c_out,
            xs,
            w_rec,
            ghs,
            gcs,
            ctx.tanh_units,
            scratch.empty(acts, *acts.shape),
            ids,
            grad_table,
        )
        # as FusedLSTMSequence's: the long dimension last, the result transposed back
        grad_w_rec = torch.bmm(h_prev.view(M, B * T, G // 4).transpose(1, 2), ga.view(M, B * T, G)).transpose(
            1, 2
        )
        return grad_table, None, grad_w_rec, g_h0, g_c0, None
