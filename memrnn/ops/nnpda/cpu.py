"""The nnPDA recurrence over one-hot inputs as one autograd Function with hand-written
backpropagation through time on token buckets (:mod:`memrnn.ops.buckets`): the CPU fast path of
:func:`memrnn.ops.nnpda.nnpda_sequence` (Stogin, Mali & Giles 2020, Definition 3.6)."""

from __future__ import annotations

import torch
from torch import Tensor

from memrnn.ops.autograd import first_order
from memrnn.ops.buckets import TokenBuckets


class NNPDASequence(torch.autograd.Function):
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
    (``tests/ops/test_nnpda.py``).

    Members (M runs as one model): ``weight [M, n + 2 + m2, n, m1, m2 + 1]``, ``sensitivity
    [M]``, ``q0 [M, B, n]``, ``stack0 [M, B, D, m2]``, ``tail0 [M, B, m2]`` and buckets over the
    ``M·B`` rows of every member with member ``μ``'s symbol ``k`` as symbol ``μ·m1 + k``
    (:func:`memrnn.ops.buckets.member_buckets`) -> ``Q [M, B, T+1, n]``, ``K [M, B,
    T+1, D, m2]``, ``tail [M, B, T+1, m2]``, ``p+ [M, B, T]``: the members' rows are one batch
    (every buffer ``[T(+1), M·B, ...]``), their weight slices one bucketed ``bmm`` per step, ``H``
    per row (the action mix one ``baddbmm`` over the members), ``∂W`` per member and symbol,
    ``∂H`` per member; a step launches the kernels of one run whatever M is."""

    @staticmethod
    def forward(ctx, weight, sensitivity, q0, stack0, tail0, buckets, action):  # type: ignore[override]
        O, n, m1, L = weight.shape[-4:]
        D, m2 = stack0.shape[-2:]
        lead = q0.shape[:-1]  # ([M,] B)
        T = buckets.slots.shape[0]
        if len(lead) == 2:  # members: every member's rows as one batch, H per row
            M, B = lead
            B *= M
            q0, stack0, tail0 = q0.reshape(B, n), stack0.reshape(B, D, m2), tail0.reshape(B, m2)
            wk = weight.permute(0, 3, 2, 4, 1).reshape(M * m1, n * L, O)
            h_m = sensitivity.detach()
            H = h_m[:, None, None].expand(M, B // M, 1).reshape(B, 1)  # [M·B, 1]
            mix = weight.new_tensor([[1.0, -1.0, 0.0], [0.0, -1.0, 1.0]]) * h_m[:, None, None]  # [M, 2, 3]
            e1 = torch.stack([torch.zeros_like(h_m), h_m, torch.zeros_like(h_m)], -1)[:, None]  # [M, 1, 3]
            const = -H / 2

            def shifted(z: Tensor) -> Tensor:  # H·z − H/2
                return torch.addcmul(const, z, H)

            def weights_of(a: Tensor, out: Tensor) -> Tensor:  # H·(p+, 1 − p+ − p−, p−)
                return torch.baddbmm(e1, a.view(M, -1, 2), mix, out=out.view(M, -1, 3)).view(B, 3)
        else:
            B = lead[0]
            h_m = H = float(sensitivity)
            wk = weight.permute(2, 1, 3, 0).reshape(m1, n * L, O)  # wk[k, j·L + l, o] = W[o, j, k, l]
            mix = weight.new_tensor([[1.0, -1.0, 0.0], [0.0, -1.0, 1.0]]) * H  # (p+, p−) -> H·mix weights
            e1 = weight.new_tensor([0.0, H, 0.0])
            const = q0.new_full((), -H / 2)

            def shifted(z: Tensor) -> Tensor:  # H·z − H/2
                return torch.add(const, z, alpha=H)

            def weights_of(a: Tensor, out: Tensor) -> Tensor:  # H·(p+, 1 − p+ − p−, p−)
                return torch.addmm(e1, a, mix, out=out)

        Q = q0.new_empty(T + 1, B, n)
        P = stack0.new_empty(T + 1, B, D + 2, m2)  # [C_{t+1}; K^t; tail^t] per step
        R = q0.new_empty(T, B, L)
        Z = q0.new_empty(T, B, O)
        Wh = q0.new_empty(T, B, 3)  # H · (p+, 1 − p+ − p−, p−)
        Q[0], P[0, :, 1 : D + 1], P[0, :, D + 1] = q0, stack0, tail0
        P[T, :, 0] = 0
        qr, mix_buf = q0.new_empty(B, n, L), q0.new_empty(B, D, m2)
        half = H / 2 if isinstance(H, float) else (H / 2)[:, :, None]  # H/2 (per row with members)
        Q_, P_, R_, Z_, W_ = Q.unbind(0), P.unbind(0), R.unbind(0), Z.unbind(0), Wh.unbind(0)
        for s in range(T):
            Ps, Ps1 = P_[s], P_[s + 1]
            top = Ps[:, 1]
            r = torch.cat([top, 1 - top.amax(-1, keepdim=True)], -1, out=R_[s])
            torch.mul(Q_[s][:, :, None], r[:, None, :], out=qr)
            z = buckets.contract(s, qr.view(B, n * L), wk, out=Z_[s])
            torch.sigmoid(shifted(z[:, :n]), out=Q_[s + 1])
            a = z[:, n:]
            if action == "sigmoid":
                a = torch.sigmoid(shifted(a))
            elif action == "clamp":
                a = a.clamp(0.0, 1.0)
            Ps[:, 0] = a[:, 2:]
            wh = weights_of(a[:, :2], W_[s])[:, :, None, None]
            mixed = torch.mul(Ps[:, 1 : D + 1], wh[:, 1], out=mix_buf)
            mixed.addcmul_(Ps[:, :D], wh[:, 0]).addcmul_(Ps[:, 2:], wh[:, 2]).sub_(half)  # H·(mix − 1/2)
            torch.sigmoid(mixed, out=Ps1[:, 1 : D + 1])
            torch.sigmoid(shifted(Ps[:, D + 1]), out=Ps1[:, D + 1])
        ctx.buckets, ctx.action, ctx.H, ctx.h_m, ctx.lead = buckets, action, H, h_m, lead
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(weight, Q, P, R, Z, Wh)
        push = Wh[:, :, 0].t() / H  # p+ of every step [B, T], for strict's overflow check
        outs = (Q.transpose(0, 1), P[:, :, 1 : D + 1].transpose(0, 1), P[:, :, D + 1].transpose(0, 1), push)
        if len(lead) == 2:
            outs = tuple(t.unflatten(0, lead) for t in outs)
        ctx.mark_non_differentiable(outs[3])
        return outs

    @staticmethod
    @first_order
    def backward(ctx, gQ, gK, gtail, _gpush):  # type: ignore[override]
        weight, Q, P, R, Z, Wh = ctx.saved_tensors
        learn_h = ctx.needs_input_grad[1]
        buckets: TokenBuckets = ctx.buckets
        H, h_m, action, lead = ctx.H, ctx.h_m, ctx.action, ctx.lead
        members = len(lead) == 2
        grad_h = Q.new_zeros(lead[:-1]) if learn_h else None  # [M] with members
        sig_back = torch.ops.aten.sigmoid_backward
        O, n, m1, L = weight.shape[-4:]
        T1, B, D2, m2 = P.shape
        T, D = T1 - 1, D2 - 2
        unit_t = weight.new_tensor([[1.0, 0.0], [-1.0, -1.0], [0.0, 1.0]])
        if members:
            M = lead[0]
            wkt = weight.permute(0, 3, 1, 2, 4).reshape(M * m1, O, n * L)  # [M·m1, O, n·L]
            mix_t = unit_t * h_m[:, None, None]  # [M, 3, 2]
            gQ, gK, gtail = (None if g is None else g.flatten(0, 1) for g in (gQ, gK, gtail))

            def total(t: Tensor) -> Tensor:  # each member's sum
                return t.reshape(M, -1).sum(1)

            def action_grads(gw: Tensor, out: Tensor) -> None:
                out.copy_(torch.bmm(gw.view(M, -1, 3), mix_t).view(B, 2))
        else:
            wkt = weight.permute(2, 0, 1, 3).reshape(m1, O, n * L)  # [m1, O, n·L]
            mix_t = unit_t * H

            def total(t: Tensor) -> Tensor:
                return t.sum()

            def action_grads(gw: Tensor, out: Tensor) -> None:
                torch.mm(gw, mix_t, out=out)

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
            action_grads(gw, gz[:, n : n + 2])
            torch.mul(gm[:, 0], w0[:, 0], out=gz[:, n + 2 :])
            g_q_pre = sig_back(gq, Q_[s + 1])  # ∂/∂(H·z_Q − H/2)
            if learn_h:
                # every h_H(u − 1/2) = σ(H u − H/2) contributes Σ ∂pre · (u − 1/2); for the stack
                # cells u − 1/2 = (Σ_i wh_i window_i)/H − 1/2, and Σ gm·window_i is gw
                grad_h += total(gw * wh) / h_m - total(gm) / 2
                grad_h += total(g_tail_pre * (P_[s][:, D + 1] - 0.5))
                grad_h += total(g_q_pre * (Z_[s][:, :n] - 0.5))
            if action == "sigmoid":
                za = Z_[s][:, n:]
                g_a_pre = sig_back(gz[:, n:], torch.sigmoid(za * H - H / 2))
                if learn_h:
                    grad_h += total(g_a_pre * (za - 0.5))
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
        dwk = buckets.weight_grad(QR, GZ.transpose(0, 1))  # [(M·)m1, n·L, O]
        if members:
            grad_w = dwk.view(M, m1, n, L, O).permute(0, 4, 2, 1, 3)
            return (
                grad_w,
                grad_h,
                gq.unflatten(0, lead),
                gs.unflatten(0, lead),
                gt.unflatten(0, lead),
                None,
                None,
            )
        grad_w = dwk.view(m1, n, L, O).permute(3, 1, 0, 2)
        return grad_w, grad_h, gq, gs, gt, None, None
