"""Automata with runners and checked definitions: DFA, deterministic PFSA (Cotterell et al. 2023), the
deterministic PDA in the vectorized form of Stogin et al. 2020 appendix B, and the real-time simplified
k-counter machine (SKCM) of Weiss et al. 2018.

Symbols and states are strings.  A malformed definition (unknown state or symbol, two
transitions for one configuration, probabilities that do not sum to 1) raises ``ValueError``
naming the offending item, at construction time.  Partial transition functions are allowed:
a missing transition sends the run to a dead (rejecting) configuration, reported as ``None``.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from memrnn.languages.base import PYTHON_STEP, check_table_cost

DEAD = None  # the implicit rejecting sink of a partial automaton


def _index(items: Sequence[str], what: str) -> dict[str, int]:
    items = tuple(items)
    if len(set(items)) != len(items):
        dup = sorted({x for x in items if items.count(x) > 1})
        raise ValueError(f"duplicate {what}: {dup}")
    if not items:
        raise ValueError(f"an automaton needs at least one {what[:-1]}")
    return {x: i for i, x in enumerate(items)}


def _check(x: str, index: Mapping[str, int], what: str, where: str) -> None:
    if x not in index:
        raise ValueError(f"unknown {what} {x!r} in {where}; known: {list(index)}")


class DFA:
    """Deterministic finite automaton ``(Q, Σ, δ, q0, F)`` (Stogin et al. 2020 appendix A, Cotterell et al. 2023).

    Args:
        states, alphabet: names.
        transitions: ``(q, a, q')`` triples; at most one per ``(q, a)``.
        start: ``q0``.  accept: ``F``.
    """

    def __init__(
        self,
        states: Sequence[str],
        alphabet: Sequence[str],
        transitions: Iterable[tuple[str, str, str]],
        start: str,
        accept: Iterable[str],
    ) -> None:
        self.states, self.alphabet = tuple(states), tuple(alphabet)
        self.q_index, self.a_index = _index(self.states, "states"), _index(self.alphabet, "symbols")
        _check(start, self.q_index, "state", "start")
        self.start = start
        self.accept = frozenset(accept)
        for q in self.accept:
            _check(q, self.q_index, "state", "accept")
        self.delta: dict[tuple[str, str], str] = {}
        for q, a, q2 in transitions:
            where = f"transition ({q!r}, {a!r}) -> {q2!r}"
            _check(q, self.q_index, "state", where)
            _check(a, self.a_index, "symbol", where)
            _check(q2, self.q_index, "state", where)
            if (q, a) in self.delta and self.delta[(q, a)] != q2:
                raise ValueError(f"nondeterministic: ({q!r}, {a!r}) -> {self.delta[(q, a)]!r} and {q2!r}")
            self.delta[(q, a)] = q2

    def __repr__(self) -> str:
        return f"DFA({len(self.states)} states, alphabet={self.alphabet})"

    def _key(self) -> tuple:
        return (self.states, self.alphabet, tuple(sorted(self.delta.items())), self.start, self.accept)

    def __eq__(self, other: object) -> bool:
        """Same states (in order), alphabet, transitions, start and accepting states."""
        return isinstance(other, DFA) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def diff(self, other: DFA) -> list[str]:
        """Human-readable differences from ``other`` (empty when equal)."""
        out = []
        for name in ("states", "alphabet", "start", "accept"):
            if getattr(self, name) != getattr(other, name):
                out.append(f"{name}: {getattr(self, name)!r} != {getattr(other, name)!r}")
        for key in sorted(set(self.delta) | set(other.delta)):
            if self.delta.get(key) != other.delta.get(key):
                out.append(f"delta{key}: {self.delta.get(key)!r} != {other.delta.get(key)!r}")
        return out

    @classmethod
    def random(
        cls,
        rng: np.random.Generator,
        num_states: int,
        alphabet: Sequence[str] = ("a", "b"),
        accept_fraction: float = 0.5,
        missing_fraction: float = 0.0,
    ) -> DFA:
        """A random DFA: each ``δ(q, a)`` uniform over the states (absent with probability
        ``missing_fraction``), each state accepting with probability ``accept_fraction``."""
        states = [f"q{i}" for i in range(num_states)]
        t = [
            (q, a, states[int(rng.integers(num_states))])
            for q in states
            for a in alphabet
            if rng.random() >= missing_fraction
        ]
        accept = [q for q in states if rng.random() < accept_fraction]
        return cls(states, alphabet, t, states[0], accept)

    def step(self, q: str | None, a: str) -> str | None:
        """``δ(q, a)``; ``None`` for the dead state."""
        _check(a, self.a_index, "symbol", "input")
        return None if q is None else self.delta.get((q, a))

    def run(self, word: Iterable[str]) -> list[str | None]:
        """States ``q0, q1, ..., qT`` visited on ``word`` (``T + 1`` entries)."""
        out = [self.start]
        for a in word:
            out.append(self.step(out[-1], a))
        return out

    def accepts(self, word: Iterable[str]) -> bool:
        return self.run(word)[-1] in self.accept

    def transition_tensor(self) -> np.ndarray:
        """``W[i, j, k] = 1`` iff ``δ(q_j, a_k) = q_i`` (Stogin et al. 2020 Definition A.3: next state
        ``i``, current ``j``, input ``k``), ``[|Q|, |Q|, |Σ|]`` float64; missing transitions
        give a zero column (the dead state is the zero vector)."""
        w = np.zeros((len(self.states), len(self.states), len(self.alphabet)))
        for (q, a), q2 in self.delta.items():
            w[self.q_index[q2], self.q_index[q], self.a_index[a]] = 1.0
        return w


class PFSA:
    """Deterministic probabilistic FSA (Cotterell et al. 2023): ``(q, a, q', p)`` transitions and final
    (halting) probabilities, locally normalised: ``Σ_a p(q, a) + final(q) = 1`` for every state.

    Args:
        states, alphabet, start: as for :class:`DFA`.
        transitions: ``(q, a, q', p)``; ``p = 0`` entries are dropped.
        final: ``{q: p_end}``; states not listed have ``p_end = 0``.
    """

    def __init__(
        self,
        states: Sequence[str],
        alphabet: Sequence[str],
        transitions: Iterable[tuple[str, str, str, float]],
        start: str,
        final: Mapping[str, float] | None = None,
        *,
        atol: float = 1e-9,
    ) -> None:
        trans = [(q, a, q2, float(p)) for q, a, q2, p in transitions]
        for q, a, q2, p in trans:
            if not 0 <= p <= 1:
                raise ValueError(f"transition ({q!r}, {a!r}) -> {q2!r} has probability {p} outside [0, 1]")
        self.dfa = DFA(states, alphabet, [(q, a, q2) for q, a, q2, p in trans if p > 0], start, ())
        self.states, self.alphabet, self.start = self.dfa.states, self.dfa.alphabet, start
        self.prob = {(q, a): p for q, a, _, p in trans if p > 0}
        self.final = {q: float(p) for q, p in (final or {}).items()}
        for q, p in self.final.items():
            _check(q, self.dfa.q_index, "state", "final")
            if not 0 <= p <= 1:
                raise ValueError(f"final probability of {q!r} is {p}, outside [0, 1]")
        for q in self.states:
            tot = self.final.get(q, 0.0) + sum(self.prob.get((q, a), 0.0) for a in self.alphabet)
            if abs(tot - 1.0) > atol:
                raise ValueError(
                    f"state {q!r}: outgoing probabilities and final probability sum to {tot}, not 1"
                )

    def __repr__(self) -> str:
        return f"PFSA({len(self.states)} states, alphabet={self.alphabet})"

    def next_log_probs(self, q: str) -> np.ndarray:
        """``log p(a | q)`` for each symbol then ``END`` (``log final(q)``), ``[|Σ| + 1]``."""
        p = [self.prob.get((q, a), 0.0) for a in self.alphabet] + [self.final.get(q, 0.0)]
        with np.errstate(divide="ignore"):
            return np.log(np.array(p))

    def log_prob(self, word: Iterable[str]) -> float:
        """``log p(word, END)``: the product of transition probabilities and the final one."""
        q, lp = self.start, 0.0
        for a in word:
            _check(a, self.dfa.a_index, "symbol", "input")
            if (q, a) not in self.prob:
                return -math.inf
            lp += math.log(self.prob[(q, a)])
            q = self.dfa.delta[(q, a)]
        f = self.final.get(q, 0.0)
        return lp + math.log(f) if f > 0 else -math.inf

    def table_cost(self, n: int) -> tuple[float, float]:
        """``(bytes, operations)`` of exact sampling given ``n`` symbols: the backward table
        ``β [n + 1, |Q|]`` float64, a Python step per (position, transition) to fill it and
        per position to sample (:data:`~memrnn.languages.base.PYTHON_STEP`)."""
        steps = (n + 1) * (len(self.prob) + 1)
        return 8.0 * (n + 1) * len(self.states), float(PYTHON_STEP * steps)

    def _length_cost(self, max_length: int) -> tuple[float, float]:
        # a Python float per length (and its list slot), a Python-level mat-vec step per length
        return 40.0 * (max_length + 1), float(PYTHON_STEP * (max_length + 1))

    def length_log_probs(self, max_length: int) -> np.ndarray:
        """``log P(|w| = n)``, ``n = 0..max_length`` (symbols, without ``END``)."""
        check_table_cost(self, max_length, self._length_cost, "its length distribution")
        idx = self.dfa.q_index
        trans = np.zeros((len(self.states), len(self.states)))
        for (q, a), p in self.prob.items():
            trans[idx[q], idx[self.dfa.delta[(q, a)]]] += p
        fin = np.array([self.final.get(q, 0.0) for q in self.states])
        dist = np.zeros(len(self.states))
        dist[idx[self.start]] = 1.0
        out = []
        for _ in range(max_length + 1):
            out.append(dist @ fin)
            dist = dist @ trans
        with np.errstate(divide="ignore"):
            return np.log(np.array(out))

    def sample_given_length(self, rng: np.random.Generator, n: int) -> list[str]:
        """Exactly ``p(w | |w| = n)``: backward table ``β[t, q] = P(n − t more symbols, then END | q)``."""
        check_table_cost(self, n, self.table_cost, "its backward table")
        idx = self.dfa.q_index
        beta = np.zeros((n + 1, len(self.states)))
        beta[n] = [self.final.get(q, 0.0) for q in self.states]
        for t in range(n - 1, -1, -1):
            for (q, a), p in self.prob.items():
                beta[t, idx[q]] += p * beta[t + 1, idx[self.dfa.delta[(q, a)]]]
        if beta[0, idx[self.start]] <= 0:
            raise ValueError(f"the PFSA generates no string of length {n}")
        q, out = self.start, []
        for t in range(n):
            w = np.array(
                [
                    self.prob.get((q, a), 0.0) * beta[t + 1, idx[self.dfa.delta[(q, a)]]]
                    if (q, a) in self.prob
                    else 0.0
                    for a in self.alphabet
                ]
            )
            a = self.alphabet[int(rng.choice(len(w), p=w / w.sum()))]
            out.append(a)
            q = self.dfa.delta[(q, a)]
        return out


# -- pushdown automata --------------------------------------------------------------------------
Op = tuple[Literal["pop", "noop", "push"], str | None]
POP: Op = ("pop", None)
NOOP: Op = ("noop", None)


def push(symbol: str) -> Op:
    """The stack operation ``π_+(symbol)``."""
    return ("push", symbol)


EMPTY = None  # the stack reading of an empty stack (the error character e of Stogin et al. 2020)


@dataclass(frozen=True)
class PDAStep:
    """One transition taken: state before, symbol read, stack top read (None = empty), the
    operation, the state after, and the stack after (bottom first)."""

    state: str
    symbol: str
    top: str | None
    op: Op
    next_state: str
    stack: tuple[str, ...]


class DPDA:
    """Deterministic PDA ``(Q, Σ, Γ, δ, q0, F)`` of Stogin et al. 2020 appendix B (Definition B.7): each
    step reads one input symbol and the top of the stack (or ``EMPTY``), moves to a state and
    applies one operation: ``POP``, ``NOOP`` or ``push(γ)``.  Popping an empty stack leaves it
    empty (Definition B.3).  A string is accepted if the state after its last symbol is in
    ``F`` (end markers, like appendix E's ``e``, are ordinary input symbols).

    Args:
        transitions: ``(q, a, top, q', op)`` with ``top`` in Γ or ``EMPTY``; at most one per
            ``(q, a, top)``.  ``top="*"`` is shorthand for every reading.
        max_depth: optional bound; a run that pushes deeper raises ``ValueError``.
    """

    def __init__(
        self,
        states: Sequence[str],
        alphabet: Sequence[str],
        stack_alphabet: Sequence[str],
        transitions: Iterable[tuple[str, str, str | None, str, Op]],
        start: str,
        accept: Iterable[str],
        *,
        max_depth: int | None = None,
    ) -> None:
        self.states, self.alphabet, self.stack_alphabet = (
            tuple(states),
            tuple(alphabet),
            tuple(stack_alphabet),
        )
        self.q_index = _index(self.states, "states")
        self.a_index = _index(self.alphabet, "symbols")
        self.g_index = _index(self.stack_alphabet, "stack symbols")
        _check(start, self.q_index, "state", "start")
        self.start, self.accept = start, frozenset(accept)
        for q in self.accept:
            _check(q, self.q_index, "state", "accept")
        if max_depth is not None and max_depth < 0:
            raise ValueError(f"max_depth must be >= 0, got {max_depth}")
        self.max_depth = max_depth
        self.delta: dict[tuple[str, str, str | None], tuple[str, Op]] = {}
        for q, a, top, q2, op in transitions:
            where = f"transition ({q!r}, {a!r}, {top!r}) -> ({q2!r}, {op!r})"
            _check(q, self.q_index, "state", where)
            _check(a, self.a_index, "symbol", where)
            _check(q2, self.q_index, "state", where)
            if op[0] not in ("pop", "noop", "push") or (op[0] == "push") != (op[1] is not None):
                raise ValueError(f"bad stack operation {op!r} in {where}; use POP, NOOP or push(symbol)")
            if op[0] == "push":
                _check(op[1], self.g_index, "stack symbol", where)
            tops = [*self.stack_alphabet, EMPTY] if top == "*" else [top]
            for tp in tops:
                if tp is not EMPTY:
                    _check(tp, self.g_index, "stack symbol", where)
                key = (q, a, tp)
                if key in self.delta and self.delta[key] != (q2, op):
                    raise ValueError(f"nondeterministic: {key} -> {self.delta[key]} and {(q2, op)}")
                self.delta[key] = (q2, op)

    def __repr__(self) -> str:
        return f"DPDA({len(self.states)} states, Σ={self.alphabet}, Γ={self.stack_alphabet})"

    def _key(self) -> tuple:
        delta = tuple(sorted(self.delta.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2] or "")))
        return (self.states, self.alphabet, self.stack_alphabet, delta, self.start, self.accept)

    def __eq__(self, other: object) -> bool:
        """Same states (in order), alphabets, transitions, start and accepting states."""
        return isinstance(other, DPDA) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def diff(self, other: DPDA) -> list[str]:
        """Human-readable differences from ``other`` (empty when equal)."""
        out = []
        for name in ("states", "alphabet", "stack_alphabet", "start", "accept"):
            if getattr(self, name) != getattr(other, name):
                out.append(f"{name}: {getattr(self, name)!r} != {getattr(other, name)!r}")
        for key in sorted(set(self.delta) | set(other.delta), key=lambda k: (k[0], k[1], k[2] or "")):
            if self.delta.get(key) != other.delta.get(key):
                out.append(f"delta{key}: {self.delta.get(key)!r} != {other.delta.get(key)!r}")
        return out

    def run(self, word: Iterable[str]) -> list[PDAStep]:
        """The transitions taken on ``word``; stops early at a missing transition (dead)."""
        q, stack, out = self.start, [], []
        for pos, a in enumerate(word):
            _check(a, self.a_index, "symbol", f"input position {pos}")
            top = stack[-1] if stack else EMPTY
            nxt = self.delta.get((q, a, top))
            if nxt is None:
                break
            q2, op = nxt
            if op[0] == "pop":
                if stack:
                    stack.pop()
            elif op[0] == "push":
                stack.append(op[1])
                if self.max_depth is not None and len(stack) > self.max_depth:
                    raise ValueError(
                        f"stack depth {len(stack)} exceeds max_depth={self.max_depth} at input position {pos}"
                    )
            out.append(PDAStep(q, a, top, op, q2, tuple(stack)))
            q = q2
        return out

    def accepts(self, word: Sequence[str]) -> bool:
        steps = self.run(word)
        if len(steps) < len(word):
            return False
        return (steps[-1].next_state if steps else self.start) in self.accept

    def tensors(self) -> dict[str, np.ndarray]:
        """The weights of Definition B.9 (component names as in Stogin et al. 2020):

        * ``W_Q[i, j, k, l]``: ``(W_Q)_i^{jkl}``, next state ``i``, state ``j``, input ``k``,
          stack reading ``l`` (``l = |Γ|`` is the empty reading), ``[n, n, m1, m2 + 1]``;
        * ``W_push[j, k, l]``, ``W_pop[j, k, l]``: ``(W_{p±})^{jkl}``, ``[n, m1, m2 + 1]``;
        * ``W_C[i, j, k, l]``: the pushed symbol, one-hot over Γ, set only where pushing
          (appendix E's second choice), ``[m2, n, m1, m2 + 1]``.

        Missing transitions are zero (the zero state vector is the dead state).
        """
        n, m1, m2 = len(self.states), len(self.alphabet), len(self.stack_alphabet)
        w_q = np.zeros((n, n, m1, m2 + 1))
        w_push, w_pop = np.zeros((n, m1, m2 + 1)), np.zeros((n, m1, m2 + 1))
        w_c = np.zeros((m2, n, m1, m2 + 1))
        for (q, a, top), (q2, op) in self.delta.items():
            j, k = self.q_index[q], self.a_index[a]
            ll = m2 if top is EMPTY else self.g_index[top]
            w_q[self.q_index[q2], j, k, ll] = 1.0
            if op[0] == "push":
                w_push[j, k, ll] = 1.0
                w_c[self.g_index[op[1]], j, k, ll] = 1.0
            elif op[0] == "pop":
                w_pop[j, k, ll] = 1.0
        return {"W_Q": w_q, "W_push": w_push, "W_pop": w_pop, "W_C": w_c}


def dyck1_pda() -> DPDA:
    """The Dyck-1 PDA of Stogin et al. 2020 appendix E: states ⊙ (accept) and ⊖ (reject), input ``l``,
    ``r`` and the end marker ``e``, one stack symbol.  ``r`` on an empty stack and ``e`` on a
    non-empty stack send ⊙ to ⊖; ⊖ is absorbing."""
    acc, rej = "⊙", "⊖"
    t = []
    for q in (acc, rej):
        t.append((q, "l", "*", q, push("x")))
        t.append((q, "r", "x", q, POP))
        t.append((q, "r", EMPTY, rej, POP))
        t.append((q, "e", "x", rej, NOOP))
        t.append((q, "e", EMPTY, q, NOOP))
    return DPDA([acc, rej], ["l", "r", "e"], ["x"], t, acc, [acc])


# -- counter machines ---------------------------------------------------------------------------
INC, DEC, NOP = 1, -1, 0
Pattern = tuple[bool | None, ...]  # per counter: True (== 0), False (!= 0), None (either)


class CounterMachine:
    """Real-time simplified k-counter machine (SKCM, Weiss et al. 2018 section 3): a DFA whose
    transitions also read ``COMP0`` of every counter and apply ``INC``/``DEC``/``NOP`` (±1) to
    each; the accept decision reads the state and ``COMP0`` of every counter.

    Args:
        k: number of counters.
        transitions: ``(q, a, pattern, q', ops)``; ``pattern`` has one entry per counter,
            ``True`` (counter is 0), ``False`` (non-zero) or ``None`` (either); ``ops`` one of
            ``INC``, ``DEC``, ``NOP`` per counter.  Two transitions whose patterns both match a
            configuration raise ``ValueError`` (checked over all ``2^k`` zero patterns).
        accept: ``(q, pattern)`` pairs.
    """

    def __init__(
        self,
        k: int,
        states: Sequence[str],
        alphabet: Sequence[str],
        transitions: Iterable[tuple[str, str, Pattern, str, tuple[int, ...]]],
        start: str,
        accept: Iterable[tuple[str, Pattern]],
    ) -> None:
        if k < 1:
            raise ValueError(f"a counter machine needs k >= 1 counters, got {k}")
        self.k = k
        self.states, self.alphabet = tuple(states), tuple(alphabet)
        self.q_index, self.a_index = _index(self.states, "states"), _index(self.alphabet, "symbols")
        _check(start, self.q_index, "state", "start")
        self.start = start
        self.delta: dict[tuple[str, str, tuple[bool, ...]], tuple[str, tuple[int, ...]]] = {}
        for q, a, pat, q2, ops in transitions:
            where = f"transition ({q!r}, {a!r}, {pat!r}) -> ({q2!r}, {ops!r})"
            _check(q, self.q_index, "state", where)
            _check(a, self.a_index, "symbol", where)
            _check(q2, self.q_index, "state", where)
            pat, ops = self._pattern(pat, where), tuple(ops)
            if len(ops) != k or any(o not in (INC, DEC, NOP) for o in ops):
                raise ValueError(f"ops must be {k} values in (INC=1, DEC=-1, NOP=0) in {where}")
            for zeros in self._expand(pat):
                key = (q, a, zeros)
                if key in self.delta and self.delta[key] != (q2, ops):
                    raise ValueError(f"nondeterministic: {key} matched by two transitions (second: {where})")
                self.delta[key] = (q2, ops)
        self.accepting: set[tuple[str, tuple[bool, ...]]] = set()
        for q, pat in accept:
            _check(q, self.q_index, "state", "accept")
            for zeros in self._expand(self._pattern(pat, f"accept ({q!r}, {pat!r})")):
                self.accepting.add((q, zeros))

    def _pattern(self, pat: Pattern, where: str) -> Pattern:
        pat = tuple(pat)
        if len(pat) != self.k or any(p not in (True, False, None) for p in pat):
            raise ValueError(f"pattern must have {self.k} entries in (True, False, None) in {where}")
        return pat

    @staticmethod
    def _expand(pat: Pattern) -> Iterable[tuple[bool, ...]]:
        return itertools.product(*[(p,) if p is not None else (True, False) for p in pat])

    def __repr__(self) -> str:
        return f"CounterMachine(k={self.k}, {len(self.states)} states, alphabet={self.alphabet})"

    def run(self, word: Iterable[str]) -> list[tuple[str, tuple[int, ...]] | None]:
        """Configurations ``(q, counters)`` before and after every symbol; ``None`` once dead."""
        conf: tuple[str, tuple[int, ...]] | None = (self.start, (0,) * self.k)
        out: list[tuple[str, tuple[int, ...]] | None] = [conf]
        for pos, a in enumerate(word):
            _check(a, self.a_index, "symbol", f"input position {pos}")
            if conf is not None:
                q, c = conf
                nxt = self.delta.get((q, a, tuple(x == 0 for x in c)))
                conf = None if nxt is None else (nxt[0], tuple(x + o for x, o in zip(c, nxt[1], strict=True)))
            out.append(conf)
        return out

    def accepts(self, word: Iterable[str]) -> bool:
        conf = self.run(word)[-1]
        return conf is not None and (conf[0], tuple(x == 0 for x in conf[1])) in self.accepting


def anbn_counter_machine(min_n: int = 0) -> CounterMachine:
    """SKCM for ``a^n b^n`` (``n >= min_n``, ``min_n ∈ {0, 1}``): count ``a`` up, ``b`` down."""
    if min_n not in (0, 1):
        raise ValueError(f"min_n must be 0 or 1, got {min_n}")
    t = [
        ("A", "a", (None,), "A", (INC,)),
        ("A", "b", (False,), "B", (DEC,)),
        ("B", "b", (False,), "B", (DEC,)),
    ]
    acc = [("B", (True,))] + ([("A", (True,))] if min_n == 0 else [])
    return CounterMachine(1, ["A", "B"], ["a", "b"], t, "A", acc)


def anbncn_counter_machine(min_n: int = 0) -> CounterMachine:
    """SKCM for ``a^n b^n c^n`` with two counters: ``a`` increments both, ``b`` decrements the
    first, ``c`` the second (which must reach 0 exactly when the first has)."""
    if min_n not in (0, 1):
        raise ValueError(f"min_n must be 0 or 1, got {min_n}")
    t = [
        ("A", "a", (None, None), "A", (INC, INC)),
        ("A", "b", (False, False), "B", (DEC, NOP)),
        ("B", "b", (False, False), "B", (DEC, NOP)),
        ("B", "c", (True, False), "C", (NOP, DEC)),
        ("C", "c", (True, False), "C", (NOP, DEC)),
    ]
    acc = [("C", (True, True))] + ([("A", (True, True))] if min_n == 0 else [])
    return CounterMachine(2, ["A", "B", "C"], ["a", "b", "c"], t, "A", acc)


def dyck1_counter_machine() -> CounterMachine:
    """SKCM for Dyck-1 over ``(`` and ``)``: ``(`` increments, ``)`` decrements a non-zero
    counter (a ``)`` on zero kills the run); accept when the counter is 0."""
    t = [("S", "(", (None,), "S", (INC,)), ("S", ")", (False,), "S", (DEC,))]
    return CounterMachine(1, ["S"], ["(", ")"], t, "S", [("S", (True,))])


def anbmcnm_counter_machine() -> CounterMachine:
    """SKCM for ``a^n b^m c^(n+m)`` (``n, m >= 0``): ``a`` and ``b`` increment, ``c`` decrements a
    non-zero counter; the states keep the blocks in order; accept when the counter is 0."""
    t = [
        ("A", "a", (None,), "A", (INC,)),
        ("A", "b", (None,), "B", (INC,)),
        ("B", "b", (None,), "B", (INC,)),
        ("A", "c", (False,), "C", (DEC,)),
        ("B", "c", (False,), "C", (DEC,)),
        ("C", "c", (False,), "C", (DEC,)),
    ]
    return CounterMachine(1, ["A", "B", "C"], ["a", "b", "c"], t, "A", [("A", (True,)), ("C", (True,))])
