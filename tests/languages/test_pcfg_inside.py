"""The batched inside pass (:meth:`PCFG.log_probs`, a probability-space CKY with one log scale
per chart cell) against the log-space CKY of :meth:`PCFG.log_prob`, string by string."""

import math

import numpy as np
import pytest

from memrnn.languages import DyckN, HardestCFL, MarkedReversal, PaddedReversal, UnmarkedReversal
from memrnn.languages.pcfg import PCFG


@pytest.mark.parametrize(
    "make", [HardestCFL, MarkedReversal, UnmarkedReversal, PaddedReversal, lambda: DyckN(2)]
)
def test_batched_inside_equals_the_log_space_cky(make):
    g = make().grammar
    rng = np.random.default_rng(0)
    lengths = [n for n in range(1, 61) if np.isfinite(g.length_log_probs(60)[n])]
    words = [g.sample_given_length(rng, n) for n in lengths[::5] for _ in range(3)]
    k = len(g.terminals)
    words += [[int(t) for t in rng.integers(0, k, size=n)] for n in (1, 2, 5, 12) for _ in range(4)]
    words += [words[0][:-1], []]  # a truncated member, the empty string
    want = np.array([g.log_prob(w) for w in words])
    for chunk in (64, 3, 1):
        got = g.log_probs(words, chunk=chunk)
        assert (np.isfinite(got) == np.isfinite(want)).all()
        fin = np.isfinite(want)
        assert fin.sum() >= len(lengths[::5]) * 3
        np.testing.assert_allclose(got[fin], want[fin], rtol=1e-12, atol=0)


def test_a_long_string_is_scored_like_the_log_space_cky():
    g = HardestCFL().grammar
    w = g.sample_given_length(np.random.default_rng(1), 150)
    assert g.log_probs([w])[0] == pytest.approx(g.log_prob(w), rel=1e-12)


def test_a_chart_that_could_lose_precision_is_rescored_in_log_space():
    # in the cell of "a", A has weight 1 and X weight 1e-200: the scaled chart flags the string
    g = PCFG(
        [("S", ("X", "Y"), 0.5), ("S", ("A", "Y"), 0.5), ("A", ("a",), 1.0),
         ("X", ("a",), 1e-200), ("X", ("b",), 1.0 - 1e-200), ("Y", ("c",), 1.0)],
        "S", ("a", "b", "c"),
    )  # fmt: skip
    w = [0, 2]  # "a c"
    assert g._scaled_inside(np.array([w])).tolist() == [-math.inf]
    assert g.log_probs([w])[0] == pytest.approx(g.log_prob(w), rel=1e-12)
    assert g.log_probs([w])[0] == pytest.approx(math.log(0.5 * (1 + 1e-200)), rel=1e-12)


def test_bad_chunks_and_terminals_are_named():
    g = HardestCFL().grammar
    with pytest.raises(ValueError, match="chunk must be a positive int, got 0"):
        g.log_probs([[0]], chunk=0)
    with pytest.raises(ValueError, match="unknown terminal index 99 at position 1 of string 0"):
        g.log_probs([[0, 99]])


def test_length_floor_is_log_k_over_the_mean_length():
    """DuSell & Chiang's splits draw the length uniformly from the K possible lengths of 40-80
    symbols (41-81 with END); a model of that distribution pays log K per string against
    log p(w | length).  Dyck and unmarked reversal have the 21 even symbol counts, marked
    reversal the 20 odd ones, padded reversal all 41."""
    from memrnn.languages import DuSellDyck, length_floor

    window = (41, 81)
    assert length_floor(DuSellDyck(), window) == pytest.approx(math.log(21) / 61)
    assert length_floor(UnmarkedReversal(), window) == pytest.approx(math.log(21) / 61)
    assert length_floor(MarkedReversal(), window) == pytest.approx(math.log(20) / 61)
    assert length_floor(PaddedReversal(), window) == pytest.approx(math.log(41) / 61)
    # a split's own lengths: sum log K / sum n
    assert length_floor(DuSellDyck(), window, [41, 41, 81]) == pytest.approx(3 * math.log(21) / 163)
    with pytest.raises(ValueError, match=r"lengths \[42, 83\] are not possible lengths"):
        length_floor(DuSellDyck(), window, [41, 42, 83])
    # a split sampled like the training data is near the expectation (1,000 strings)
    lang, rng = MarkedReversal(), np.random.default_rng(0)
    lengths = [len(w) for w in lang.sample_many(1000, rng, window, "uniform")]
    assert length_floor(lang, window, lengths) == pytest.approx(math.log(20) / 61, rel=0.02)
