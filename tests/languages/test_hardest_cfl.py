"""HardestCFL's exact probabilities against the grammar as DuSell & Chiang write it, worked by
hand (docs/references.md; the class docstring lists the rules)."""

import math

import numpy as np
import pytest

from memrnn.languages import HardestCFL
from memrnn.languages.pcfg import cont

C = U = cont(0.5)  # 1/3
V = cont(1.0)  # 1/2: a long filler of mean length 2 is one W plus a geometric count of mean 1
P_SEMI, S, T = 0.25, cont(1.5), cont(3.0)  # 0.25, 0.6, 0.75
# ", $ ( ) , ;": R = U , R' with U = R' = ε; Q = ε; S = T = ( Q ) with Q = ε; L = L' , U with L' = U = ε
P0 = (1 - U) ** 2 * (1 - C) ** 2 * (1 - P_SEMI) ** 2 * (1 - S) * (1 - T) / 2


def ids(lang, text):
    return [*lang.encode(text), lang.end_id]


def test_the_hand_worked_probabilities_of_short_strings():
    lang = HardestCFL()
    assert math.isclose(math.exp(lang.log_prob(ids(lang, ", $ ( ) , ;"))), P0, rel_tol=1e-12)
    assert math.isclose(math.exp(lang.log_prob(ids(lang, ", $ [ ] , ;"))), P0, rel_tol=1e-12)
    # R' → R' V , (c) once, R' → ε, V → W (1 − v) with W = "(" (1/5): one long filler of one W
    p1 = P0 / (1 - C) * C * (1 - C) * (1 - V) / 5
    assert math.isclose(math.exp(lang.log_prob(ids(lang, ", ( , $ ( ) , ;"))), p1, rel_tol=1e-12)
    # the same with V → W V (v) → W W: a filler of two
    p2 = P0 / (1 - C) * C * (1 - C) * V * (1 - V) / 25
    assert math.isclose(math.exp(lang.log_prob(ids(lang, ", ( [ , $ ( ) , ;"))), p2, rel_tol=1e-12)
    # a short filler U = "$" (u, then ε) in front of R's comma
    p3 = P0 * U / 5
    assert math.isclose(math.exp(lang.log_prob(ids(lang, "$ , $ ( ) , ;"))), p3, rel_tol=1e-12)


def test_the_hand_worked_length_law_and_conditional_probabilities():
    lang = HardestCFL()
    lp = lang.length_log_probs(9)  # tokens, END counted: index n + 1 holds n symbols
    assert lp[:7].max() == -math.inf  # the shortest strings have 6 symbols
    # 6 symbols: ", $ ( ) , ;" and ", $ [ ] , ;"
    assert math.isclose(math.exp(lp[7]), 2 * P0, rel_tol=1e-12)
    # 7 symbols: one W in R's U or in L's U (ratio u/5 each, 5 choices), for either bracket
    assert math.isclose(math.exp(lp[8]), 2 * P0 * 2 * U, rel_tol=1e-12)
    assert math.isclose(lang.log_prob_given_length(ids(lang, ", $ ( ) , ;")), math.log(0.5), rel_tol=1e-12)
    w = ids(lang, "$ , $ ( ) , ;")
    assert math.isclose(lang.log_prob_given_length(w), math.log(P0 * U / 5 / (4 * U * P0)), rel_tol=1e-12)
    window = (7, 8)
    assert math.isclose(lang.log_prob(w, window), math.log(P0 * U / 5 / (2 * P0 + 4 * U * P0)), rel_tol=1e-12)


def _series_length_law(n_max: int, v: float = V) -> np.ndarray:
    """``P(n symbols)`` for ``n = 0..n_max`` from the grammar's generating functions in ``z``
    (one factor of ``z`` per terminal), as truncated power series; ``S`` and ``T`` by fixed-point
    iteration (each round fixes at least one more coefficient)."""
    n = n_max + 1

    def mul(*fs):
        out = np.zeros(n)
        out[0] = 1.0
        for f in fs:
            out = np.convolve(out, f)[:n]
        return out

    def geometric(p, f):  # Σ_k (p f)^k (1 − p)
        out, term = np.zeros(n), np.zeros(n)
        term[0] = 1.0
        for _ in range(n):
            out += term
            term = mul(term, p * f)
        return (1 - p) * out

    z, one = np.eye(n)[1], np.eye(n)[0]
    u_fill = geometric(U, z)  # U → W U | ε
    v_fill = mul(geometric(v, z), z)  # V → W V | W
    r_prime = geometric(C, mul(v_fill, z))  # R' → R' V , | ε
    r = mul(u_fill, z, r_prime)
    l_prime = geometric(C, mul(z, v_fill))  # L' → , V L' | ε
    ell = mul(l_prime, z, u_fill)
    q = P_SEMI * mul(ell, z, r) + (1 - P_SEMI) * one
    s = np.zeros(n)
    for _ in range(n + 2):
        t = mul(z, z, q, T * mul(q, s) + (1 - T) * one)  # T → ( Q S Q ) | ( Q ), two bracket kinds
        s = (1 - S) * t + S * mul(s, q, t)  # S → S Q T | T
    return mul(r, z, q, s, ell, z)


def test_the_length_law_equals_the_grammars_generating_function():
    lang = HardestCFL()
    n_max = 30
    expected = _series_length_law(n_max)
    got = np.exp(lang.length_log_probs(n_max + 1)[1:])
    np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-300)
    # the check tells the fixed grammar from the old v = cont(2) (fillers of mean length 3)
    old = _series_length_law(n_max, v=cont(2.0))
    assert np.abs(np.log(old[8:]) - np.log(got[8:])).max() > 0.1


def test_a_long_filler_mean_below_one_is_refused():
    with pytest.raises(ValueError, match="mean_long_filler_length must be >= 1"):
        HardestCFL(mean_long_filler_length=0.5)
