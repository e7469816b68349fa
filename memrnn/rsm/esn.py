"""The echo state network baseline of Paaßen et al. 2021 (Jaeger & Haas 2004): a frozen
:class:`~memrnn.layers.reservoir.Reservoir` and a linear readout ``y_t = V h_t + c`` fitted in
closed form by ridge regression, the bias not regularized (:mod:`memrnn.ops.ridge`).

The readout's sufficient statistics ``H̃ᵀH̃`` and ``H̃ᵀY`` are accumulated batch by batch
(:meth:`EchoStateNetwork.partial_fit`), so a data set of any size streams through once;
:meth:`EchoStateNetwork.solve` then sets the readout.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from memrnn.core.checks import finite_float, nonnegative_int, positive_int
from memrnn.layers.reservoir import Reservoir
from memrnn.ops.ridge import RidgeStats


class EchoStateNetwork(nn.Module):
    """Reservoir + ridge readout.

    Args:
        reservoir: the frozen reservoir (``input_size`` n, ``units`` m).
        output_size: ``L``.
        alpha: ridge penalty on ``V``.
        washout: initial steps of each sequence left out of the fit.

    Buffers: ``weight [L, m]``, ``bias [L]``.
    """

    def __init__(self, reservoir: Reservoir, output_size: int, alpha: float = 1e-6, washout: int = 0) -> None:
        super().__init__()
        positive_int("output_size", output_size)
        nonnegative_int("washout", washout)
        finite_float("alpha", alpha, nonnegative=True)
        self.reservoir, self.output_size, self.alpha, self.washout = reservoir, output_size, alpha, washout
        self.register_buffer("weight", torch.zeros(output_size, reservoir.units, dtype=torch.float64))
        self.register_buffer("bias", torch.zeros(output_size, dtype=torch.float64))
        self._stats: RidgeStats | None = None

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}, alpha={self.alpha}, washout={self.washout}"

    @torch.no_grad()
    def partial_fit(self, x: Tensor, y: Tensor, mask: Tensor | None = None) -> None:
        """Accumulate ``x [B, T, n]``, targets ``y [B, T, L]`` (or ``[B, T]``) and the right-padding
        ``mask [B, T]``."""
        h, _ = self.reservoir(x, mask=mask)
        y = y[..., None] if y.dim() == 2 else y
        if y.shape[:2] != h.shape[:2] or y.shape[2] != self.output_size:
            raise ValueError(
                f"targets must be [{h.shape[0]}, {h.shape[1]}, {self.output_size}], got {tuple(y.shape)}"
            )
        keep = torch.ones(h.shape[:2], dtype=torch.bool, device=h.device) if mask is None else mask.clone()
        keep[:, : self.washout] = False
        if self._stats is None:
            self._stats = RidgeStats(self.reservoir.units, self.output_size, device=h.device)
        self._stats.update(h[keep], y[keep])

    def solve(self) -> EchoStateNetwork:
        """Set the readout from the accumulated statistics (and forget them)."""
        if self._stats is None:
            raise ValueError("nothing accumulated: call partial_fit() first")
        w, b = self._stats.solve(self.alpha)
        self.weight.copy_(w)
        self.bias.copy_(b)
        self._stats = None
        return self

    def fit(self, x: Tensor, y: Tensor, mask: Tensor | None = None) -> EchoStateNetwork:
        """``partial_fit`` on one batch, then ``solve``."""
        self._stats = None
        self.partial_fit(x, y, mask)
        return self.solve()

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        """``x [B, T, n] -> y [B, T, L]`` (zero at padded steps)."""
        h, _ = self.reservoir(x, mask=mask)
        y = h @ self.weight.to(h.dtype).T + self.bias.to(h.dtype)
        return y if mask is None else y * mask[..., None]
