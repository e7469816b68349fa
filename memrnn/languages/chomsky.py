"""The 15 transduction tasks of Delétang et al. (2023), "Neural networks and the Chomsky
hierarchy", with the input and output conventions of their public code (which the paper's numbers
come from; where its docstrings disagree with its code, the code is followed and the docstring
here says so).

A task maps an input string ``x`` (ids over ``input_symbols``) of length ``n`` to an output
string ``y`` (ids over ``output_symbols``) of length ``output_length(n)``.  The model reads ``x``,
then ``output_length(n)`` blank inputs, and is scored on its predictions at those last
positions, only where ``scored(y)`` is true (the tasks whose output ends with a termination token
score up to and including it).  ``sample(rng, n)`` draws ``(x, y)`` exactly as the public code
does at length ``n``, from a ``numpy.random.Generator``; ``transduce(x)`` is the exact output of
any valid input (every task is a function of its input), the oracle the samplers are tested
against.

=========================  ===========  ======================================================
task                       level        input -> output
=========================  ===========  ======================================================
``even_pairs``             regular      binary string -> #(unequal neighbours) mod 2
``modular_arithmetic``     regular      ``d op d op … d`` (mod 5, ``*`` first) -> its value
``parity_check``           regular      binary string -> #1 mod 2
``cycle_navigation``       regular      moves −1/0/+1 (tokens 0/1/2) -> position mod 5
``stack_manipulation``     dcf          stack (bottom first) + POP/PUSH 0/PUSH 1 -> final stack
``reverse_string``         dcf          binary string -> its reverse
``modular_arithmetic_brackets``  dcf    fully bracketed ``+``/``−``/``*`` expression (mod 5) -> value
``solve_equation``         dcf          such an expression with one digit ``x``, ``=``, value -> x
``duplicate_string``       cs           binary ``w`` -> ``ww``
``missing_duplicate``      cs           ``ww`` with one symbol masked -> that symbol
``odds_first``             cs           ``s_0 s_1 …`` -> ``s_1 s_3 … s_0 s_2 …``
``binary_addition``        cs           little-endian ``a + b`` -> ``a+b``, termination, zeros
``binary_multiplication``  cs           little-endian ``a × b`` -> ``a·b``, termination, zeros
``compute_sqrt``           cs           big-endian ``a`` -> ``⌊√a⌋`` big-endian
``bucket_sort``            cs           string over 5 symbols -> sorted
=========================  ===========  ======================================================

The names are those of the public code's registry (``experiments/constants.py``,
``TASK_BUILDERS``) but one: its ``missing_duplicate_string`` is ``missing_duplicate`` here.
:func:`chomsky_task` (and :class:`memrnn.data.ChomskyDataModule`) take every name of that
registry, the alias included (:data:`TASK_ALIASES`).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import ClassVar

import numpy as np

from memrnn.languages.base import check_rng
from memrnn.languages.definitions import (
    binary_addition,
    binary_multiplication,
    bucket_sort,
    cycle_position,
    first_equals_last,
    little_endian,
    little_endian_value,
)

__all__ = [
    "CHOMSKY_TASKS",
    "TASK_ALIASES",
    "BinaryAddition",
    "BinaryMultiplication",
    "BucketSort",
    "ComputeSqrt",
    "CycleNavigation",
    "DuplicateString",
    "EvenPairs",
    "MissingDuplicate",
    "ModularArithmetic",
    "ModularArithmeticBrackets",
    "OddsFirst",
    "ParityCheck",
    "ReverseString",
    "SolveEquation",
    "StackManipulation",
    "TransductionTask",
    "canonical_task_name",
    "chomsky_task",
]


class TransductionTask(ABC):
    """One of Delétang et al.'s (2023) tasks (module docstring)."""

    #: the task's name in :data:`CHOMSKY_TASKS`
    name: ClassVar[str]
    #: ``"regular"``, ``"dcf"`` (deterministic context-free) or ``"cs"`` (context-sensitive)
    level: ClassVar[str]
    input_symbols: tuple[str, ...]
    output_symbols: tuple[str, ...]
    #: whether the output ends with the termination token and only up to it is scored
    terminated: ClassVar[bool] = False
    #: whether the output is read at the input positions (``y_t`` after ``x_t``; the word
    #: problems of :mod:`memrnn.languages.state_tracking`) instead of after the input
    aligned: ClassVar[bool] = False

    def output_length(self, n: int) -> int:
        """Output positions for an input of ``n`` symbols (1 for the classification tasks)."""
        return 1

    @abstractmethod
    def transduce(self, x: Sequence[int]) -> list[int]:
        """The exact output ``[output_length(len(x))]`` of a valid input ``x``; a ``ValueError``
        naming the first bad token otherwise."""

    @abstractmethod
    def _draw(self, rng: np.random.Generator, n: int) -> list[int]:
        """An input of length ``n`` drawn as the public code draws it."""

    def sample(self, rng: np.random.Generator, n: int) -> tuple[list[int], list[int]]:
        """``(x, y)``: an input of length ``n`` (``n − 1`` for the tasks whose inputs have odd
        length only, as the public code) and its output."""
        rng = check_rng(rng)
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise ValueError(f"{self.name}: the input length must be an int >= 1, got {n!r}")
        x = self._draw(rng, int(n))
        return x, self.transduce(x)

    def scored(self, y: Sequence[int]) -> list[bool]:
        """Which output positions count towards the accuracy: all of them, or up to and including
        the first termination token."""
        if not self.terminated:
            return [True] * len(y)
        end = self.output_symbols.index("END")
        stop = list(y).index(end) if end in y else len(y) - 1
        return [i <= stop for i in range(len(y))]

    def check_input(self, x: Sequence[int]) -> list[int]:
        """``x`` as a list of ints, each a valid input id (a ``ValueError`` naming the first bad
        token and its position otherwise)."""
        out = []
        for pos, t in enumerate(x):
            if (
                isinstance(t, bool)
                or not isinstance(t, (int, np.integer))
                or not 0 <= t < len(self.input_symbols)
            ):
                raise ValueError(
                    f"{self.name}: unknown input token {t!r} at position {pos}; ids are 0..{len(self.input_symbols) - 1} "
                    f"for {self.input_symbols}"
                )
            out.append(int(t))
        return out

    def decode(self, ids: Sequence[int], output: bool = False) -> str:
        """The symbols of ``ids``, space-separated."""
        symbols = self.output_symbols if output else self.input_symbols
        return " ".join(symbols[i] for i in ids)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


def _bits(rng: np.random.Generator, n: int, k: int = 2) -> list[int]:
    return [int(b) for b in rng.integers(0, k, size=n)]


# -- regular ---------------------------------------------------------------------------------
class EvenPairs(TransductionTask):
    """Binary strings; class 1 iff the number of unequal neighbouring pairs (``01`` and ``10``)
    is odd, i.e. iff the first and last symbols differ."""

    name, level = "even_pairs", "regular"
    input_symbols, output_symbols = ("0", "1"), ("even", "odd")

    def _draw(self, rng, n):
        return _bits(rng, n)

    def transduce(self, x):
        return [int(not first_equals_last(self.check_input(x)))]  # odd: first and last differ


class ParityCheck(TransductionTask):
    """Binary strings; class 1 iff the number of 1s is odd."""

    name, level = "parity_check", "regular"
    input_symbols, output_symbols = ("0", "1"), ("even", "odd")

    def _draw(self, rng, n):
        return _bits(rng, n)

    def transduce(self, x):
        return [sum(self.check_input(x)) % 2]


class CycleNavigation(TransductionTask):
    """Moves on a cycle of 5 positions from position 0: token ``i`` moves by ``i − 1`` (0: left,
    1: stay, 2: right); the class is the final position."""

    name, level = "cycle_navigation", "regular"
    input_symbols, output_symbols = ("-1", "0", "+1"), tuple(str(i) for i in range(5))

    def _draw(self, rng, n):
        return _bits(rng, n, 3)

    def transduce(self, x):
        return [cycle_position(t - 1 for t in self.check_input(x))]


class ModularArithmetic(TransductionTask):
    """Delétang et al.'s simple modular arithmetic: ``d op d op … d`` with digits mod 5 and
    operators ``+ − *`` (``*`` binds first, ``−`` left-associative); class the value mod 5.
    Inputs have odd length: an even ``n`` gives ``n − 1`` symbols, as the public code.  The blank
    ``_`` is in the vocabulary but never drawn."""

    name, level = "modular_arithmetic", "regular"
    input_symbols = ("0", "1", "2", "3", "4", "+", "-", "*", "_")
    output_symbols = ("0", "1", "2", "3", "4")

    def _draw(self, rng, n):
        n = n if n % 2 else n - 1
        x = []
        for i in range(n):
            x.append(int(rng.integers(0, 5)) if i % 2 == 0 else int(rng.choice([5, 7, 6])))
        return x

    def transduce(self, x):
        x = self.check_input(x)
        if len(x) % 2 == 0 or any((t < 5) != (i % 2 == 0) or t == 8 for i, t in enumerate(x)):
            raise ValueError(f"{self.name}: not an expression d op d … d: {self.decode(x)}")
        total, term = 0, x[0]
        for op, d in zip(x[1::2], x[2::2], strict=True):
            if op == 7:
                term *= d
            else:
                total, term = total + term, d if op == 5 else -d
        return [(total + term) % 5]


# -- deterministic context-free --------------------------------------------------------------
class StackManipulation(TransductionTask):
    """A binary stack given bottom first, then actions POP / PUSH 0 / PUSH 1 (POP on an empty
    stack does nothing); the output is the final stack top first, the termination token, then 0s
    to ``n + 1`` positions.  At ``n = 1`` the input is one stack symbol."""

    name, level, terminated = "stack_manipulation", "dcf", True
    input_symbols = ("0", "1", "POP", "PUSH0", "PUSH1")
    output_symbols = ("0", "1", "END")

    def output_length(self, n):
        return n + 1

    def _draw(self, rng, n):
        if n == 1:
            return _bits(rng, 1)
        k = int(rng.integers(1, n))  # stack symbols 1..n−1, then the actions
        return _bits(rng, k) + [int(a) for a in rng.integers(2, 5, size=n - k)]

    def transduce(self, x):
        x = self.check_input(x)
        k = next((i for i, t in enumerate(x) if t >= 2), len(x))
        if any(t < 2 for t in x[k:]):
            raise ValueError(f"{self.name}: a stack symbol after the first action: {self.decode(x)}")
        stack = x[:k]
        for a in x[k:]:
            if a == 2:
                if stack:
                    stack.pop()
            else:
                stack.append(a - 3)
        out = [*stack[::-1], 2]
        return out + [0] * (len(x) + 1 - len(out))


class ReverseString(TransductionTask):
    """Binary ``w`` -> its reverse."""

    name, level = "reverse_string", "dcf"
    input_symbols = output_symbols = ("0", "1")

    def output_length(self, n):
        return n

    def _draw(self, rng, n):
        return _bits(rng, n)

    def transduce(self, x):
        return self.check_input(x)[::-1]


def _expression(rng: np.random.Generator, n: int, mult: bool = False) -> tuple[list[str], int]:
    """Delétang et al.'s random bracketed expression of exactly ``n`` symbols over digits mod 5,
    ``+`` and ``−`` (and ``*`` with ``mult``, each operator equally likely), and its value: ``d``,
    ``−d``, ``(d)``, ``(−d)`` for ``n ≤ 4``, else ``(L op R)`` with ``|L|`` uniform in ``1..n−4``."""
    if n < 1:
        raise ValueError(f"an expression needs at least one symbol, got length {n}")
    if n <= 4:
        d = int(rng.integers(0, 5))
        form = {1: [str(d)], 2: ["-", str(d)], 3: ["(", str(d), ")"], 4: ["(", "-", str(d), ")"]}[n]
        return form, (-d if n % 2 == 0 else d) % 5
    left = int(rng.integers(1, n - 3))
    ls, lv = _expression(rng, left, mult)
    rs, rv = _expression(rng, n - 3 - left, mult)
    op = int(rng.integers(0, 3 if mult else 2))
    if op == 0:
        return ["(", *ls, "+", *rs, ")"], (lv + rv) % 5
    if op == 1:
        return ["(", *ls, "-", *rs, ")"], (lv - rv) % 5
    return ["(", *ls, "*", *rs, ")"], (lv * rv) % 5


def _evaluate(symbols: Sequence[str], x: int | None = None) -> int:
    """The value mod 5 of a bracketed ``+``/``−``/``*`` expression (``x`` substituted), by
    recursive descent over ``E -> F ((+|−) F)*``, ``F -> T (* T)*``, ``T -> digit | x | −T | (E)``
    (``*`` binds tighter, unary ``−`` tightest, as Python reads them); a ``ValueError`` if it does
    not parse."""
    pos = 0

    def term() -> int:
        nonlocal pos
        if pos >= len(symbols):
            raise ValueError("the expression ends early")
        s = symbols[pos]
        pos += 1
        if s == "-":
            return -term()
        if s == "(":
            v = expr()
            if pos >= len(symbols) or symbols[pos] != ")":
                raise ValueError(f"no ')' at position {pos}")
            pos += 1
            return v
        if s == "x" and x is not None:
            return x
        if s.isdigit():
            return int(s)
        raise ValueError(f"unexpected {s!r} at position {pos - 1}")

    def factor() -> int:
        nonlocal pos
        v = term()
        while pos < len(symbols) and symbols[pos] == "*":
            pos += 1
            v = v * term()
        return v

    def expr() -> int:
        nonlocal pos
        v = factor()
        while pos < len(symbols) and symbols[pos] in "+-":
            op = symbols[pos]
            pos += 1
            v = v + factor() if op == "+" else v - factor()
        return v

    v = expr()
    if pos != len(symbols):
        raise ValueError(f"unexpected {symbols[pos]!r} at position {pos}")
    return v % 5


class ModularArithmeticBrackets(TransductionTask):
    """A fully bracketed expression over digits mod 5 with ``+``, ``−`` and ``*`` (drawn as
    :func:`_expression`, each operator equally likely); the class is its value.  The public
    sweep builds this task with ``mult=True`` (its ``TASK_BUILDERS``), so the paper's numbers are
    with ``*``; ``mult=False`` draws ``+`` and ``−`` only (the vocabulary keeps ``*``).  The
    vocabulary also holds ``x``, as the public code's."""

    name, level = "modular_arithmetic_brackets", "dcf"
    input_symbols = ("0", "1", "2", "3", "4", "+", "-", "*", "(", ")", "x")
    output_symbols = ("0", "1", "2", "3", "4")

    def __init__(self, mult: bool = True) -> None:
        if not isinstance(mult, bool):
            raise ValueError(f"mult must be a bool, got {mult!r}")
        self.mult = mult

    def _draw(self, rng, n):
        return [self.input_symbols.index(s) for s in _expression(rng, n, self.mult)[0]]

    def transduce(self, x):
        x = self.check_input(x)
        try:
            return [_evaluate([self.input_symbols[t] for t in x])]
        except ValueError as e:
            raise ValueError(f"{self.name}: not an expression ({e}): {self.decode(x)}") from None


class SolveEquation(TransductionTask):
    """An expression of ``n − 2`` symbols (as :class:`ModularArithmeticBrackets`) with one digit
    replaced by ``x``, then ``=`` and the expression's value; the class is the replaced digit
    (unique: ``x`` enters with coefficient ±1).  The public code replaces the first digit at or
    after a uniform position (wrapping).  For ``n < 3`` the public code returns all-zero inputs
    and class 0; so does this one."""

    name, level = "solve_equation", "dcf"
    input_symbols = ("0", "1", "2", "3", "4", "+", "-", "(", ")", "x", "=")
    output_symbols = ("0", "1", "2", "3", "4")

    def _draw(self, rng, n):
        if n < 3:
            return [0] * n
        symbols, value = _expression(rng, n - 2)
        i = int(rng.integers(0, len(symbols)))
        while not symbols[i].isdigit():
            i = (i + 1) % len(symbols)
        symbols[i] = "x"
        return [self.input_symbols.index(s) for s in [*symbols, "=", str(value)]]

    def transduce(self, x):
        x = self.check_input(x)
        if len(x) < 3 and all(t == 0 for t in x):
            return [0]
        s = [self.input_symbols[t] for t in x]
        if len(s) < 3 or s[-2] != "=" or not s[-1].isdigit() or s.count("x") != 1:
            raise ValueError(f"{self.name}: not 'expression with one x = digit': {self.decode(x)}")
        try:
            sols = [v for v in range(5) if _evaluate(s[:-2], v) == int(s[-1])]
        except ValueError as e:
            raise ValueError(f"{self.name}: not an expression ({e}): {self.decode(x)}") from None
        return [sols[0]]


# -- context-sensitive -----------------------------------------------------------------------
class DuplicateString(TransductionTask):
    """Binary ``w`` -> ``ww``."""

    name, level = "duplicate_string", "cs"
    input_symbols = output_symbols = ("0", "1")

    def output_length(self, n):
        return 2 * n

    def _draw(self, rng, n):
        return _bits(rng, n)

    def transduce(self, x):
        x = self.check_input(x)
        return x + x


class MissingDuplicate(TransductionTask):
    """Binary ``w`` of ``n // 2`` symbols, duplicated, one position (uniform) masked by ``_``,
    padded by ``#`` when ``n`` is odd; the class is the masked symbol.  At ``n = 1`` the public
    code gives input ``1`` and class 1 (nothing to duplicate); so does this one."""

    name, level = "missing_duplicate", "cs"
    input_symbols, output_symbols = ("0", "1", "_", "#"), ("0", "1")

    def _draw(self, rng, n):
        if n == 1:
            return [1]
        w = _bits(rng, n // 2)
        ww = w + w
        ww[int(rng.integers(0, len(ww)))] = 2
        return ww + [3] * (n % 2)

    def transduce(self, x):
        x = self.check_input(x)
        if x == [1]:
            return [1]
        body = x[:-1] if len(x) % 2 else x
        half = len(body) // 2
        holes = [i for i, t in enumerate(body) if t == 2]
        pairs = [(body[j], body[j + half]) for j in range(half)]
        if (
            (len(x) % 2 and x[-1] != 3)
            or len(holes) != 1
            or any(a != b and 2 not in (a, b) for a, b in pairs)
        ):
            raise ValueError(f"{self.name}: not a duplicated binary string with one '_': {self.decode(x)}")
        partner = body[(holes[0] + half) % len(body)]
        return [partner]


class OddsFirst(TransductionTask):
    """``s_0 s_1 … s_{n−1}`` (binary) -> the symbols at odd positions (0-based), then those at even
    ones: the public code's ``[1::2] + [::2]`` (its docstring describes the other order)."""

    name, level = "odds_first", "cs"
    input_symbols = output_symbols = ("0", "1")

    def output_length(self, n):
        return n

    def _draw(self, rng, n):
        return _bits(rng, n)

    def transduce(self, x):
        x = self.check_input(x)
        return x[1::2] + x[::2]


def _uniform_bits(rng: np.random.Generator, n: int) -> int:
    """A uniform integer in ``1..2^n − 1`` for any ``n`` (numpy's integers stop at 2^63): ``n``
    uniform bits, drawn again while all are 0."""
    while True:
        v = 0
        for _ in range(0, n, 32):
            v = (v << 32) | int(rng.integers(0, 2**32))
        v >>= -n % 32
        if v:
            return v


class _BinaryOperation(TransductionTask):
    """Little-endian ``a`` and ``b`` joined by the operator token, their lengths split uniformly
    (``|a|`` in ``1..n−2``) and each uniform in ``1..2^len − 1``, zero-padded to its length; the
    output is the result little-endian without trailing zeros, the termination token, then 0s."""

    level, terminated = "cs", True
    output_symbols = ("0", "1", "END")

    @staticmethod
    @abstractmethod
    def _op(a: int, b: int) -> int: ...

    def _draw(self, rng, n):
        if n <= 2:
            return little_endian(int(rng.integers(0, 2**n - 1)), n)
        la = int(rng.integers(1, n - 1))
        lb = n - 1 - la
        a, b = _uniform_bits(rng, la), _uniform_bits(rng, lb)
        return [*little_endian(a, la), 2, *little_endian(b, lb)]

    def _short(self, x: list[int]) -> list[int]:
        """The result of an input of at most 2 symbols with no operator."""
        return little_endian(little_endian_value(x))

    def transduce(self, x):
        x = self.check_input(x)
        if 2 not in x:
            if len(x) > 2:
                raise ValueError(f"{self.name}: no operator in {self.decode(x)}")
            res = self._short(x)
        else:
            i = x.index(2)
            a, b = x[:i], x[i + 1 :]
            if 2 in b or not a or not b:
                raise ValueError(f"{self.name}: not 'a {self.input_symbols[2]} b': {self.decode(x)}")
            res = little_endian(self._op(little_endian_value(a), little_endian_value(b)))
        out = [*res, 2]
        n = self.output_length(len(x))
        if len(out) > n:
            raise ValueError(f"{self.name}: the result {res} needs more than {n} output positions")
        return out + [0] * (n - len(out))


class BinaryAddition(_BinaryOperation):
    """``a + b`` in little-endian binary; ``n + 1`` output positions.  At ``n ≤ 2`` the input is
    one number (uniform in ``0..2^n − 2``) and the output that number."""

    name = "binary_addition"
    input_symbols = ("0", "1", "+")

    def output_length(self, n):
        return n + 1

    _op = staticmethod(binary_addition)


class BinaryMultiplication(_BinaryOperation):
    """``a × b`` in little-endian binary; ``n`` output positions.  At ``n ≤ 2`` the input is one
    number and the output ``n − 1`` zeros (the public code's placeholder)."""

    name = "binary_multiplication"
    input_symbols = ("0", "1", "*")

    def output_length(self, n):
        return n

    _op = staticmethod(binary_multiplication)

    def _short(self, x):
        return [0] * (len(x) - 1)


class ComputeSqrt(TransductionTask):
    """A number uniform in ``1..2^n − 1``, big-endian on ``n`` bits -> ``⌊√a⌋`` big-endian on
    ``⌈n/2⌉`` bits."""

    name, level = "compute_sqrt", "cs"
    input_symbols = output_symbols = ("0", "1")

    def output_length(self, n):
        return math.ceil(n / 2)

    def _draw(self, rng, n):
        a = _uniform_bits(rng, n)
        return [int(b) for b in format(a, "b").zfill(n)]

    def transduce(self, x):
        x = self.check_input(x)
        a = int("".join(map(str, x)) or "0", 2)
        return [int(b) for b in format(math.isqrt(a), "b").zfill(self.output_length(len(x)))]


class BucketSort(TransductionTask):
    """A string over 5 symbols -> its symbols sorted."""

    name, level = "bucket_sort", "cs"
    input_symbols = output_symbols = ("0", "1", "2", "3", "4")

    def output_length(self, n):
        return n

    def _draw(self, rng, n):
        return _bits(rng, n, 5)

    def transduce(self, x):
        return list(bucket_sort(self.check_input(x)))


#: every task by name, in the paper's order (regular, deterministic context-free, context-sensitive)
CHOMSKY_TASKS: dict[str, type[TransductionTask]] = {
    cls.name: cls
    for cls in (
        EvenPairs,
        ModularArithmetic,
        ParityCheck,
        CycleNavigation,
        StackManipulation,
        ReverseString,
        ModularArithmeticBrackets,
        SolveEquation,
        DuplicateString,
        MissingDuplicate,
        OddsFirst,
        BinaryAddition,
        BinaryMultiplication,
        ComputeSqrt,
        BucketSort,
    )
}


#: the public code's registry names (``experiments/constants.py``, ``TASK_BUILDERS``) that differ
#: from memrnn's: alias -> name in :data:`CHOMSKY_TASKS`
TASK_ALIASES: dict[str, str] = {"missing_duplicate_string": "missing_duplicate"}


def canonical_task_name(name: str) -> str:
    """``name`` with the public code's aliases (:data:`TASK_ALIASES`) resolved; any other name as
    given."""
    return TASK_ALIASES.get(name, name) if isinstance(name, str) else name


def chomsky_task(name: str) -> TransductionTask:
    """The task called ``name``, a name of :data:`CHOMSKY_TASKS` or of the public code's registry
    (:data:`TASK_ALIASES`); a ``ValueError`` listing the names otherwise."""
    canonical = canonical_task_name(name)
    if canonical not in CHOMSKY_TASKS:
        raise ValueError(
            f"unknown Chomsky-hierarchy task {name!r}; the tasks are {list(CHOMSKY_TASKS)} "
            f"(aliases: {TASK_ALIASES})"
        )
    return CHOMSKY_TASKS[canonical]()
