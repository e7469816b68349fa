"""A controller RNN driving a differentiable memory, whole sequence at once with hand-written
backpropagation through time: :class:`StackRNNSequence` (the method of :mod:`memrnn.ops.bptt`).

Everything runs transposed, on ``[features, batch]`` columns (as :class:`memrnn.ops.lstm.cpu.LSTMSequence`):

* ``z [T+1, N+m, B]`` holds ``[h_t ; r_t]``, the controller's output and the memory's reading
  after step ``t`` (``t = 0``: the initial state), which is the recurrent input of step ``t+1``:
  one ``addmm`` of ``w_z = [w_rec  w_r]`` gives the step's gates;
* ``heads [T, K, B]``: the memory's actions (softmax or sigmoid) and value after each step;
* with a value MLP (the Tape-RNN's write head, Delétang et al. 2023), its hidden layers'
  activations ``[T, H_l, B]``: the head then gives the actions only, and the value is
  ``W_L relu(… relu(W_1 h + b_1) …) + b_L`` (and the value activation);
* the memory's own buffers (a kernel class per memory below).

The forward loop records no graph; the backward loop runs, per step, the memory's backward, the
heads' (one ``addmm`` into ``∂h``; a value MLP's layers one ``mm`` each, their pre-activations'
gradients kept for the weights'), then the controller's (one ``mm``), with the local derivatives
that do not depend on the incoming gradient computed for :data:`memrnn.ops.bptt.BLOCK` steps at a
time.  Each row's final state is gathered at its own length, and its gradient enters the backward
loop at that step, so masks cost nothing.  Every subgradient (``clamp_min`` at 0, ``minimum`` at a
tie) is autograd's, so the gradients equal the reference loop's to rounding.

On CPU tensors of float32 and float64 the two loops run in C++ (``native.cpp`` beside this file,
:mod:`memrnn.ops.native`; ``spec``'s last field), on the same buffers, for every memory
here; the Python loops are their fallback and their check.
"""

from __future__ import annotations

import functools

import torch
from torch import Tensor

from memrnn.ops.autograd import first_order
from memrnn.ops.bptt import blocks, input_grads_block
from memrnn.ops.buckets import final_by_length
from memrnn.ops.native import load
from memrnn.ops.stratification import covered, covered_transpose


def _value_derivative(name: str, v: Tensor) -> Tensor | None:
    """``act'`` from the activation's output ``v`` (None for the identity)."""
    if name == "sigmoid":
        return v - v * v
    if name == "tanh":
        return 1 - v * v
    return None


def _views(of):
    """A kernel attribute: ``of(kernel)`` unbound along time (one view per step), made on first use."""
    return functools.cached_property(lambda k: of(k).unbind(0))


# -- memories ---------------------------------------------------------------------------------
# Each kernel keeps its structure in the rows of ``z`` after ``h`` (``zmem [T+1, R, B]``) where
# the controller reads them in place, or in its own buffers; every per-step view is made once.
class _Kernel:
    """What every memory kernel below shares: its sizes from the initial state and the reading's
    width in cells (subclasses whose state or reading differ override them)."""

    #: cells of width ``m`` in the reading (the DeQue reads both ends: 2)
    reads = 1
    #: the memory's own buffers beyond ``z`` (the C++ loops' ``P``, ``S``, ``P2``)
    buffers: tuple[Tensor, ...] = ()
    #: each row's jump (the jump tape's; int64 ``[B]``)
    shift: Tensor | None = None

    def native_buffers(self) -> tuple[Tensor | None, Tensor | None, Tensor | None]:
        """``(P, S, P2)`` for the C++ loops (None where this memory has none)."""
        return (*self.buffers, None, None, None)[:3]

    def native_grads(self) -> list[Tensor]:
        """The gradient state (made by ``start_backward``) that the C++ backward updates in place."""
        raise NotImplementedError

    def native_final_grads(self, g_mem: tuple[Tensor | None, ...], lens: Tensor) -> tuple[Tensor | None, ...]:
        """The final state's gradients the C++ backward adds at each row's end (all of them here)."""
        return g_mem

    def after_native(self, T: int) -> None:
        """Point the Python bookkeeping at the buffer the C++ backward left the gradient in."""

    @staticmethod
    def dims(mem0: tuple[Tensor, ...]) -> tuple[int, int]:
        """``(D, m)``: cells and their width, from the memory's initial state."""
        return mem0[0].shape[1], mem0[0].shape[2]


def _window_at(P: Tensor, start: Tensor, D: int) -> Tensor:
    """``P [L, m, B]`` read at ``P[start_b : start_b + D]`` for each row ``b``: ``[B, D, m]`` (a
    sliding-buffer memory's final window at each row's own length)."""
    idx = start[:, None] + torch.arange(D, device=start.device)  # [B, D]
    return P.permute(2, 0, 1).gather(1, idx[..., None].expand(-1, -1, P.shape[1]))


class _Superposition(_Kernel):
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
    S_ = _views(lambda k: k.Sp[:, : k.D])
    up_ = _views(lambda k: k.Sp[:, 1:])
    lo_ = _views(lambda k: k.Sp[:, 1 : k.D])
    hi_ = _views(lambda k: k.Sp[:, : k.D - 1])
    top_ = _views(lambda k: k.Sp[:, 0])
    last_ = _views(lambda k: k.Sp[:, k.D - 1])

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


class _Tape(_Kernel):
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

    S_ = _views(lambda k: k.S)

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


class _JumpTape(_Tape):
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


def _slide(P: Tensor, T: int, D: int) -> list[Tensor]:
    """``[P[t : t+D] for t in 0..T]`` as views made by one call (the DeQue's top half)."""
    _, m, B = P.shape
    return P.as_strided((T + 1, D, m, B), (m * B, m * B, B, 1), P.storage_offset()).unbind(0)


def _windows(P: Tensor, T: int, D: int) -> list[Tensor]:
    """``[P[T−t : T−t+D] for t in 0..T]`` as views made by one call."""
    _, m, B = P.shape
    return P.as_strided((T + 1, D, m, B), (m * B, m * B, B, 1), P.storage_offset()).unbind(0)[::-1]


class _Stratification(_Kernel):
    """Grefenstette et al.'s (2015) stratification stack (``order="stack"``) or neural queue.

    The values only slide: ``V_t = P[T−t : T−t+D]`` in one buffer ``P [T+D, m, B]`` holding the
    pushed values newest first (``P[T−1−s] = v_s``) and then the initial values.  Strengths
    ``s [T+1, D, B]``; the reading lives in ``z`` (``[T+1, m, B]``), where the controller reads it."""

    n_actions = 2
    softmax = False
    order = (0, 1)  # push, pop

    @staticmethod
    def rows(D: int, m: int) -> int:
        return m

    def __init__(
        self, mem0: tuple[Tensor, ...], T: int, zmem: Tensor, want_overflow: bool, kind: str
    ) -> None:
        values0, strengths0, reading0 = mem0
        B, D, m = values0.shape
        self.T, self.D, self.m, self.kind = T, D, m, kind
        self.P = values0.new_empty(T + D, m, B)
        self.P[T:] = values0.permute(1, 2, 0)
        self.s = values0.new_empty(T + 1, D, B)
        self.s[0] = strengths0.t()
        self.r = zmem
        self.r[0] = reading0.t()
        self.buffers = (self.P, self.s)

    s_ = _views(lambda k: k.s)
    r_ = _views(lambda k: k.r)
    head_ = _views(lambda k: k.s[:, 0])
    tail_ = _views(lambda k: k.s[:, 1:])
    win_ = functools.cached_property(lambda k: _windows(k.P, k.T, k.D))
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
        self.gwin_ = _windows(self.gP, self.T, self.D)
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
        values = self.P[:D].permute(2, 0, 1) if lengths is None else _window_at(self.P, T - lengths, D)
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


class _Deque(_Kernel):
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
    s_ = _views(lambda k: k.s)
    r_ = _views(lambda k: k.r)
    bot_ = functools.cached_property(lambda k: _windows(k.Pb, k.T, k.D))
    top_ = functools.cached_property(lambda k: _slide(k.Pt, k.T, k.D))
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
        self.gbot_, self.gtop_ = _windows(self.gPb, T, D), _slide(self.gPt, T, D)
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
            values = torch.cat([_window_at(self.Pb, T - lengths, D), _window_at(self.Pt, lengths, D)], 1)
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


def _memory(kind: str, mem0: tuple[Tensor, ...], T: int, zmem: Tensor, want_overflow: bool):
    if kind == "superposition":
        return _Superposition(mem0, T, zmem, want_overflow)
    if kind == "tape":
        return _Tape(mem0, T, zmem, want_overflow)
    if kind == "tape_jump":
        return _JumpTape(mem0, T, zmem, want_overflow)
    if kind == "deque":
        return _Deque(mem0, T, zmem, want_overflow)
    return _Stratification(mem0, T, zmem, want_overflow, "stack" if kind == "stratification" else "queue")


_KERNELS = {
    "superposition": _Superposition,
    "tape": _Tape,
    "tape_jump": _JumpTape,
    "deque": _Deque,
    "stratification": _Stratification,
    "queue": _Stratification,
}


def _forward_loop(spec, mem, N, mr, acts, z, w_z, w_head, b_head, heads, A, cs, xs, overflow, mlp) -> None:
    """The forward loop of :class:`StackRNNSequence` in Python (every device and dtype); ``mlp =
    (weights, biases, hidden buffers [T, H_l, B])`` of the value MLP, each empty without one."""
    controller, activation, _, value_act, want_overflow = spec[:5]
    T, k = acts.shape[0], A.shape[1]
    lstm = controller == "lstm"
    a_, zr_, h_, hd_ = acts.unbind(0), z[:, : N + mr].unbind(0), z[:, :N].unbind(0), heads.unbind(0)
    ha_, hv_, A_ = heads[:, :k].unbind(0), heads[:, k:].unbind(0), A.unbind(0)
    rows_ = list(zip(*(A[:, j].unbind(0) for j in range(k)), strict=True))
    if lstm:
        sig_, g_ = acts[:, : 3 * N].unbind(0), acts[:, 3 * N :].unbind(0)
        o_, i_, f_ = (acts[:, j * N : (j + 1) * N].unbind(0) for j in range(3))
        c_, x_ = cs.unbind(0), xs.unbind(0)
    else:
        act = {"tanh": torch.tanh, "sigmoid": torch.sigmoid, "relu": torch.relu}[activation]
    vfn = {"sigmoid": Tensor.sigmoid_, "tanh": Tensor.tanh_, "identity": None}[value_act]
    afn = torch.softmax if mem.softmax else None
    mlp_w, mlp_b, mlp_h = mlp
    head_ = ha_ if mlp_w else hd_  # with a value MLP the head gives the actions only
    # the value MLP's layers: (weight, bias column, per-step outputs), the last into the value rows
    outs = [*(h.unbind(0) for h in mlp_h), hv_] if mlp_w else []
    layers = [(w, bb[:, None], o) for w, bb, o in zip(mlp_w, mlp_b, outs, strict=True)]
    for s in range(T):
        a_[s].addmm_(w_z, zr_[s])
        if lstm:
            sig_[s].sigmoid_()
            g_[s].tanh_()
            torch.mul(f_[s], c_[s], out=c_[s + 1])
            c_[s + 1].addcmul_(i_[s], g_[s])
            torch.tanh(c_[s + 1], out=x_[s])
            torch.mul(o_[s], x_[s], out=h_[s + 1])
        else:
            h_[s + 1].copy_(act(a_[s]))
        torch.addmm(b_head[:, None], w_head, h_[s + 1], out=head_[s])
        inp = h_[s + 1]
        for j, (w, bb, o) in enumerate(layers, 1):
            torch.addmm(bb, w, inp, out=o[s])
            if j < len(layers):
                o[s].relu_()  # a hidden layer's activation, kept for the backward
            inp = o[s]
        if afn is not None:
            torch.softmax(ha_[s], 0, out=A_[s])
        else:
            torch.sigmoid(ha_[s], out=A_[s])
        if vfn is not None:
            vfn(hv_[s])
        lost = mem.forward(s, rows_[s], hv_[s])
        if lost is not None and want_overflow:
            overflow[s] = lost


class StackRNNSequence(torch.autograd.Function):
    """A one-layer LSTM (gate blocks **o, i, f, g**) or Elman controller reading ``[x_t ; r_{t−1}]``
    and driving a memory through a linear head (module docstring).

    ``x [B, T, n]``, ``w_in [G, n + m]`` (the controller's input weights over ``[x ; r]``),
    ``b [G]``, ``w_rec [G, N]``, ``w_head [K, N]``, ``b_head [K]`` (the layer's action order, then
    the value; the actions only, ``[k, N]`` and ``[k]``, with a value MLP), ``h0 [B, N]``, ``c0
    [B, N]`` (None for Elman), ``lengths [B]`` (None: all ``T``), ``spec = (controller,
    activation, memory, value_activation, want_overflow, native, L)``, then the value MLP's ``L``
    layers as ``w_1, b_1, …, w_L, b_L`` (``w_l [H_l, H_{l−1}]``, ``H_0 = N``, ``H_L`` the value's
    units; ReLU between layers; none when ``L = 0``), then the memory's initial state fields ->
    ``h [B, T, N]`` (steps 1..T), ``r [B, T, m]``, final ``h``, ``c`` (None for Elman), the
    memory's final fields, ``overflow [B, T]`` (not differentiable; zeros unless asked).
    """

    @staticmethod
    def forward(ctx, x, w_in, b, w_rec, w_head, b_head, h0, c0, lengths, spec, *rest):  # type: ignore[override]
        controller, _, kind, _, want_overflow, native, n_mlp = spec
        mlp_w, mlp_b, mem0 = list(rest[: 2 * n_mlp : 2]), list(rest[1 : 2 * n_mlp : 2]), rest[2 * n_mlp :]
        ctx.set_materialize_grads(False)
        B, T, nx = x.shape
        N = w_rec.shape[1]
        cls = _KERNELS[kind]
        k = cls.n_actions
        D, m = cls.dims(mem0)
        mr = cls.reads * m  # the reading's units
        perm = torch.tensor([*cls.order, *range(k, w_head.shape[0])], device=w_head.device)
        w_head, b_head = w_head[perm], b_head[perm]  # the kernel's action order
        z = x.new_empty(T + 1, N + cls.rows(D, m), B)
        z[0, :N] = h0.t()
        mem = _memory(kind, mem0, T, z[:, N:], want_overflow)
        w_z = torch.cat([w_rec, w_in[:, nx:]], 1)  # [G, N + mr]: reads [h ; r], the first N + mr rows of z
        if native:  # the C++ loop projects the inputs itself, a block of steps ahead
            acts = x.new_empty(T, w_in.shape[0], B)
        else:
            acts = torch.bmm(w_in[:, :nx].expand(T, -1, nx), x.permute(1, 2, 0)).add_(b[:, None])  # [T, G, B]
        K = k + mlp_w[-1].shape[0] if mlp_w else w_head.shape[0]  # the actions' and the value's rows
        heads = x.new_empty(T, K, B)  # pre-activations; the value rows activated in place
        mlp_h = [x.new_empty(T, w.shape[0], B) for w in mlp_w[:-1]]  # the MLP's hidden activations
        A = x.new_empty(T, k, B)  # the actions
        overflow = x.new_zeros(T, B)
        lstm = controller == "lstm"
        cs = xs = None
        if lstm:
            cs = x.new_empty(T + 1, N, B)
            cs[0] = c0.t()
            xs = x.new_empty(T, N, B)
        if native:
            _native_ops().stack_rnn_forward(
                *_native_codes(spec), bool(want_overflow), D, m, mem.shift, x, w_in[:, :nx].contiguous(), b, acts, z,
                w_z, w_head, b_head, heads, A, cs, xs, overflow, *mem.native_buffers(), mlp_w,
                [bb.contiguous() for bb in mlp_b], mlp_h,
            )  # fmt: skip
        else:
            mlp = (mlp_w, mlp_b, mlp_h)
            _forward_loop(spec, mem, N, mr, acts, z, w_z, w_head, b_head, heads, A, cs, xs, overflow, mlp)
        ctx.spec, ctx.mem, ctx.N, ctx.lengths, ctx.perm = spec, mem, N, lengths, perm
        # the stratification kernel's own buffers are saved too, so that memory accounting
        # (saved-tensor hooks, benchmarks/run.py) sees them; the backward reads them through ctx.mem
        ctx.save_for_backward(x, w_in, w_z, w_head, acts, z, heads, A, cs, xs, *mlp_w, *mlp_h, *mem.buffers)
        ctx.mark_non_differentiable(overflow)
        finals_h = final_by_length(z[:, :N].permute(2, 0, 1), lengths)
        finals_c = final_by_length(cs.permute(2, 0, 1), lengths) if lstm else None
        return (
            z[1:, :N].permute(2, 0, 1),
            z[1:, N : N + mr].permute(2, 0, 1),
            finals_h,
            finals_c,
            *mem.finals(lengths),
            overflow.t(),
        )

    @staticmethod
    @first_order
    def backward(ctx, gy_h, gy_r, g_hT, g_cT, *rest):  # type: ignore[override]
        saved = ctx.saved_tensors
        x, w_in, w_z, w_head, acts, z, heads, A, cs, xs = saved[:10]
        controller, activation, _, value_act, _, native, n_mlp = ctx.spec
        mlp_w, mlp_h = list(saved[10 : 10 + n_mlp]), list(saved[10 + n_mlp : 9 + 2 * n_mlp])
        mem, N, lengths = ctx.mem, ctx.N, ctx.lengths
        g_mem = rest[:-1]
        B, T, nx = x.shape
        G, K, Ka, k = w_z.shape[0], heads.shape[1], w_head.shape[0], mem.n_actions  # Ka: the head's rows
        m = w_z.shape[1] - N  # the reading's units
        lstm = controller == "lstm"
        tm = lambda g: None if g is None else g.permute(1, 2, 0).contiguous().unbind(0)  # noqa: E731
        gyh, gyr = (None, None) if native else (tm(gy_h), tm(gy_r))
        ends = _ends(lengths, T, x)
        gz = x.new_zeros(N + m, B)  # ∂L/∂[h ; r] of the step being undone (r: m units)
        gzh, gzr = gz[:N], gz[N:]
        g_c = x.new_zeros(N, B)
        mem.start_backward()
        ga = acts.new_empty(T, G, B)
        ghd = heads.new_empty(T, K, B)
        gA = A.new_empty(T, k, B)
        # ∂L/∂ the value MLP's hidden pre-activations, every step's (fresh for each backward)
        g_mlp = [x.new_empty(T, w.shape[0], B) for w in mlp_w[:-1]]
        mlp_wt = [w.t() for w in mlp_w]
        if not native:  # the Python loop's per-step views
            ga_, ghd_, gA_, A_ = ga.unbind(0), ghd.unbind(0), gA.unbind(0), A.unbind(0)
            gha_, ghv_, hv_ = ghd[:, :k].unbind(0), ghd[:, k:].unbind(0), heads[:, k:].unbind(0)
            rows_ = list(zip(*(A[:, j].unbind(0) for j in range(k)), strict=True))
            ghead_ = gha_ if mlp_w else ghd_  # the head's rows
            g_mlp_ = [g.unbind(0) for g in g_mlp]
            if lstm:
                gah_, gac_ = ga[:, :N].unbind(0), ga[:, N:].view(T, 3, N, B).unbind(0)
        w_z_t, w_head_t = w_z.t(), w_head.t()
        need_x, need_w, need_b = ctx.needs_input_grad[:3]
        grad_w_x = w_in.new_zeros(G, nx) if need_w else None
        grad_b = w_in.new_zeros(G) if need_b else None
        grad_xt = x.new_empty(T, nx, B) if need_x and not native else None

        def add_final(t, g_c):
            rows = ends.get(t)
            if rows is None:
                return g_c
            if g_hT is not None:
                gzh.add_(g_hT.t() * rows)
            if g_cT is not None:
                g_c = g_c + g_cT.t() * rows
            extra = mem.add_final_grads(t, g_mem, rows)
            if extra is not None:
                gzr.add_(extra)
            return g_c

        if native:
            grad_w_z = w_z.new_zeros(w_z.shape)
            grad_x = x.new_empty(B, T, nx) if need_x else None
            grad_w_head_k, grad_b_head_k = _native_backward(
                ctx.spec, mem, acts, z, w_z, w_head, heads, A, cs, xs, lengths, gy_h, gy_r, g_hT, g_cT,
                g_mem, ga, ghd, gA, gz, g_c, grad_b, x, w_in[:, :nx].contiguous(), grad_w_z, grad_w_x,
                grad_x, mlp_w, mlp_h, g_mlp,
            )  # fmt: skip
        for lo, hi in [] if native else blocks(T):
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
            mem.local(lo, hi, A)
            dval = _value_derivative(value_act, heads[lo:hi, k:])
            dval_ = None if dval is None else dval.unbind(0)
            dsig_ = None if mem.softmax else (A[lo:hi] - A[lo:hi] ** 2).unbind(0)
            relu_ = [(h[lo:hi] > 0).to(h.dtype).unbind(0) for h in mlp_h]  # relu' (0 at 0, as autograd)
            for s in range(hi - 1, lo - 1, -1):
                j = s - lo
                if gyh is not None:
                    gzh.add_(gyh[s])
                if gyr is not None:
                    gzr.add_(gyr[s])
                if s + 1 in ends:
                    g_c = add_final(s + 1, g_c)
                mem.backward(s, gzr, rows_[s], hv_[s], gA_[s], ghv_[s])
                if mem.softmax:
                    t = A_[s] * gA_[s]
                    torch.addcmul(t, A_[s], t.sum(0), value=-1, out=gha_[s])
                else:
                    torch.mul(gA_[s], dsig_[j], out=gha_[s])
                if dval_ is not None:
                    ghv_[s].mul_(dval_[j])
                g_h = torch.addmm(gzh, w_head_t, ghead_[s])
                if mlp_w:  # down the value MLP: ∂L/∂ each hidden pre-activation, then into ∂L/∂h
                    gl = ghv_[s]
                    for l in range(len(mlp_w) - 1, 0, -1):
                        gl = torch.mm(mlp_wt[l], gl, out=g_mlp_[l - 1][s]).mul_(relu_[l - 1][j])
                    g_h.addmm_(mlp_wt[0], gl)
                if lstm:
                    g_c = torch.addcmul(g_c, g_h, dhdc_[j])
                    torch.mul(kh_[j], g_h, out=gah_[s])
                    torch.mul(kc_[j], g_c, out=gac_[s])
                    g_c = g_c * f_[j]
                else:
                    torch.mul(g_h, dact_[j], out=ga_[s])
                torch.mm(w_z_t, ga_[s], out=gz)
            gb = ga[lo:hi]
            input_grads_block(gb, x, w_in[:, :nx], lo, hi, grad_w_x, grad_b, grad_xt)
        g_c = add_final(0, g_c)
        # the weight gradients: one product each over all steps
        if not native:
            zt = z[:T, : N + m]
            grad_w_z = torch.bmm(ga, zt.transpose(1, 2)).sum(0)
            grad_w_head_k = torch.bmm(ghd[:, :Ka], z[1:, :N].transpose(1, 2)).sum(0)
            grad_b_head_k = ghd[:, :Ka].sum((0, 2))
        grad_mlp = []  # the value MLP's layers: ∂L/∂ each output [T, H_l, B] times its input
        if mlp_w:
            for g_out, inp in zip([*g_mlp, ghd[:, k:]], [z[1:, :N], *mlp_h], strict=True):
                grad_mlp += [torch.bmm(g_out, inp.transpose(1, 2)).sum(0), g_out.sum((0, 2))]
        perm = ctx.perm
        grad_w_head = torch.empty_like(grad_w_head_k).index_copy_(0, perm, grad_w_head_k)
        grad_b_head = torch.empty_like(grad_b_head_k).index_copy_(0, perm, grad_b_head_k)
        grad_w_in = torch.cat([grad_w_x, grad_w_z[:, N:]], 1) if need_w else None
        if not native:
            grad_x = None if grad_xt is None else grad_xt.permute(2, 0, 1)
        g_mem0 = mem.initial_grads(gzr.clone())
        return (
            grad_x,
            grad_w_in,
            grad_b,
            grad_w_z[:, :N],
            grad_w_head,
            grad_b_head,
            gzh.t().clone(),
            g_c.t() if lstm else None,
            None,
            None,
            *grad_mlp,
            *g_mem0,
        )


#: the codes of native.cpp's enums
_NATIVE_CODES = {
    "controller": {"lstm": 0, "elman": 1},
    "activation": {"tanh": 0, "sigmoid": 1, "relu": 2, "identity": 3},
    "memory": {"superposition": 0, "stratification": 1, "queue": 2, "tape": 3, "tape_jump": 4, "deque": 5},
}


def _native_codes(spec: tuple) -> tuple[int, int, int, int]:
    controller, activation, kind, value_act = spec[:4]
    act = _NATIVE_CODES["activation"]
    return (
        _NATIVE_CODES["controller"][controller],
        act[activation] if controller == "elman" else 0,
        _NATIVE_CODES["memory"][kind],
        act[value_act],
    )


def _native_ops():
    ops = load()
    if ops is None:  # the dispatch checked; the build can only have been turned off since
        raise RuntimeError("memrnn's C++ loops are not available (MEMRNN_NATIVE=0 or a failed build)")
    return ops


def _native_backward(spec, mem, acts, z, w_z, w_head, heads, A, cs, xs, lengths, gy_h, gy_r, g_hT,
                     g_cT, g_mem, ga, ghd, gA, gz, g_c, grad_b, x, w_x, grad_w_z, grad_w_x, grad_x,
                     mlp_w, mlp_h, g_mlp):  # fmt: skip
    """The backward loop of :class:`StackRNNSequence` in C++ (``native.cpp``): fills ``ga``,
    ``ghd``, ``gA``, leaves ``∂L/∂[h_0 ; r_0]`` in ``gz``, ``∂L/∂c_0`` in ``g_c`` and the memory's
    gradient state where its kernel's ``add_final_grads``/``initial_grads`` read it; accumulates
    ``grad_b``, ``grad_w_z``, ``grad_w_x`` and writes ``grad_x [B, T, n]`` (each None when not
    needed) and ``g_mlp`` (``∂L/∂`` the value MLP's hidden pre-activations, ``[T, H_l, B]``);
    returns the gradients of the head's weight and bias (the kernel's action order)."""
    T, B = acts.shape[0], acts.shape[-1]
    N, K = w_head.shape[1], w_head.shape[0]
    cont = lambda g: None if g is None else g.contiguous()  # noqa: E731
    lens = torch.full((B,), T, dtype=torch.long) if lengths is None else lengths.to(torch.long).contiguous()
    P, S, P2 = mem.native_buffers()
    gw_head, gb_head = w_head.new_zeros(K, N), w_head.new_zeros(K)
    g_fin = mem.native_final_grads(g_mem, lens)
    _native_ops().stack_rnn_backward(
        *_native_codes(spec), mem.D, mem.m, mem.shift, acts, z, w_z, w_head, heads, A, cs, xs, P, S,
        lens, gy_h, gy_r, cont(g_hT), cont(g_cT), [cont(g) for g in g_fin], ga, ghd, gA, gz,
        g_c, mem.native_grads(), grad_b, gw_head, gb_head, x, w_x, grad_w_z, grad_w_x, grad_x, P2,
        mlp_w, mlp_h, g_mlp,
    )  # fmt: skip
    mem.after_native(T)
    return gw_head, gb_head


def _ends(lengths: Tensor | None, T: int, like: Tensor) -> dict[int, Tensor]:
    """``{t: rows [B] (1.0 where the row's length is t)}`` for every length present."""
    if lengths is None:
        return {T: like.new_ones(like.shape[0])}
    out = {}
    for t in sorted(set(lengths.tolist())):
        out[int(t)] = (lengths == t).to(like.dtype)
    return out
