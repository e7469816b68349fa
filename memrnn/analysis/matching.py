"""Optimal one-to-one matching of units (the Hungarian algorithm), for comparing learned units
with a construction's."""

from __future__ import annotations

import numpy as np


def linear_assignment(cost: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows and columns of a minimum-cost matching of ``cost [n, m]`` that covers
    ``min(n, m)`` rows/columns (the Hungarian algorithm with potentials, O(n²m));
    ``(rows, cols)`` sorted by row.  The same answer as ``scipy.optimize.linear_sum_assignment``
    (tested against brute force), without scipy."""
    cost = np.asarray(cost, dtype=np.float64)
    if cost.ndim != 2:
        raise ValueError(f"cost must be a matrix, got shape {cost.shape}")
    if not np.isfinite(cost).all():
        raise ValueError("cost must be finite")
    transposed = cost.shape[0] > cost.shape[1]
    c = cost.T if transposed else cost
    n, m = c.shape  # n <= m
    u, v = np.zeros(n + 1), np.zeros(m + 1)
    match = np.zeros(m + 1, dtype=np.int64)  # match[j] = row (1-based) assigned to column j
    way = np.zeros(m + 1, dtype=np.int64)
    for i in range(1, n + 1):
        match[0] = i
        j0 = 0
        minv = np.full(m + 1, np.inf)
        used = np.zeros(m + 1, dtype=bool)
        while True:
            used[j0] = True
            i0 = match[j0]
            cur = c[i0 - 1] - u[i0] - v[1:]
            free = ~used[1:]
            better = free & (cur < minv[1:])
            minv[1:][better] = cur[better]
            way[1:][better] = j0
            cand = np.where(free, minv[1:], np.inf)
            j1 = int(np.argmin(cand)) + 1
            delta = cand[j1 - 1]
            u[match[used]] += delta
            v[used] -= delta
            minv[1:][free] -= delta
            j0 = j1
            if match[j0] == 0:
                break
        while j0:
            j1 = way[j0]
            match[j0] = match[j1]
            j0 = j1
    cols = np.nonzero(match[1:])[0]
    rows = match[1:][cols] - 1
    if transposed:
        rows, cols = cols, rows
    order = np.argsort(rows)
    return rows[order], cols[order]


def match_units(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Match the units of ``a [N, p]`` (e.g. learned activations over N positions) to those of
    ``b [N, q]`` (e.g. the construction's) by absolute Pearson correlation, one to one.
    Returns ``(rows, cols, |corr| of the matched pairs)``.  A constant unit correlates 0 with any
    varying one, and 1 with a constant unit of the same value (within ``0.05``): a gate held
    open by the construction is matched by a learned gate held open."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    corr = np.abs(correlation(a, b))
    ca, cb = a.std(0) < 1e-6, b.std(0) < 1e-6
    same = np.abs(a.mean(0)[:, None] - b.mean(0)[None, :]) < 0.05
    corr = np.where(ca[:, None] & cb[None, :], same.astype(np.float64), corr)
    rows, cols = linear_assignment(-corr)
    return rows, cols, corr[rows, cols]


def correlation(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Pearson correlation ``[p, q]`` between the columns of ``a [N, p]`` and ``b [N, q]`` (0 for
    constant columns)."""
    a = a - a.mean(0)
    b = b - b.mean(0)
    na, nb = np.linalg.norm(a, axis=0), np.linalg.norm(b, axis=0)
    out = (a.T @ b) / np.where(na > 1e-12, na, np.inf)[:, None] / np.where(nb > 1e-12, nb, np.inf)[None, :]
    return out
