"""Every language: samples accepted, negatives rejected, next sets contain the next token,
exhaustive agreement of membership with the PDA / Earley / CKY, and exact probabilities that
sum to the length distribution."""

from __future__ import annotations

import itertools
import math
from functools import cache

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memrnn.languages import (
    AnBn,
    AnBnCn,
    DuSellDyck,
    DyckKM,
    DyckN,
    GrammarLanguage,
    HardestCFL,
    JsonLite,
    Latch,
    MarkedReversal,
    PaddedReversal,
    Palindrome,
    UnmarkedReversal,
)

FACTORIES = {
    "dyck1": lambda: DyckN(1),
    "dyck2": lambda: DyckN(2),
    "dyck3": lambda: DyckN(3),
    "dyck6": lambda: DyckN(6),
    "anbn": lambda: AnBn(),
    "anbn0": lambda: AnBn(min_n=0),
    "anbncn": lambda: AnBnCn(),
    "palindrome": lambda: Palindrome(),
    "json": lambda: JsonLite(),
    "latch": lambda: Latch(),
    "marked_reversal": lambda: MarkedReversal(),
    "unmarked_reversal": lambda: UnmarkedReversal(),
    "unmarked_reversal_public": lambda: UnmarkedReversal(root="public"),
    "padded_reversal": lambda: PaddedReversal(),
    "dusell_dyck": lambda: DuSellDyck(),
    "dusell_dyck_public": lambda: DuSellDyck(root="public"),
    "hardest_cfl": lambda: HardestCFL(),
    "dyck_km": lambda: DyckKM(2, 3),
}
# exhaustive enumeration depth (symbols before END): >= 10 for binary alphabets
DEPTH = {"dyck1": 10, "anbn": 12, "anbn0": 12, "latch": 12, "marked_reversal": 7, "palindrome": 7,
         "unmarked_reversal": 10, "unmarked_reversal_public": 10, "padded_reversal": 10, "anbncn": 8,
         "dyck2": 6, "dusell_dyck": 6, "dusell_dyck_public": 6, "dyck3": 4, "dyck6": 3, "json": 4,
         "hardest_cfl": 6, "dyck_km": 7}  # fmt: skip
NAMES = list(FACTORIES)
# enumerating the hardest CFL (7 terminals, shortest member 6 symbols) takes ~40 s: slow run only
EXHAUSTIVE = [pytest.param(n, marks=pytest.mark.slow) if n == "hardest_cfl" else n for n in NAMES]


@cache
def lang(name: str):
    return FACTORIES[name]()


def strings_upto(language, depth: int):
    """Every string of up to ``depth`` symbols, followed by END.  For the hardest CFL (shortest
    member: 6 symbols, always ending with ``;``) only strings ending with ``;`` are listed."""
    last = language.symbols.index(";") if ";" in language.symbols else None
    for n in range(depth + 1):
        if last is not None:
            if n:
                for w in itertools.product(range(language.end_id), repeat=n - 1):
                    yield [*w, last, language.end_id]
            continue
        for w in itertools.product(range(language.end_id), repeat=n):
            yield [*w, language.end_id]


@cache
def members(name: str) -> tuple[tuple[int, ...], ...]:
    language = lang(name)
    return tuple(tuple(w) for w in strings_upto(language, DEPTH[name]) if language.accepts(w))


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), split=st.sampled_from(["train", "test"]), uniform=st.booleans())
def test_samples_are_accepted_with_their_next_sets_and_probabilities(name, seed, split, uniform):
    language = lang(name)
    rng = np.random.default_rng(seed)
    window = language.default_lengths(split)
    if name == "hardest_cfl" and split == "test":
        window = (41, 61)  # Earley on 100-symbol strings of an ambiguous grammar is slow in CI
    mode = "uniform" if uniform else "natural"
    for w in language.sample_many(2, rng, window, mode):
        assert window[0] <= len(w) <= window[1]
        assert language.accepts(w), language.decode(w)
        sets = language.allowed_next_all(w)
        assert len(sets) == len(w)
        assert all(tok in s for tok, s in zip(w, sets, strict=True))
        ref = language.reference_log_probs(w, window, mode)
        assert ref.shape == (len(w),) and np.isfinite(ref).all() and ref.sum() <= 1e-9


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**31 - 1))
def test_negatives_are_rejected(name, seed):
    language = lang(name)
    w = language.sample_negative(np.random.default_rng(seed), language.default_lengths("train"))
    assert w[-1] == language.end_id and not language.accepts(w)


@pytest.mark.parametrize("name", EXHAUSTIVE)
def test_exhaustive_membership_agrees_with_automata(name):
    language = lang(name)
    inside = isinstance(language, GrammarLanguage)
    pda = language.pda() if hasattr(language, "pda") and name != "anbncn" else None
    earley = GrammarLanguage.accepts.__get__(language) if inside else None
    count = 0
    for w in strings_upto(language, DEPTH[name]):
        a = language.accepts(w)
        count += a
        if pda is not None:
            assert pda.accepts([language.symbols[i] for i in w]) == a, language.decode(w)
        if inside:
            assert earley(w) == a, language.decode(w)
            positive = language.log_prob(w) > -math.inf
            # the public-code variants give some members probability 0 (docs/references.md)
            assert positive == a or (name.endswith("_public") and a and not positive), language.decode(w)
        if name in ("anbn", "anbn0", "anbncn"):
            n = language.n_of_length(len(w))
            assert a == (n is not None and w == language.string([n] * language.blocks))
    assert count == len(members(name)) > 0


@pytest.mark.parametrize("name", EXHAUSTIVE)
def test_exhaustive_next_sets(name):
    """``allowed_next(p)`` contains every continuation seen among members, and every symbol in
    it is the start of some member continuation (checked against Earley where overridden)."""
    language = lang(name)
    seen: dict[tuple[int, ...], set[int]] = {}
    for w in members(name):
        for t in range(len(w)):
            seen.setdefault(w[:t], set()).add(w[t])
    for prefix, nxt in seen.items():
        allowed = language.allowed_next(list(prefix))
        assert nxt <= allowed, (language.decode(prefix), nxt, allowed)
        if len(prefix) < DEPTH[name] - 2 and isinstance(language, GrammarLanguage):
            assert allowed == GrammarLanguage.allowed_next(language, list(prefix))
    bad = [language.end_id - 1] * 3 if name.startswith("dyck") else None
    if bad is not None and name != "dyck_km":  # three closes: not a viable prefix
        assert language.allowed_next(bad) == frozenset()


@pytest.mark.parametrize("name", [n for n in EXHAUSTIVE if n != "dyck_km"])
def test_exact_probabilities_sum_to_length_probabilities(name):
    language = lang(name)
    depth = DEPTH[name]
    by_len: dict[int, float] = {}
    for w in members(name):
        by_len[len(w)] = by_len.get(len(w), 0.0) + math.exp(language.log_prob(list(w)))
    lp = language.length_log_probs(depth + 1)
    for n in range(1, depth + 2):
        assert by_len.get(n, 0.0) == pytest.approx(math.exp(lp[n]), rel=1e-9, abs=1e-300), n
    # within a window the probabilities sum to 1, and given a length too
    lengths = [n for n in range(1, depth + 2) if math.isfinite(lp[n])]
    window = (lengths[0], lengths[-1])
    total = sum(math.exp(language.log_prob(list(w), window)) for w in members(name))
    assert total == pytest.approx(1.0, rel=1e-9)
    n = lengths[-1]
    given = sum(math.exp(language.log_prob_given_length(list(w))) for w in members(name) if len(w) == n)
    assert given == pytest.approx(1.0, rel=1e-9)


@pytest.mark.parametrize(
    "name",
    [
        "dyck2",
        "padded_reversal",
        pytest.param("hardest_cfl", marks=pytest.mark.slow),
        "anbn",
        "latch",
        "dusell_dyck_public",
    ],
)
def test_sampling_given_length_matches_exact_probabilities(name):
    """Length-conditioned sampling is exact: total variation to ``p(w | n)`` is small."""
    language = lang(name)
    sizes: dict[int, int] = {}
    for w in members(name):
        sizes[len(w)] = sizes.get(len(w), 0) + 1
    n = max(k for k, c in sizes.items() if c <= 60)  # few outcomes: 4000 draws measure TV well
    rng = np.random.default_rng(0)
    draws = 4000
    counts: dict[tuple[int, ...], int] = {}
    for _ in range(draws):
        w = tuple(language.sample_given_length(rng, n))
        counts[w] = counts.get(w, 0) + 1
    exact = {w: math.exp(language.log_prob_given_length(list(w))) for w in members(name) if len(w) == n}
    assert set(counts) <= set(exact)
    tv = 0.5 * sum(abs(counts.get(w, 0) / draws - p) for w, p in exact.items())
    assert tv < 0.06, tv


def test_hardest_cfl_earley_and_inside_agree_near_members():
    """Default-run stand-in for the slow exhaustive check: samples and their one-symbol edits."""
    language = lang("hardest_cfl")
    rng = np.random.default_rng(0)
    checked = 0
    for w in language.sample_many(15, rng, (7, 20)):
        body = w[:-1]
        edits = [[*body[:i], a, *body[i + 1 :]] for i in range(len(body)) for a in range(language.end_id)]
        edits += [body[:i] + body[i + 1 :] for i in range(len(body))]
        for e in [body, *edits[:: max(1, len(edits) // 20)]]:
            s = [*e, language.end_id]
            a = language.accepts(s)
            assert (language.log_prob(s) > -math.inf) == a, language.decode(s)
            checked += 1
    assert checked > 200


def test_uniform_length_sampling_is_uniform_over_possible_lengths():
    language = DyckN(2)
    rng = np.random.default_rng(0)
    lengths = [len(w) for w in language.sample_many(3000, rng, (3, 21), "uniform")]
    possible = language.lengths_in((3, 21))
    assert possible == list(range(3, 22, 2))
    freq = np.bincount(lengths, minlength=22)[possible] / len(lengths)
    assert np.abs(freq - 1 / len(possible)).max() < 0.03


def test_token_log_probs_chain_rule_is_exact_for_counting_and_regular_languages():
    for language, window in ((AnBn(), (3, 41)), (AnBnCn(min_n=0), (1, 31)), (Latch(), (1, 9))):
        total = 0.0
        for n in range(window[0], window[1] + 1):
            for w in members_of_length(language, n):
                tl = language.token_log_probs(w, window)
                assert tl.sum() == pytest.approx(language.log_prob(w, window))
                total += math.exp(tl.sum())
        assert total == pytest.approx(1.0, rel=1e-9)


def members_of_length(language, n):
    if hasattr(language, "n_of_length"):
        k = language.n_of_length(n)
        return [] if k is None else [language.string([k] * language.blocks)]
    return [[*w, language.end_id] for w in itertools.product(range(language.end_id), repeat=n - 1)
            if language.accepts([*w, language.end_id])]  # fmt: skip


def test_suzgun_pcfg_numbers():
    d = DyckN(1)
    assert d.grammar.null_prob["S"] == pytest.approx(2 - math.sqrt(3))  # e = 1/4 + e²/4
    assert math.exp(d.log_prob(d.encode("END"))) == pytest.approx(2 - math.sqrt(3))
    # "()" : S → ( S ) with S ⇒ ε, plus concatenations with empty parts
    assert d.log_prob(d.encode("( ) END")) == pytest.approx(math.log(math.exp(d.length_log_probs(3)[3])))


def test_dusell_public_quirk_is_ln2_for_dyck():
    paper, public = DuSellDyck(), DuSellDyck(root="public")
    w = paper.encode("( ) [ ( ) ] END")
    assert public.log_prob(w) - paper.log_prob(w) == pytest.approx(math.log(2))
    single = paper.encode("[ ( ) ] END")
    assert paper.accepts(single) and public.log_prob(single) == -math.inf
    assert UnmarkedReversal(root="public").length_log_probs(3)[1] == -math.inf


def test_weiss_negatives_and_near_misses():
    rng = np.random.default_rng(0)
    language = AnBn()
    strings, labels = language.near_miss_test_set(rng, 1000)
    assert len(strings) == 1000 and 0 < sum(labels) < 1000
    for w, y in zip(strings, labels, strict=True):
        counts = [w.count(0), w.count(1)]
        assert y == (counts[0] == counts[1] >= 1)
    three = AnBnCn()
    neg = three.sample_negative(rng, (4, 151))
    assert len({neg.count(0), neg.count(1), neg.count(2)}) > 1 and not three.accepts(neg)


def test_negatives_with_empty_blocks_cover_the_near_miss_family():
    rng = np.random.default_rng(1)
    counts = [(w.count(0), w.count(1)) for w in (AnBn().sample_negative(rng, (3, 201)) for _ in range(3000))]
    assert min(min(c) for c in counts) == 1  # Weiss's default: no training string starts with b
    zero = AnBn(negative_min_count=0)
    counts = [(w.count(0), w.count(1)) for w in (zero.sample_negative(rng, (3, 201)) for _ in range(3000))]
    assert any(a == 0 for a, _ in counts) and any(b == 0 for _, b in counts)
    assert all(a != b for a, b in counts) and max(max(c) for c in counts) <= 100
    with pytest.raises(ValueError, match="negative_min_count must be >= 0, got -1"):
        AnBnCn(negative_min_count=-1)


@pytest.mark.parametrize("name", NAMES)
def test_bad_input_is_named(name):
    language = lang(name)
    with pytest.raises(ValueError, match="unknown token id 99"):
        language.accepts([99])
    with pytest.raises(ValueError, match="length window"):
        language.sample_many(1, np.random.default_rng(0), (5, 2))


@pytest.mark.parametrize("name", NAMES)
def test_fast_prefix_membership_equals_the_definition(name):
    from memrnn.languages.base import Language

    language = lang(name)
    rng = np.random.default_rng(1)
    window = (1, 30) if name != "hardest_cfl" else (7, 20)
    window = window if language.lengths_in(window) else language.default_lengths("train")
    for w in [*language.sample_many(3, rng, window), language.sample_negative(rng, window)]:
        assert language.accepts_prefixes(w) == Language.accepts_prefixes(language, w), language.decode(w)


@pytest.mark.parametrize("name", NAMES)
def test_languages_round_trip_through_weights_only_checkpoints(name):
    import io

    import torch

    language = lang(name)
    buf = io.BytesIO()
    torch.save({"language": language}, buf)
    buf.seek(0)
    loaded = torch.load(buf, weights_only=True)["language"]
    assert type(loaded) is type(language) and repr(loaded) == repr(language)
    w = language.sample(
        np.random.default_rng(0), (7, 30) if name == "hardest_cfl" else language.default_lengths("train")
    )
    assert loaded.log_prob(w) == language.log_prob(w) and loaded.accepts(w)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("mode", ["natural", "uniform"])
def test_batched_reference_log_probs_equal_the_per_string_ones(name, mode):
    """What a dataset split stores (``reference_log_probs_many``, one inside pass per length for
    the PCFG languages) equals ``reference_log_probs`` string by string: members of several
    lengths, non-members, a string outside the window and an incomplete one."""
    language = lang(name)
    rng = np.random.default_rng(7)
    window = (language.lengths_in((1, 14))[0], 14)
    strings = language.sample_many(12, rng, window, mode)
    possible = set(language.lengths_in((1, 4)))  # uniform: scored given a length it can have
    strings += [list(w) for w in strings_upto(language, 3) if mode == "natural" or len(w) in possible]
    strings.append(language.sample_many(1, rng, (15, 22), mode)[0])  # outside the window
    if mode == "natural":
        strings.append(strings[0][:-1])  # no END
    got = language.reference_log_probs_many(strings, window, mode)
    assert len(got) == len(strings)
    for w, g in zip(strings, got, strict=True):
        want = language.reference_log_probs(w, window, mode)
        assert g.shape == want.shape
        np.testing.assert_allclose(g, want, rtol=1e-12, atol=1e-12)


def test_pcfg_batched_inside_equals_cky_and_names_bad_terminals():
    grammar = lang("hardest_cfl").grammar
    rng = np.random.default_rng(3)
    words = [grammar.sample_given_length(rng, n) for n in (6, 6, 7, 9, 9, 9)] + [[], [0, 1], [0] * 6]
    want = np.array([grammar.log_prob(w) for w in words])
    np.testing.assert_allclose(grammar.log_probs(words, chunk=2), want, rtol=1e-12)
    assert np.isfinite(want[:6]).all() and want[-1] == -math.inf
    with pytest.raises(ValueError, match="unknown terminal index 99 at position 1 of string 1"):
        grammar.log_probs([[0], [0, 99]])
    with pytest.raises(ValueError, match="chunk must be a positive int, got 0"):
        grammar.log_probs(words, chunk=0)
