"""The Elman recurrence ``h_t = (1 − α) h_{t−1} + α σ(pre_t + h_{t−1} Uᵀ)`` (Elman, Hewitt's
Simple RNN, the reservoirs): the reference loop, the CPU fast path and the GPU kernels behind one
entry point, :func:`elman_sequence`."""

from __future__ import annotations

from collections.abc import Callable

from torch import Tensor

from memrnn.ops.dispatch import choose
from memrnn.ops.elman.cpu import elman_cpu, elman_member_cpu
from memrnn.ops.elman.reference import elman_member_reference, elman_reference


def elman_sequence(
    pre: Tensor,
    weight_hh: Tensor,
    h0: Tensor,
    activation: str,
    fn: Callable[[Tensor], Tensor],
    leak: float = 1.0,
    *,
    impl: str | None = None,
) -> Tensor:
    """``pre [B, T, H]`` (projected inputs), ``weight_hh [H, H]``, ``h0 [B, H]`` -> ``hs [B, T+1, H]``
    (``hs[:, 0] = h0``).  ``activation`` names ``fn`` for the GPU kernels.

    ``impl``: ``None`` picks by device and dtype (:func:`memrnn.ops.dispatch.choose`: the Triton
    kernels on CUDA for float32/bfloat16/float16, else the CPU path), or ``"reference"``,
    ``"cpu"``, ``"triton"`` (on CPU tensors only under ``TRITON_INTERPRET=1``).

    Members (M runs as one model, ``docs/design.md``): ``pre [M, B, T, H]``, ``weight_hh [M, H,
    H]``, ``h0 [M, B, H]`` -> ``hs [M, B, T+1, H]``, member ``m`` exactly the call on its ``[m]``
    slices: the reference loops over the members, the CPU path batches its products over them
    (:class:`memrnn.ops.elman.cpu.ElmanSequence` with members), the GPU kernels take them as a grid axis
    (:class:`memrnn.ops.elman.triton.ElmanTriton` with members)."""
    if weight_hh.dim() == 3:
        return _members(pre, weight_hh, h0, activation, fn, leak, impl)
    impl = choose(pre, impl, triton_ok=_triton_knows(activation))
    if impl == "reference":
        return elman_reference(pre, weight_hh, h0, fn, leak)
    if impl == "cpu":
        return elman_cpu(pre, weight_hh, h0, fn, leak)
    from memrnn.ops.elman.triton import elman_triton

    return elman_triton(pre, weight_hh, h0, activation, leak)


def _members(pre, weight_hh, h0, activation, fn, leak, impl):
    M = weight_hh.shape[0]
    for name, t, dims in (("pre", pre, 4), ("h0", h0, 3)):
        if t.dim() != dims or t.shape[0] != M:
            raise ValueError(
                f"with members every argument has the member dimension first: weight_hh is "
                f"{tuple(weight_hh.shape)} (M = {M}), so {name} must be {dims}-D with {M} first, got {tuple(t.shape)}"
            )
    impl = choose(pre, impl, triton_ok=_triton_knows(activation))
    if impl == "reference":
        return elman_member_reference(pre, weight_hh, h0, fn, leak)
    if impl == "cpu":
        return elman_member_cpu(pre, weight_hh, h0, fn, leak)
    from memrnn.ops.elman.triton import elman_triton

    return elman_triton(pre, weight_hh, h0, activation, leak)


def _triton_knows(activation: str) -> bool:
    return activation in ("tanh", "sigmoid", "relu", "heaviside", "saturated_linear", "identity")


__all__ = ["elman_member_reference", "elman_reference", "elman_sequence"]
