"""Bad input to the languages gets a clear error naming the value, never a silent answer."""

import numpy as np
import pytest

from memrnn.languages import (
    AnBn,
    AnBnCn,
    DuSellDyck,
    DyckKM,
    DyckN,
    HardestCFL,
    JsonLite,
    Latch,
    MarkedReversal,
    Palindrome,
    UnmarkedReversal,
)

LANGUAGES = [DyckKM(2, 3), DyckN(2), DuSellDyck(), AnBn(), AnBnCn(), HardestCFL(), JsonLite(), MarkedReversal(), Palindrome(), Latch()]  # fmt: skip
IDS = pytest.mark.parametrize("lang", LANGUAGES, ids=lambda lang: type(lang).__name__)


@IDS
def test_symbols_where_ids_are_expected_name_the_symbol_and_point_to_encode(lang):
    w = lang.sample(np.random.default_rng(0), lang.default_lengths("train"))
    symbols = [lang.symbols[i] for i in w]
    for method in ("accepts", "allowed_next", "log_prob", "allowed_next_all", "accepts_prefixes", "decode"):
        with pytest.raises(ValueError, match=r"expected token ids, got str .* at position 0.*encode"):
            getattr(lang, method)(symbols)
    with pytest.raises(ValueError, match=r"got the string .*encode\("):
        lang.accepts(" ".join(symbols))
    assert lang.check_ids(np.array(w)) == w  # numpy ids are ids


@IDS
def test_an_int_seed_or_a_torch_generator_is_refused_with_how_to_make_an_rng(lang):
    import torch

    window = lang.default_lengths("train")
    for bad in (0, torch.Generator(), None):
        with pytest.raises(ValueError, match=r"rng must be a numpy.random.Generator.*default_rng"):
            lang.sample(bad, window)
        with pytest.raises(ValueError, match=r"rng must be a numpy.random.Generator"):
            lang.sample_many(2, bad, window)
    with pytest.raises(ValueError, match=r"rng must be a numpy.random.Generator"):
        lang.sample_negative(0, window)


@IDS
def test_negative_counts_and_fractional_windows_are_refused(lang):
    rng = np.random.default_rng(0)
    lo, hi = lang.default_lengths("train")
    with pytest.raises(ValueError, match=r"n >= 0, got -2"):
        lang.sample_many(-2, rng, (lo, hi))
    with pytest.raises(ValueError, match=r"n >= 0, got 2.5"):
        lang.sample_many(2.5, rng, (lo, hi))
    with pytest.raises(ValueError, match=r"bounds must be integers .*\.5"):
        lang.sample_many(2, rng, (lo, hi + 0.5))
    with pytest.raises(ValueError, match=r"bounds must be integers"):
        lang.sample(rng, (lo + 0.5, hi))
    with pytest.raises(ValueError, match=r"0 <= min <= max"):
        lang.sample_many(2, rng, (hi, lo - 1))
    # an integral float is an integer, not a truncation
    assert len(lang.sample_many(2, rng, (float(lo), float(hi)))) == 2


GiB = r"\d+\.\d GiB of memory"
#: (what, call, message): each asked numpy for tens of GiB (or ran for hours) before memrnn refused
TOO_LONG = {
    "unmarked_reversal_given_length": (  # the newcomer's: a 37 GiB allocation
        lambda rng: UnmarkedReversal().sample_given_length(rng, 10**9),
        r"UnmarkedReversal\(mean_length=60.0, root='paper'\): length 1,000,000,000 is too long to sample or "
        rf"score exactly: its grammar's length tables \(their time grows as the length squared\) would take {GiB} "
        r"and ~3.0e\+18 operations; the limits \(2.0 GiB, 1e\+10 operations: memrnn.languages.base."
        r"TABLE_MEMORY_LIMIT / TABLE_WORK_LIMIT\) allow lengths up to 57,735$",
    ),
    "dyck_n_window": (
        lambda rng: DyckN(2).sample(rng, (1, 10**9)),
        rf"DyckN\(n=2.*length 1,000,000,000 .*length tables .*{GiB}.*allow lengths up to 53,453$",
    ),
    "dusell_dyck_uniform_lengths": (
        lambda rng: DuSellDyck().sample_many(2, rng, (1, 10**6), "uniform"),
        r"DuSellDyck.*length 1,000,000 .*its grammar's length tables .*~\d.\de\+1\d operations",
    ),
    "hardest_cfl_window_mass": (
        lambda rng: HardestCFL().window_log_mass((1, 10**7)),
        r"HardestCFL.*length 10,000,000 .*length tables",
    ),
    "json_inside_chart": (  # scoring a long string: the inside chart grows as the length squared
        lambda rng: JsonLite().log_prob([0] * 20_000 + [JsonLite().end_id]),
        rf"JsonLite.*length 20,001 is too long .*its inside chart would take {GiB}; ",
    ),
    "marked_reversal_inside_charts": (
        lambda rng: MarkedReversal().reference_log_probs_many([[0] * 30_000 + [MarkedReversal().end_id]]),
        r"MarkedReversal.*length 30,001 .*its inside chart",
    ),
    "pcfg_itself": (
        lambda rng: UnmarkedReversal().grammar.sample_given_length(rng, 10**9),
        r"PCFG\(start='S', 3 rules, root='paper'\): length 1,000,000,000 .*length tables",
    ),
    "latch_given_length": (
        lambda rng: Latch().sample_given_length(rng, 10**9),
        rf"Latch\(p_end=0.05\): length 1,000,000,000 .*its backward table would take {GiB}.*up to 20,000,000$",
    ),
    "latch_window_probabilities": (
        lambda rng: Latch().token_log_probs([1, 2], (1, 10**9)),
        r"Latch.*length 1,000,000,000 .*its backward table",
    ),
    "dyck_km_window": (
        lambda rng: DyckKM(2, 3).sample(rng, (1, 10**9)),
        rf"DyckKM\(k=2, m=3.*length 1,000,000,000 .*its exact sampling table Z\[position, depth\] .*{GiB}",
    ),
    "dyck_km_length_distribution": (
        lambda rng: DyckKM(2, 3).length_log_probs(10**9),
        r"DyckKM.*length 1,000,000,000 .*its length distribution",
    ),
    "anbn_window": (
        lambda rng: AnBn().sample(rng, (1, 10**9)),
        rf"AnBn.*length 1,000,000,000 .*the window's counts and the string would take {GiB}",
    ),
    "anbncn_string": (
        lambda rng: AnBnCn().string([10**9] * 3),
        r"AnBnCn.*length 3,000,000,001 .*the string would take",
    ),
    "anbn_near_misses": (
        lambda rng: AnBn().near_miss_test_set(rng, 3, (10**9, 10**9)),
        r"AnBn.*length 2,000,00\d,00\d .*the string",
    ),
}


@pytest.mark.parametrize("case", TOO_LONG)
def test_lengths_beyond_what_can_be_sampled_are_refused_before_allocating(case):
    """Each sampler (and exact probability) that allocates by length names the length, what it
    would take and the longest length within the limits, before allocating."""
    call, message = TOO_LONG[case]
    with pytest.raises(ValueError, match=message):
        call(np.random.default_rng(0))


def test_the_limits_are_settings_and_the_longest_length_is_exact(monkeypatch):
    from memrnn.languages import base

    monkeypatch.setattr(base, "TABLE_MEMORY_LIMIT", 1000)
    with pytest.raises(
        ValueError, match=r"length 200 .*would take 1.6 KiB of memory; .*allow lengths up to 125$"
    ):
        base.check_table_cost("X", 200, lambda n: (8.0 * n, 0.0), "a table")
    base.check_table_cost("X", 125, lambda n: (8.0 * n, 0.0), "a table")  # 1000 bytes: within
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match=r"length 200 is too long .*allow lengths up to"):
        Latch().sample_given_length(rng, 200)
    monkeypatch.setattr(base, "TABLE_MEMORY_LIMIT", 2 << 30)
    monkeypatch.setattr(base, "TABLE_WORK_LIMIT", 10**6)  # a PCFG's quadratic time is limited too
    with pytest.raises(ValueError, match=r"length 2,000 .*~1.2e\+07 operations"):
        UnmarkedReversal().sample_given_length(rng, 2000)
    assert len(UnmarkedReversal().sample_given_length(rng, 101)) == 101
    with pytest.raises(ValueError, match=r"length must be an integer \(END counted\), got 10.5"):
        UnmarkedReversal().sample_given_length(rng, 10.5)


def test_bad_grammar_and_counting_arguments_are_named():
    """Were: "unknown symbol 'T' in rule S → S T" (n=0), "rule S → a S a has invalid weight nan",
    "nonterminals ['S'] derive no terminal string" (an infinite mean), numpy's "low >= high"."""
    with pytest.raises(ValueError, match="n must be a positive integer, got 0"):
        DuSellDyck(n=0)
    with pytest.raises(ValueError, match=r"mean_nesting_depth must be >= 1 .*got 0.5"):
        DuSellDyck(mean_nesting_depth=0.5)
    for bad in (float("nan"), float("inf"), -1.0, "60"):
        with pytest.raises(ValueError, match=rf"a mean length must be a finite number >= 0, got {bad!r}"):
            UnmarkedReversal(bad)
    assert MarkedReversal(np.int64(3)).mean_length == 3  # numpy numbers are numbers
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="delta must be a non-negative integer, got -1"):
        AnBn().near_miss_test_set(rng, 2, delta=-1)
    with pytest.raises(ValueError, match=r"n_range must satisfy 0 <= min <= max, got \(5, 1\)"):
        AnBn().near_miss_test_set(rng, 2, (5, 1))
