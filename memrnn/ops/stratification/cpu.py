"""Grefenstette et al.'s (2015) stratification stack and neural queue: their one CPU kernel for
:class:`memrnn.ops.stack_rnn.cpu.StackRNNSequence` (the queue is the stack read and popped from the
other end: ``covered`` summed the other way, :func:`memrnn.ops.stratification.covered`)."""

from __future__ import annotations

import functools

import torch
from torch import Tensor

from memrnn.ops.buckets import final_by_length
from memrnn.ops.memory import MemoryKernel, views, window_at, windows
from memrnn.ops.stratification import covered, covered_transpose


class StratificationKernel(MemoryKernel):
    """Grefenstette et al.'s (2015) stratification stack (and, with ``kind = "queue"``, the neural
    queue: :class:`QueueKernel`).

    The values only slide: ``V_t = P[T−t : T−t+D]`` in one buffer ``P [T+D, m, B]`` holding the
    pushed values newest first (``P[T−1−s] = v_s``) and then the initial values.  Strengths
    ``s [T+1, D, B]``; the reading lives in ``z`` (``[T+1, m, B]``), where the controller reads it."""

    n_actions = 2
    softmax = False
    order = (0, 1)  # push, pop

    @staticmethod
    def rows(D: int, m: int) -> int:
        return m

    #: ``covered``'s direction: ``"stack"`` (pop and read the newest) or ``"queue"`` (the oldest)
    kind = "stack"

    def __init__(self, mem0: tuple[Tensor, ...], T: int, zmem: Tensor, want_overflow: bool) -> None:
        values0, strengths0, reading0 = mem0
        B, D, m = values0.shape
        self.T, self.D, self.m = T, D, m
        self.P = values0.new_empty(T + D, m, B)
        self.P[T:] = values0.permute(1, 2, 0)
        self.s = values0.new_empty(T + 1, D, B)
        self.s[0] = strengths0.t()
        self.r = zmem
        self.r[0] = reading0.t()
        self.buffers = (self.P, self.s)

    s_ = views(lambda k: k.s)
    r_ = views(lambda k: k.r)
    head_ = views(lambda k: k.s[:, 0])
    tail_ = views(lambda k: k.s[:, 1:])
    win_ = functools.cached_property(lambda k: windows(k.P, k.T, k.D))
    v_ = functools.cached_property(lambda k: k.P[: k.T].unbind(0)[::-1])

    def forward(self, s: int, a: tuple[Tensor, ...], v: Tensor) -> Tensor | None:
        push, pop = a
        old, new = self.s_[s], self.s_[s + 1]
        popped = torch.clamp_min(old - torch.clamp_min(pop - covered(old, self.kind, -2), 0), 0)
        self.head_[s + 1].copy_(push)
        self.tail_[s + 1].copy_(popped[:-1])
        self.v_[s].copy_(v)
        w = torch.minimum(new, torch.clamp_min(1 - covered(new, self.kind, -2), 0))
        torch.sum(w[:, None] * self.win_[s + 1], 0, out=self.r_[s + 1])
        return popped[-1]

    def start_backward(self) -> None:
        # a fresh gradient buffer for every backward pass, and its views made from it here (a view
        # cached across passes would accumulate a second backward into the first one's result)
        self.gP = torch.zeros_like(self.P)
        self.g = torch.zeros_like(self.s[0])
        self._block = None
        self.gwin_ = windows(self.gP, self.T, self.D)
        self.gv_ = self.gP[: self.T].unbind(0)[::-1]

    def native_grads(self) -> list[Tensor]:
        return [self.gP, self.g]

    def local(self, lo: int, hi: int, heads: Tensor) -> None:
        """The local derivatives of steps ``lo..hi−1`` (they do not depend on the gradient)."""
        old, new = self.s[lo:hi], self.s[lo + 1 : hi + 1]
        pop = heads[lo:hi, 1][:, None]
        a1 = pop - covered(old, self.kind, -2)
        a2 = old - torch.clamp_min(a1, 0)
        a3 = 1 - covered(new, self.kind, -2)
        r3 = torch.clamp_min(a3, 0)
        da = torch.where(new < r3, 1.0, torch.where(new == r3, 0.5, 0.0)).to(new.dtype)
        self._block = (
            lo,
            (a1 >= 0).to(new.dtype).unbind(0),
            (a2[:, :-1] >= 0).to(new.dtype).unbind(0),
            da.unbind(0),
            ((1 - da) * (a3 >= 0)).unbind(0),
            torch.minimum(new, r3)[:, :, None].unbind(0),
        )

    def backward(self, s: int, g_r: Tensor, a: tuple[Tensor, ...], v: Tensor, ga: Tensor, gv: Tensor) -> None:
        lo, m1, m2, da, db3, w = self._block
        j = s - lo
        g_w = (self.win_[s + 1] * g_r).sum(1)  # ∂L/∂w [D, B]
        self.gwin_[s + 1].addcmul_(w[j], g_r)
        g_new = torch.addcmul(self.g, g_w, da[j])
        g_new -= covered_transpose(g_w * db3[j], self.kind, -2)
        ga[0] = g_new[0]
        g_a2 = torch.zeros_like(g_new)
        torch.mul(g_new[1:], m2[j], out=g_a2[:-1])
        g_a1 = g_a2 * m1[j]  # −∂L/∂(pop − covered)
        torch.sum(g_a1, 0, out=ga[1])
        ga[1].neg_()
        self.g = g_a2 + covered_transpose(g_a1, self.kind, -2)
        gv.copy_(self.gv_[s])

    def finals(self, lengths: Tensor | None) -> tuple[Tensor, ...]:
        T, D = self.T, self.D
        values = self.P[:D].permute(2, 0, 1) if lengths is None else window_at(self.P, T - lengths, D)
        return (
            values,
            final_by_length(self.s.permute(2, 0, 1), lengths),
            final_by_length(self.r.permute(2, 0, 1), lengths),
        )

    def add_final_grads(self, t: int, grads: tuple[Tensor | None, ...], rows: Tensor) -> Tensor | None:
        gV, gs, gr = grads
        if gV is not None:
            self.gP[self.T - t : self.T - t + self.D].add_(gV.permute(1, 2, 0) * rows)
        if gs is not None:
            self.g += gs.t() * rows
        return None if gr is None else gr.t() * rows

    def initial_grads(self, g_r: Tensor) -> tuple[Tensor, ...]:
        return self.gP[self.T :].permute(2, 0, 1), self.g.t(), g_r.t()


class QueueKernel(StratificationKernel):
    """Grefenstette et al.'s (2015, section 3.2) neural queue: the stratification stack's kernel,
    popped and read from the oldest end."""

    kind = "queue"
