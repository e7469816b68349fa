"""Readouts fitted in closed form, for echo state networks and the reservoir stack machine's
classifiers ``c_pop``, ``c_push``, ``c_shift``, ``c_out`` (Paaßen et al. 2021, section 3.2).

Every readout has ``fit(features [N, d], targets) -> self`` and
``predict(features [N, d], context=None) -> [N]`` (class labels) or ``[N, L]`` (values).
``context`` is what the reservoir stack machine knows symbolically at that point (its stack and
input symbol, :class:`memrnn.rsm.machine.RSMContext`); learned readouts ignore it, oracle readouts
(:class:`memrnn.rsm.LROracle`) use only it.

* :class:`RidgeReadout`: linear (or random-Fourier-feature) ridge regression, bias unregularized.
* :class:`RidgeClassifier`: the same on one-hot targets, ``argmax`` over the classes seen in
  training (one class seen: that class).  Runs on any device; its state is in ``state_dict``.
* :class:`SVMClassifier`: scikit-learn's RBF ``SVC`` with ``gamma="scale"``, as in Paaßen et al. 2021
  (``pip install memrnn[svm]``); CPU, pickled rather than in ``state_dict``.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor, nn

from memrnn.core.checks import finite_float, positive_int
from memrnn.ops.ridge import RidgeStats


class _ResizingBuffers(nn.Module):
    """Buffers whose shapes are set by ``fit``: ``load_state_dict`` takes the saved shapes."""

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):  # type: ignore[no-untyped-def]
        for name, buf in list(self._buffers.items()):
            saved = state_dict.get(prefix + name)
            if buf is not None and saved is not None and saved.shape != buf.shape:
                self._buffers[name] = torch.empty(saved.shape, dtype=saved.dtype, device=buf.device)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)


class RidgeReadout(_ResizingBuffers):
    """Ridge regression ``y = W φ(x) + b`` fitted in closed form (:mod:`memrnn.ops.ridge`).

    Args:
        alpha: the ridge penalty (on ``W`` only).
        features: 0 for ``φ(x) = x``; ``D > 0`` for ``D`` random Fourier features of the RBF
            kernel ``exp(−γ ‖x − x'‖²)``: ``φ(x) = √(2/D) cos(x Ω + φ₀)``, ``Ω ~ N(0, 2γ)``.
        gamma: ``"scale"`` (``1 / (d · Var[x])`` of the training features, scikit-learn's
            default) or a number.
        seed: seeds Ω and φ₀.
        standardize: z-score every feature with the training mean and std first (features that
            are constant in training are only centred).
        chunk: rows per block when accumulating (memory bound).
    """

    def __init__(
        self,
        alpha: float = 1e-3,
        *,
        features: int = 0,
        gamma: float | str = "scale",
        seed: int = 0,
        standardize: bool = False,
        chunk: int = 8192,
    ) -> None:
        super().__init__()
        if alpha < 0:
            raise ValueError(f"alpha must be >= 0, got {alpha}")
        if features < 0:
            raise ValueError(f"features must be >= 0, got {features}")
        if not (gamma == "scale" or (isinstance(gamma, (int, float)) and gamma > 0)):
            raise ValueError(f"gamma must be 'scale' or a positive number, got {gamma!r}")
        self.alpha, self.features, self.gamma, self.seed, self.chunk = alpha, features, gamma, seed, chunk
        self.standardize = standardize
        for name in ("weight", "bias", "omega", "phase", "mean", "scale"):
            self.register_buffer(name, torch.zeros(0, dtype=torch.float64))

    @property
    def fitted(self) -> bool:
        return self.weight.numel() > 0

    def extra_repr(self) -> str:
        return f"alpha={self.alpha}, features={self.features}, gamma={self.gamma!r}, standardize={self.standardize}"

    def feature_map_input(self, x: Tensor) -> Tensor:
        """The standardized input of the feature map (float64)."""
        x = x.to(torch.float64)
        if self.mean.numel():
            x = (x - self.mean.to(x.device)) / self.scale.to(x.device)
        return x

    def feature_map(self, x: Tensor) -> Tensor:
        """``φ(x)``: ``[N, d] -> [N, d or D]`` (float64)."""
        x = self.feature_map_input(x)
        if not self.features:
            return x
        return math.sqrt(2.0 / self.features) * torch.cos(
            x @ self.omega.to(x.device) + self.phase.to(x.device)
        )

    def _fit_scaling(self, x: Tensor) -> None:
        self.mean, self.scale = torch.zeros(0, dtype=torch.float64), torch.zeros(0, dtype=torch.float64)
        if self.standardize:
            x = x.to(torch.float64)
            std = (
                x.std(0) if x.shape[0] > 1 else torch.zeros(x.shape[1], dtype=torch.float64, device=x.device)
            )
            self.mean, self.scale = x.mean(0), torch.where(std > 0, std, torch.ones_like(std))

    def _draw_features(self, x: Tensor) -> None:
        x = self.feature_map_input(x)
        d = x.shape[1]
        gamma = self.gamma
        if gamma == "scale":
            var = float(x.to(torch.float64).var())
            gamma = 1.0 / (d * var) if var > 0 else 1.0
        gen = torch.Generator().manual_seed(self.seed)
        omega = torch.randn(d, self.features, generator=gen, dtype=torch.float64) * math.sqrt(2 * gamma)
        phase = torch.rand(self.features, generator=gen, dtype=torch.float64) * 2 * math.pi
        self.omega, self.phase = omega.to(x.device), phase.to(x.device)

    def fit(self, x: Tensor, y: Tensor) -> RidgeReadout:
        """``x [N, d]``, ``y [N, L]`` or ``[N]``."""
        if x.dim() != 2 or x.shape[0] == 0:
            raise ValueError(f"features must be a non-empty [N, d] tensor, got {tuple(x.shape)}")
        y2 = y[:, None] if y.dim() == 1 else y
        if y2.shape[0] != x.shape[0]:
            raise ValueError(f"{x.shape[0]} feature rows but {y2.shape[0]} targets")
        self._fit_scaling(x)
        if self.features:
            self._draw_features(x)
        dim = self.features or x.shape[1]
        stats = RidgeStats(dim, y2.shape[1], device=x.device)
        for start in range(0, x.shape[0], self.chunk):
            stats.update(self.feature_map(x[start : start + self.chunk]), y2[start : start + self.chunk])
        self.weight, self.bias = stats.solve(self.alpha)
        return self

    def predict(self, x: Tensor, context: Any = None) -> Tensor:
        """``[N, d] -> [N, L]`` in ``x``'s dtype."""
        if not self.fitted:
            raise RuntimeError(f"{type(self).__name__} is not fitted: call fit() first")
        out = self.feature_map(x) @ self.weight.T.to(x.device) + self.bias.to(x.device)
        return out.to(x.dtype if x.is_floating_point() else torch.get_default_dtype())


class RidgeClassifier(RidgeReadout):
    """One-vs-rest ridge regression on one-hot targets; ``predict`` returns the class with the
    largest score (labels are the integers seen in ``fit``)."""

    def __init__(self, alpha: float = 1e-3, **kwargs: Any) -> None:
        super().__init__(alpha, **kwargs)
        self.register_buffer("classes", torch.zeros(0, dtype=torch.long))

    def fit(self, x: Tensor, y: Tensor) -> RidgeClassifier:
        """``x [N, d]``, ``y [N]`` integer labels."""
        if y.dim() != 1 or y.is_floating_point():
            raise ValueError(f"labels must be an integer tensor [N], got {y.dtype} {tuple(y.shape)}")
        self.classes = torch.unique(y).to(torch.long)
        if len(self.classes) == 1:
            self.weight = torch.zeros(1, self.features or x.shape[1], dtype=torch.float64, device=x.device)
            self.bias = torch.ones(1, dtype=torch.float64, device=x.device)
            self.omega, self.phase = (torch.zeros(0, dtype=torch.float64),) * 2
            self._fit_scaling(x)
            if self.features:
                self._draw_features(x)
            return self
        onehot = (y[:, None] == self.classes.to(y.device)[None, :]).to(torch.float64)
        super().fit(x, onehot)
        return self

    def scores(self, x: Tensor) -> Tensor:
        """Per-class scores ``[N, classes]``."""
        return super().predict(x)

    def predict(self, x: Tensor, context: Any = None) -> Tensor:
        """``[N, d] -> [N]`` labels (long)."""
        if not self.fitted:
            raise RuntimeError("RidgeClassifier is not fitted: call fit() first")
        return self.classes.to(x.device)[self.scores(x).argmax(1)]


class SVMClassifier:
    """scikit-learn's ``SVC(kernel="rbf", gamma="scale")`` (the classifiers of Paaßen et al. 2021), on CPU.

    Args:
        C, gamma: as in scikit-learn.  Needs ``scikit-learn`` (``pip install memrnn[svm]``).
    """

    def __init__(self, C: float = 1.0, gamma: float | str = "scale") -> None:
        try:
            from sklearn.svm import SVC
        except ImportError as err:  # pragma: no cover - depends on the environment
            raise ImportError("SVMClassifier needs scikit-learn: pip install 'memrnn[svm]'") from err
        self.C, self.gamma = C, gamma
        self._svc = SVC(C=C, kernel="rbf", gamma=gamma)
        self._constant: int | None = None

    def __repr__(self) -> str:
        return f"SVMClassifier(C={self.C}, gamma={self.gamma!r})"

    def fit(self, x: Tensor, y: Tensor) -> SVMClassifier:
        labels = y.detach().cpu().numpy()
        if len(set(labels.tolist())) == 1:  # SVC refuses one class
            self._constant = int(labels[0])
            return self
        self._constant = None
        self._svc.fit(x.detach().cpu().double().numpy(), labels)
        return self

    def predict(self, x: Tensor, context: Any = None) -> Tensor:
        if self._constant is not None:
            return torch.full((x.shape[0],), self._constant, dtype=torch.long, device=x.device)
        if x.shape[0] == 0:
            return torch.zeros(0, dtype=torch.long, device=x.device)
        out = self._svc.predict(x.detach().cpu().double().numpy())
        return torch.as_tensor(out, dtype=torch.long, device=x.device)


class LogisticClassifier(RidgeClassifier):
    """Multinomial logistic regression with an L2 penalty ``l2/2 ‖W‖²`` (bias unpenalized), fitted
    by L-BFGS in float64 on any device; ``standardize`` (default on) z-scores the features first.
    On separable data (the usual case for reservoir stack machines) it finds a separating
    hyperplane where least squares may not."""

    def __init__(
        self, l2: float = 1e-4, *, max_iter: int = 500, standardize: bool = True, **kwargs: Any
    ) -> None:
        super().__init__(0.0, standardize=standardize, **kwargs)
        finite_float("l2", l2, nonnegative=True)
        positive_int("max_iter", max_iter)
        self.l2, self.max_iter = l2, max_iter

    def extra_repr(self) -> str:
        return f"l2={self.l2}, max_iter={self.max_iter}, features={self.features}, standardize={self.standardize}"

    def fit(self, x: Tensor, y: Tensor) -> LogisticClassifier:
        if y.dim() != 1 or y.is_floating_point():
            raise ValueError(f"labels must be an integer tensor [N], got {y.dtype} {tuple(y.shape)}")
        super().fit(x, y)  # classes, scaling, features; a ridge start
        if len(self.classes) == 1:
            return self
        z = self.feature_map(x)
        target = torch.searchsorted(self.classes.to(y.device), y)
        W = self.weight.clone().requires_grad_(True)
        b = self.bias.clone().requires_grad_(True)
        opt = torch.optim.LBFGS(
            [W, b],
            lr=1,
            max_iter=self.max_iter,
            tolerance_grad=1e-10,
            tolerance_change=1e-12,
            history_size=20,
            line_search_fn="strong_wolfe",
        )

        def closure() -> Tensor:
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(z @ W.T + b, target) + 0.5 * self.l2 * (W**2).sum()
            loss.backward()
            return loss

        with torch.enable_grad():
            opt.step(closure)
        self.weight, self.bias = W.detach(), b.detach()
        return self
