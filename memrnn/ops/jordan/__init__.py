"""The Jordan recurrence (:class:`memrnn.layers.JordanRNN`): the reference loop, the CPU fast path
(:class:`memrnn.ops.jordan.cpu.JordanSequence`) and the GPU kernels behind one entry point,
:func:`jordan_sequence`."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from memrnn.ops.dispatch import choose
from memrnn.ops.jordan.cpu import JordanSequence
from memrnn.ops.members import per_member

ELEMENTWISE = ("tanh", "sigmoid", "relu", "heaviside", "saturated_linear")


def jordan_reference(
    pre: Tensor,
    weight_fb: Tensor,
    weight_out: Tensor,
    r0: Tensor,
    activation: Callable[[Tensor], Tensor],
    output_activation: Callable[[Tensor], Tensor],
) -> tuple[Tensor, Tensor]:
    """``h_t = σ(pre_t + r_{t−1} Uᵀ)``, ``r_t = σ_o(h_t Eᵀ)`` as a loop under autograd: ``pre
    [T, B, H]`` (time-major), ``U [H, F]``, ``E [F, H]``, ``r0 [B, F]`` -> ``hs [T, B, H]``,
    ``rs [T+1, B, F]``."""
    r, hs, rs = r0, [], [r0]
    for pre_t in pre.unbind(0):
        h = activation(pre_t + r @ weight_fb.t())
        r = output_activation(h @ weight_out.t())
        hs.append(h)
        rs.append(r)
    hs_t = torch.stack(hs, 0) if hs else pre.new_zeros(pre.shape)
    return hs_t, torch.stack(rs, 0)


def jordan_member_reference(
    pre: Tensor,
    weight_fb: Tensor,
    weight_out: Tensor,
    r0: Tensor,
    activation: Callable[[Tensor], Tensor],
    output_activation: Callable[[Tensor], Tensor],
) -> tuple[Tensor, Tensor]:
    """Members: member ``m`` is :func:`jordan_reference` on its ``[m]`` slices: ``pre [M, T, B, H]``,
    ``U [M, H, F]``, ``E [M, F, H]``, ``r0 [M, B, F]`` -> ``hs [M, T, B, H]``, ``rs [M, T+1, B, F]``."""
    return per_member(
        jordan_reference, pre.shape[0], pre, weight_fb, weight_out, r0, activation, output_activation
    )


def jordan_sequence(
    pre: Tensor,
    weight_fb: Tensor,
    weight_out: Tensor,
    r0: Tensor,
    activation: str,
    output_activation: str,
    fns: tuple[Callable[[Tensor], Tensor], Callable[[Tensor], Tensor]],
    *,
    impl: str | None = None,
) -> tuple[Tensor, Tensor]:
    """``pre [T, B, H]`` (time-major) -> ``hs [T, B, H]``, ``rs [T+1, B, F]``; ``activation`` and
    ``output_activation`` name ``fns``.  ``impl`` as :func:`memrnn.ops.elman.elman_sequence`; the
    kernels keep ``r`` in registers, so feedback sizes over 128 take the CPU path.

    Members (M runs as one model, ``docs/design.md``): every argument with a leading member
    dimension, ``pre [M, T, B, H]``, ``weight_fb [M, H, F]``, ``weight_out [M, F, H]``, ``r0 [M, B,
    F]`` -> ``hs [M, T, B, H]``, ``rs [M, T+1, B, F]``, member ``m`` exactly the call on its ``[m]``
    slices: the reference loops over the members, the CPU path batches its products over them
    (:class:`memrnn.ops.jordan.cpu.JordanSequence` with members), the GPU kernels launch once per
    direction for all members (a grid of row tiles × members)."""
    from_names = activation in ELEMENTWISE and output_activation in (*ELEMENTWISE, "identity", "softmax")
    triton_ok = from_names and weight_fb.shape[-1] <= 128
    if weight_fb.dim() == 3:
        return _members(pre, weight_fb, weight_out, r0, activation, output_activation, fns, impl, triton_ok)
    impl = choose(pre, impl, triton_ok=triton_ok)
    if impl == "reference":
        return jordan_reference(pre, weight_fb, weight_out, r0, *fns)
    if impl == "cpu":
        return JordanSequence.apply(pre, weight_fb, weight_out, r0, *fns, output_activation)
    from memrnn.ops.jordan.triton import jordan_triton

    return jordan_triton(pre, weight_fb, weight_out, r0, activation, output_activation)


def _members(pre, weight_fb, weight_out, r0, activation, output_activation, fns, impl, triton_ok):
    M = weight_fb.shape[0]
    for name, t, dims in (("pre", pre, 4), ("weight_out", weight_out, 3), ("r0", r0, 3)):
        if t.dim() != dims or t.shape[0] != M:
            raise ValueError(
                f"with members every argument has the member dimension first: weight_fb is "
                f"{tuple(weight_fb.shape)} (M = {M}), so {name} must be {dims}-D with {M} first, got {tuple(t.shape)}"
            )
    impl = choose(pre, impl, triton_ok=triton_ok)
    if impl == "reference":
        return jordan_member_reference(pre, weight_fb, weight_out, r0, *fns)
    if impl == "cpu":
        return JordanSequence.apply(pre, weight_fb, weight_out, r0, *fns, output_activation)
    from memrnn.ops.jordan.triton import jordan_triton

    return jordan_triton(pre, weight_fb, weight_out, r0, activation, output_activation)


__all__ = ["jordan_member_reference", "jordan_reference", "jordan_sequence"]
