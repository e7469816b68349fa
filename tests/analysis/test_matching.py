import itertools

import numpy as np
import pytest

from memrnn.analysis.matching import correlation, linear_assignment, match_units


def test_linear_assignment_is_optimal():
    rng = np.random.default_rng(0)
    for _ in range(200):
        n, m = (int(x) for x in rng.integers(1, 6, 2))
        c = rng.normal(size=(n, m))
        rows, cols = linear_assignment(c)
        if n <= m:
            best = min(sum(c[i, p[i]] for i in range(n)) for p in itertools.permutations(range(m), n))
        else:
            best = min(sum(c[p[j], j] for j in range(m)) for p in itertools.permutations(range(n), m))
        assert c[rows, cols].sum() == pytest.approx(best, abs=1e-9)
        assert len(set(rows.tolist())) == len(rows) == min(n, m) == len(set(cols.tolist()))


def test_match_units_recovers_a_permutation():
    rng = np.random.default_rng(1)
    b = rng.normal(size=(500, 6))
    perm = rng.permutation(6)
    a = -2 * b[:, perm] + 0.01 * rng.normal(size=(500, 6))
    _, cols, r = match_units(a, b)
    assert (cols == perm).all() and r.min() > 0.99


def test_constant_units():
    a = np.c_[np.ones(10), np.arange(10.0)]
    b = np.c_[np.arange(10.0), np.ones(10)]
    _, cols, r = match_units(a, b)
    assert cols.tolist() == [1, 0] and r.tolist() == [1.0, 1.0]
    assert correlation(np.ones((5, 1)), np.arange(5.0)[:, None])[0, 0] == 0
    with pytest.raises(ValueError, match="finite"):
        linear_assignment(np.array([[np.nan]]))
