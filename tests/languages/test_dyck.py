import itertools
import math
from functools import lru_cache

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memrnn.languages import ACCEPT, REJECT, DyckKM

km = st.tuples(st.integers(1, 5), st.integers(1, 5))
truncations = st.sampled_from(["hewitt", "rejection"])


@st.composite
def windows(draw):
    # lengths (END counted) are odd, and "hewitt" ends only after lo brackets (length > lo):
    # hi >= lo + 2 leaves an admissible length under both truncations
    lo = draw(st.integers(1, 25))
    hi = draw(st.integers(lo + 2, lo + 30))
    return lo, hi


def dyck_by_definition(ids, k, m):
    """Definition 1 of Hewitt et al. 2020, written independently of the DFA: well nested, types match,
    depth never above m, END exactly once at the end."""
    if not ids or ids[-1] != 2 * k or 2 * k in ids[:-1]:
        return False
    stack = []
    for t in ids[:-1]:
        if t < k:
            stack.append(t)
            if len(stack) > m:
                return False
        elif not stack or stack.pop() != t - k:
            return False
    return not stack


@settings(max_examples=60, deadline=None)
@given(km, truncations, windows(), st.integers(0, 2**32 - 1))
def test_samples_are_accepted_and_inside_their_window(kms, truncation, window, seed):
    lang = DyckKM(*kms, truncation=truncation)
    rng = np.random.default_rng(seed)
    for s in lang.sample_many(10, rng, window):
        assert lang.accepts(s) and dyck_by_definition(s, *kms)
        assert window[0] <= len(s) <= window[1]


@settings(max_examples=40, deadline=None)
@given(km, st.integers(0, 2**32 - 1))
def test_allowed_set_is_nonempty_until_end_and_contains_every_next_token(kms, seed):
    lang = DyckKM(*kms)
    s = lang.sample(np.random.default_rng(seed), lang.default_lengths("train"))
    for t in range(len(s)):
        allowed = lang.allowed_next(s[:t])
        assert allowed and s[t] in allowed
        # the oracle agrees with the definition: exactly the ids that keep a valid prefix
        brute = {a for a in range(lang.num_symbols) if lang.run([*s[:t], a]) != REJECT}
        assert allowed == brute
    assert lang.allowed_next(s) == frozenset()


@pytest.mark.parametrize(("k", "m"), [(1, 1), (2, 2), (2, 3), (3, 2), (4, 3), (2, 5)])
def test_number_of_reachable_stack_states(k, m):
    assert len(DyckKM(k, m).reachable_states()) == sum(k**i for i in range(m + 1))


@pytest.mark.parametrize(("k", "m"), [(1, 2), (2, 2), (2, 1), (3, 2)])
def test_dfa_agrees_with_the_definition_on_every_short_string(k, m):
    lang = DyckKM(k, m)
    for n in range(1, 8):
        for ids in itertools.product(range(2 * k + 1), repeat=n):
            assert lang.accepts(ids) == dyck_by_definition(list(ids), k, m), ids


def complete_strings(lang, max_len):
    """Every string of the language of length <= max_len (END counted), by DFS."""
    out, stack = [], [[]]
    while stack:
        p = stack.pop()
        for a in lang.allowed_next(p):
            w = [*p, a]
            if a == lang.end_id:
                out.append(w)
            elif len(w) < max_len:
                stack.append(w)
    return out


def test_probabilities_of_short_strings_sum_to_the_depth_recursion():
    """(k, m) = (2, 2): Σ p(w) over complete strings of length <= 10 equals the probability,
    computed by a recursion over depth alone, that a sampled string ends within 10 tokens."""
    k, m, n = 2, 2, 10
    lang = DyckKM(k, m)

    @lru_cache(None)
    def ends_within(depth, budget):
        if budget == 0:
            return 0.0
        if depth == 0:
            return 0.5 + 0.5 * ends_within(1, budget - 1)
        if depth == m:
            return ends_within(m - 1, budget - 1)
        return 0.5 * ends_within(depth + 1, budget - 1) + 0.5 * ends_within(depth - 1, budget - 1)

    strings = complete_strings(lang, n)
    total = sum(math.exp(lang.log_prob(w)) for w in strings)
    assert len(strings) > 100
    assert total == pytest.approx(ends_within(0, n), abs=1e-12)
    assert 0.5 < total < 1


def test_hand_worked_probabilities():
    lang = DyckKM(2, 3)
    # "(0 0) END": open 1/(2k) = 1/4, close-top 1/2, END 1/2
    assert math.exp(lang.log_prob(lang.encode("(0 0) END"))) == pytest.approx(1 / 16)
    # depth m forces the close: "(1 (0 (0 0) 0) 1) END"
    p = (1 / 4) * (1 / 4) * (1 / 4) * 1 * (1 / 2) * (1 / 2) * (1 / 2)
    assert math.exp(lang.log_prob(lang.encode("(1 (0 (0 0) 0) 1) END"))) == pytest.approx(p)
    assert lang.log_prob(lang.encode("(0 1) END")) == -math.inf


def test_the_two_truncations_differ_as_computed_by_hand():
    """Dyck-(1,2), window (6, 7), so only length 7 (6 brackets).  Base probabilities: ()()()
    1/128, ()(()) 1/64, (())() 1/64, (()()) 1/32.  Rejection conditions on the window: 1/9, 2/9,
    2/9, 4/9.  The authors' generator re-draws END while fewer than 6 brackets were emitted, so
    each early return to the empty stack costs nothing: every string gets 1/16, i.e. 1/4 after
    rejecting the longer ones."""
    want = {"hewitt": [1 / 4] * 4, "rejection": [1 / 9, 2 / 9, 2 / 9, 4 / 9]}
    for truncation, probs in want.items():
        lang = DyckKM(1, 2, truncation=truncation)
        texts = [
            "(0 0) (0 0) (0 0) END",
            "(0 0) (0 (0 0) 0) END",
            "(0 (0 0) 0) (0 0) END",
            "(0 (0 0) (0 0) 0) END",
        ]
        got = [math.exp(lang.log_prob(lang.encode(t), (6, 7))) for t in texts]
        assert got == pytest.approx(probs, abs=1e-12), truncation
        assert sum(math.exp(lang.log_prob(w, (6, 7))) for w in complete_strings(lang, 7)) == pytest.approx(1)


@pytest.mark.parametrize("truncation", ["hewitt", "rejection"])
@pytest.mark.parametrize(("k", "m", "window"), [(2, 2, (1, 11)), (2, 3, (5, 13)), (1, 3, (9, 15))])
def test_window_distribution_sums_to_one(truncation, k, m, window):
    lang = DyckKM(k, m, truncation=truncation)
    strings = [w for w in complete_strings(lang, window[1]) if len(w) >= window[0]]
    assert sum(math.exp(lang.log_prob(w, window)) for w in strings) == pytest.approx(1, abs=1e-10)
    # strings outside the window have probability 0
    short = [w for w in complete_strings(lang, window[1]) if len(w) < window[0]]
    assert all(lang.log_prob(w, window) == -math.inf for w in short)


@settings(max_examples=40, deadline=None)
@given(km, truncations, windows(), st.integers(0, 2**32 - 1))
def test_next_token_distribution_is_normalised_and_matches_token_log_probs(kms, truncation, window, seed):
    lang = DyckKM(*kms, truncation=truncation)
    s = lang.sample(np.random.default_rng(seed), window)
    per_token = lang.token_log_probs(s, window)
    for t in range(len(s)):
        lp = lang.next_log_probs(s[:t], window)
        assert np.exp(lp).sum() == pytest.approx(1, abs=1e-9)
        assert lp[s[t]] == pytest.approx(per_token[t], abs=1e-12)
        support = {int(a) for a in np.flatnonzero(np.isfinite(lp))}
        assert support <= lang.allowed_next(s[:t])
        unconditioned = {int(a) for a in np.flatnonzero(np.isfinite(lang.next_log_probs(s[:t])))}
        assert unconditioned == lang.allowed_next(s[:t])


def authors_sampler(k, m, lo, hi, rng):
    """A literal transcription of the procedure in the authors' generator: END is re-drawn while
    the string (END counted) is shorter than lo; strings longer than hi are rejected."""
    while True:
        stack, out = [], []
        while True:
            weights = np.zeros(2 * k + 1)
            if not stack:
                weights[:k] = 1 / k
                weights[2 * k] = 1
            elif len(stack) == m:
                weights[k + stack[-1]] = 1
            else:
                weights[:k] = 1 / k
                weights[k + stack[-1]] = 1
            tok = int(rng.choice(2 * k + 1, p=weights / weights.sum()))
            if tok == 2 * k:
                if len(out) < lo:  # len(string) is checked before END is appended, as in the original
                    continue
                out.append(tok)
                break
            out.append(tok)
            if tok < k:
                stack.append(tok)
            else:
                stack.pop()
        if lo <= len(out) <= hi:
            return out


def test_hewitt_mode_matches_the_authors_procedure_statistically():
    """Length histogram of 4000 draws from each sampler against the exact probabilities
    (4.5 standard errors)."""
    k, m, window = 2, 3, (3, 11)
    lang = DyckKM(k, m, truncation="hewitt")
    exact = {}
    for w in complete_strings(lang, window[1]):
        p = math.exp(lang.log_prob(w, window))
        if p > 0:
            exact[len(w)] = exact.get(len(w), 0) + p
    n = 4000
    ours = np.bincount([len(s) for s in lang.sample_many(n, np.random.default_rng(1), window)], minlength=12)
    rng = np.random.default_rng(2)
    theirs = np.bincount([len(authors_sampler(k, m, *window, rng)) for _ in range(n)], minlength=12)
    for length, p in exact.items():
        se = math.sqrt(p * (1 - p) / n)
        assert abs(ours[length] / n - p) < 4.5 * se, (length, ours[length] / n, p)
        assert abs(theirs[length] / n - p) < 4.5 * se, (length, theirs[length] / n, p)
    assert set(exact) == {5, 7, 9, 11}  # >= 3 brackets, so >= 4, so length >= 5


def test_default_windows_are_table_2():
    assert DyckKM(2, 3).default_lengths("train") == (1, 84)
    assert DyckKM(2, 3).default_lengths("test") == (85, 168)
    assert DyckKM(8, 5).default_lengths("train") == (1, 180)
    assert DyckKM(8, 5).default_lengths("test") == (181, 360)


def test_exact_sampling_reaches_test_windows_that_rejection_would_not():
    lang = DyckKM(2, 3, truncation="rejection")
    window = (85, 168)
    samples = lang.sample_many(50, np.random.default_rng(0), window)
    assert all(85 <= len(s) <= 168 and lang.accepts(s) for s in samples)
    # Under rejection, log p(w | window) - log p(w) = -log P(window) for every w in the window.
    log_p_window = [lang.log_prob(s) - lang.log_prob(s, window) for s in samples]
    assert np.ptp(log_p_window) < 1e-9
    # P(window) ≈ 6.5e-4: whole-string rejection would need ~1,500 tries per sample.
    assert 5e-4 < math.exp(log_p_window[0]) < 8e-4


def test_dfa_transitions_of_appendix_b():
    lang = DyckKM(2, 2)
    assert lang.transition((), lang.end_id) == ACCEPT  # B.1
    assert lang.transition((), 1) == (1,)  # B.2
    assert lang.transition((1,), 0) == (1, 0)  # B.3
    assert lang.transition((1, 0), 2) == (1,)  # B.5: full stack, close of the top
    assert lang.transition((1, 0), 0) == REJECT  # no push on a full stack
    assert lang.transition((1,), 2) == REJECT  # wrong close
    assert lang.transition(ACCEPT, 0) == REJECT


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: DyckKM(0, 3), "k must be a positive integer, got 0"),
        (lambda: DyckKM(2, -1), "m must be a positive integer, got -1"),
        (lambda: DyckKM(2, 3, truncation="local"), "'local'"),
        (lambda: DyckKM(2, 3).accepts([0, 7]), "unknown token id 7 at position 1"),
        (lambda: DyckKM(2, 3).accepts([-1]), "unknown token id -1"),
        (lambda: DyckKM(2, 3).encode("(0 ]"), "unknown symbol ']'"),
        (lambda: DyckKM(2, 3).sample(np.random.default_rng(0), (4, 4)), r"no string with length in \(4, 4\)"),
        (lambda: DyckKM(2, 3).token_log_probs([0], (5, 3)), "min <= max, got \\(5, 3\\)"),
        (lambda: DyckKM(2, 3).token_log_probs([0], (0, 3)), "1 <= min <= max"),
        (lambda: DyckKM(2, 3).next_log_probs([2]), "not a prefix"),
        (lambda: DyckKM(2, 3).default_lengths("dev2"), "unknown split 'dev2'"),
    ],
)
def test_clear_errors(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_sampling_is_reproducible():
    lang = DyckKM(3, 4)
    a = lang.sample_many(20, np.random.default_rng(7), (1, 60))
    b = lang.sample_many(20, np.random.default_rng(7), (1, 60))
    assert a == b
    assert lang.decode(lang.encode("(2 2) END")) == "(2 2) END"


def test_hewitt_training_window_never_yields_the_empty_string():
    lang = DyckKM(2, 3)
    window = lang.default_lengths("train")
    assert lang.log_prob([lang.end_id], window) == -math.inf
    assert lang.next_log_probs([], window)[lang.end_id] == -math.inf
    samples = lang.sample_many(500, np.random.default_rng(3), window)
    assert min(len(s) for s in samples) >= 3
    # under "rejection" the empty string is about half of all samples
    rej = DyckKM(2, 3, truncation="rejection")
    assert math.exp(rej.log_prob([rej.end_id], window)) == pytest.approx(0.5, abs=1e-3)
