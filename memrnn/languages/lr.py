"""LR(1) automata and their parser, exactly as Paaßen, Schulz & Hammer 2021:
Definition 2, Algorithm 1, and the per-step traces that Algorithm 4 (teacher forcing of the
reservoir stack machine) consumes.

An automaton is ``(Φ, Σ, R, F)``: nonterminals, terminals, an *ordered* list of rules
``(s̄, x, j, A)`` (if the stack ends with ``s̄`` and the current input is ``x``, or ``x = ε``,
pop ``j`` symbols and push ``A``; the first matching rule wins), and accepting nonterminals.
After the input, the end symbol ``#`` is processed; the word is accepted iff the stack is then
``A #`` with ``A ∈ F``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

END_MARK = "#"
EPS = None  # x = ε: the rule matches whatever the input symbol is


@dataclass(frozen=True)
class LRRule:
    """``(s̄, x, j, A)`` of Definition 2; ``suffix`` is s̄ (bottom to top), ``lookahead`` x
    (``None`` for ε)."""

    suffix: tuple[str, ...]
    lookahead: str | None
    pop: int
    push: str

    def __str__(self) -> str:
        return f"({' '.join(self.suffix)}, {self.lookahead or 'ε'}, {self.pop}, {self.push})"


@dataclass
class LRTrace:
    """What Algorithm 1 did on ``w_1..w_T`` (then ``#``), as Algorithm 4's 5-tuple.

    Attributes:
        pops: ``J``, ``[T + 1, M]`` int: symbols popped by the τ-th action at step t; each row
            ends with the terminating ``(0, none)`` action and is 0-padded.
        pushes: ``A``, ``[T + 1, M]`` int: index in Φ of the pushed nonterminal, ``-1`` for
            none (Algorithm 4's zero vector).
        shift: ``ρ``, ``[T + 1]``: always 1 for an LR(1) automaton.
        output: ``Y``, ``[T + 1]``: 1 iff, after the reductions of step t (before shifting
            ``x_t``), the stack is one accepting nonterminal (section 3.2's teacher signal).
            This is ``w_<t ∈ L`` whenever ``x_t`` is ``#`` or a viable continuation; after a
            symbol that kills the word, reductions made for it may differ (JSON: ``s ]``).
        num_actions: ``[T + 1]`` actions per step, the terminating one included.
        stacks: ``stacks[t]``: the stack before step t's reductions, after each action, and
            after the shift (bottom first), for replay checks.
        accepted: the result of Algorithm 1.
    """

    pops: np.ndarray
    pushes: np.ndarray
    shift: np.ndarray
    output: np.ndarray
    num_actions: np.ndarray
    stacks: list[list[tuple[str, ...]]]
    accepted: bool


class LRAutomaton:
    """An LR(1) automaton ``(Φ, Σ, R, F)`` (Paaßen et al. 2021 Definition 2).

    Args:
        nonterminals: Φ.  terminals: Σ (``#`` is added as the end symbol).
        rules: ``(s̄, x, j, A)``: ``s̄`` a sequence of symbols or a whitespace-separated string,
            ``x`` a terminal, ``#`` or ``None`` (ε), ``j <= len(s̄)``, ``A`` in Φ.
        accepting: F.
        max_reductions: bound on rule applications per input symbol; exceeding it raises
            ``ValueError`` (an automaton whose rules loop).
    """

    def __init__(
        self,
        nonterminals: Sequence[str],
        terminals: Sequence[str],
        rules: Iterable[tuple[Sequence[str] | str, str | None, int, str]],
        accepting: Iterable[str],
        *,
        max_reductions: int = 10_000,
    ) -> None:
        self.nonterminals, self.terminals = tuple(nonterminals), tuple(terminals)
        if set(self.nonterminals) & set(self.terminals):
            raise ValueError(f"Φ and Σ overlap: {sorted(set(self.nonterminals) & set(self.terminals))}")
        if END_MARK in self.terminals or END_MARK in self.nonterminals:
            raise ValueError(f"{END_MARK!r} is reserved for the end symbol")
        symbols = set(self.nonterminals) | set(self.terminals)
        self.rules: list[LRRule] = []
        for s, x, j, a in rules:
            suffix = tuple(s.split()) if isinstance(s, str) else tuple(s)
            where = f"rule ({' '.join(suffix)}, {x or 'ε'}, {j}, {a})"
            for sym in suffix:
                if sym not in symbols:
                    raise ValueError(f"unknown symbol {sym!r} in {where}")
            if x is not EPS and x not in self.terminals and x != END_MARK:
                raise ValueError(f"unknown lookahead {x!r} in {where}; terminals are {self.terminals}")
            if not isinstance(j, int) or not 0 <= j <= len(suffix):
                raise ValueError(f"pop count j={j!r} must be an int in 0..len(s̄)={len(suffix)} in {where}")
            if a not in self.nonterminals:
                raise ValueError(f"pushed symbol {a!r} is not a nonterminal in {where}")
            self.rules.append(LRRule(suffix, x, j, a))
        self.accepting = frozenset(accepting)
        for a in self.accepting:
            if a not in self.nonterminals:
                raise ValueError(f"accepting symbol {a!r} is not a nonterminal")
        self.max_reductions = max_reductions
        self._nt_index = {a: i for i, a in enumerate(self.nonterminals)}

    def __repr__(self) -> str:
        return f"LRAutomaton(Φ={self.nonterminals}, Σ={self.terminals}, {len(self.rules)} rules, F={set(self.accepting)})"

    def match(self, stack: Sequence[str], y: str) -> LRRule | None:
        """The first rule whose ``s̄`` is a suffix of ``stack`` and whose ``x`` is ``y`` or ε."""
        n = len(stack)
        for r in self.rules:
            k = len(r.suffix)
            if (r.lookahead is EPS or r.lookahead == y) and k <= n and tuple(stack[n - k :]) == r.suffix:
                return r
        return None

    def parse(self, word: Sequence[str]) -> LRTrace:
        """Algorithm 1 on ``word`` (terminals, without ``#``), with the full trace."""
        for pos, y in enumerate(word):
            if y not in self.terminals:
                raise ValueError(f"unknown terminal {y!r} at position {pos}; terminals are {self.terminals}")
        stack: list[str] = []
        actions: list[list[tuple[int, int]]] = []
        stacks: list[list[tuple[str, ...]]] = []
        output = []
        for y in [*word, END_MARK]:
            acts, snaps = [], [tuple(stack)]
            while (r := self.match(stack, y)) is not None:
                if len(acts) >= self.max_reductions:
                    raise ValueError(
                        f"more than {self.max_reductions} reductions before {y!r}: the rules loop"
                    )
                del stack[len(stack) - r.pop :]
                stack.append(r.push)
                acts.append((r.pop, self._nt_index[r.push]))
                snaps.append(tuple(stack))
            acts.append((0, -1))
            output.append(int(len(stack) == 1 and stack[0] in self.accepting))
            stack.append(y)
            snaps.append(tuple(stack))
            actions.append(acts)
            stacks.append(snaps)
        m = max(len(a) for a in actions)
        pops = np.zeros((len(actions), m), dtype=np.int64)
        pushes = np.full((len(actions), m), -1, dtype=np.int64)
        for t, acts in enumerate(actions):
            for tau, (j, a) in enumerate(acts):
                pops[t, tau], pushes[t, tau] = j, a
        accepted = len(stack) == 2 and stack[0] in self.accepting and stack[1] == END_MARK
        return LRTrace(
            pops=pops,
            pushes=pushes,
            shift=np.ones(len(actions), dtype=np.int64),
            output=np.array(output, dtype=np.int64),
            num_actions=np.array([len(a) for a in actions], dtype=np.int64),
            stacks=stacks,
            accepted=accepted,
        )

    def accepts(self, word: Sequence[str]) -> bool:
        return self.parse(word).accepted


def replay(trace: LRTrace, word: Sequence[str], nonterminals: Sequence[str]) -> list[list[tuple[str, ...]]]:
    """Apply a trace's stack operations as Algorithm 4 does (lines 9–12 and 21–22): pop
    ``J[t, τ]``, push ``A[t, τ]`` if any, stop at the ``(0, none)`` action, shift ``x_t`` if
    ``ρ_t``.  Returns the stack snapshots in the same layout as ``trace.stacks``."""
    stack: list[str] = []
    out = []
    for t, y in enumerate([*word, END_MARK]):
        snaps = [tuple(stack)]
        for tau in range(trace.pops.shape[1]):
            j, a = int(trace.pops[t, tau]), int(trace.pushes[t, tau])
            if j == 0 and a < 0:
                break
            del stack[len(stack) - j :]
            if a >= 0:
                stack.append(nonterminals[a])
            snaps.append(tuple(stack))
        if trace.shift[t]:
            stack.append(y)
        snaps.append(tuple(stack))
        out.append(snaps)
    return out


# -- the automata of Paaßen et al. 2021 (Table 1, Equation 3, section 4) ---------------------------------
def _dyck_rules(pairs: Sequence[tuple[str, str]]) -> list:
    rules: list = [(("S", "S"), EPS, 2, "S")]
    rules += [((o, "S", c), EPS, 3, "S") for o, c in pairs]
    rules += [((o,), c, 0, "S") for o, c in pairs]
    return rules


DYCK_PAIRS = (("(", ")"), ("[", "]"), ("{", "}"))


def table1_automaton(name: str) -> LRAutomaton:
    """The LR(1) automata of Paaßen et al. 2021 Table 1: ``dyck1``, ``dyck2``, ``dyck3``, ``anbn``,
    ``palindrome``, ``json``; and section 4's ``latch`` (see :func:`latch_automaton`).

    Table 1 prints the second a^n b^n rule as ``(a, b, ε, S)``; Equation 3 gives ``(a, b, 0, S)``,
    which is what is used here.  JSON terminals: ``{ } [ ] , : n s k``.
    """
    if name in ("dyck1", "dyck2", "dyck3"):
        pairs = DYCK_PAIRS[: int(name[-1])]
        return LRAutomaton(["S"], [s for p in pairs for s in p], _dyck_rules(pairs), ["S"])
    if name == "anbn":
        return LRAutomaton(["S"], ["a", "b"], [("a S b", EPS, 3, "S"), ("a", "b", 0, "S")], ["S"])
    if name == "palindrome":
        rules = [("a S a", EPS, 3, "S"), ("b S b", EPS, 3, "S"), ("$", EPS, 1, "S")]
        return LRAutomaton(["S"], ["a", "b", "$"], rules, ["S"])
    if name == "json":
        rules = [
            ("{ }", EPS, 2, "V"),
            ("[ ]", EPS, 2, "V"),
            ("{ O }", EPS, 3, "V"),
            ("[ A ]", EPS, 3, "V"),
            ("n", EPS, 1, "V"),
            ("s", EPS, 1, "V"),
            ("k : V , O", EPS, 5, "O"),
            ("k : V", "}", 3, "O"),
            ("V , A", EPS, 3, "A"),
            ("V", "]", 1, "A"),
        ]
        return LRAutomaton(["V", "O", "A"], ["{", "}", "[", "]", ",", ":", "n", "s", "k"], rules, ["V"])
    if name == "latch":
        return latch_automaton()
    raise ValueError(
        f"unknown Table 1 automaton {name!r}; choose dyck1, dyck2, dyck3, anbn, palindrome, json, latch"
    )


def latch_automaton(as_printed: bool = False) -> LRAutomaton:
    """Section 4's latch rules (odd number of ``1``): ``(S0, ε, 2, S)``, ``(S1, ε, 2, A)``,
    ``(A0, ε, 2, A)``, ``(A1, ε, 2, S)``, ``(0, ε, 1, A)`` with F = {S}.

    As printed, no rule reduces a leading ``1``, so every word starting with ``1`` is rejected
    (``1`` itself has one ``1`` and should be accepted).  By default the missing rule
    ``(1, ε, 1, S)`` is appended, which makes the automaton accept exactly the latch language;
    ``as_printed=True`` gives the rules exactly as the paper lists them.
    """
    rules = [
        ("S 0", EPS, 2, "S"),
        ("S 1", EPS, 2, "A"),
        ("A 0", EPS, 2, "A"),
        ("A 1", EPS, 2, "S"),
        ("0", EPS, 1, "A"),
    ]
    if not as_printed:
        rules.append(("1", EPS, 1, "S"))
    return LRAutomaton(["S", "A"], ["0", "1"], rules, ["S"])
