"""A controller RNN driving a differentiable memory, whole sequence at once with hand-written
backpropagation through time: :class:`StackRNNSequence` (the method of :mod:`memrnn.ops.bptt`).

Everything runs transposed, on ``[features, batch]`` columns (as :class:`memrnn.ops.lstm.cpu.LSTMSequence`):

* ``z [T+1, N+m, B]`` holds ``[h_t ; r_t]``, the controller's output and the memory's reading
  after step ``t`` (``t = 0``: the initial state), which is the recurrent input of step ``t+1``:
  one ``addmm`` of ``w_z = [w_rec  w_r]`` gives the step's gates;
* ``heads [T, K, B]``: the memory's actions (softmax or sigmoid) and value after each step;
* the memory's own buffers (a kernel class per memory below).

The forward loop records no graph; the backward loop runs, per step, the memory's backward, the
heads' (one ``addmm`` into ``∂h``), then the controller's (one ``mm``), with the local derivatives
that do not depend on the incoming gradient computed for :data:`memrnn.ops.bptt.BLOCK` steps at a
time.  Each row's final state is gathered at its own length, and its gradient enters the backward
loop at that step, so masks cost nothing.  Every subgradient (``clamp_min`` at 0, ``minimum`` at a
tie) is autograd's, so the gradients equal the reference loop's to rounding.
"""

from __future__ import annotations

import torch
from torch import Tensor

from memrnn.ops.autograd import first_order
from memrnn.ops.bptt import blocks, input_grads_block

_VALUE_ACT = {"sigmoid": torch.sigmoid, "tanh": torch.tanh, "identity": None}


def _value_derivative(name: str, v: Tensor) -> Tensor | None:
    """``act'`` from the activation's output ``v`` (None for the identity)."""
    if name == "sigmoid":
        return v - v * v
    if name == "tanh":
        return 1 - v * v
    return None


# -- memories ---------------------------------------------------------------------------------
class _Superposition:
    """Joulin & Mikolov's (2015) stack, ``S [T+1, D, m, B]`` (top first)."""

    n_actions = 3
    softmax = True

    def __init__(self, mem0: tuple[Tensor, ...], T: int) -> None:
        (stack0,) = mem0
        B, D, m = stack0.shape
        self.D, self.m = D, m
        self.S = stack0.new_empty(T + 1, D, m, B)
        self.S[0] = stack0.permute(1, 2, 0)
        self.S_ = self.S.unbind(0)

    def reading(self, t: int) -> Tensor:
        return self.S_[t][0]

    def forward(self, s: int, a: Tensor, v: Tensor) -> Tensor:
        """Step ``s``: ``a [3, B]`` (push, pop, no-op), ``v [m, B]``; returns ``overflow [B]``."""
        old, new = self.S_[s], self.S_[s + 1]
        push, pop, noop = a.unbind(0)
        torch.mul(old, noop, out=new)
        new[1:].addcmul_(old[:-1], push)
        new[0].addcmul_(v, push)
        new[:-1].addcmul_(old[1:], pop)
        return push * old[-1].abs().amax(0)

    def start_backward(self) -> None:
        self.g = torch.zeros_like(self.S[0])  # ∂L/∂S_{s+1}

    def _local(self, lo: int, hi: int, heads: Tensor) -> None:
        """Nothing to precompute."""

    def backward(self, s: int, g_r: Tensor, a: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Given ``g_r = ∂L/∂r_{s+1}``: ``(∂L/∂a [3, B], ∂L/∂v [m, B])``; ``self.g`` becomes ∂L/∂S_s."""
        g, S = self.g, self.S_[s]
        g[0] += g_r
        push, pop, noop = a.unbind(0)
        ga = a.new_empty(3, a.shape[1])
        gf, Sf = g.view(-1, g.shape[-1]), S.view(-1, S.shape[-1])
        k = self.m
        torch.sum(gf[k:] * Sf[:-k], 0, out=ga[0])
        ga[0] += (g[0] * v).sum(0)
        torch.sum(gf[:-k] * Sf[k:], 0, out=ga[1])
        torch.sum(gf * Sf, 0, out=ga[2])
        gv = g[0] * push
        new = g * noop
        new[:-1].addcmul_(g[1:], push)
        new[1:].addcmul_(g[:-1], pop)
        self.g = new
        return ga, gv

    def finals(self, lengths: Tensor | None) -> tuple[Tensor, ...]:
        return (_final(self.S.permute(3, 0, 1, 2), lengths),)

    def add_final_grads(self, t: int, grads: tuple[Tensor | None, ...], rows: Tensor) -> None:
        """Add ``∂L/∂`` (final state) of the rows whose state ``t`` is final (``rows [B]``, 0/1)."""
        if grads[0] is not None:
            self.g += grads[0].permute(1, 2, 0) * rows

    def initial_grads(self, g_r: Tensor) -> tuple[Tensor, ...]:
        self.g[0] += g_r
        return (self.g.permute(2, 0, 1),)


class _Tape(_Superposition):
    """Delétang et al.'s (2023) circular tape, ``S [T+1, D, m, B]`` (head first): write into the
    head's cell, then move by (stay, left, right)."""

    def forward(self, s: int, a: Tensor, v: Tensor) -> Tensor:
        old, new = self.S_[s], self.S_[s + 1]
        W = old.clone()
        W[0] = v
        stay, left, right = a.unbind(0)
        torch.mul(W, stay, out=new)
        new[:-1].addcmul_(W[1:], left)
        new[-1].addcmul_(W[0], left)
        new[1:].addcmul_(W[:-1], right)
        new[0].addcmul_(W[-1], right)
        return a.new_zeros(a.shape[1])

    def backward(self, s: int, g_r: Tensor, a: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        g = self.g
        g[0] += g_r
        W = self.S_[s].clone()
        W[0] = v
        stay, left, right = a.unbind(0)
        # gW[j] = stay g[j] + left g[j−1] + right g[j+1]  (indices mod D)
        gl = torch.roll(g, 1, 0)  # gl[j] = g[j−1]
        gr = torch.roll(g, -1, 0)  # gr[j] = g[j+1]
        ga = a.new_empty(3, a.shape[1])
        torch.sum((g * W).flatten(0, 1), 0, out=ga[0])
        torch.sum((gl * W).flatten(0, 1), 0, out=ga[1])  # Σ_i g[i] W[i+1]
        torch.sum((gr * W).flatten(0, 1), 0, out=ga[2])  # Σ_i g[i] W[i−1]
        gW = g * stay
        gW.addcmul_(gl, left).addcmul_(gr, right)
        gv = gW[0].clone()
        gW[0] = 0
        self.g = gW
        return ga, gv


def _excl(s: Tensor, order: str) -> Tensor:
    """For each element (dim −2 of ``s [..., D, B]``), the strength covering it: the elements
    newer (stack: lower index) or older (queue: higher index)."""
    c = torch.cumsum(s, -2)
    return c - s if order == "stack" else s.sum(-2, keepdim=True) - c


def _excl_t(g: Tensor, order: str) -> Tensor:
    """The transpose of :func:`_excl` applied to ``g``."""
    c = torch.cumsum(g, -2)
    return g.sum(-2, keepdim=True) - c if order == "stack" else c - g


class _Stratification:
    """Grefenstette et al.'s (2015) stratification stack (``order="stack"``) or neural queue.

    The values only slide: ``V_t = P[T−t : T−t+D]`` in one buffer ``P [T+D, m, B]`` holding the
    pushed values newest first (``P[T−1−s] = v_s``) and then the initial values.  Strengths
    ``s [T+1, D, B]``; the reading is stored by the caller in ``z``."""

    n_actions = 2
    softmax = False

    def __init__(self, mem0: tuple[Tensor, ...], T: int, order: str) -> None:
        values0, strengths0, reading0 = mem0
        B, D, m = values0.shape
        self.T, self.D, self.m, self.order = T, D, m, order
        self.P = values0.new_empty(T + D, m, B)
        self.P[T:] = values0.permute(1, 2, 0)
        self.s = values0.new_empty(T + 1, D, B)
        self.s[0] = strengths0.t()
        self.reading0 = reading0.t()
        self.r = values0.new_empty(T + 1, m, B)
        self.r[0] = self.reading0
        self.s_ = self.s.unbind(0)

    def window(self, t: int) -> Tensor:
        return self.P[self.T - t : self.T - t + self.D]

    def reading(self, t: int) -> Tensor:
        return self.r[t]

    def forward(self, s: int, a: Tensor, v: Tensor) -> Tensor:
        push, pop = a.unbind(0)
        old, new = self.s_[s], self.s_[s + 1]
        popped = torch.clamp_min(old - torch.clamp_min(pop - _excl(old, self.order), 0), 0)
        new[0] = push
        new[1:] = popped[:-1]
        self.P[self.T - 1 - s] = v
        w = torch.minimum(new, torch.clamp_min(1 - _excl(new, self.order), 0))
        torch.sum(w[:, None] * self.window(s + 1), 0, out=self.r[s + 1])
        return popped[-1]

    def start_backward(self) -> None:
        self.gP = torch.zeros_like(self.P)
        self.g = torch.zeros_like(self.s[0])
        self._block = None

    def _local(self, lo: int, hi: int, heads: Tensor) -> None:
        """The local derivatives of steps ``lo..hi−1`` (they do not depend on the gradient)."""
        old, new = self.s[lo:hi], self.s[lo + 1 : hi + 1]
        pop = heads[lo:hi, 1][:, None]
        a1 = pop - _excl(old, self.order)
        a2 = old - torch.clamp_min(a1, 0)
        r3 = torch.clamp_min(1 - _excl(new, self.order), 0)
        m3 = (1 - _excl(new, self.order)) >= 0
        da = torch.where(new < r3, 1.0, torch.where(new == r3, 0.5, 0.0)).to(new.dtype)
        self._block = (
            lo,
            (a1 >= 0).to(new.dtype).unbind(0),
            (a2 >= 0).to(new.dtype).unbind(0),
            da.unbind(0),
            ((1 - da) * m3).unbind(0),
            torch.minimum(new, r3).unbind(0),
        )

    def backward(self, s: int, g_r: Tensor, a: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        lo, m1, m2, da, db3, w = self._block
        j = s - lo
        win, gwin = self.window(s + 1), self.gP[self.T - 1 - s : self.T - 1 - s + self.D]
        g_w = (win * g_r).sum(1)  # ∂L/∂w [D, B]
        gwin.addcmul_(w[j][:, None], g_r)
        g_new = torch.addcmul(self.g, g_w, da[j])
        g_new -= _excl_t(g_w * db3[j], self.order)
        ga = a.new_empty(2, a.shape[1])
        ga[0] = g_new[0]
        g_a2 = a.new_zeros(g_new.shape)
        torch.mul(g_new[1:], m2[j][:-1], out=g_a2[:-1])
        g_a1 = g_a2 * m1[j]  # ∂L/∂(pop − covered) = −∂L/∂a2 · [a1 ≥ 0]; sign folded below
        torch.sum(g_a1, 0, out=ga[1])
        ga[1].neg_()
        self.g = g_a2 + _excl_t(g_a1, self.order)
        return ga, self.gP[self.T - 1 - s].clone()

    def finals(self, lengths: Tensor | None) -> tuple[Tensor, ...]:
        T, D = self.T, self.D
        if lengths is None:
            values = self.window(T).permute(2, 0, 1)
        else:
            idx = (T - lengths)[:, None] + torch.arange(D, device=lengths.device)  # [B, D]
            P = self.P.permute(2, 0, 1)  # [B, T+D, m]
            values = P.gather(1, idx[..., None].expand(-1, -1, self.m))
        return values, _final(self.s.permute(2, 0, 1), lengths), _final(self.r.permute(2, 0, 1), lengths)

    def add_final_grads(self, t: int, grads: tuple[Tensor | None, ...], rows: Tensor) -> Tensor | None:
        gV, gs, gr = grads
        if gV is not None:
            self.gP[self.T - t : self.T - t + self.D] += gV.permute(1, 2, 0) * rows
        if gs is not None:
            self.g += gs.t() * rows
        return None if gr is None else gr.t() * rows

    def initial_grads(self, g_r: Tensor) -> tuple[Tensor, ...]:
        return self.gP[self.T :].permute(2, 0, 1), self.g.t(), g_r.t()


def _final(states: Tensor, lengths: Tensor | None) -> Tensor:
    if lengths is None:
        return states[:, -1]
    idx = lengths.view(-1, *([1] * (states.dim() - 1))).expand(-1, 1, *states.shape[2:])
    return states.gather(1, idx)[:, 0]


def _memory(kind: str, mem0: tuple[Tensor, ...], T: int):
    if kind == "superposition":
        return _Superposition(mem0, T)
    if kind == "tape":
        return _Tape(mem0, T)
    return _Stratification(mem0, T, "stack" if kind == "stratification" else "queue")


class StackRNNSequence(torch.autograd.Function):
    """A one-layer LSTM (gate blocks **o, i, f, g**) or Elman controller reading ``[x_t ; r_{t−1}]``
    and driving a memory through a linear head (module docstring).

    ``x [B, T, n]``, ``w_in [G, n + m]`` (the controller's input weights over ``[x ; r]``),
    ``b [G]``, ``w_rec [G, N]``, ``w_head [K, N]``, ``b_head [K]``, ``h0 [B, N]``, ``c0 [B, N]``
    (None for Elman), ``lengths [B]`` (None: all ``T``), ``spec = (controller, activation,
    memory, value_activation, want_overflow)``, then the memory's initial state fields ->
    ``h [B, T, N]`` (steps 1..T), ``r [B, T, m]``, final ``h``, ``c`` (None for Elman), the
    memory's final fields, ``overflow [B, T]`` (not differentiable; zeros unless asked).
    """

    @staticmethod
    def forward(ctx, x, w_in, b, w_rec, w_head, b_head, h0, c0, lengths, spec, *mem0):  # type: ignore[override]
        controller, activation, kind, value_act, want_overflow = spec
        ctx.set_materialize_grads(False)
        B, T, nx = x.shape
        N = w_rec.shape[1]
        mem = _memory(kind, mem0, T)
        m, k = mem.m, mem.n_actions
        w_z = torch.cat([w_rec, w_in[:, nx:]], 1)  # [G, N + m]
        acts = torch.bmm(w_in[:, :nx].expand(T, -1, nx), x.permute(1, 2, 0)).add_(b[:, None])  # [T, G, B]
        z = x.new_empty(T + 1, N + m, B)
        z[0, :N] = h0.t()
        z[0, N:] = mem.reading(0)
        heads = x.new_empty(T, k + m, B)
        overflow = x.new_zeros(T, B)
        lstm = controller == "lstm"
        a_, z_, h_, hd_ = acts.unbind(0), z.unbind(0), z[:, :N].unbind(0), heads.unbind(0)
        if lstm:
            cs = x.new_empty(T + 1, N, B)
            cs[0] = c0.t()
            xs = x.new_empty(T, N, B)
            sig_, g_ = acts[:, : 3 * N].unbind(0), acts[:, 3 * N :].unbind(0)
            o_, i_, f_ = (acts[:, j * N : (j + 1) * N].unbind(0) for j in range(3))
            c_, x_ = cs.unbind(0), xs.unbind(0)
        else:
            cs = xs = None
            act = {"tanh": torch.tanh, "sigmoid": torch.sigmoid, "relu": torch.relu}[activation]
        vfn = _VALUE_ACT[value_act]
        for s in range(T):
            a_[s].addmm_(w_z, z_[s])
            if lstm:
                sig_[s].sigmoid_()
                g_[s].tanh_()
                torch.mul(f_[s], c_[s], out=c_[s + 1])
                c_[s + 1].addcmul_(i_[s], g_[s])
                torch.tanh(c_[s + 1], out=x_[s])
                torch.mul(o_[s], x_[s], out=h_[s + 1])
            else:
                h_[s + 1].copy_(act(a_[s]))
            hd = hd_[s]
            torch.addmm(b_head[:, None], w_head, h_[s + 1], out=hd)
            if mem.softmax:
                hd[:k] = torch.softmax(hd[:k], 0)
            else:
                hd[:k].sigmoid_()
            if vfn is not None:
                hd[k:] = vfn(hd[k:])
            lost = mem.forward(s, hd[:k], hd[k:])
            z_[s + 1][N:] = mem.reading(s + 1)
            if want_overflow:
                overflow[s] = lost
        ctx.spec, ctx.mem, ctx.N, ctx.lengths = spec, mem, N, lengths
        ctx.save_for_backward(x, w_in, w_z, w_head, acts, z, heads, cs, xs)
        ctx.mark_non_differentiable(overflow)
        finals_h = _final(z[:, :N].permute(2, 0, 1), lengths)
        finals_c = _final(cs.permute(2, 0, 1), lengths) if lstm else None
        return (
            z[1:, :N].permute(2, 0, 1),
            z[1:, N:].permute(2, 0, 1),
            finals_h,
            finals_c,
            *mem.finals(lengths),
            overflow.t(),
        )

    @staticmethod
    @first_order
    def backward(ctx, gy_h, gy_r, g_hT, g_cT, *rest):  # type: ignore[override]
        x, w_in, w_z, w_head, acts, z, heads, cs, xs = ctx.saved_tensors
        controller, activation, _, value_act, _ = ctx.spec
        mem, N, lengths = ctx.mem, ctx.N, ctx.lengths
        g_mem = rest[:-1]
        B, T, nx = x.shape
        G, K, m, k = w_z.shape[0], w_head.shape[0], mem.m, mem.n_actions
        lstm = controller == "lstm"
        tm = lambda g: None if g is None else g.permute(1, 2, 0).contiguous().unbind(0)  # noqa: E731
        gyh, gyr = tm(gy_h), tm(gy_r)
        ends = _ends(lengths, T, x)
        g_h = x.new_zeros(N, B)
        g_c = x.new_zeros(N, B)
        g_r = x.new_zeros(m, B)
        mem.start_backward()
        ga = acts.new_empty(T, G, B)
        ghd = heads.new_empty(T, K, B)
        ga_, ghd_, hd_ = ga.unbind(0), ghd.unbind(0), heads.unbind(0)
        w_z_t, w_head_t = w_z.t(), w_head.t()
        need_x, need_w, need_b = ctx.needs_input_grad[:3]
        grad_w_z = w_z.new_zeros(w_z.shape)
        grad_w_x = w_in.new_zeros(G, nx) if need_w else None
        grad_b = w_in.new_zeros(G) if need_b else None
        grad_xt = x.new_empty(T, nx, B) if need_x else None
        grad_w_head = w_head.new_zeros(w_head.shape)
        grad_b_head = w_head.new_zeros(K)

        def add_final(t, g_h, g_c, g_r):
            rows = ends.get(t)
            if rows is None:
                return g_h, g_c, g_r
            if g_hT is not None:
                g_h = g_h + g_hT.t() * rows
            if g_cT is not None:
                g_c = g_c + g_cT.t() * rows
            extra = mem.add_final_grads(t, g_mem, rows)
            return g_h, g_c, (g_r if extra is None else g_r + extra)

        for lo, hi in blocks(T):
            n = hi - lo
            if lstm:
                o, i, f, g = acts[lo:hi].view(n, 4, N, B).unbind(1)
                xb = xs[lo:hi]
                kk = acts.new_empty(n, 4, N, B)
                torch.addcmul(o, o, o, value=-1, out=kk[:, 0]).mul_(xb)
                torch.addcmul(i, i, i, value=-1, out=kk[:, 1]).mul_(g)
                torch.addcmul(f, f, f, value=-1, out=kk[:, 2]).mul_(cs[lo:hi])
                torch.addcmul(i, i * g, g, value=-1, out=kk[:, 3])
                dhdc_ = torch.addcmul(o, o * xb, xb, value=-1).unbind(0)
                kh_, kc_, f_ = kk[:, 0].unbind(0), kk[:, 1:].unbind(0), f.unbind(0)
            else:
                hb = z[lo + 1 : hi + 1, :N]
                if activation == "tanh":
                    dact = 1 - hb * hb
                elif activation == "sigmoid":
                    dact = hb - hb * hb
                else:
                    dact = (hb > 0).to(hb.dtype)
                dact_ = dact.unbind(0)
            mem._local(lo, hi, heads)
            dval = _value_derivative(value_act, heads[lo:hi, k:])
            dval_ = None if dval is None else dval.unbind(0)
            dsig_ = None if mem.softmax else (heads[lo:hi, :k] - heads[lo:hi, :k] ** 2).unbind(0)
            for s in range(hi - 1, lo - 1, -1):
                j = s - lo
                if gyh is not None:
                    g_h = g_h + gyh[s]
                if gyr is not None:
                    g_r = g_r + gyr[s]
                g_h, g_c, g_r = add_final(s + 1, g_h, g_c, g_r)
                hd = hd_[s]
                g_a, g_v = mem.backward(s, g_r, hd[:k], hd[k:])
                gh = ghd_[s]
                if mem.softmax:
                    a = hd[:k]
                    torch.mul(a, g_a - (a * g_a).sum(0), out=gh[:k])
                else:
                    torch.mul(g_a, dsig_[j], out=gh[:k])
                if dval_ is None:
                    gh[k:] = g_v
                else:
                    torch.mul(g_v, dval_[j], out=gh[k:])
                g_h = torch.addmm(g_h, w_head_t, gh)
                if lstm:
                    g_c = torch.addcmul(g_c, g_h, dhdc_[j])
                    torch.mul(kh_[j], g_h, out=ga_[s][:N])
                    torch.mul(kc_[j], g_c[None], out=ga_[s][N:].view(3, N, B))
                    g_c = g_c * f_[j]
                else:
                    torch.mul(g_h, dact_[j], out=ga_[s])
                g_z = torch.mm(w_z_t, ga_[s])
                g_h, g_r = g_z[:N], g_z[N:]
            gb = ga[lo:hi]
            grad_w_z += torch.bmm(gb, z[lo:hi].transpose(1, 2)).sum(0)
            input_grads_block(gb, x, w_in[:, :nx], lo, hi, grad_w_x, grad_b, grad_xt)
            grad_w_head += torch.bmm(ghd[lo:hi], z[lo + 1 : hi + 1, :N].transpose(1, 2)).sum(0)
            grad_b_head += ghd[lo:hi].sum((0, 2))
        g_h, g_c, g_r = add_final(0, g_h, g_c, g_r)
        grad_w_in = None
        if need_w:
            grad_w_in = torch.cat([grad_w_x, grad_w_z[:, N:]], 1)
        grad_x = None if grad_xt is None else grad_xt.permute(2, 0, 1)
        g_mem0 = mem.initial_grads(g_r)
        return (
            grad_x,
            grad_w_in,
            grad_b,
            grad_w_z[:, :N],
            grad_w_head,
            grad_b_head,
            g_h.t(),
            g_c.t() if lstm else None,
            None,
            None,
            *g_mem0,
        )


def _ends(lengths: Tensor | None, T: int, like: Tensor) -> dict[int, Tensor]:
    """``{t: rows [B] (1.0 where the row's length is t)}`` for every length present."""
    if lengths is None:
        return {T: like.new_ones(like.shape[0])}
    out = {}
    for t in sorted(set(lengths.tolist())):
        out[int(t)] = (lengths == t).to(like.dtype)
    return out
