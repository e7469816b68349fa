"""Joulin & Mikolov's (2015) superposition stack's CPU kernel for :class:`memrnn.ops.stack_rnn.cpu.StackRNNSequence`
(its Python loop; ``native.h`` beside this file is its C++ step)."""

from __future__ import annotations

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

    @staticmethod
    def rows(D: int, m: int) -> int:
        return (D + 1) * m

    def __init__(self, mem0: tuple[Tensor, ...], T: int, zmem: Tensor, want_overflow: bool) -> None:
        (stack0,) = mem0
        B, D, m = stack0.shape
        self.T, self.D, self.m, self.want_overflow = T, D, m, want_overflow
        Sp = zmem.view(T + 1, D + 1, m, B)
        Sp[:, D] = 0
        Sp[0, :D] = stack0.permute(1, 2, 0)
        self.Sp = Sp

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
        torch.mul(old, noop, out=new)
        self.lo_[s + 1].addcmul_(self.hi_[s], push)
        self.top_[s + 1].addcmul_(v, push)
        new.addcmul_(self.up_[s], pop)
        return push * self.last_[s].abs().amax(0) if self.want_overflow else None

    def start_backward(self) -> None:
        D, m, B = self.D, self.m, self.Sp.shape[-1]
        self.gpp = [self.Sp.new_zeros(D + 2, m, B) for _ in range(2)]  # ∂L/∂S, zero cell each side
        self.g3 = [g.as_strided((3, D, m, B), (m * B, m * B, B, 1)) for g in self.gpp]
        self.prod = self.Sp.new_empty(3, D, m, B)
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
        gpp, nxt = self.gpp[self.cur], self.gpp[1 - self.cur]
        g = gpp[1:-1]
        g[0] += g_r
        torch.mul(self.g3[self.cur], self.S_[s], out=self.prod)  # g[i−1]S[i], g[i]S[i], g[i+1]S[i]
        torch.sum(self.prod.view(3, -1, self.prod.shape[-1]), 1, out=ga)
        ga[2] += (g[0] * v).sum(0)
        torch.mul(g[0], push, out=gv)
        inner = nxt[1:-1]
        torch.mul(g, noop, out=inner)
        inner.addcmul_(gpp[2:], push)
        inner.addcmul_(gpp[:-2], pop)
        self.cur = 1 - self.cur

    def finals(self, lengths: Tensor | None) -> tuple[Tensor, ...]:
        return (final_by_length(self.Sp[:, : self.D].permute(3, 0, 1, 2), lengths),)

    def add_final_grads(self, t: int, grads: tuple[Tensor | None, ...], rows: Tensor) -> Tensor | None:
        """Add ``∂L/∂`` (final state) of the rows whose state ``t`` is final (``rows [B]``, 0/1)."""
        if grads[0] is not None:
            self.gpp[self.cur][1:-1] += grads[0].permute(1, 2, 0) * rows
        return None

    def initial_grads(self, g_r: Tensor) -> tuple[Tensor, ...]:
        g = self.gpp[self.cur][1:-1]
        g[0] += g_r
        return (g.permute(2, 0, 1),)
