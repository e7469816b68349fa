"""Grefenstette et al.'s (2015) neural DeQue: its CPU kernel for
:class:`memrnn.ops.stack_rnn.cpu.StackRNNSequence`."""

from __future__ import annotations

import functools

import torch
from torch import Tensor

from memrnn.ops.buckets import final_by_length
from memrnn.ops.memory import MemoryKernel, slide, views, window_at, windows
from memrnn.ops.stratification import covered, covered_transpose


class DequeKernel(MemoryKernel):
    """Grefenstette et al.'s (2015) DeQue (``memrnn.ops.deque``): ``2D`` slots bottom first, the
    bottom half newest first and the top half oldest first.  Each half's values only slide, so each
    lives in one buffer as the stratification stack's: the bottom half ``Pb[T−t : T−t+D]`` (pushes
    from the front), the top half ``Pt[t : t+D]`` (pushes at the back).  Strengths ``s [T+1, 2D,
    B]``; the reading ``[r_top ; r_bot]`` lives in ``z`` (``[T+1, 2m, B]``).  Head rows: push and
    pop at the top, push and pop at the bottom, then ``v_top``, ``v_bot``."""

    n_actions = 4
    softmax = False
    order = (0, 1, 2, 3)  # push_top, pop_top, push_bot, pop_bot
    reads = 2

    @staticmethod
    def rows(D: int, m: int) -> int:
        return 2 * m

    @staticmethod
    def dims(mem0: tuple[Tensor, ...]) -> tuple[int, int]:
        return mem0[0].shape[1] // 2, mem0[0].shape[2]

    def __init__(self, mem0: tuple[Tensor, ...], T: int, zmem: Tensor, want_overflow: bool) -> None:
        values0, strengths0, reading0 = mem0
        B, D2, m = values0.shape
        D = D2 // 2
        self.T, self.D, self.m = T, D, m
        v0 = values0.permute(1, 2, 0)
        self.Pb = values0.new_empty(T + D, m, B)
        self.Pb[T:] = v0[:D]
        self.Pt = values0.new_empty(T + D, m, B)
        self.Pt[:D] = v0[D:]
        self.s = values0.new_empty(T + 1, 2 * D, B)
        self.s[0] = strengths0.t()
        self.r = zmem
        self.r[0] = reading0.t()
        self.buffers = (self.Pb, self.s, self.Pt)  # the C++ loops' P, S, P2

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

    def start_backward(self) -> None:
        # fresh gradient buffers for every backward pass, with their views (as the stratification
        # kernel's: re-entrant)
        self.gPb, self.gPt = torch.zeros_like(self.Pb), torch.zeros_like(self.Pt)
        self.g = torch.zeros_like(self.s[0])
        T, D = self.T, self.D
        self.gbot_, self.gtop_ = windows(self.gPb, T, D), slide(self.gPt, T, D)
        self.gvb_, self.gvt_ = self.gPb[:T].unbind(0)[::-1], self.gPt[D:].unbind(0)

    def native_grads(self) -> list[Tensor]:
        return [self.gPb, self.gPt, self.g]

    def local(self, lo: int, hi: int, heads: Tensor) -> None:
        """The local derivatives of steps ``lo..hi−1`` (they do not depend on the gradient), made
        for the whole block at once: the readings' weights and their ``min``/``max`` masks, and the
        two pops' masks."""
        old, new = self.s[lo:hi], self.s[lo + 1 : hi + 1]
        c1, c2, _, b1, b2, _ = self._pops(old, heads[lo:hi, 1][:, None], heads[lo:hi, 3][:, None])
        a_top, a_bot, r_top, r_bot = self._weights(new)
        da_t, db_t = self._min_grads(new, r_top, a_top)
        da_b, db_b = self._min_grads(new, r_bot, a_bot)
        dt = new.dtype
        self._block = (
            lo,
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
        lo, w_top_, w_bot_, da_t_, db_t_, da_b_, db_b_, m_b2, m_b1, m_c2, m_c1 = self._block
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
        return gV0, self.g.t(), g_r.t()
