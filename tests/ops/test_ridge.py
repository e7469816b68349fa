"""Closed-form ridge regression from sufficient statistics (the ESN readout of Paaßen et al. 2021)."""

import pytest
import torch

from memrnn.ops.ridge import RidgeStats, ridge_reference, ridge_solve, with_bias


def data(gen, n=200, d=7, L=3):
    x = torch.randn(n, d, generator=gen, dtype=torch.float64)
    w = torch.randn(L, d, generator=gen, dtype=torch.float64)
    y = x @ w.T + 0.3 + 0.1 * torch.randn(n, L, generator=gen, dtype=torch.float64)
    return x, y


@pytest.mark.parametrize("alpha", [0.0, 1e-3, 10.0])
def test_accumulated_statistics_equal_the_closed_form(gen, alpha):
    x, y = data(gen)
    stats = RidgeStats(7, 3)
    for chunk in range(0, 200, 37):  # uneven batches
        stats.update(x[chunk : chunk + 37], y[chunk : chunk + 37])
    assert stats.count == 200
    w, b = stats.solve(alpha)
    w_ref, b_ref = ridge_reference(x, y, alpha)
    torch.testing.assert_close(w, w_ref, atol=1e-9, rtol=1e-9)
    torch.testing.assert_close(b, b_ref, atol=1e-9, rtol=1e-9)
    # optimality: the gradient of ‖Xw + b − Y‖² + α‖w‖² vanishes
    r = x @ w.T + b - y
    torch.testing.assert_close(
        x.T @ r + alpha * w.T, torch.zeros(7, 3, dtype=torch.float64), atol=1e-8, rtol=0
    )
    torch.testing.assert_close(r.sum(0), torch.zeros(3, dtype=torch.float64), atol=1e-8, rtol=0)


def test_bias_is_not_regularized(gen):
    x, y = data(gen)
    w, b = ridge_reference(x, y, 1e12)
    assert w.abs().max() < 1e-6
    torch.testing.assert_close(b, y.mean(0), atol=1e-6, rtol=0)
    stats = RidgeStats(7, 3)
    stats.update(x, y)
    _, b2 = stats.solve(1e12)
    torch.testing.assert_close(b2, y.mean(0), atol=1e-6, rtol=0)


def test_equals_scikit_learn_ridge(gen):
    sklearn = pytest.importorskip("sklearn.linear_model")
    x, y = data(gen)
    m = sklearn.Ridge(alpha=0.5, fit_intercept=True).fit(x.numpy(), y.numpy())
    stats = RidgeStats(7, 3)
    stats.update(x, y)
    w, b = stats.solve(0.5)
    torch.testing.assert_close(w, torch.as_tensor(m.coef_), atol=1e-9, rtol=1e-9)
    torch.testing.assert_close(b, torch.as_tensor(m.intercept_), atol=1e-9, rtol=1e-9)


def test_singular_features_fall_back_to_least_squares(gen):
    x, y = data(gen)
    x = torch.cat([x, x[:, :1]], 1)  # a duplicated column: X̃ᵀX̃ singular
    w, b = ridge_solve(with_bias(x).T @ with_bias(x), with_bias(x).T @ y, 0.0)
    assert torch.isfinite(w).all()
    r = x @ w.T + b - y
    torch.testing.assert_close(x.T @ r, torch.zeros(8, 3, dtype=torch.float64), atol=1e-7, rtol=0)


def test_clear_errors(gen):
    stats = RidgeStats(3, 1)
    with pytest.raises(ValueError, match="no rows"):
        stats.solve(1.0)
    with pytest.raises(ValueError, match=r"features must be \[N, 3\]"):
        stats.update(torch.zeros(4, 2), torch.zeros(4))
    with pytest.raises(ValueError, match="targets must be"):
        stats.update(torch.zeros(4, 3), torch.zeros(5))
    with pytest.raises(ValueError, match="alpha must be >= 0"):
        ridge_solve(torch.eye(2), torch.zeros(2, 1), -1.0)
