"""Higher-order (tensor) contractions of recurrent networks, each with a slow reference.

* second order (Giles et al. 1990; Stogin et al. 2020 appendix A, equation 3):
  ``z_i = Σ_jk W_ijk s_j x_k``;
* third order (Stogin et al. 2020 Definition 3.6): ``z_o = Σ_jkl W_ojkl q_j x_k r_l``.

The input ``x`` is either dense ``[B, m]`` or given by token ids ``[B]`` (a one-hot input),
and no one-hot vector is ever multiplied.  For ids there are two exact ways, chosen by size:

* ``m ≥ 4·B`` (a large vocabulary): index each row's input slice ``W[..., k_b]`` and multiply,
  ``O(B·out·n)`` work, but ``B`` weight slices are copied and the backward pass scatters them;
* otherwise: contract the state first in one matrix product ``[B, n] × [n, out·m]`` and gather
  column ``k_b`` of the result, ``O(B·out·n·m)`` flops in one GEMM, which is faster for small
  vocabularies (measured on CPU, float32, B = 32: 4x faster at n = 128, m = 8, equal at
  m = 4B; ``benchmarks/nnpda_speed.py``).
"""

from __future__ import annotations

import torch
from torch import Tensor


def _check_tokens(tokens: Tensor) -> None:
    """Dtype only: the range of the ids is the caller's to check (one host sync per sequence,
    not per step; the layers do it in ``forward``)."""
    if tokens.dtype not in (torch.int64, torch.int32):
        raise ValueError(f"token ids must be an integer tensor, got dtype {tokens.dtype}")


def second_order(
    weight: Tensor, state: Tensor, x: Tensor | None = None, tokens: Tensor | None = None
) -> Tensor:
    """``z_i = Σ_jk W_ijk s_j x_k`` (Stogin et al. 2020 equation 3, before the activation).

    Args:
        weight: ``W [out, n, m]`` (next unit ``i``, current unit ``j``, input ``k``).
        state: ``s [B, n]``.
        x: dense input ``[B, m]``; or
        tokens: input ids ``[B]`` (``x = one_hot(tokens, m)``).

    Returns:
        ``z [B, out]``.
    """
    out, n, m = weight.shape
    if (x is None) == (tokens is None):
        raise ValueError("give exactly one of x (dense input) and tokens (ids of a one-hot input)")
    if tokens is not None:
        _check_tokens(tokens)
        if m >= 4 * tokens.shape[0]:
            slices = weight.permute(2, 0, 1)[tokens]  # [B, out, n]: the input slice W[:, :, k_b]
            return torch.bmm(slices, state[:, :, None])[:, :, 0]
    # contract the state first: one [B, n] x [n, out*m] matrix product, then the input.
    by_state = (state @ weight.permute(1, 0, 2).reshape(n, out * m)).view(-1, out, m)
    if tokens is not None:
        return by_state.gather(2, tokens[:, None, None].expand(-1, out, 1))[:, :, 0]
    return torch.bmm(by_state, x[:, :, None])[:, :, 0]


def second_order_reference(weight: Tensor, state: Tensor, x: Tensor) -> Tensor:
    """Equation 3 with explicit sums over ``j`` and ``k`` (slow)."""
    out, n, m = weight.shape
    rows = []
    for b in range(state.shape[0]):
        rows.append(
            torch.stack(
                [
                    sum(weight[i, j, k] * state[b, j] * x[b, k] for j in range(n) for k in range(m))
                    for i in range(out)
                ]
            )
        )
    return torch.stack(rows)


def third_order(
    weight: Tensor, state: Tensor, reading: Tensor, x: Tensor | None = None, tokens: Tensor | None = None
) -> Tensor:
    """``z_o = Σ_jkl W_ojkl q_j x_k r_l`` (Stogin et al. 2020 Definition 3.6, before the activations).

    Args:
        weight: ``W [out, n, m, L]`` (output ``o``, state ``j``, input ``k``, stack reading ``l``).
        state: ``q [B, n]``; reading: ``r [B, L]``.
        x: dense input ``[B, m]``; or tokens: input ids ``[B]``.

    Returns:
        ``z [B, out]``.
    """
    out, n, m, L = weight.shape
    if (x is None) == (tokens is None):
        raise ValueError("give exactly one of x (dense input) and tokens (ids of a one-hot input)")
    qr = (state[:, :, None] * reading[:, None, :]).reshape(-1, n * L)  # [B, n*L]
    if tokens is not None:
        _check_tokens(tokens)
        if m >= 4 * tokens.shape[0]:
            slices = weight.permute(2, 0, 1, 3).reshape(m, out, n * L)[tokens]  # [B, out, n*L]
            return torch.bmm(slices, qr[:, :, None])[:, :, 0]
    by_state = (qr @ weight.permute(1, 3, 0, 2).reshape(n * L, out * m)).view(-1, out, m)
    if tokens is not None:
        return by_state.gather(2, tokens[:, None, None].expand(-1, out, 1))[:, :, 0]
    return torch.bmm(by_state, x[:, :, None])[:, :, 0]


def third_order_reference(weight: Tensor, state: Tensor, reading: Tensor, x: Tensor) -> Tensor:
    """Definition 3.6's contraction with explicit sums over ``j, k, l`` (slow)."""
    out, n, m, L = weight.shape
    rows = []
    for b in range(state.shape[0]):
        rows.append(
            torch.stack(
                [
                    sum(
                        weight[o, j, k, l] * state[b, j] * x[b, k] * reading[b, l]
                        for j in range(n)
                        for k in range(m)
                        for l in range(L)
                    )
                    for o in range(out)
                ]
            )
        )
    return torch.stack(rows)
