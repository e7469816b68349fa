"""Delétang et al.'s (2023) transduction tasks and Butoi et al.'s (2025) FLaRe recognizers of the
same name build on one definition (memrnn.languages.definitions): both agree with it, and the names
whose languages differ say how."""

import itertools

import numpy as np
import pytest

from memrnn.languages import chomsky, definitions, recognizers
from memrnn.languages.definitions import little_endian, little_endian_value


def binary_strings(max_length: int):
    for n in range(max_length + 1):
        yield from (list(s) for s in itertools.product((0, 1), repeat=n))


def test_even_pairs_is_one_language_in_both_framings():
    task, lang = chomsky.EvenPairs(), recognizers.EvenPairs()
    for x in binary_strings(9):
        member = definitions.first_equals_last(x)
        assert lang.accepts(x) == member, x  # the recognizer's automaton
        assert task.transduce(x) == [int(not member)], x  # class 1: the pairs are odd in number


def test_cycle_navigation_is_one_function_in_both_framings():
    task, lang = chomsky.CycleNavigation(), recognizers.CycleNavigation()
    move_of_token = {0: +1, 1: -1, 2: 0}  # FLaRe's >, <, =
    for n in range(7):
        for tokens in itertools.product(range(3), repeat=n):
            position = definitions.cycle_position(move_of_token[t] for t in tokens)
            accepted = [d for d in range(5) if lang.accepts([*tokens, 3 + d])]
            assert accepted == [position], tokens
            moves = [move_of_token[t] for t in tokens]  # Delétang et al.'s tokens are move + 1
            assert task.transduce([m + 1 for m in moves]) == [position], tokens


def test_bucket_sort_and_binary_arithmetic_agree_across_the_framings():
    rng = np.random.default_rng(0)
    sort_task, sort_lang = chomsky.BucketSort(), recognizers.BucketSort()
    for _ in range(50):
        w = [int(a) for a in rng.integers(0, 5, size=int(rng.integers(0, 12)))]
        assert sort_task.transduce(w) == list(definitions.bucket_sort(w))
        assert sort_lang.accepts([*w, 5, *definitions.bucket_sort(w)])
    for name in ("binary_addition", "binary_multiplication"):
        f = getattr(definitions, name)
        task, lang = chomsky.chomsky_task(name), recognizers.flare_language(name)
        for _ in range(50):
            x, y = (int(v) for v in rng.integers(1, 200, size=2))
            a, b = little_endian(x), little_endian(y)
            out = task.transduce([*a, 2, *b])
            assert little_endian_value(out[: out.index(2)]) == f(x, y)
            assert lang.accepts([*a, 2, *b, 3, *little_endian(f(x, y))])
            assert not lang.accepts([*a, 2, *b, 3, *little_endian(f(x, y) + 1)])


def test_little_endian_round_trips_and_refuses_a_narrow_width():
    for x in range(70):
        assert little_endian_value(little_endian(x)) == x and little_endian_value(little_endian(x, 9)) == x
    assert little_endian(0) == [0] and little_endian(6, 4) == [0, 1, 1, 0]
    with pytest.raises(ValueError, match="9 does not fit in 3 bits"):
        little_endian(9, 3)


@pytest.mark.parametrize("name", sorted(definitions.DIFFERENT))
def test_names_whose_languages_differ_are_in_both_modules(name):
    """Each name listed as different is a task of both benchmarks (so the list is not stale)."""
    assert name in chomsky.CHOMSKY_TASKS and name in recognizers.FLARE_LANGUAGES


def test_odds_first_differs_as_documented():
    assert chomsky.OddsFirst().transduce([0, 1, 1, 1, 0]) == [1, 1, 0, 1, 0]  # x[1::2] + x[::2]
    assert recognizers.OddsFirst.transform((0, 1, 1, 1, 0)) == (0, 1, 0, 1, 1)  # w[0::2] + w[1::2]
