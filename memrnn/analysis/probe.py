"""Linear probes: can a reference quantity (the Dyck stack's top, a counter's value, the automaton
state) be read off a layer's state by one linear map?

* ``kind="class"`` (stack top, state): multinomial logistic regression (a linear map and a
  softmax), fitted to convergence by L-BFGS with a small L2 penalty; accuracy of the argmax.
* ``kind="value"`` (counters, stack depth): ridge regression to the integer value(s); a position
  counts as decoded when every rounded prediction equals the reference; also ``r2``.

Fitting is on one set of strings and scoring on another (whole strings, never positions of the
same string on both sides), so a probe cannot memorise a string.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from memrnn.analysis.reference import Feature, Kind


@dataclass(frozen=True)
class ProbeResult:
    """A fitted probe's scores: ``accuracy`` on the held-out strings' positions, ``train_accuracy``
    on the fitting ones, ``r2`` (value probes; NaN for class probes) and the held-out predictions
    ``[n_test]`` (class) or ``[n_test, k]`` (value) with their references ``target``."""

    kind: Kind
    accuracy: float
    train_accuracy: float
    r2: float
    n_train: int
    n_test: int
    prediction: np.ndarray
    target: np.ndarray


def _standardise(x_train: Tensor, x_test: Tensor) -> tuple[Tensor, Tensor]:
    mean, std = x_train.mean(0), x_train.std(0, unbiased=False)
    std = torch.where(std > 1e-8, std, torch.ones_like(std))
    one = x_train.new_ones(1)
    add_bias = lambda x: torch.cat([(x - mean) / std, one.expand(x.shape[0], 1)], 1)  # noqa: E731
    return add_bias(x_train), add_bias(x_test)


def fit_linear_probe(
    x_train: Tensor | np.ndarray,
    y_train: Tensor | np.ndarray,
    x_test: Tensor | np.ndarray,
    y_test: Tensor | np.ndarray,
    kind: Kind,
    *,
    l2: float = 1e-4,
    max_iter: int = 200,
) -> ProbeResult:
    """Fit a linear probe from features ``x [N, D]`` to references ``y`` (``[N]`` integer classes,
    or ``[N]``/``[N, k]`` integer values) and score it on ``(x_test, y_test)``.  Features are
    standardised with the fitting set's mean and deviation; a bias is added.  Safe to call under
    ``torch.no_grad`` or ``torch.inference_mode`` (Lightning's evaluation loops)."""
    with torch.inference_mode(False), torch.enable_grad():
        return _fit(x_train, y_train, x_test, y_test, kind, l2, max_iter)


def _fit(x_train, y_train, x_test, y_test, kind: Kind, l2: float, max_iter: int) -> ProbeResult:
    if kind not in ("class", "value"):
        raise ValueError(f"kind must be 'class' or 'value', got {kind!r}")
    # copies: inputs made under inference_mode cannot enter autograd
    host = lambda a: a.detach().cpu().numpy() if isinstance(a, Tensor) else np.asarray(a)  # noqa: E731
    xt, xe = (torch.tensor(host(a), dtype=torch.float64) for a in (x_train, x_test))
    yt, ye = (torch.tensor(host(a)) for a in (y_train, y_test))
    if xt.dim() != 2 or xe.dim() != 2 or xt.shape[1] != xe.shape[1]:
        raise ValueError(f"features must be [N, D] with one D; got {tuple(xt.shape)} and {tuple(xe.shape)}")
    if len(xt) != len(yt) or len(xe) != len(ye):
        raise ValueError(f"{len(xt)}/{len(xe)} feature rows but {len(yt)}/{len(ye)} references")
    if len(xt) == 0 or len(xe) == 0:
        raise ValueError("a probe needs at least one fitting and one held-out position")
    xt, xe = _standardise(xt, xe)
    if kind == "value":
        yt2, ye2 = (y.to(torch.float64).reshape(len(y), -1) for y in (yt, ye))
        eye = torch.eye(xt.shape[1], dtype=torch.float64)
        eye[-1, -1] = 0.0  # no penalty on the bias
        w = torch.linalg.solve(xt.T @ xt + l2 * len(xt) * eye, xt.T @ yt2)
        pt, pe = xt @ w, xe @ w
        ok = lambda p, y: (p.round() == y).all(1).double().mean().item()  # noqa: E731
        ss_res = ((pe - ye2) ** 2).sum().item()
        ss_tot = ((ye2 - ye2.mean(0)) ** 2).sum().item()
        r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else (1.0 if ss_res < 1e-12 else 0.0)
        return ProbeResult(
            kind, ok(pe, ye2), ok(pt, yt2), r2, len(xt), len(xe), pe.squeeze(-1).numpy(), ye.numpy()
        )
    classes = torch.unique(yt)
    index = torch.searchsorted(classes, yt)
    w = torch.zeros(xt.shape[1], len(classes), dtype=torch.float64, requires_grad=True)
    opt = torch.optim.LBFGS([w], max_iter=max_iter, line_search_fn="strong_wolfe", tolerance_grad=1e-9)

    def closure() -> Tensor:
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(xt @ w, index) + l2 * (w[:-1] ** 2).sum()
        loss.backward()
        return loss

    opt.step(closure)
    with torch.no_grad():
        pt, pe = classes[(xt @ w).argmax(1)], classes[(xe @ w).argmax(1)]
    return ProbeResult(
        kind,
        (pe == ye).double().mean().item(),
        (pt == yt).double().mean().item(),
        float("nan"),
        len(xt),
        len(xe),
        pe.numpy(),
        ye.numpy(),
    )


def probe_features(
    states: Tensor, mask: Tensor, features: Sequence[dict[str, Feature]], train_strings: int
) -> dict[str, ProbeResult]:
    """Probe every reference feature from per-step layer states.

    Args:
        states: ``[B, T, D]`` the layer's state after each input position.
        mask: ``[B, T]`` real positions (row ``b`` has ``len(features[b][name].values)`` of them).
        features: per string, :func:`~memrnn.analysis.reference.reference_features`.
        train_strings: the first ``train_strings`` strings fit the probes, the rest score them.
    """
    if not 0 < train_strings < len(features):
        raise ValueError(f"train_strings must split the {len(features)} strings, got {train_strings}")
    if states.shape[0] != len(features):
        raise ValueError(f"{states.shape[0]} state rows for {len(features)} strings")
    rows = [states[b, mask[b]].detach().double().cpu() for b in range(len(features))]
    out = {}
    for name, first in features[0].items():
        ys = [f[name].values for f in features]
        for b, (r, y) in enumerate(zip(rows, ys, strict=True)):
            if len(r) != len(y):
                raise ValueError(f"string {b}: {len(r)} real positions but {len(y)} reference values")
        x_tr, x_te = torch.cat(rows[:train_strings]), torch.cat(rows[train_strings:])
        y_tr, y_te = np.concatenate(ys[:train_strings]), np.concatenate(ys[train_strings:])
        out[name] = fit_linear_probe(x_tr, y_tr, x_te, y_te, first.kind)
    return out
