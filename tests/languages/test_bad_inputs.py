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
