"""Grefenstette et al.'s (2015) neural DeQue: its CPU kernel for
:class:`memrnn.ops.stack_rnn.cpu.StackRNNSequence`."""

from __future__ import annotations

import functools

import torch
from torch import Tensor

from memrnn.ops.buckets import final_by_length
from memrnn.ops.memory import MemoryKernel, slide, views, window_at, windows
from memrnn.ops.stratification import _suffix, covered, covered_transpose


def _cells(x: Tensor, n: int, W: int) -> Tensor:
    """The ``n`` cells at each end of ``x [..., 2W, B]`` (the DeQue's layout, bottom first): rows
    ``0..n−1`` and ``2W−n..2W−1`` as ``[..., 2n, B]`` (``x`` itself when ``n = W``)."""
    return x if n == W else torch.cat([x[..., :n, :], x[..., 2 * W - n :, :]], -2)


class DequeKernel(MemoryKernel):
    """Grefenstette et al.'s (2015) DeQue (``memrnn.ops.deque``): ``2D`` slots bottom first, the
    bottom half newest first and the top half oldest first.  Each half's values only slide, so each
    lives in one buffer as the stratification stack's: the bottom half ``Pb[T−t : T−t+D]`` (pushes
    from the front), the top half ``Pt[t : t+D]`` (pushes at the back).  Strengths ``s [T+1, 2D,
    B]``; the reading ``[r_top ; r_bot]`` lives in ``z`` (``[T+1, 2m, B]``).  Head rows: push and
    pop at the top, push and pop at the bottom, then ``v_top``, ``v_bot``.

    From all-zero initial strengths each step computes only the cells that can hold strength, at
    both ends (the filled trim, :meth:`_live`)."""

    n_actions = 4
    softmax = False
    order = (0, 1, 2, 3)  # push_top, pop_top, push_bot, pop_bot
    reads = 2
    trims = True  # takes finals=, grad0= and trim= (False: the whole window) and trims its window (_live)

    @staticmethod
    def rows(D: int, m: int) -> int:
        return 2 * m

    @staticmethod
    def dims(mem0: tuple[Tensor, ...]) -> tuple[int, int]:
        return mem0[0].shape[1] // 2, mem0[0].shape[2]

    def __init__(
        self,
        mem0: tuple[Tensor, ...],
        T: int,
        zmem: Tensor,
        want_overflow: bool,
        *,
        finals: bool = True,
        grad0: bool = True,
        trim: bool = True,
    ) -> None:
        values0, strengths0, reading0 = mem0
        B, D2, m = values0.shape
        D = D2 // 2
        self.T, self.D, self.m = T, D, m
        v0 = values0.permute(1, 2, 0)
        self.Pb = values0.new_empty(T + D, m, B)
        self.Pb[T:] = v0[:D]
        self.Pt = values0.new_empty(T + D, m, B)
        self.Pt[:D] = v0[D:]
        self.live = None if not trim else self._live(strengths0, values0, finals, grad0)
        self._C, self._G = (None, None) if self.live is None else self.live.tolist()  # the Python loop's
        # a pop that ties at the empty middle in some step (_live): the backward then runs whole
        self._tie: Tensor | None = None
        self.s = values0.new_empty(T + 1, 2 * D, B)
        if self.live is not None:  # the cells no step writes are the empty middle of S_1 … S_D: zeros
            self.s[1 : D + 1].zero_()
        self.s[0] = strengths0.t()
        self.r = zmem
        self.r[0] = reading0.t()
        self.buffers = (self.Pb, self.s, self.Pt)  # the C++ loops' P, S, P2

    def _live(self, strengths0: Tensor, values0: Tensor, finals: bool, grad0: bool) -> Tensor | None:
        """The trimmed window (as the stratification stack's,
        :meth:`memrnn.ops.stratification.cpu.StratificationKernel._live`): int64 ``[2, T+1]``, row 0
        ``C(t)``, the cells **at each end** of the DeQue after ``t`` steps that can hold strength,
        row 1 ``G(t)``, those whose strengths' gradient the backward computes; None: the full window.

        The filled trim, at both ends.  The ``2D`` cells are bottom first: the bottom half
        ``0..D−1`` (newest first) and the top half ``D..2D−1`` (oldest first, the newest at
        ``2D−1``).  From all-zero initial strengths, after ``t`` steps only the ``c = min(t, D)``
        cells at each end can hold strength, ``0..c−1`` and ``2D−c..2D−1``; the middle
        ``c..2D−c−1`` is exactly 0.  By induction: ``S_0`` is all middle; a step pops an empty cell
        to ``max(0 − max(u − covered, 0), 0) = 0`` (either pop), then shifts each half outward by
        one and writes a push at each end, so the live cells of ``S_{t+1}`` are those of ``S_t``
        moved out by one plus the two new ends (``c + 1`` each while ``c < D``), and the two
        middle cells it drops (``D−1``, ``D``) are empty until ``t ≥ D`` (the overflow is 0).
        An empty cell adds exactly 0 to every ``covered`` sum and weighs ``min(0, ·) = 0`` in both
        readings (Grefenstette et al. 2015, section 3.3), so the forward skips the middle.  There
        is no readable trim (as the stratification stack's: a deep cell is read at once when the
        ones above it are weak).

        The backward skips the middle too where its gradient reaches nothing: not always.  Unlike
        the stack's empty tail, the DeQue's middle lies above the bottom half for the top reading
        and below the top half for the bottom one, so ``covered``'s transposes carry gradient into
        it from both ends; that gradient stays in the middle (the shift moves middle to middle),
        and leaves it only (a) into the initial state's gradient (``grad0``: then the backward
        runs whole), (b) through the readings' weights where an empty cell holds a nonzero value
        (the initial values: with any nonzero, whole), and (c) into a pop's gradient where that
        pop ties exactly at the middle: ``u_top = Σ`` of the top half's live strengths or
        ``u_bot = Σ`` of the bottom half's after the top pop (e.g. a saturated pop of exactly 0
        over an empty half), where autograd's subgradient at ``max(·, 0)`` lets the middle's
        gradient into the pop's and its ``covered`` transpose.  (c) depends on the data, so the
        forward looks for it at each trimmed step (:meth:`_middle_tie`, the C++ step the same) and
        the backward runs whole when it found one (:meth:`start_backward`).  The final state's
        gradient may be wanted (``finals``): what it adds to the middle stays there but for (a)
        and (c).  Every value computed is the full window's, bit for bit."""
        if strengths0.numel() == 0 or bool(strengths0.any()):
            return None
        T, D = self.T, self.D
        C = torch.arange(T + 1).clamp(max=D)
        G = C.clone() if not grad0 and not bool(values0.any()) else torch.full_like(C, D)
        if bool((C == D).all()) and bool((G == D).all()):
            return None
        return torch.stack([C, G])

    def _tracks_ties(self) -> bool:
        """Whether the backward is to trim (:meth:`_live`), so that the forward looks for ties."""
        return self._G is not None and self._G[0] < self.D

    @staticmethod
    def _middle_tie(u_top: Tensor, u_bot: Tensor, top: Tensor, bot: Tensor) -> Tensor:
        """Whether a pop ties at the empty middle (``[B]`` bool), from ``top`` and ``bot`` ``[B]``:
        the running sums the full window's ``covered`` has there (the top half's strengths, then
        the bottom half's after the top pop): the full window's masks ``c1 ≥ 0 ∧ c2 ≥ 0`` (or
        ``b1``, ``b2``) of :meth:`local` at an empty cell (:meth:`_live`, (c))."""
        c1 = u_top - top
        c2 = 0 - torch.clamp_min(c1, 0)
        b1 = u_bot - bot
        b2 = torch.clamp_min(c2, 0) - torch.clamp_min(b1, 0)
        return ((c1 >= 0) & (c2 >= 0)) | ((b1 >= 0) & (b2 >= 0))

    # per-step views, made when the Python loop first needs them (the C++ loop does not)
    s_ = views(lambda k: k.s)
    r_ = views(lambda k: k.r)
    bot_ = functools.cached_property(lambda k: windows(k.Pb, k.T, k.D))
    top_ = functools.cached_property(lambda k: slide(k.Pt, k.T, k.D))
    vb_ = functools.cached_property(lambda k: k.Pb[: k.T].unbind(0)[::-1])  # v_bot of step s at Pb[T−1−s]
    vt_ = functools.cached_property(lambda k: k.Pt[k.D :].unbind(0))  # v_top of step s at Pt[D+s]

    def _pops(self, old: Tensor, u_top: Tensor, u_bot: Tensor) -> tuple[Tensor, ...]:
        """The two pops of ``old [2D, B]``: their pre-activations and results."""
        c1 = u_top - covered(old, "queue", -2)  # what the top pop still has to take at i
        c2 = old - torch.clamp_min(c1, 0)
        p1 = torch.clamp_min(c2, 0)
        b1 = u_bot - covered(p1, "stack", -2)
        b2 = p1 - torch.clamp_min(b1, 0)
        return c1, c2, p1, b1, b2, torch.clamp_min(b2, 0)

    def _weights(self, new: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        a_top = 1 - covered(new, "queue", -2)
        a_bot = 1 - covered(new, "stack", -2)
        return a_top, a_bot, torch.clamp_min(a_top, 0), torch.clamp_min(a_bot, 0)

    def forward(self, s: int, a: tuple[Tensor, ...], v: Tensor) -> Tensor | None:
        push_top, pop_top, push_bot, pop_bot = a
        D, m = self.D, self.m
        old, new = self.s_[s], self.s_[s + 1]
        if self._C is not None and self._C[s] < D:
            return self._forward_trimmed(s, a, v)
        p2 = self._pops(old, pop_top, pop_bot)[-1]
        # whole-view writes only (torch.compile's autograd refuses writes into views of views)
        torch.cat([push_bot[None], p2[: D - 1], p2[D + 1 :], push_top[None]], 0, out=new)
        self.vt_[s].copy_(v[:m])
        self.vb_[s].copy_(v[m:])
        _, _, r_top, r_bot = self._weights(new)
        w_top, w_bot = torch.minimum(new, r_top), torch.minimum(new, r_bot)
        bot, top = self.bot_[s + 1], self.top_[s + 1]
        read_top = (w_top[:D, None] * bot).sum(0) + (w_top[D:, None] * top).sum(0)
        read_bot = (w_bot[:D, None] * bot).sum(0) + (w_bot[D:, None] * top).sum(0)
        torch.cat([read_top, read_bot], 0, out=self.r_[s + 1])
        return p2[D - 1] + p2[D]

    def _forward_trimmed(self, s: int, a: tuple[Tensor, ...], v: Tensor) -> Tensor:
        """:meth:`forward` on the ``n = C(s) < D`` live cells at each end of ``S_s`` (and the
        ``n + 1`` of ``S_{s+1}``): the same operations on fewer cells (:meth:`_live`)."""
        push_top, pop_top, push_bot, pop_bot = a
        D, m, n = self.D, self.m, self._C[s]
        old, new = _cells(self.s_[s], n, D), self.s_[s + 1]
        # the two pops (_pops), their running sums kept for the middle's (covered there: the top
        # half's total, then the bottom half's after the top pop)
        suf = _suffix(old, -2)
        p1 = torch.clamp_min(old - torch.clamp_min(pop_top - (suf - old), 0), 0)
        pre = torch.cumsum(p1, -2)
        p2 = torch.clamp_min(p1 - torch.clamp_min(pop_bot - (pre - p1), 0), 0)
        if self._tracks_ties():
            zero = torch.zeros_like(pop_top)
            tie = self._middle_tie(pop_top, pop_bot, suf[n] if n else zero, pre[n - 1] if n else zero).any()
            self._tie = tie if self._tie is None else self._tie | tie
        # the pushes at both ends; nothing leaves the window (its middle cells D−1, D are empty)
        new[0] = push_bot
        new[1 : n + 1] = p2[:n]
        new[2 * D - 1 - n : 2 * D - 1] = p2[n:]
        new[2 * D - 1] = push_top
        self.vt_[s].copy_(v[:m])
        self.vb_[s].copy_(v[m:])
        n1 = n + 1
        live = _cells(new, n1, D)
        _, _, r_top, r_bot = self._weights(live)
        w_top, w_bot = torch.minimum(live, r_top), torch.minimum(live, r_bot)
        bot, top = self.bot_[s + 1][:n1], self.top_[s + 1][D - n1 :]
        # each half's sum runs over its D rows, the empty ones 0, as the full window's: torch's sum
        # over the cells groups its terms by their position (it differs without the zeros)
        bbuf, tbuf = self._products()
        read = []
        for w in (w_top, w_bot):
            torch.mul(w[:n1, None], bot, out=bbuf[:n1])
            torch.mul(w[n1:, None], top, out=tbuf[D - n1 :])
            read.append(bbuf.sum(0) + tbuf.sum(0))
        torch.cat(read, 0, out=self.r_[s + 1])
        return torch.zeros_like(push_top)  # the dropped cells D−1, D are empty

    def _products(self) -> tuple[Tensor, Tensor]:
        """Two ``[D, m, B]`` zero buffers kept across the trimmed steps, for the readings' products
        on the bottom half and the top half: each step writes its live rows (``0..n−1``,
        ``D−n..D−1``), ``n`` growing, so the others stay 0."""
        if getattr(self, "_pbuf", None) is None:
            self._pbuf = self.Pt.new_zeros(2, self.D, self.m, self.Pt.shape[-1]).unbind(0)
        return self._pbuf

    def start_backward(self) -> None:
        # fresh gradient buffers for every backward pass, with their views (as the stratification
        # kernel's: re-entrant)
        self.gPb, self.gPt = torch.zeros_like(self.Pb), torch.zeros_like(self.Pt)
        self.g = torch.zeros_like(self.s[0])
        # a pop tied at the middle in the forward (this loop's, or the C++ loop's mark in G(0)): its
        # gradient can reach the live cells there, so the backward runs whole (_live, (c))
        if self._tracks_ties() and ((self._tie is not None and bool(self._tie)) or int(self.live[1, 0]) < 0):
            self.live[1].fill_(self.D)
            self._G = self.live[1].tolist()
        T, D = self.T, self.D
        self.gbot_, self.gtop_ = windows(self.gPb, T, D), slide(self.gPt, T, D)
        self.gvb_, self.gvt_ = self.gPb[:T].unbind(0)[::-1], self.gPt[D:].unbind(0)

    def native_grads(self) -> list[Tensor]:
        return [self.gPb, self.gPt, self.g]

    def local(self, lo: int, hi: int, heads: Tensor) -> None:
        """The local derivatives of steps ``lo..hi−1`` (they do not depend on the gradient), made
        for the whole block at once: the readings' weights and their ``min``/``max`` masks, and the
        two pops' masks."""
        D = self.D
        # with the trim (_live), the cells at each end that the block's steps compute: the old
        # states' G(hi − 1), the new ones' G(hi) (a step with fewer reads its own from these)
        wo, wn = (D, D) if self._G is None else (self._G[hi - 1], self._G[hi])
        old, new = _cells(self.s[lo:hi], wo, D), _cells(self.s[lo + 1 : hi + 1], wn, D)
        c1, c2, _, b1, b2, _ = self._pops(old, heads[lo:hi, 1][:, None], heads[lo:hi, 3][:, None])
        a_top, a_bot, r_top, r_bot = self._weights(new)
        da_t, db_t = self._min_grads(new, r_top, a_top)
        da_b, db_b = self._min_grads(new, r_bot, a_bot)
        dt = new.dtype
        self._block = (
            lo,
            wo,
            wn,
            torch.minimum(new, r_top).unbind(0),
            torch.minimum(new, r_bot).unbind(0),
            da_t.unbind(0),
            db_t.unbind(0),
            da_b.unbind(0),
            db_b.unbind(0),
            (b2 >= 0).to(dt).unbind(0),
            (b1 >= 0).to(dt).unbind(0),
            (c2 >= 0).to(dt).unbind(0),
            (c1 >= 0).to(dt).unbind(0),
        )

    @staticmethod
    def _min_grads(new: Tensor, r: Tensor, a: Tensor) -> tuple[Tensor, Tensor]:
        """``∂ min(new, r) / ∂new`` (½ at a tie, as autograd) and ``/ ∂a`` through ``r = max(a, 0)``."""
        da = torch.where(new < r, 1.0, torch.where(new == r, 0.5, 0.0)).to(new.dtype)
        return da, (1 - da) * (a >= 0).to(new.dtype)

    def backward(self, s: int, g_r: Tensor, a: tuple[Tensor, ...], v: Tensor, ga: Tensor, gv: Tensor) -> None:
        if self._G is not None and self._G[s] < self.D:
            return self._backward_trimmed(s, g_r, ga, gv)
        lo, _, _, w_top_, w_bot_, da_t_, db_t_, da_b_, db_b_, m_b2, m_b1, m_c2, m_c1 = self._block
        j = s - lo
        D, m = self.D, self.m
        g_top, g_bot = g_r[:m], g_r[m:]
        bot, top = self.bot_[s + 1], self.top_[s + 1]
        w_top, w_bot = w_top_[j], w_bot_[j]
        # the readings: into the values (the buffers' windows) and the weights
        self.gbot_[s + 1].addcmul_(w_top[:D, None], g_top).addcmul_(w_bot[:D, None], g_bot)
        self.gtop_[s + 1].addcmul_(w_top[D:, None], g_top).addcmul_(w_bot[D:, None], g_bot)
        gw_top = torch.cat([(bot * g_top).sum(1), (top * g_top).sum(1)])
        gw_bot = torch.cat([(bot * g_bot).sum(1), (top * g_bot).sum(1)])
        g_new = self.g + gw_top * da_t_[j] + gw_bot * da_b_[j]
        g_new -= covered_transpose(gw_top * db_t_[j], "queue", -2) + covered_transpose(
            gw_bot * db_b_[j], "stack", -2
        )
        # the pushes, then the shift that dropped slots D−1 and D
        ga[0], ga[2] = g_new[2 * D - 1], g_new[0]
        g_p2 = torch.zeros_like(g_new)
        g_p2[: D - 1] = g_new[1:D]
        g_p2[D + 1 :] = g_new[D : 2 * D - 1]
        # the bottom pop, then the top pop (undone in reverse)
        g_b2 = g_p2 * m_b2[j]
        g_b1 = -g_b2 * m_b1[j]
        ga[3] = g_b1.sum(0)
        g_p1 = g_b2 - covered_transpose(g_b1, "stack", -2)
        g_c2 = g_p1 * m_c2[j]
        g_c1 = -g_c2 * m_c1[j]
        ga[1] = g_c1.sum(0)
        self.g = g_c2 - covered_transpose(g_c1, "queue", -2)
        gv[:m] = self.gvt_[s]
        gv[m:] = self.gvb_[s]

    def _backward_trimmed(self, s: int, g_r: Tensor, ga: Tensor, gv: Tensor) -> None:
        """:meth:`backward` on the ``n = G(s) < D`` cells at each end of ``S_s`` and the ``n1 =
        G(s+1)`` of ``S_{s+1}`` (:meth:`_live`): the same operations on fewer cells."""
        lo, wo, wn, *block = self._block
        D, m, n, n1 = self.D, self.m, self._G[s], self._G[s + 1]
        w_top, w_bot, da_t, db_t, da_b, db_b = (_cells(x[s - lo], n1, wn) for x in block[:6])
        m_b2, m_b1, m_c2, m_c1 = (_cells(x[s - lo], n, wo) for x in block[6:])
        g_top, g_bot = g_r[:m], g_r[m:]
        bot, top = self.bot_[s + 1][:n1], self.top_[s + 1][D - n1 :]
        # the readings: into the values (the live rows of the buffers' windows) and the weights
        self.gbot_[s + 1][:n1].addcmul_(w_top[:n1, None], g_top).addcmul_(w_bot[:n1, None], g_bot)
        self.gtop_[s + 1][D - n1 :].addcmul_(w_top[n1:, None], g_top).addcmul_(w_bot[n1:, None], g_bot)
        gw_top = torch.cat([(bot * g_top).sum(1), (top * g_top).sum(1)])
        gw_bot = torch.cat([(bot * g_bot).sum(1), (top * g_bot).sum(1)])
        g_new = _cells(self.g, n1, D) + gw_top * da_t + gw_bot * da_b
        g_new -= covered_transpose(gw_top * db_t, "queue", -2) + covered_transpose(gw_bot * db_b, "stack", -2)
        # the pushes, then the shift (no cell left the window: n < D)
        ga[0], ga[2] = g_new[2 * n1 - 1], g_new[0]
        g_p2 = torch.cat([g_new[1 : n + 1], g_new[n1 : n1 + n]])
        # the bottom pop, then the top pop (undone in reverse); each pop's gradient is a sum over
        # all 2D cells, the empty ones 0, as the full window's (the readings' sums in forward)
        g_b2 = g_p2 * m_b2
        g_b1 = -g_b2 * m_b1
        ga[3] = self._all_cells(g_b1, n).sum(0)
        g_p1 = g_b2 - covered_transpose(g_b1, "stack", -2)
        g_c2 = g_p1 * m_c2
        g_c1 = -g_c2 * m_c1
        ga[1] = self._all_cells(g_c1, n).sum(0)
        g_old = g_c2 - covered_transpose(g_c1, "queue", -2)
        self.g[:n] = g_old[:n]
        self.g[2 * D - n :] = g_old[n:]
        gv[:m] = self.gvt_[s]
        gv[m:] = self.gvb_[s]

    def _all_cells(self, x: Tensor, n: int) -> Tensor:
        """``x [2n, B]`` (the ``n`` cells at each end) in the ``2D`` cells, the middle 0."""
        out = x.new_zeros(2 * self.D, x.shape[-1])
        out[:n] = x[:n]
        out[2 * self.D - n :] = x[n:]
        return out

    def finals(self, lengths: Tensor | None) -> tuple[Tensor, ...]:
        T, D = self.T, self.D
        if lengths is None:
            values = torch.cat([self.Pb[:D], self.Pt[T : T + D]], 0).permute(2, 0, 1)
        else:
            values = torch.cat([window_at(self.Pb, T - lengths, D), window_at(self.Pt, lengths, D)], 1)
        return (
            values,
            final_by_length(self.s.permute(2, 0, 1), lengths),
            final_by_length(self.r.permute(2, 0, 1), lengths),
        )

    def add_final_grads(self, t: int, grads: tuple[Tensor | None, ...], rows: Tensor) -> Tensor | None:
        gV, gs, gr = grads
        D = self.D
        if gV is not None:
            gV = gV.permute(1, 2, 0) * rows
            self.gPb[self.T - t : self.T - t + D].add_(gV[:D])
            self.gPt[t : t + D].add_(gV[D:])
        if gs is not None:
            self.g += gs.t() * rows
        return None if gr is None else gr.t() * rows

    def initial_grads(self, g_r: Tensor) -> tuple[Tensor, ...]:
        D, T = self.D, self.T
        gV0 = torch.cat([self.gPb[T:], self.gPt[:D]], 0).permute(2, 0, 1)
        g = self.g
        if self._G is not None and self._G[0] < D:  # not wanted (_live: G(0) = 0, all middle): zeros
            g = torch.zeros_like(g)
        return gV0, g.t(), g_r.t()
