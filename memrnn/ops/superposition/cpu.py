"""Joulin & Mikolov's (2015) superposition stack's CPU kernel for :class:`memrnn.ops.stack_rnn.cpu.StackRNNSequence`
(its Python loop; ``native.h`` beside this file is its C++ step)."""

from __future__ import annotations

import functools

import torch
from torch import Tensor

from memrnn.ops.buckets import final_by_length
from memrnn.ops.memory import MemoryKernel, views


class SuperpositionKernel(MemoryKernel):
    """Joulin & Mikolov's (2015) stack in ``z``: cells ``S_0 … S_{D−1}`` and one zero cell below
    (``[T+1, D+1, m, B]``), so the controller's ``addmm`` reads ``[h ; S_0]`` in place and a pop
    reads the cells one lower without a copy.  The head's actions are kept in the order pop,
    no-op, push: the backward's three action gradients are then one product of the gradient,
    zero-padded and viewed at shifts −1, 0, +1, with the old stack."""

    n_actions = 3
    softmax = True
    order = (1, 2, 0)  # kernel row j holds the layer's action order[j] (push, pop, no-op)
    trims = True  # takes finals=, grad0= and trim= (False: the whole window) and trims its window (_live)
    ring_trims = True  # and live_steps=, for a ring of slots (its forward reads _C and live by step only)
    recomputes = True  # its state is z's rows only: native.cpp's "Recomputed memory" reruns its steps

    @staticmethod
    def rows(D: int, m: int) -> int:
        return (D + 1) * m

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
        live_steps: int | None = None,
    ) -> None:
        (stack0,) = mem0
        B, D, m = stack0.shape
        self.T, self.D, self.m, self.want_overflow = T, D, m, want_overflow
        # the steps the live ranges count: T, or the whole sequence's when the buffers are a ring of
        # slots (the forward without history, memrnn.ops.stack_rnn.cpu._Ring)
        self.live_T = T if live_steps is None else live_steps
        Sp = zmem.view(T + 1, D + 1, m, B)
        Sp[:, D] = 0
        Sp[0, :D] = stack0.permute(1, 2, 0)
        self.Sp = Sp
        self.live = (
            None if not trim else self._live(bool(stack0.any()) if stack0.numel() else False, finals, grad0)
        )
        self._C, self._G = (None, None) if self.live is None else self.live.tolist()  # the Python loop's

    def _live(self, nonzero0: bool, finals: bool, grad0: bool) -> Tensor | None:
        """The trimmed windows (Joulin & Mikolov's stack touched only where it can matter; rau, DuSell's
        library, trims the same way to ``min(t, T − t)``): int64 ``[2, T+1]``, row 0 ``C(t)``, the
        cells of ``S_t`` each step computes, row 1 ``G(t)``, the cells of ``∂L/∂S_t`` the backward
        computes; None when nothing is trimmed (the full window, as before).

        * Filled: from an all-zero initial stack, after ``t`` steps only cells ``0..min(t, D)−1``
          can be non-zero (a deeper cell mixes zeros, exactly 0), so ``C(t) ≤ min(t, D)``.  The
          gradient of a structurally zero cell only ever multiplies zeros on its way to the
          actions, so the backward trims it too, unless the initial stack's gradient is wanted
          (``grad0``).
        * Readable: a cell deeper than ``T − t`` cannot reach the top before the end, so it
          changes no output, only the final state: without ``finals`` (and without the
          overflow, which reads the bottom cell) ``C(t), G(t) ≤ T − t + 1``, and the final
          state's gradient is zero, so the backward trims the same cells.

        Every cell computed is the full window's, bit for bit: the skipped ones are either
        exact zeros (a mix of zeros) or feed nothing that is computed."""
        T, D = self.live_T, self.D
        filled = not nonzero0
        readable = not finals and not self.want_overflow
        if not filled and not readable:
            return None
        t = torch.arange(T + 1)
        Z = t.clamp(max=D) if filled else torch.full_like(t, D)
        R = (T - t + 1).clamp(max=D) if readable else torch.full_like(t, D)
        C = torch.minimum(Z, R)
        C[0] = D  # the initial stack, as given
        G = torch.minimum(R, Z if filled and not grad0 else torch.full_like(t, D))
        if bool((C == D).all()) and bool((G == D).all()):
            return None
        return torch.stack([C, G])

    # per-step views, made when the Python loop first needs them (the C++ loop does not)
    S_ = views(lambda k: k.Sp[:, : k.D])
    up_ = views(lambda k: k.Sp[:, 1:])
    lo_ = views(lambda k: k.Sp[:, 1 : k.D])
    hi_ = views(lambda k: k.Sp[:, : k.D - 1])
    top_ = views(lambda k: k.Sp[:, 0])
    last_ = views(lambda k: k.Sp[:, k.D - 1])

    def forward(self, s: int, a: tuple[Tensor, ...], v: Tensor) -> Tensor | None:
        pop, noop, push = a
        old, new = self.S_[s], self.S_[s + 1]
        hi = self.D if self._C is None else self._C[s + 1]
        if hi == self.D:
            torch.mul(old, noop, out=new)
            self.lo_[s + 1].addcmul_(self.hi_[s], push)
            self.top_[s + 1].addcmul_(v, push)
            new.addcmul_(self.up_[s], pop)
        else:  # the trimmed window (_live): cells 0..hi−1, the same operations in the same order
            up = self.Sp[s, 1 : hi + 1]  # cells ≥ C(s) read here are zero (written below, a step ago)
            torch.mul(old[:hi], noop, out=new[:hi])
            new[1:hi].addcmul_(old[: hi - 1], push)
            self.top_[s + 1].addcmul_(v, push)
            new[:hi].addcmul_(up, pop)
            new[hi : hi + 2].zero_()  # the next step reads up to two cells past its own
        if not self.want_overflow:
            return None
        if self._C is not None and self._C[s] < self.D:  # the bottom cell is still empty
            return push * 0
        return push * self.last_[s].abs().amax(0)

    def release_steps(self) -> None:
        """Drops this kernel's views of ``z`` once the forward is done with them: a recomputed
        memory's ring (``native.cpp``'s "Recomputed memory"), which the backward does not read (it
        reruns its steps into a ring of its own), is then freed before the backward runs."""
        self.Sp = self.Sp.new_empty((0, *self.Sp.shape[1:]))
        for name, attr in vars(type(self)).items():  # the per-step views (views(): cached on first use)
            if isinstance(attr, functools.cached_property):
                self.__dict__.pop(name, None)

    def start_backward(self) -> None:
        D, m, B = self.D, self.m, self.Sp.shape[-1]
        self.gpp = [self.Sp.new_zeros(D + 2, m, B) for _ in range(2)]  # ∂L/∂S, zero cell each side
        self.g3 = [g.as_strided((3, D, m, B), (m * B, m * B, B, 1)) for g in self.gpp]
        self.prod = None  # the Python backward's products (backward: made on its first step; the
        # C++ loop never reads them, and zeroing [3, D, m, B] cost it 4% of a 20-member step)
        self.prod_hi = D  # prod's cells past this are zero
        self.cur = 0

    def local(self, lo: int, hi: int, heads: Tensor) -> None:
        """Nothing to precompute."""

    def native_grads(self) -> list[Tensor]:
        return self.gpp  # the two alternating zero-padded buffers

    def after_native(self, T: int) -> None:
        self.cur = T % 2

    def backward(self, s: int, g_r: Tensor, a: tuple[Tensor, ...], v: Tensor, ga: Tensor, gv: Tensor) -> None:
        """Given ``g_r = ∂L/∂r_{s+1}`` (the reading, ``S_{s+1}[0]``): writes ``∂L/∂a`` into ``ga
        [3, B]`` (kernel order) and ``∂L/∂v`` into ``gv [m, B]``; the state gradient moves to
        ``∂L/∂S_s``."""
        pop, noop, push = a
        if self.prod is None:
            self.prod = self.Sp.new_zeros(3, self.D, self.m, self.Sp.shape[-1])
        gpp, nxt = self.gpp[self.cur], self.gpp[1 - self.cur]
        g = gpp[1:-1]
        g[0] += g_r
        D = self.D
        if self._G is None:
            L = Gn = D
        else:  # the trimmed window (_live); the cells of ∂L/∂S_{s+1} past G(s+1) hold zeros
            Gc, Gn = self._G[s + 1], self._G[s]
            L = min(self._C[s], Gc + 1, D)  # the cells of S_s whose products can be non-zero
        if L == D:
            torch.mul(self.g3[self.cur], self.S_[s], out=self.prod)  # g[i−1]S[i], g[i]S[i], g[i+1]S[i]
        else:  # the rest of prod is zero: the sum below runs over the whole window, as untrimmed
            torch.mul(self.g3[self.cur][:, :L], self.S_[s][:L], out=self.prod[:, :L])
            self.prod[:, L : self.prod_hi].zero_()
        self.prod_hi = L
        torch.sum(self.prod.view(3, -1, self.prod.shape[-1]), 1, out=ga)
        ga[2] += (g[0] * v).sum(0)
        torch.mul(g[0], push, out=gv)
        inner = nxt[1:-1]
        if Gn == D:
            torch.mul(g, noop, out=inner)
            inner.addcmul_(gpp[2:], push)
            inner.addcmul_(gpp[:-2], pop)
        else:
            torch.mul(g[:Gn], noop, out=inner[:Gn])
            inner[:Gn].addcmul_(gpp[2 : Gn + 2], push)
            inner[:Gn].addcmul_(gpp[:Gn], pop)
            inner[Gn : Gn + 2].zero_()  # the next step reads up to two cells past G(s)
        self.cur = 1 - self.cur

    def finals(self, lengths: Tensor | None) -> tuple[Tensor, ...]:
        out = final_by_length(self.Sp[:, : self.D].permute(3, 0, 1, 2), lengths)
        if self.live is None or bool((self.live[0, 1:] == self.D).all()):
            return (out,)
        # filled trim (finals are wanted, so only it): cells ≥ min(length, D) were never written
        # and are exactly zero
        ends = torch.full((out.shape[0],), self.T) if lengths is None else lengths.cpu()
        keep = torch.arange(self.D)[None, :] < ends.to(torch.long)[:, None]
        return (torch.where(keep.to(out.device)[:, :, None], out, out.new_zeros(())),)

    def add_final_grads(self, t: int, grads: tuple[Tensor | None, ...], rows: Tensor) -> Tensor | None:
        """Add ``∂L/∂`` (final state) of the rows whose state ``t`` is final (``rows [B]``, 0/1)."""
        if grads[0] is not None:
            self.gpp[self.cur][1:-1] += grads[0].permute(1, 2, 0) * rows
        return None

    def initial_grads(self, g_r: Tensor) -> tuple[Tensor, ...]:
        g = self.gpp[self.cur][1:-1]
        g[0] += g_r
        if self.live is not None:  # the trimmed cells' gradient: zero, or not wanted (_live)
            g[int(self.live[1, 0]) :].zero_()
        return (g.permute(2, 0, 1),)
