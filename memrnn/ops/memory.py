"""What every memory's CPU kernel shares (the kernels of :class:`memrnn.ops.stack_rnn.cpu.StackRNNSequence`,
one per memory in ``memrnn/ops/<memory>/cpu.py``), and :class:`MemorySpec`, the one description of a
memory that every table of the fused paths is derived from (:mod:`memrnn.ops.stack_rnn.specs`).

A kernel keeps its structure in the rows of ``z`` after ``h`` (``zmem [T+1, R, B]``, transposed,
batch last: :mod:`memrnn.ops.stack_rnn.cpu`'s layout) where the controller reads them in place, or
in its own buffers; every per-step view is made once.  A kernel class sets ``n_actions``,
``softmax``, ``order`` (kernel row ``j`` holds the layer's action ``order[j]``) and ``rows(D, m)``,
and implements ``forward``, ``start_backward``, ``local``, ``backward``, ``finals``,
``add_final_grads``, ``initial_grads`` and ``native_grads``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor


@dataclass(frozen=True)
class MemorySpec:
    """One memory of the stack RNN's fused paths (:func:`memrnn.ops.stack_rnn.stack_rnn_sequence`).

    Attributes:
        name: the layer's ``Memory.kind`` and the fused paths' ``memory=`` (e.g. ``"deque"``).
        code: the memory's one integer code: the Triton kernels' constexpr ``MEM`` and the C++
            loops' ``MemoryKind`` (``memrnn/ops/stack_rnn/memory_kinds.h``, generated from the specs).
        actions: the names of the head's first outputs, the layer's order (``Memory.actions``).
        action_activation: ``"softmax"`` over the actions or a ``"sigmoid"`` each.
        reads: cells of width ``m`` in the reading (the DeQue reads both ends: 2).
        fields: the state's field names, batch first (the layer's ``Memory.State``).
        value_activation: the layer's default for the pushed or written vector.
        triton, native: whether the Triton kernels and the C++ loops cover it.
        kernel: its CPU kernel class (a :class:`MemoryKernel`).
        step: its batched torch step under autograd (the reference of
            :func:`memrnn.ops.stack_rnn.stack_rnn_sequence`): ``(state fields, actions [B, k] (the
            layer's order, activated), value [B, units])`` -> ``(new fields, reading [B, reads·m],
            overflow [B])``.
        read: the reading of a state's fields ``[B, reads·m]`` (the initial state's).
    """

    name: str
    code: int
    actions: tuple[str, ...]
    action_activation: Literal["softmax", "sigmoid"]
    reads: int
    fields: tuple[str, ...]
    value_activation: str
    triton: bool
    native: bool
    kernel: type[MemoryKernel]
    step: Callable[[tuple[Tensor, ...], Tensor, Tensor], tuple[tuple[Tensor, ...], Tensor, Tensor]]
    read: Callable[[tuple[Tensor, ...]], Tensor]

    @property
    def n_actions(self) -> int:
        return len(self.actions)

    def __post_init__(self) -> None:
        k = self.kernel
        if (
            k.n_actions != self.n_actions
            or k.softmax != (self.action_activation == "softmax")
            or k.reads != self.reads
        ):
            raise ValueError(f"memory spec {self.name!r} disagrees with its kernel {k.__name__}")


def views(of):
    """A kernel attribute: ``of(kernel)`` unbound along time (one view per step), made on first use."""
    return functools.cached_property(lambda k: of(k).unbind(0))


# -- memories ---------------------------------------------------------------------------------
# Each kernel keeps its structure in the rows of ``z`` after ``h`` (``zmem [T+1, R, B]``) where
# the controller reads them in place, or in its own buffers; every per-step view is made once.
class MemoryKernel:
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


def window_at(P: Tensor, start: Tensor, D: int) -> Tensor:
    """``P [L, m, B]`` read at ``P[start_b : start_b + D]`` for each row ``b``: ``[B, D, m]`` (a
    sliding-buffer memory's final window at each row's own length)."""
    idx = start[:, None] + torch.arange(D, device=start.device)  # [B, D]
    return P.permute(2, 0, 1).gather(1, idx[..., None].expand(-1, -1, P.shape[1]))


def slide(P: Tensor, T: int, D: int) -> list[Tensor]:
    """``[P[t : t+D] for t in 0..T]`` as views made by one call (the DeQue's top half)."""
    _, m, B = P.shape
    return P.as_strided((T + 1, D, m, B), (m * B, m * B, B, 1), P.storage_offset()).unbind(0)


def windows(P: Tensor, T: int, D: int) -> list[Tensor]:
    """``[P[T−t : T−t+D] for t in 0..T]`` as views made by one call."""
    _, m, B = P.shape
    return P.as_strided((T + 1, D, m, B), (m * B, m * B, B, 1), P.storage_offset()).unbind(0)[::-1]
