"""The Jordan recurrence (:class:`memrnn.layers.JordanRNN`): the reference loop, the CPU fast path
(:class:`memrnn.ops.jordan.cpu.JordanSequence`) and the GPU kernels behind one entry point,
:func:`jordan_sequence`."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from memrnn.ops.dispatch import choose
from memrnn.ops.jordan.cpu import JordanSequence

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
    kernels keep ``r`` in registers, so feedback sizes over 128 take the CPU path."""
    from_names = activation in ELEMENTWISE and output_activation in (*ELEMENTWISE, "identity", "softmax")
    impl = choose(pre, impl, triton_ok=from_names and weight_fb.shape[1] <= 128)
    if impl == "reference":
        return jordan_reference(pre, weight_fb, weight_out, r0, *fns)
    if impl == "cpu":
        return JordanSequence.apply(pre, weight_fb, weight_out, r0, *fns, output_activation)
    from memrnn.ops.jordan.triton import jordan_triton

    return jordan_triton(pre, weight_fb, weight_out, r0, activation, output_activation)


__all__ = ["jordan_reference", "jordan_sequence"]
