"""A controller driving a nondeterministic stack over a whole sequence (DuSell & Chiang 2020,
2022; the vector stack of 2023): the sequence driver of :class:`memrnn.layers.StackRNN` with
those stacks, as :func:`memrnn.ops.stack_rnn.stack_rnn_sequence` is for the other memories.

At each step the controller reads ``[x_t ; r_{t−1}]`` and gives ``h_t``; the stack's head turns
``h_t`` into the PDA's log transition weights, the stack takes its step and the reading ``r_t``
(normalised ``α[t]``, or the expected top vectors) is what the controller reads next.  The stack
runs as one :class:`memrnn.ops.nondeterministic.NondeterministicRun` (C++ on CPU, Triton kernels on
CUDA; float32/float64; first order): each column of inner weights written once, not a
``[depth, depth]`` window copied and masked at every step, start times still log 0 skipped.
When nothing can ask for a gradient (``torch.no_grad``, ``torch.inference_mode``, or neither the
stack's state nor the first step's transition weights requiring one) the run keeps no history
(:class:`~memrnn.ops.nondeterministic.NondeterministicRun`'s ``history=False``: in C++, the last
``depth`` columns, so that a memory-limited stack's forward takes the memory of its state whatever
``T``), and the driver keeps no step's reading it does not return.
Elsewhere (other dtypes, ``torch.compile``/``export``, ``impl="cpu"``) the stack's torch step
runs after the controller's at each step, rows past their length frozen.  Both equal the layer's
reference loop over ``step`` (``tests/ops/test_nondeterministic*.py``); rows past their length run
on and are ignored (hidden states zero there, final state at each row's length).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple, Protocol, TypeVar

import torch
from torch import Tensor

from memrnn.core.state import state_where
from memrnn.ops.buckets import masked_outputs
from memrnn.ops.nondeterministic import NondeterministicRun, run_impl

S = TypeVar("S", bound=tuple)


class StackHeads(Protocol):
    """What :func:`nondeterministic_sequence` needs of the stack (the layers'
    ``NondeterministicStack`` and ``VectorNondeterministicStack``)."""

    states: int

    def transitions(self, h: Tensor) -> tuple[Tensor, ...]:
        """``h [B, N]`` -> the log weights ``push, repl [B, QS, QS]``, ``pop [B, QS, Q]`` (and the
        vector stack's log pushed vector ``[B, m]``)."""

    def reading(self, out: Any) -> Tensor:
        """The reading ``[B, width]`` from what a run's step returns."""

    def read(self, state: Any) -> Tensor:
        """The reading ``[B, width]`` at a stack state."""

    def update(self, state: Any, actions: tuple[Tensor, ...]) -> tuple[Any, Tensor]:
        """The torch step: the new stack state and ``overflow [B]``."""


def nondeterministic_sequence(
    x: Tensor,
    controller_step: Callable[[int, Tensor, S], tuple[Tensor, S]],
    controller_state: S,
    stack: StackHeads,
    stack_state: NamedTuple,
    mask: Tensor | None = None,
    *,
    readings: bool = False,
    final: bool = True,
    impl: str | None = None,
) -> tuple[Tensor, Tensor | None, S, NamedTuple | None]:
    """Run a controller and a nondeterministic stack over ``x [B, T, n]``, ``T ≥ 1``.

    Args:
        x: the inputs (their batch, length, device and dtype choose the run).
        controller_step: ``controller_step(t, r, cs) -> (h_t [B, N], new cs)``: the controller's
            step on ``[x_t ; r]`` (the layer's, which may project every ``x_t`` at once).
        controller_state: the controller's state before step 0.
        stack: the stack's heads and steps (:class:`StackHeads`).
        stack_state: ``(steps [B], gamma, alpha)`` (the vector stack: ``…, zeta, eta``), the
            layout of :mod:`memrnn.ops.nondeterministic`.
        mask: ``[B, T]`` real steps (right padding), or None for all.
        readings: also return the reading after each step.
        final: build the final stack state (False: outputs only; the run's
            ``[B, depth, depth, QS, QS]`` window is never built).
        impl: ``"native"``, ``"triton"`` (a run) or ``"cpu"``/``"reference"`` (the torch step);
            None picks by device and dtype (:func:`memrnn.ops.nondeterministic.run_impl`).

    Returns:
        ``h [B, T, N]`` and the readings ``[B, T, width]`` after each step (None unless
        ``readings``), zero at padded steps, each row's final controller state and final stack state (None
        unless ``final``) at its length.
    """
    if run_impl(x, impl) not in ("native", "triton"):
        h, r, cs, ms = _torch_sequence(
            x, controller_step, controller_state, stack, stack_state, mask, readings
        )
        return h, r, cs, (ms if final else None)
    T = x.shape[1]
    lengths = None if mask is None else mask.sum(1)
    vector = "zeta" in stack_state._fields
    zeta = stack_state.zeta if vector else None
    # each row's last step, whose η is the vector stack's final one (rows of length 0: any)
    last = None if lengths is None else (lengths - 1).clamp(min=0)
    cs = controller_state
    reading = stack.read(stack_state)
    hs, rs = [], []
    run, eta = None, None
    masks = mask.unbind(1) if mask is not None else [None] * T
    for t, m_t in enumerate(masks):
        h, new = controller_step(t, reading, cs)
        cs = new if m_t is None else state_where(m_t, new, cs)
        actions = stack.transitions(h)
        if run is None:  # made at the first step, when its weights say whether a gradient can be asked for
            run = NondeterministicRun(
                stack_state.gamma, stack_state.alpha, T, states=stack.states, lengths=lengths if final else None,
                zeta=zeta, impl=run_impl(x, impl), history=_history(stack_state, actions),
            )  # fmt: skip
        out = run.step(*actions)
        reading = stack.reading(out)
        if vector and final:  # η is part of the vector stack's state: each row's at its last step
            pick = last is not None and eta is not None
            eta = torch.where((last == t)[:, None, None], out[1], eta) if pick else out[1]
        hs.append(h)
        if readings:
            rs.append(reading)
    h_all, r_all = _outputs(hs, rs if readings else None, mask)
    if not final:
        return h_all, r_all, cs, None
    memory = run.final()  # (gamma, alpha[, zeta]), each row's after its own last step
    if vector:  # and η after that step
        memory += (eta,)
    if lengths is not None:  # rows that took no step keep their state as it came, bit for bit
        memory = state_where(lengths == 0, tuple(stack_state[1:]), memory)
    steps = stack_state.steps + (T if lengths is None else lengths.to(stack_state.steps.dtype))
    return h_all, r_all, cs, type(stack_state)(steps, *memory)


def _history(stack_state: NamedTuple, actions: tuple[Tensor, ...]) -> bool:
    """Whether a gradient can be asked for through the run: gradients on, and the stack's state or
    the first step's transition weights requiring one (those of the later steps come from the same
    parameters, inputs and controller state; a run without history refuses a step whose weights
    require one)."""
    return torch.is_grad_enabled() and any(
        isinstance(t, Tensor) and t.requires_grad for t in (*stack_state, *actions)
    )


def _torch_sequence(
    x: Tensor,
    controller_step: Callable[[int, Tensor, S], tuple[Tensor, S]],
    cs: S,
    stack: StackHeads,
    ms: NamedTuple,
    mask: Tensor | None,
    readings: bool,
) -> tuple[Tensor, Tensor | None, S, NamedTuple]:
    """:func:`nondeterministic_sequence` off the runs: the stack's torch step after the
    controller's, rows past their length frozen."""
    reading = stack.read(ms)
    hs, rs = [], []
    for t in range(x.shape[1]):
        h, new = controller_step(t, reading, cs)
        new_ms, _ = stack.update(ms, stack.transitions(h))
        if mask is None:
            cs, ms = new, new_ms
        else:
            cs, ms = state_where(mask[:, t], new, cs), state_where(mask[:, t], new_ms, ms)
        reading = stack.read(ms)
        hs.append(h)
        rs.append(reading)
    h_all, r_all = _outputs(hs, rs if readings else None, mask)
    return h_all, r_all, cs, ms


def _outputs(hs: list[Tensor], rs: list[Tensor] | None, mask: Tensor | None) -> tuple[Tensor, Tensor | None]:
    """The steps' ``h_t`` and readings stacked, ``[B, T, …]``, zero at padded steps."""
    h = masked_outputs(torch.stack(hs, 1), mask)[0]
    return h, (None if rs is None else masked_outputs(torch.stack(rs, 1), mask)[0])
