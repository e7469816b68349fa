"""Delétang et al.'s (2023) tape and the Tape-RNN's jump tape: their CPU kernels for
:class:`memrnn.ops.stack_rnn.cpu.StackRNNSequence` (the jump tape is the tape with two more moves, so
it lives here, a subclass of the tape's kernel; ``native.h`` and ``triton.py`` beside this file hold
both memories' steps the same way)."""

from __future__ import annotations

import torch
from torch import Tensor

from memrnn.ops.buckets import final_by_length
from memrnn.ops.memory import MemoryKernel, views


class TapeKernel(MemoryKernel):
    """Delétang et al.'s (2023) circular tape in ``z`` (``[T+1, D, m, B]``, the head's cell
    first, read in place): write into the head's cell, then move by (stay, left, right)."""

    n_actions = 3
    softmax = True
    order = (0, 1, 2)

    @staticmethod
    def rows(D: int, m: int) -> int:
        return D * m

    def __init__(self, mem0: tuple[Tensor, ...], T: int, zmem: Tensor, want_overflow: bool) -> None:
        (tape0,) = mem0
        B, D, m = tape0.shape
        self.T, self.D, self.m = T, D, m
        self.S = zmem.view(T + 1, D, m, B)
        self.S[0] = tape0.permute(1, 2, 0)
        self.W = self.S.new_empty(D + 2, m, B)  # the written tape, one cell wrapped on each side
        self.Wi = self.W[1:-1]

    S_ = views(lambda k: k.S)

    def _written(self, s: int, v: Tensor) -> Tensor:
        W, Wi = self.W, self.Wi
        Wi.copy_(self.S_[s])
        Wi[0] = v
        W[0] = Wi[-1]
        W[-1] = Wi[0]
        return W

    def forward(self, s: int, a: tuple[Tensor, ...], v: Tensor) -> Tensor | None:
        stay, left, right = a[:3]
        W, new = self._written(s, v), self.S_[s + 1]
        torch.mul(W[1:-1], stay, out=new)
        new.addcmul_(W[2:], left)  # new[i] += left · W[i+1]
        new.addcmul_(W[:-2], right)  # new[i] += right · W[i−1]
        self._jumps_forward(new, W[1:-1], a)
        return None

    def _jumps_forward(self, new: Tensor, W: Tensor, a: tuple[Tensor, ...]) -> None:
        """More moves of the written tape ``W [D, m, B]`` into ``new`` (none here)."""

    def _jumps_backward(self, g: Tensor, W: Tensor, a: tuple[Tensor, ...], ga: Tensor, gW: Tensor) -> None:
        """Their gradients: into ``ga`` (the actions) and ``gW [D, m, B]`` (none here)."""

    def start_backward(self) -> None:
        D, m, B = self.D, self.m, self.S.shape[-1]
        self.g = self.S.new_zeros(D, m, B)
        self.gp = self.S.new_empty(D + 2, m, B)
        self.prod = self.S.new_empty(3, D, m, B)

    def local(self, lo: int, hi: int, heads: Tensor) -> None:
        """Nothing to precompute."""

    def native_grads(self) -> list[Tensor]:
        self._pair = [self.g, torch.zeros_like(self.g)]  # the C++ backward alternates between them
        return self._pair

    def after_native(self, T: int) -> None:
        self.g = self._pair[T % 2]

    def backward(self, s: int, g_r: Tensor, a: tuple[Tensor, ...], v: Tensor, ga: Tensor, gv: Tensor) -> None:
        stay, left, right = a[:3]
        g = self.g
        g[0] += g_r
        W = self._written(s, v)
        D, m, B = self.D, self.m, g.shape[-1]
        # Σ g[i] W[i], Σ g[i] W[i+1], Σ g[i] W[i−1] from the wrapped W at shifts 0, +1, −1
        w3 = W.as_strided((3, D, m, B), (m * B, m * B, B, 1))  # W[i−1], W[i], W[i+1]
        torch.mul(w3, g, out=self.prod)
        tmp = self.prod.view(3, D * m, B).sum(1)
        ga[0], ga[1], ga[2] = tmp[1], tmp[2], tmp[0]
        gp = self.gp  # gW[j] = stay g[j] + left g[j−1] + right g[j+1]
        gp[1:-1] = g
        gp[0] = g[-1]
        gp[-1] = g[0]
        new = g * stay
        new.addcmul_(gp[:-2], left).addcmul_(gp[2:], right)
        self._jumps_backward(g, W[1:-1], a, ga, new)
        gv.copy_(new[0])
        new[0] = 0
        self.g = new

    def finals(self, lengths: Tensor | None) -> tuple[Tensor, ...]:
        return (final_by_length(self.S.permute(3, 0, 1, 2), lengths),)

    def add_final_grads(self, t: int, grads: tuple[Tensor | None, ...], rows: Tensor) -> Tensor | None:
        if grads[0] is not None:
            self.g += grads[0].permute(1, 2, 0) * rows
        return None

    def initial_grads(self, g_r: Tensor) -> tuple[Tensor, ...]:
        self.g[0] += g_r
        return (self.g.permute(2, 0, 1),)


class JumpTapeKernel(TapeKernel):
    """The tape of Delétang et al.'s Tape-RNN with its jumps by each row's input length ``L``
    (``memrnn.layers.memories.JumpTape``): two more moves, ``new[i] += jump_left · W[i+L] +
    jump_right · W[i−L]`` (indices mod ``D``), each one gather with indices fixed for the whole
    sequence; their transposes are the gathers the other way.  State fields ``(jump, tape)``."""

    n_actions = 5
    order = (0, 1, 2, 3, 4)

    @staticmethod
    def dims(mem0: tuple[Tensor, ...]) -> tuple[int, int]:
        return mem0[1].shape[1], mem0[1].shape[2]

    def __init__(self, mem0: tuple[Tensor, ...], T: int, zmem: Tensor, want_overflow: bool) -> None:
        jump, tape0 = mem0
        super().__init__((tape0,), T, zmem, want_overflow)
        D, m, B = self.D, self.m, tape0.shape[0]
        L = torch.round(jump.detach()).to(torch.long)
        i = torch.arange(D, device=tape0.device)[:, None]
        self.jump = jump
        self.shift = torch.remainder(L, D).contiguous()  # the C++ loops' per-row shift
        self.to_left = ((i + L) % D)[:, None, :].expand(D, m, B)  # new[i] reads W[i+L]
        self.to_right = ((i - L) % D)[:, None, :].expand(D, m, B)  # new[i] reads W[i−L]

    def _jumps_forward(self, new: Tensor, W: Tensor, a: tuple[Tensor, ...]) -> None:
        new.addcmul_(W.gather(0, self.to_left), a[3])
        new.addcmul_(W.gather(0, self.to_right), a[4])

    def _jumps_backward(self, g: Tensor, W: Tensor, a: tuple[Tensor, ...], ga: Tensor, gW: Tensor) -> None:
        ga[3] = (g * W.gather(0, self.to_left)).sum((0, 1))
        ga[4] = (g * W.gather(0, self.to_right)).sum((0, 1))
        gW.addcmul_(g.gather(0, self.to_right), a[3])  # W[j] fed new[j−L] through the left jump
        gW.addcmul_(g.gather(0, self.to_left), a[4])

    def finals(self, lengths: Tensor | None) -> tuple[Tensor, ...]:
        return (self.jump.clone(), *super().finals(lengths))  # the jump passes through unchanged

    def start_backward(self) -> None:
        super().start_backward()
        self.g_jump = torch.zeros_like(self.jump)

    def native_final_grads(self, g_mem: tuple[Tensor | None, ...], lens: Tensor) -> tuple[Tensor | None, ...]:
        """The jump passes through unchanged: its final gradient is its initial one (rows of length
        0 get theirs from ``add_final_grads`` at step 0); the tape's go to the C++ backward."""
        if g_mem[0] is not None:
            self.g_jump += g_mem[0] * (lens >= 1).to(g_mem[0].dtype)
        return g_mem[1:]

    def add_final_grads(self, t: int, grads: tuple[Tensor | None, ...], rows: Tensor) -> Tensor | None:
        if grads[0] is not None:
            self.g_jump += grads[0] * rows
        return super().add_final_grads(t, grads[1:], rows)

    def initial_grads(self, g_r: Tensor) -> tuple[Tensor | None, ...]:
        return (self.g_jump, *super().initial_grads(g_r))
