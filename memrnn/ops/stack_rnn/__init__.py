"""A controller RNN driving a differentiable memory (superposition stack, stratification stack,
neural queue and DeQue, tape, the Tape-RNN's jump tape) over a whole sequence: :func:`stack_rnn_sequence`, the fast path of
:class:`memrnn.layers.StackRNN`.  Its reference is the layer's own loop over ``step``, built on the
memories' batched steps (:mod:`memrnn.ops.superposition`, :mod:`memrnn.ops.stratification`,
:mod:`memrnn.ops.tape`), each tested against a literal transcription of its paper."""

from __future__ import annotations

from collections.abc import Sequence

from torch import Tensor

from memrnn.ops.dispatch import choose
from memrnn.ops.stack_rnn import reference
from memrnn.ops.stack_rnn.cpu import StackRNNSequence
from memrnn.ops.stack_rnn.specs import KERNELS, MEMORIES, NATIVE_MEMORIES, SPECS, TRITON_MEMORIES

_CONTROLLERS = ("lstm", "elman")
# the memories each path covers, from their specs (the names the benchmarks and tests import)
_MEMORIES, _TRITON_MEMORIES, _NATIVE_MEMORIES = MEMORIES, TRITON_MEMORIES, NATIVE_MEMORIES


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
    value_mlp: Sequence[tuple[Tensor, Tensor]] | None = None,
    impl: str | None = None,
    finals: bool = True,
) -> tuple[Tensor, ...]:
    """Run the controller and the memory over ``x [B, T, n]``.

    Args:
        w_in: ``[G, n + m]`` the controller's input weights over ``[x_t ; r_{t−1}]``; ``b [G]``;
            ``w_rec [G, N]``.  LSTM gate blocks in the order o, i, f, g.
        w_head, b_head: ``[K, N]``, ``[K]``: the memory's head (actions first, then the value);
            with ``value_mlp``, the ``k`` action rows only (``[k, N]``, ``[k]``).
        h0, c0: ``[B, N]`` (``c0`` None for an Elman controller); ``memory0``: the memory's
            state fields, batch first.
        lengths: ``[B]`` each row's length (right padding), None for all ``T``.
        overflow: compute what each step drops out of the window.
        value_mlp: the value's MLP (the Tape-RNN's write head, Delétang et al. 2023), or None
            (the value is the head's last rows): its linear layers ``((w_1, b_1), …, (w_L,
            b_L))``, ``w_l [H_l, H_{l−1}]``, ``b_l [H_l]``, ``H_0 = N``, ``H_L`` the value's
            units (``m``, the DeQue's ``2m``); the value is ``w_L relu(… relu(w_1 h + b_1) …) +
            b_L``, then ``value_activation``.  The Triton kernels do not cover it: a call with a
            value MLP runs the ``"cpu"`` path on CUDA and under (or with) ``impl="triton"``.
        impl: ``"reference"`` (the loop over the memories' batched torch steps under autograd,
            :func:`memrnn.ops.stack_rnn.reference.stack_rnn_reference`), ``"triton"`` (CUDA, float32/bfloat16/float16: two persistent kernels,
            :mod:`memrnn.ops.stack_rnn.triton`), ``"cpu"`` (the hand-written BPTT of
            :mod:`memrnn.ops.stack_rnn.cpu`, any device) or ``"native"`` (the same with its time
            loops in C++, ``native.cpp``: CPU, float32/float64, every memory here); None picks by device and dtype (:func:`memrnn.ops.dispatch.choose`).
        finals: compute each row's final state.  With False (a caller that needs the outputs
            only, :meth:`memrnn.layers.StackRNN.outputs`) the final ``h``, ``c`` and memory fields
            are returned as None, and the memory may trim its window to the cells that can still
            be read before step ``T`` (the superposition stack on the ``"cpu"`` and ``"native"``
            paths: :meth:`~memrnn.ops.superposition.cpu.SuperpositionKernel._live`); the outputs
            and every gradient are the same, bit for bit.  (``T``, not ``max(lengths)``: running
            fewer steps changes the C++ loop's blocks of input projections, hence the last bits;
            memrnn's collators pad to the longest row, so the two agree.)

    Returns:
        ``h [B, T, N]``, ``r [B, T, m]`` (steps 1..T), then each row's final ``h``, ``c`` (None
        for Elman) and memory fields at its length, and ``overflow [B, T]``.

    Without gradients (``torch.no_grad``, ``torch.inference_mode``, or no argument requiring
    one) the ``"cpu"``, ``"native"`` and ``"triton"`` paths keep no history: memory O(B × the
    state) besides the outputs instead of O(T × B × the state), the same results bit for bit
    (:class:`memrnn.ops.stack_rnn.cpu.NoHistory`; the kernels' ``NO_HISTORY``,
    :mod:`memrnn.ops.stack_rnn.triton`); a length outside ``[0, T]`` is then a ``ValueError``.

    Members (M runs as one model, ``docs/design.md``): every argument with a leading member
    dimension, ``x [M, B, T, n]``, ``w_in [M, G, n + m]``, ``b [M, G]``, ``w_rec [M, G, N]``,
    ``w_head [M, K, N]``, ``b_head [M, K]``, ``h0``, ``c0`` ``[M, B, N]``, the memory's fields
    ``[M, B, ...]``, ``lengths [M, B]``, the value MLP's ``[M, ...]`` -> every result ``[M, B,
    ...]``, member ``m`` exactly the call on its ``[m]`` slices: the reference loops over the
    members (:func:`memrnn.ops.stack_rnn.reference.stack_rnn_member_reference`); ``"triton"``
    (picked as for one run: CUDA, no value MLP) launches each kernel once for all members, a grid
    of row tiles × members, each program on its member's weights and rows; ``"native"`` and
    ``"cpu"`` run :class:`StackRNNSequence` with members (its C++ or Python loops: the memory on
    the members' ``M·B`` rows as one batch, the products per member).
    """
    if not finals:
        return _without_finals(
            x, w_in, b, w_rec, w_head, b_head, h0, c0, memory0, controller=controller, activation=activation,
            memory=memory, value_activation=value_activation, lengths=lengths, overflow=overflow,
            value_mlp=value_mlp, impl=impl,
        )  # fmt: skip
    return _sequence(
        x, w_in, b, w_rec, w_head, b_head, h0, c0, memory0, controller=controller, activation=activation,
        memory=memory, value_activation=value_activation, lengths=lengths, overflow=overflow,
        value_mlp=value_mlp, impl=impl,
    )  # fmt: skip


def _without_finals(*args, **options):
    """:func:`stack_rnn_sequence` with ``finals=False`` (its docstring): the finals None."""
    h, r, *rest, ov = _sequence(*args, finals=False, **options)
    return (h, r, *[None] * len(rest), ov)  # (the reference and Triton paths compute them anyway)


def _sequence(
    x, w_in, b, w_rec, w_head, b_head, h0, c0, memory0, *, controller, activation, memory, value_activation,
    lengths, overflow, value_mlp, impl, finals=True,
):  # fmt: skip
    """:func:`stack_rnn_sequence` (its docstring), every step."""
    if w_rec.dim() == 3:
        return _members(
            x, w_in, b, w_rec, w_head, b_head, h0, c0, memory0, controller=controller, activation=activation,
            memory=memory, value_activation=value_activation, lengths=lengths, overflow=overflow,
            value_mlp=value_mlp, impl=impl, finals=finals,
        )  # fmt: skip
    mlp = _check_value_mlp(value_mlp, w_head, memory, memory0)
    triton_ok = memory in _TRITON_MEMORIES and not mlp
    impl = choose(x, impl, triton_ok=triton_ok, native_ok=memory in _NATIVE_MEMORIES)
    if impl == "triton" and mlp:  # asked for by name: the kernels have no value MLP
        impl = "cpu"
    if impl == "reference":
        return reference.stack_rnn_reference(  # looked up at the call: tests spy on it
            x, w_in, b, w_rec, w_head, b_head, h0, c0, memory0, controller=controller, activation=activation,
            memory=memory, value_activation=value_activation, lengths=lengths, overflow=overflow, value_mlp=mlp,
        )  # fmt: skip
    if impl == "triton":
        from memrnn.ops.stack_rnn.triton import stack_rnn_triton

        return stack_rnn_triton(
            x, w_in, b, w_rec, w_head, b_head, h0, c0, memory0, controller=controller,
            activation=activation, memory=memory, value_activation=value_activation, lengths=lengths,
        )  # fmt: skip
    from memrnn.ops.stack_rnn.opaque import hand_written  # torch._dynamo, loaded on the first run

    spec = (
        controller,
        activation,
        memory,
        value_activation,
        bool(overflow),
        impl == "native",
        len(mlp),
        finals,
    )
    flat = [t for layer in mlp for t in layer]
    return hand_written(x, w_in, b, w_rec, w_head, b_head, h0, c0, lengths, spec, *flat, *memory0)


def _members(
    x, w_in, b, w_rec, w_head, b_head, h0, c0, memory0, *, lengths, value_mlp, impl, finals, **options
):
    """:func:`stack_rnn_sequence` with members (its docstring): shapes checked, then the member
    reference or :class:`StackRNNSequence` with members."""
    M = w_rec.shape[0]
    named = [("x", x, 4), ("w_in", w_in, 3), ("b", b, 2), ("w_head", w_head, 3), ("b_head", b_head, 2)]
    named += [("h0", h0, 3), ("c0", c0, 3), ("lengths", lengths, 2)]
    named += [(f"memory0[{i}]", f, f.dim()) for i, f in enumerate(memory0)]
    for i, (w, bias) in enumerate(value_mlp or ()):
        named += [(f"value_mlp[{i}] weight", w, 3), (f"value_mlp[{i}] bias", bias, 2)]
    for name, t, dims in named:
        if t is not None and (t.dim() != dims or t.shape[0] != M or t.dim() < 2):
            raise ValueError(
                f"with members every argument has the member dimension first: w_rec is {tuple(w_rec.shape)} "
                f"(M = {M}), so {name} must be {dims}-D with {M} first, got {tuple(t.shape)}"
            )
    rows = [(n, t.shape[1]) for n, t, _ in named if t is not None and n in ("h0", "c0", "lengths")]
    rows += [(n, t.shape[1]) for n, t, _ in named if n.startswith("memory0")]
    bad = [(n, r) for n, r in rows if r != x.shape[1]]
    if bad:
        raise ValueError(f"{bad[0][0]} has {bad[0][1]} rows per member; x has {x.shape[1]} (x [M, B, T, n])")
    # the value MLP's shapes, as one member's
    one = None if value_mlp is None else [(w[0], bias[0]) for w, bias in value_mlp]
    mlp = _check_value_mlp(one, w_head[0], options["memory"], tuple(f[0] for f in memory0))
    mlp = tuple(value_mlp) if mlp else ()
    triton_ok = options["memory"] in _TRITON_MEMORIES and not mlp
    if impl == "triton" and not triton_ok:  # asked for by name: the kernels have no value MLP
        impl = "cpu"
    impl = choose(x, impl, triton_ok=triton_ok, native_ok=options["memory"] in _NATIVE_MEMORIES)
    if impl == "reference":
        return reference.stack_rnn_member_reference(
            x, w_in, b, w_rec, w_head, b_head, h0, c0, memory0, lengths=lengths, value_mlp=mlp, **options
        )
    if impl == "triton":  # one launch per direction for all members (a grid of row tiles × members)
        from memrnn.ops.stack_rnn.triton import stack_rnn_triton

        names = ("controller", "activation", "memory", "value_activation")
        kw = {k: options[k] for k in names}
        return stack_rnn_triton(x, w_in, b, w_rec, w_head, b_head, h0, c0, memory0, lengths=lengths, **kw)
    from memrnn.ops.stack_rnn.opaque import hand_written  # torch._dynamo, loaded on the first run

    names = ("controller", "activation", "memory", "value_activation")
    spec = (*(options[k] for k in names), bool(options["overflow"]), impl == "native", len(mlp), finals)
    flat = [t for layer in mlp for t in layer]
    return hand_written(x, w_in, b, w_rec, w_head, b_head, h0, c0, lengths, spec, *flat, *memory0)


def _check_value_mlp(
    value_mlp: Sequence[tuple[Tensor, Tensor]] | None,
    w_head: Tensor,
    memory: str,
    memory0: tuple[Tensor, ...],
) -> tuple[tuple[Tensor, Tensor], ...]:
    """``value_mlp`` as a tuple of ``(weight, bias)`` pairs (empty for None), its shapes checked
    against the controller's ``N`` (``w_head [k, N]``), each other and the memory's value."""
    if value_mlp is None:
        return ()
    layers = tuple(value_mlp)
    if not layers or not all(isinstance(p, (tuple, list)) and len(p) == 2 for p in layers):
        raise ValueError(f"value_mlp must be a non-empty sequence of (weight, bias) pairs, got {value_mlp!r}")
    if memory not in KERNELS:
        raise ValueError(f"unknown memory {memory!r}; the fused paths cover {', '.join(KERNELS)}")
    kernel = KERNELS[memory]
    k, units = kernel.n_actions, kernel.reads * kernel.dims(memory0)[1]
    if w_head.dim() != 2 or w_head.shape[0] != k:
        raise ValueError(
            f"with a value_mlp, w_head holds the {memory!r} memory's {k} action rows only; got "
            f"w_head of shape {tuple(w_head.shape)}"
        )
    n_in = w_head.shape[1]
    for i, (w, bias) in enumerate(layers):
        if w.dim() != 2 or w.shape[1] != n_in or bias.shape != (w.shape[0],):
            raise ValueError(
                f"value_mlp layer {i}: expected a weight [H, {n_in}] and a bias [H], got "
                f"{tuple(w.shape)} and {tuple(bias.shape)}"
            )
        n_in = w.shape[0]
    if n_in != units:
        raise ValueError(
            f"value_mlp's last layer gives {n_in} units; the {memory!r} memory's value has {units}"
        )
    return tuple((w, bias) for w, bias in layers)


__all__ = ["SPECS", "StackRNNSequence", "fused_kinds", "stack_rnn_sequence"]
