"""Ridge regression in closed form from accumulated sufficient statistics (the echo state network
readout of Paaßen et al. 2021, and the torch-native classifiers of the reservoir stack machine).

With features ``X [N, d]``, targets ``Y [N, L]`` and a bias column of ones appended
(``X̃ = [X, 1]``), the readout is ``w = (X̃ᵀX̃ + α D)^{-1} X̃ᵀY`` with ``D = diag(1, …, 1, 0)``:
the bias is not regularized.  ``X̃ᵀX̃`` and ``X̃ᵀY`` are sums over rows, so they are accumulated
batch by batch (:class:`RidgeStats`) and the data never has to sit in memory at once.
"""

from __future__ import annotations

import torch
from torch import Tensor

from memrnn.core.checks import positive_int


def with_bias(x: Tensor) -> Tensor:
    """``[N, d] -> [N, d + 1]``: a column of ones appended."""
    return torch.cat([x, x.new_ones(x.shape[0], 1)], 1)


class RidgeStats:
    """Running ``X̃ᵀX̃ [d+1, d+1]``, ``X̃ᵀY [d+1, L]`` and the row count, in float64."""

    def __init__(self, in_features: int, out_features: int, *, device: torch.device | str | None = None):
        positive_int("in_features", in_features)
        positive_int("out_features", out_features)
        self.in_features, self.out_features = in_features, out_features
        self.xtx = torch.zeros(in_features + 1, in_features + 1, dtype=torch.float64, device=device)
        self.xty = torch.zeros(in_features + 1, out_features, dtype=torch.float64, device=device)
        self.count = 0

    def update(self, x: Tensor, y: Tensor) -> None:
        """Add rows ``x [N, d]``, ``y [N, L]`` (or ``[N]`` when ``L = 1``)."""
        if y.dim() == 1:
            y = y[:, None]
        if x.dim() != 2 or x.shape[1] != self.in_features:
            raise ValueError(f"features must be [N, {self.in_features}], got {tuple(x.shape)}")
        if y.shape != (x.shape[0], self.out_features):
            raise ValueError(f"targets must be [{x.shape[0]}, {self.out_features}], got {tuple(y.shape)}")
        xb = with_bias(x.to(self.xtx))
        self.xtx += xb.T @ xb
        self.xty += xb.T @ y.to(self.xty)
        self.count += x.shape[0]

    def solve(self, alpha: float) -> tuple[Tensor, Tensor]:
        """``(weight [L, d], bias [L])`` minimising ``‖X w + b − Y‖² + α ‖w‖²``."""
        if self.count == 0:
            raise ValueError("no rows accumulated: call update() before solve()")
        return ridge_solve(self.xtx, self.xty, alpha)


def ridge_solve(xtx: Tensor, xty: Tensor, alpha: float) -> tuple[Tensor, Tensor]:
    """Solve ``(X̃ᵀX̃ + α D) w = X̃ᵀY`` (bias last, unregularized); returns ``(weight [L, d],
    bias [L])``.  ``α = 0`` or a singular system falls back to the minimum-norm least squares."""
    if alpha < 0:
        raise ValueError(f"alpha must be >= 0, got {alpha}")
    d = xtx.shape[0] - 1
    reg = torch.full((d + 1,), float(alpha), dtype=xtx.dtype, device=xtx.device)
    reg[-1] = 0
    lhs = xtx + torch.diag(reg)
    w = None
    if alpha > 0:
        chol, info = torch.linalg.cholesky_ex(lhs)
        if int(info) == 0:
            w = torch.cholesky_solve(xty, chol)
    if w is None:
        w = torch.linalg.pinv(lhs, hermitian=True) @ xty
    return w[:d].T.contiguous(), w[d].contiguous()


def ridge_reference(x: Tensor, y: Tensor, alpha: float) -> tuple[Tensor, Tensor]:
    """The textbook formula on the full data (slow, for tests): ``w = (X̃ᵀX̃ + αD)^{-1} X̃ᵀY``."""
    if y.dim() == 1:
        y = y[:, None]
    xb = with_bias(x.double())
    D = torch.eye(xb.shape[1], dtype=torch.float64)
    D[-1, -1] = 0
    w = torch.linalg.inv(xb.T @ xb + alpha * D) @ xb.T @ y.double()
    return w[:-1].T, w[-1]
