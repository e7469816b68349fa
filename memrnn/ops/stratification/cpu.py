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
    trims = True  # takes finals=, grad0= and trim= (False: the whole window) and trims its window (_live)

    @staticmethod
    def rows(D: int, m: int) -> int:
        return m

    #: ``covered``'s direction: ``"stack"`` (pop and read the newest) or ``"queue"`` (the oldest)
    kind = "stack"

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
        B, D, m = values0.shape
        self.T, self.D, self.m = T, D, m
        self.P = values0.new_empty(T + D, m, B)
        self.P[T:] = values0.permute(1, 2, 0)
        self.live = None if not trim else self._live(strengths0, values0, finals, grad0)
        self._C, self._G = (None, None) if self.live is None else self.live.tolist()  # the Python loop's
        # with the trim, the slots no step writes are the empty ones: zeros
        self.s = values0.new_empty(T + 1, D, B) if self.live is None else values0.new_zeros(T + 1, D, B)
        self.s[0] = strengths0.t()
        self.r = zmem
        self.r[0] = reading0.t()
        self.buffers = (self.P, self.s)

    def _live(self, strengths0: Tensor, values0: Tensor, finals: bool, grad0: bool) -> Tensor | None:
        """The trimmed window (as the superposition stack's,
        :meth:`memrnn.ops.superposition.cpu.SuperpositionKernel._live`): int64 ``[2, T+1]``, row 0
        ``C(t)``, the slots of the structure after ``t`` steps that can hold strength, row 1
        ``G(t)``, the slots whose strengths' gradient the backward computes; None: the full window.

        Only the filled trim applies here.  From all-zero initial strengths, ``t`` steps push at
        most ``t`` elements, so the slots past ``min(t, D)`` have strength exactly 0: they pop
        nothing (``max(0 − ·, 0) = 0``), cover nothing and weigh nothing in the reading
        (``min(0, ·) = 0``), so the forward skips them.  There is no readable trim: an element's
        weight in the reading depends on the strengths above it, not on its depth, so a deep
        element is read at once when the ones above it are weak (Grefenstette et al. 2015, eq. 3).
        The backward skips the empty slots too where their gradient is exactly zero and reaches
        nothing: the stack (``covered``'s transpose carries gradient upward only, from the empty
        slots' zero), from all-zero initial values (an empty slot's reading weight has the value's
        gradient ``Σ v·g_r``), without the final state's gradient (``finals``) and without the
        initial state's (``grad0``).  Not the queue: its ``covered`` sums the older elements, so its
        transpose carries the newer elements' gradient into the empty slots, and at a pop of
        exactly 0 (a saturated sigmoid) the full window's subgradient brings it back into the pop's
        gradient; the queue trims its forward only."""
        if strengths0.numel() == 0 or bool(strengths0.any()):
            return None
        T, D = self.T, self.D
        C = torch.arange(T + 1).clamp(max=D)
        exact_backward = self.kind == "stack" and not finals and not grad0 and not bool(values0.any())
        G = C if exact_backward else torch.full_like(C, D)
        if bool((C == D).all()) and bool((G == D).all()):
            return None
        return torch.stack([C, G])

    s_ = views(lambda k: k.s)
    r_ = views(lambda k: k.r)
    head_ = views(lambda k: k.s[:, 0])
    tail_ = views(lambda k: k.s[:, 1:])
    win_ = functools.cached_property(lambda k: windows(k.P, k.T, k.D))
    v_ = functools.cached_property(lambda k: k.P[: k.T].unbind(0)[::-1])
    _rows = functools.cached_property(lambda k: torch.zeros_like(k.win_[0]))  # a trimmed reading's [D, m, B]

    def forward(self, s: int, a: tuple[Tensor, ...], v: Tensor) -> Tensor | None:
        push, pop = a
        old, new = self.s_[s], self.s_[s + 1]
        n = self.D if self._C is None else self._C[s]
        if n < self.D:  # the trimmed window (_live): the first n slots, the same operations
            n1 = self._C[s + 1]
            old = old[:n]
            popped = torch.clamp_min(old - torch.clamp_min(pop - covered(old, self.kind, -2), 0), 0)
            self.head_[s + 1].copy_(push)
            new[1 : n + 1].copy_(popped)
            self.v_[s].copy_(v)
            new = new[:n1]
            w = torch.minimum(new, torch.clamp_min(1 - covered(new, self.kind, -2), 0))
            # the reading sums all D slots, the empty ones as zeros, as the full window does:
            # torch's sum over the slots rounds by its own grouping of rows, which fewer rows
            # change (_rows' rows from n1 on were never written: C only grows)
            rows = self._rows
            torch.mul(w[:, None], self.win_[s + 1][:n1], out=rows[:n1])
            torch.sum(rows, 0, out=self.r_[s + 1])
            return torch.zeros_like(push)  # slot D − 1 is still empty: it drops nothing
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
        D = self.D
        n1, n = (D, D) if self._G is None else (self._G[s + 1], self._G[s])  # slots of S_{s+1}, S_s
        win = self.win_[s + 1][:n1]
        g_w = (win * g_r).sum(1)  # ∂L/∂w [n1, B]
        self.gwin_[s + 1][:n1].addcmul_(w[j][:n1], g_r)
        g_new = torch.addcmul(self.g[:n1], g_w, da[j][:n1])
        g_new -= covered_transpose(g_w * db3[j][:n1], self.kind, -2)
        ga[0] = g_new[0]
        g_a2 = g_new.new_zeros(n, g_new.shape[-1])
        if n == D:
            torch.mul(g_new[1:], m2[j], out=g_a2[:-1])
        else:  # the trimmed window (_live): slot n − 1 moves to slot n < D
            torch.mul(g_new[1 : n + 1], m2[j][:n], out=g_a2)
        g_a1 = g_a2 * m1[j][:n]  # −∂L/∂(pop − covered)
        if n == D:
            torch.sum(g_a1, 0, out=ga[1])
        else:  # summed over all D slots, the trimmed ones as zeros (the forward's reading's reason)
            torch.sum(torch.cat([g_a1, g_a1.new_zeros(D - n, g_a1.shape[-1])]), 0, out=ga[1])
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
        g = self.g
        if self._G is not None:  # the trimmed slots' gradient is not wanted (_live): zeros
            g = torch.cat([g[: self._G[0]], g.new_zeros(self.D - self._G[0], g.shape[-1])])
        return self.gP[self.T :].permute(2, 0, 1), g.t(), g_r.t()


class QueueKernel(StratificationKernel):
    """Grefenstette et al.'s (2015, section 3.2) neural queue: the stratification stack's kernel,
    popped and read from the oldest end."""

    kind = "queue"
