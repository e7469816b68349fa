"""A controller RNN driving a differentiable memory (superposition stack, stratification stack,
neural queue and DeQue, tape, the Tape-RNN's jump tape) over a whole sequence: :func:`stack_rnn_sequence`, the fast path of
:class:`memrnn.layers.StackRNN`.  Its reference is the layer's own loop over ``step``, built on the
memories' batched steps (:mod:`memrnn.ops.superposition`, :mod:`memrnn.ops.stratification`,
:mod:`memrnn.ops.tape`), each tested against a literal transcription of its paper."""

from __future__ import annotations

from torch import Tensor

from memrnn.ops.dispatch import choose
from memrnn.ops.stack_rnn.cpu import StackRNNSequence

_CONTROLLERS = ("lstm", "elman")
_MEMORIES = ("superposition", "stratification", "queue", "tape", "tape_jump", "deque")  # the CPU kernels'
_TRITON_MEMORIES = ("superposition", "stratification", "queue", "tape", "tape_jump", "deque")
_NATIVE_MEMORIES = _MEMORIES  # native.cpp covers every one


def fused_kinds() -> frozenset[tuple[str, str]]:
    """The (controller, memory) pairs :func:`stack_rnn_sequence` covers."""
    return frozenset((c, m) for c in _CONTROLLERS for m in _MEMORIES)


def stack_rnn_sequence(
    x: Tensor,
    w_in: Tensor,
    b: Tensor,
    w_rec: Tensor,
    w_head: Tensor,
    b_head: Tensor,
    h0: Tensor,
    c0: Tensor | None,
    memory0: tuple[Tensor, ...],
    *,
    controller: str,
    activation: str,
    memory: str,
    value_activation: str,
    lengths: Tensor | None = None,
    overflow: bool = False,
    impl: str | None = None,
) -> tuple[Tensor, ...]:
    """Run the controller and the memory over ``x [B, T, n]``.

    Args:
        w_in: ``[G, n + m]`` the controller's input weights over ``[x_t ; r_{t−1}]``; ``b [G]``;
            ``w_rec [G, N]``.  LSTM gate blocks in the order o, i, f, g.
        w_head, b_head: ``[K, N]``, ``[K]``: the memory's head (actions first, then the value).
        h0, c0: ``[B, N]`` (``c0`` None for an Elman controller); ``memory0``: the memory's
            state fields, batch first.
        lengths: ``[B]`` each row's length (right padding), None for all ``T``.
        overflow: compute what each step drops out of the window.
        impl: ``"triton"`` (CUDA, float32/bfloat16/float16: two persistent kernels,
            :mod:`memrnn.ops.stack_rnn.triton`), ``"cpu"`` (the hand-written BPTT of
            :mod:`memrnn.ops.stack_rnn.cpu`, any device) or ``"native"`` (the same with its time
            loops in C++, ``native.cpp``: CPU, float32/float64, every memory here); None picks by device and dtype (:func:`memrnn.ops.dispatch.choose`).

    Returns:
        ``h [B, T, N]``, ``r [B, T, m]`` (steps 1..T), then each row's final ``h``, ``c`` (None
        for Elman) and memory fields at its length, and ``overflow [B, T]``.
    """
    impl = choose(x, impl, triton_ok=memory in _TRITON_MEMORIES, native_ok=memory in _NATIVE_MEMORIES)
    if impl == "triton":
        from memrnn.ops.stack_rnn.triton import stack_rnn_triton

        return stack_rnn_triton(
            x, w_in, b, w_rec, w_head, b_head, h0, c0, memory0, controller=controller,
            activation=activation, memory=memory, value_activation=value_activation, lengths=lengths,
        )  # fmt: skip
    from memrnn.ops.stack_rnn.opaque import hand_written  # torch._dynamo, loaded on the first run

    spec = (controller, activation, memory, value_activation, bool(overflow), impl == "native")
    return hand_written(x, w_in, b, w_rec, w_head, b_head, h0, c0, lengths, spec, *memory0)


__all__ = ["StackRNNSequence", "fused_kinds", "stack_rnn_sequence"]
