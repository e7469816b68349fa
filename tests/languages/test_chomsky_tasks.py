"""Delétang et al.'s (2023) transduction tasks: the worked examples of their public code's
docstrings, exhaustive checks of the regular tasks on short strings, samplers against
independent oracles (Python integers, a second evaluator), the length conventions, and bad
inputs named."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from memrnn.languages.chomsky import (
    CHOMSKY_TASKS,
    TASK_ALIASES,
    MissingDuplicate,
    ModularArithmeticBrackets,
    _evaluate,
    _expression,
    chomsky_task,
)
from memrnn.languages.state_tracking import transduction_task


def ids(task, text: str) -> list[int]:
    return [task.input_symbols.index(s) for s in text.split()]


def outs(task, text: str) -> list[int]:
    return [task.output_symbols.index(s) for s in text.split()]


WORKED = [  # (task, input, output), from the public code's docstrings (odds_first: its code)
    ("even_pairs", "0 0 1 1 1 0", "even"),
    ("even_pairs", "0 1 0 1 0 0 1", "odd"),
    ("parity_check", "1 0 1 0 1 0 0", "odd"),
    ("parity_check", "0 1 1 1 1", "even"),
    ("cycle_navigation", "+1 -1 0 -1 -1", "3"),
    ("cycle_navigation", "+1 +1 +1 -1", "2"),
    ("modular_arithmetic", "1 + 2 * 3", "2"),
    ("modular_arithmetic", "1 - 1 - 1", "4"),
    ("modular_arithmetic", "0 * 1 + 4 * 3 - 2", "0"),
    ("stack_manipulation", "0 1 1 0 PUSH1 POP POP", "1 1 0 END 0 0 0 0"),
    ("stack_manipulation", "1 1 0 POP POP POP", "END 0 0 0 0 0 0"),
    ("stack_manipulation", "1 POP POP PUSH0", "0 END 0 0 0"),  # a POP on the empty stack is ignored
    ("reverse_string", "1 1 0 1 0", "0 1 0 1 1"),
    ("modular_arithmetic_brackets", "( ( 1 + 2 ) - ( - 3 ) )", "1"),
    ("modular_arithmetic_brackets", "( - 4 )", "1"),
    ("modular_arithmetic_brackets", "( ( 2 * - 4 ) + ( 3 * 3 ) )", "1"),  # -8 + 9
    ("modular_arithmetic_brackets", "( 4 * ( 1 - 3 ) )", "2"),  # -8 mod 5
    ("solve_equation", "( x + 2 ) = 4", "2"),
    ("solve_equation", "( ( 1 - x ) - ( - 3 ) ) = 0", "4"),
    ("duplicate_string", "1 0 1", "1 0 1 1 0 1"),
    ("missing_duplicate", "0 1 1 0 0 _ 1 0", "1"),
    ("missing_duplicate", "1 0 1 1 _ 1 #", "0"),
    ("odds_first", "0 0 1 1 0 1 0 1", "0 1 1 1 0 1 0 0"),
    ("binary_addition", "0 0 1 + 0 1 1 0 1", "0 1 0 1 1 END 0 0 0 0"),  # 4 + 22 = 26
    ("binary_addition", "1 0 0 1 + 0 0 0 0 0 1", "1 0 0 1 0 1 END 0 0 0 0 0"),  # 9 + 32 = 41
    ("binary_multiplication", "0 0 1 * 0 1 1 0 1", "0 0 0 1 1 0 1 END 0"),  # 4 · 22 = 88
    ("binary_multiplication", "1 0 0 1 * 0 0 0 0 0 1", "0 0 0 0 0 1 0 0 1 END 0"),  # 9 · 32 = 288
    ("compute_sqrt", "1 0 0 1 0 1", "1 1 0"),  # 37 -> 6
    ("compute_sqrt", "1 1 1", "1 0"),  # 7 -> 2
    ("bucket_sort", "1 0 2 0 4 1 1 2", "0 0 1 1 1 2 2 4"),
]


@pytest.mark.parametrize(("name", "x", "y"), WORKED)
def test_worked_examples(name, x, y):
    task = chomsky_task(name)
    got = task.transduce(ids(task, x))
    assert got == outs(task, y), task.decode(got, output=True)
    assert len(got) == task.output_length(len(ids(task, x)))


def test_the_registry_is_the_papers_fifteen_tasks_by_level():
    levels = [cls.level for cls in CHOMSKY_TASKS.values()]
    assert len(CHOMSKY_TASKS) == 15
    assert levels == ["regular"] * 4 + ["dcf"] * 4 + ["cs"] * 7
    with pytest.raises(ValueError, match="unknown Chomsky-hierarchy task 'parity'; the tasks are"):
        chomsky_task("parity")


def test_the_public_codes_registry_names_are_aliases():
    """``missing_duplicate_string`` (the public code's ``TASK_BUILDERS`` name) builds memrnn's
    ``missing_duplicate``, through both lookups; an unknown name lists the aliases."""
    assert TASK_ALIASES == {"missing_duplicate_string": "missing_duplicate"}
    for lookup in (chomsky_task, transduction_task):
        assert type(lookup("missing_duplicate_string")) is MissingDuplicate
        assert type(lookup("missing_duplicate")) is MissingDuplicate
    with pytest.raises(
        ValueError, match=r"unknown transduction task 'missing_dup'.*missing_duplicate_string"
    ):
        transduction_task("missing_dup")
    with pytest.raises(ValueError, match=r"unknown Chomsky-hierarchy task 'missing'.*aliases"):
        chomsky_task("missing")


@pytest.mark.parametrize("n", range(1, 9))
def test_regular_tasks_exhaustively(n):
    pairs, parity, cycle = (
        chomsky_task("even_pairs"),
        chomsky_task("parity_check"),
        chomsky_task("cycle_navigation"),
    )
    for w in itertools.product(range(2), repeat=n):
        assert pairs.transduce(w) == [int(w[0] != w[-1])]  # unequal neighbours are odd iff the ends differ
        assert parity.transduce(w) == [w.count(1) % 2]
    for w in itertools.product(range(3), repeat=min(n, 6)):
        position = 0
        for t in w:
            position = (position + {0: 4, 1: 0, 2: 1}[t]) % 5
        assert cycle.transduce(w) == [position]


@pytest.mark.parametrize("n", [1, 3, 5, 7])
def test_modular_arithmetic_exhaustively_against_python(n):
    task = chomsky_task("modular_arithmetic")
    digits, ops = range(5), ("+", "-", "*")
    for ds in itertools.product(digits, repeat=n // 2 + 1):
        for os_ in itertools.product(ops, repeat=n // 2) if n <= 5 else [("-", "*", "+"), ("*", "-", "-")]:
            text = " ".join(itertools.chain.from_iterable(zip(map(str, ds), (*os_, ""), strict=True))).strip()
            assert task.transduce(ids(task, text)) == [eval(text) % 5], text


def test_stack_manipulation_exhaustively_against_a_string_stack():
    task = chomsky_task("stack_manipulation")
    for n in range(1, 7):
        for w in itertools.product(range(5), repeat=n):
            k = next((i for i, t in enumerate(w) if t >= 2), n)
            if k == 0 or any(t < 2 for t in w[k:]):
                continue
            s = "".join(map(str, w[:k]))
            for a in w[k:]:
                s = s[:-1] if a == 2 else s + str(a - 3)
            want = [int(c) for c in reversed(s)] + [2]
            want += [0] * (n + 1 - len(want))
            y = task.transduce(list(w))
            assert y == want
            assert task.scored(y) == [i <= len(s) for i in range(n + 1)]


@pytest.mark.parametrize("name", list(CHOMSKY_TASKS))
@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 8, 17, 40, 41, 100])
def test_samples_have_the_papers_lengths_and_their_outputs(name, n):
    task = chomsky_task(name)
    rng = np.random.default_rng([n, len(name)])
    for _ in range(20):
        x, y = task.sample(rng, n)
        expected_n = n - 1 if name == "modular_arithmetic" and n % 2 == 0 else n
        assert len(x) == expected_n
        assert all(0 <= t < len(task.input_symbols) for t in x)
        assert len(y) == task.output_length(len(x)) and all(0 <= t < len(task.output_symbols) for t in y)
        assert y == task.transduce(x)
        assert sum(task.scored(y)) >= 1


def test_arithmetic_samples_against_an_independent_evaluator():
    rng = np.random.default_rng(0)
    ops = {True: set(), False: set()}
    for mult in (False, True):
        for n in [1, 2, 3, 4, 5, 9, 30, 60]:
            for _ in range(30):
                symbols, value = _expression(rng, n, mult)
                assert len(symbols) == n
                assert _evaluate(symbols) == value
                text = "".join(symbols).replace("--", "- -")
                assert eval(text) % 5 == value  # Python reads the same expression
                ops[mult] |= set(symbols) & {"+", "-", "*"}
    assert ops == {False: {"+", "-"}, True: {"+", "-", "*"}}
    assert _evaluate(list("2+3*4")) == 4 and _evaluate(list("-2*3")) == 4  # precedence: 14, -6
    # the task draws * by default, as the public sweep (mult=True); mult=False never
    star = chomsky_task("modular_arithmetic_brackets").input_symbols.index("*")
    assert any(star in chomsky_task("modular_arithmetic_brackets").sample(rng, 20)[0] for _ in range(20))
    assert not any(star in ModularArithmeticBrackets(mult=False).sample(rng, 20)[0] for _ in range(50))
    with pytest.raises(ValueError, match="mult must be a bool, got 1"):
        ModularArithmeticBrackets(mult=1)
    solve = chomsky_task("solve_equation")
    for n in [3, 6, 11, 40]:
        for _ in range(30):
            x, (d,) = solve.sample(rng, n)
            s = [solve.input_symbols[t] for t in x]
            assert s.count("x") == 1 and s[-2] == "="
            assert [v for v in range(5) if _evaluate(s[:-2], v) == int(s[-1])] == [d]


def test_binary_samples_against_python_integers():
    rng = np.random.default_rng(1)
    add, mul = chomsky_task("binary_addition"), chomsky_task("binary_multiplication")
    le = lambda bits: sum(b << i for i, b in enumerate(bits))  # noqa: E731
    for n in [3, 4, 10, 64, 130]:
        for task, op in ((add, int.__add__), (mul, int.__mul__)):
            for _ in range(20):
                x, y = task.sample(rng, n)
                i = x.index(2)
                a, b = x[:i], x[i + 1 :]
                assert le(a) >= 1 and le(b) >= 1
                end = y.index(2)
                assert le(y[:end]) == op(le(a), le(b)) and (end == 1 or y[end - 1] == 1)
                assert set(y[end + 1 :]) <= {0}
    sqrt = chomsky_task("compute_sqrt")
    for n in [1, 2, 7, 64, 101]:
        for _ in range(20):
            x, y = sqrt.sample(rng, n)
            a = int("".join(map(str, x)), 2)
            assert 1 <= a < 2**n and int("".join(map(str, y)), 2) == math.isqrt(a)


def test_sampling_distributions():
    rng = np.random.default_rng(2)
    stack = chomsky_task("stack_manipulation")
    sizes = [
        next(i for i, t in enumerate([*x, 2]) if t >= 2)
        for x, _ in (stack.sample(rng, 6) for _ in range(5000))
    ]
    counts = np.bincount(sizes, minlength=6)[1:]
    assert counts.min() > 850 and counts.max() < 1150  # stack length uniform in 1..5
    parity = chomsky_task("parity_check")
    ones = np.mean([parity.sample(rng, 9)[1][0] for _ in range(4000)])
    assert 0.46 < ones < 0.54
    missing = chomsky_task("missing_duplicate")
    holes = np.bincount([missing.sample(rng, 8)[0].index(2) for _ in range(4000)], minlength=8)
    assert holes.min() > 400  # the masked position is uniform over both copies


def test_bad_inputs_are_named():
    task = chomsky_task("binary_addition")
    with pytest.raises(ValueError, match=r"binary_addition: unknown input token 3 at position 1"):
        task.transduce([0, 3])
    with pytest.raises(ValueError, match="no operator"):
        task.transduce([0, 1, 1])
    with pytest.raises(ValueError, match="not an expression"):
        chomsky_task("modular_arithmetic_brackets").transduce(
            ids(chomsky_task("modular_arithmetic_brackets"), "( 1 +")
        )
    with pytest.raises(ValueError, match="a stack symbol after the first action"):
        chomsky_task("stack_manipulation").transduce([0, 2, 1])
    with pytest.raises(ValueError, match=r"not a duplicated binary string with one ._.: 0 1 1 _"):
        chomsky_task("missing_duplicate").transduce([0, 1, 1, 2])
    with pytest.raises(ValueError, match=r"rng must be a numpy\.random\.Generator"):
        task.sample(0, 5)
    with pytest.raises(ValueError, match="the input length must be an int >= 1, got 0"):
        task.sample(np.random.default_rng(0), 0)
