"""The third-order nnPDA recurrence with its differentiable stack (Stogin, Mali & Giles 2020,
Definitions 3.2, 3.4 and 3.6) over one-hot inputs: the reference loop, the CPU fast path on token
buckets and the GPU kernels behind one entry point, :func:`nnpda_sequence`.

Members (M runs as one model, ``docs/design.md``): every argument with a leading member dimension
(``weight [M, n + 2 + m2, n, m1, m2 + 1]``, ``sensitivity [M]``, ``q0 [M, B, n]``, ``stack0 [M,
B, D, m2]``, ``tail0 [M, B, m2]``, ``ids [M, B, T]``); ``"reference"`` loops over the members
(:func:`~memrnn.ops.nnpda.reference.nnpda_member_reference`), ``"cpu"`` runs
:class:`~memrnn.ops.nnpda.cpu.NNPDASequence` with members (every member's rows and weight slices
in one bucketed product per step) where buckets pay, else the member reference; the Triton
kernels launch once per direction for all members (a grid of rows × members)."""

from __future__ import annotations

from typing import Literal

from torch import Tensor

from memrnn.ops.buckets import TokenBuckets, check_ids, member_buckets
from memrnn.ops.dispatch import choose, use_buckets
from memrnn.ops.nnpda.cpu import NNPDASequence
from memrnn.ops.nnpda.reference import (
    ACTIONS,
    activate_actions,
    nnpda_member_reference,
    nnpda_reference,
    nnpda_step,
)


def nnpda_sequence(
    weight: Tensor,
    sensitivity: Tensor,
    q0: Tensor,
    stack0: Tensor,
    tail0: Tensor,
    ids: Tensor,
    action: Literal["identity", "sigmoid", "clamp"] = "identity",
    *,
    impl: str | None = None,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Every state of the nnPDA over the input symbols ``ids [B, T]`` (checked by the caller).

    Args:
        weight: ``W [n + 2 + m2, n, m1, m2 + 1]`` (rows ``Q``, ``p+``, ``p−``, ``C``; index order
            output, state ``j``, input ``k``, reading ``l`` as in the paper).
        sensitivity: ``H``, a 0-d tensor (a learned one gets its gradient on every path).
        q0 ``[B, n]``, stack0 ``[B, D, m2]`` (top first), tail0 ``[B, m2]``: the initial state
            (the window-plus-tail stack of :mod:`memrnn.ops.stack`).
        action: ``"identity"`` (Definition 3.6), ``"sigmoid"`` or ``"clamp"``
            (:func:`memrnn.ops.nnpda.reference.activate_actions`).
        impl: ``None`` picks by device and dtype (:func:`memrnn.ops.dispatch.choose`): the Triton
            kernels on CUDA for float32/bfloat16/float16; on CPU the bucketed Function where
            buckets pay (:func:`memrnn.ops.dispatch.use_buckets`), else the reference loop.  Or
            ``"reference"``, ``"cpu"``, ``"triton"`` (CPU tensors only under ``TRITON_INTERPRET=1``).

    Returns:
        ``Q [B, T+1, n]``, ``K [B, T+1, D, m2]``, ``tail [B, T+1, m2]`` (index 0: the initial
        state) and ``p+ [B, T]`` of every step (not differentiable; for the overflow check of
        ``strict``).  The fast paths are first order (second derivatives: ``impl="reference"``
        or :func:`memrnn.reference_paths`).

    Members: every argument with the member dimension first (module docstring) -> ``Q [M, B,
    T+1, n]``, ``K [M, B, T+1, D, m2]``, ``tail [M, B, T+1, m2]``, ``p+ [M, B, T]``, member ``μ``
    exactly the call on its ``[μ]`` slices.
    """
    if action not in ACTIONS:
        raise ValueError(f"unknown action {action!r}; choose one of {', '.join(ACTIONS)}")
    if weight.dim() == 5:
        return _members(weight, sensitivity, q0, stack0, tail0, ids, action, impl)
    impl = choose(q0, impl)
    if impl == "triton" and ids.shape[1] > 0:
        from memrnn.ops.nnpda.triton import nnpda_triton

        return nnpda_triton(weight, sensitivity, q0, stack0, tail0, ids, action)
    if impl == "cpu" and ids.shape[1] > 0:
        buckets = TokenBuckets(ids, weight.shape[2])
        if use_buckets(buckets, ids.shape[0]):
            return NNPDASequence.apply(weight, sensitivity, q0, stack0, tail0, buckets, action)
    return nnpda_reference(weight, sensitivity, q0, stack0, tail0, ids, action)


def _members(weight, sensitivity, q0, stack0, tail0, ids, action, impl):
    M = weight.shape[0]
    args = (
        ("sensitivity", sensitivity, 1),
        ("q0", q0, 3),
        ("stack0", stack0, 4),
        ("tail0", tail0, 3),
        ("ids", ids, 3),
    )
    for name, t, dims in args:
        if t.dim() != dims or t.shape[0] != M:
            raise ValueError(
                f"with members every argument has the member dimension first: weight is "
                f"{tuple(weight.shape)} (M = {M}), so {name} must be {dims}-D with {M} first, got {tuple(t.shape)}"
            )
    impl = choose(q0, impl)
    if impl == "triton" and ids.shape[2] > 0:
        from memrnn.ops.nnpda.triton import nnpda_triton

        check_ids(ids, weight.shape[3])  # an id past the vocabulary would read the next member's weights
        return nnpda_triton(weight, sensitivity, q0, stack0, tail0, ids, action)
    if impl == "cpu" and ids.shape[2] > 0:
        buckets = member_buckets(ids, weight.shape[3])
        if use_buckets(buckets, ids.shape[0] * ids.shape[1]):
            return NNPDASequence.apply(weight, sensitivity, q0, stack0, tail0, buckets, action)
    return nnpda_member_reference(weight, sensitivity, q0, stack0, tail0, ids, action)


__all__ = [
    "ACTIONS",
    "activate_actions",
    "nnpda_member_reference",
    "nnpda_reference",
    "nnpda_sequence",
    "nnpda_step",
]
