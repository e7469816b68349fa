"""DFA, PFSA, DPDA (Stogin et al. 2020 appendix E), SKCM (Weiss et al. 2018) and the LR(1) parser (Paaßen et al. 2021)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memrnn.languages import (
    DFA,
    DPDA,
    PFSA,
    AnBn,
    AnBnCn,
    CounterMachine,
    DyckN,
    JsonLite,
    Latch,
    LRAutomaton,
    Palindrome,
    dyck1_pda,
    latch_automaton,
    table1_automaton,
)
from memrnn.languages.automata import DEC, EMPTY, INC, NOOP, POP, push
from memrnn.languages.lr import replay

# -- DFA / PFSA ---------------------------------------------------------------------------------


def test_dfa_runs_and_validates():
    parity = DFA(
        ["e", "o"],
        ["0", "1"],
        [("e", "0", "e"), ("e", "1", "o"), ("o", "0", "o"), ("o", "1", "e")],
        "e",
        ["o"],
    )
    assert parity.run("0110") == ["e", "e", "o", "e", "e"]
    assert parity.accepts("010") and not parity.accepts("0110")
    w = parity.transition_tensor()
    assert w.shape == (2, 2, 2) and w[1, 0, 1] == 1 and w.sum() == 4
    with pytest.raises(ValueError, match="unknown state 'x'"):
        DFA(["e"], ["0"], [("e", "0", "x")], "e", [])
    with pytest.raises(ValueError, match="unknown symbol '2'"):
        DFA(["e"], ["0"], [("e", "2", "e")], "e", [])
    with pytest.raises(ValueError, match="nondeterministic"):
        DFA(["e", "o"], ["0"], [("e", "0", "e"), ("e", "0", "o")], "e", [])
    with pytest.raises(ValueError, match="unknown symbol '7'"):
        parity.accepts("7")
    partial = DFA(["a"], ["0", "1"], [("a", "0", "a")], "a", ["a"])
    assert partial.run("010") == ["a", "a", None, None]


def test_pfsa_of_cotterell_et_al_and_normalisation():
    # the lecture notes' example: q0 -a-> q0 (0.7), q0 -b-> q1 (0.3), q1 -a-> q0 (1.0)
    p = PFSA(
        ["q0", "q1"],
        ["a", "b"],
        [("q0", "a", "q0", 0.7), ("q0", "b", "q1", 0.3), ("q1", "a", "q0", 1.0), ("q1", "b", "q1", 0.0)],
        "q0",
    )
    assert np.allclose(np.exp(p.next_log_probs("q1")), [1.0, 0.0, 0.0])
    assert p.log_prob("ab") == -math.inf  # no final probability anywhere: no string ends
    with pytest.raises(ValueError, match=r"sum to 0\.9"):
        PFSA(["q"], ["a"], [("q", "a", "q", 0.9)], "q")
    with pytest.raises(ValueError, match="outside"):
        PFSA(["q"], ["a"], [("q", "a", "q", 1.5)], "q")
    ended = PFSA(
        ["q0", "q1"],
        ["a", "b"],
        [("q0", "a", "q0", 0.5), ("q0", "b", "q1", 0.3), ("q1", "a", "q0", 0.6)],
        "q0",
        {"q0": 0.2, "q1": 0.4},
    )
    assert ended.log_prob("ab") == pytest.approx(math.log(0.5 * 0.3 * 0.4))
    total = {n: 0.0 for n in range(6)}
    for n in range(6):
        for w in itertools.product("ab", repeat=n):
            total[n] += math.exp(ended.log_prob(w))
    assert np.allclose([total[n] for n in range(6)], np.exp(ended.length_log_probs(5)))


# -- DPDA ---------------------------------------------------------------------------------------


def test_appendix_e_tensors():
    t = dyck1_pda().tensors()
    ident, to_reject = np.eye(2), np.array([[0, 0], [1, 1]])
    # l (k=0): identity for both readings; r (k=1): identity if non-empty, ⊙→⊖ if empty;
    # e (k=2): ⊙→⊖ if non-empty, identity if empty (E.1)
    assert np.array_equal(t["W_Q"][:, :, 0, 0], ident) and np.array_equal(t["W_Q"][:, :, 0, 1], ident)
    assert np.array_equal(t["W_Q"][:, :, 1, 0], ident) and np.array_equal(t["W_Q"][:, :, 1, 1], to_reject)
    assert np.array_equal(t["W_Q"][:, :, 2, 0], to_reject) and np.array_equal(t["W_Q"][:, :, 2, 1], ident)
    # E.2: push exactly when k = 0, pop exactly when k = 1, C = 1 where pushing
    assert np.array_equal(
        t["W_push"], np.broadcast_to((np.arange(3) == 0)[None, :, None], (2, 3, 2)).astype(float)
    )
    assert np.array_equal(
        t["W_pop"], np.broadcast_to((np.arange(3) == 1)[None, :, None], (2, 3, 2)).astype(float)
    )
    assert np.array_equal(t["W_C"][0], t["W_push"])


def test_appendix_e_pda_is_dyck1():
    pda, dyck = dyck1_pda(), DyckN(1)
    to_pda = {"(": "l", ")": "r", "END": "e"}
    for n in range(13):
        for w in itertools.product(range(2), repeat=n):
            ids = [*w, dyck.end_id]
            assert pda.accepts([to_pda[dyck.symbols[i]] for i in ids]) == dyck.accepts(ids)
    # the paper's examples (its "((())" appears in both lists; it is invalid)
    for s, ok in (
        ("lre", True),
        ("llrre", True),
        ("llrlrre", True),
        ("re", False),
        ("llre", False),
        ("llrrre", False),
        ("lllrrre", True),
    ):
        assert pda.accepts(s) == ok, s


def test_dpda_validation_and_depth_bound():
    with pytest.raises(ValueError, match="unknown stack symbol 'y'"):
        DPDA(["q"], ["a"], ["x"], [("q", "a", EMPTY, "q", push("y"))], "q", ["q"])
    with pytest.raises(ValueError, match="nondeterministic"):
        DPDA(["q", "r"], ["a"], ["x"], [("q", "a", "*", "q", NOOP), ("q", "a", EMPTY, "r", NOOP)], "q", [])
    with pytest.raises(ValueError, match="bad stack operation"):
        DPDA(["q"], ["a"], ["x"], [("q", "a", EMPTY, "q", ("push", None))], "q", [])
    bounded = DPDA(
        ["q"],
        ["a", "b"],
        ["x"],
        [("q", "a", "*", "q", push("x")), ("q", "b", "x", "q", POP)],
        "q",
        ["q"],
        max_depth=2,
    )
    assert bounded.accepts("aab")
    with pytest.raises(ValueError, match="stack depth 3 exceeds max_depth=2 at input position 2"):
        bounded.accepts("aaa")
    steps = bounded.run("ab")
    assert [s.stack for s in steps] == [("x",), ()] and steps[1].top == "x" and steps[0].top is EMPTY


# -- counter machines ---------------------------------------------------------------------------


def test_counter_machines_agree_with_the_languages():
    for language in (AnBn(min_n=0), AnBn(), AnBnCn(), AnBnCn(min_n=0)):
        machine = language.machine
        for n in range(10):
            for w in itertools.product(language.letters, repeat=n):
                ok = any(
                    list(w) == [x for x in language.letters for _ in range(k)]
                    for k in range(max(language.min_n, 0), 5)
                )
                assert machine.accepts(w) == ok, w
    run = AnBn().machine.run("aab")
    assert run == [("A", (0,)), ("A", (1,)), ("A", (2,)), ("B", (1,))]


def test_counter_machine_validation():
    with pytest.raises(ValueError, match="nondeterministic"):
        CounterMachine(
            1, ["q"], ["a"], [("q", "a", (None,), "q", (INC,)), ("q", "a", (True,), "q", (DEC,))], "q", []
        )
    with pytest.raises(ValueError, match="ops must be 1 values"):
        CounterMachine(1, ["q"], ["a"], [("q", "a", (None,), "q", (2,))], "q", [])
    with pytest.raises(ValueError, match="pattern must have 2 entries"):
        CounterMachine(2, ["q"], ["a"], [("q", "a", (None,), "q", (INC, INC))], "q", [])


# -- LR(1) --------------------------------------------------------------------------------------
TABLE1 = {
    "dyck1": lambda: DyckN(1),
    "dyck2": lambda: DyckN(2),
    "dyck3": lambda: DyckN(3),
    "anbn": lambda: AnBn(),
    "palindrome": lambda: Palindrome(),
    "json": lambda: JsonLite(),
    "latch": lambda: Latch(),
}
# all strings up to this many symbols (|Σ|^n ≤ ~10^5), and, up to 12 symbols, every member
# and each of its one-symbol substitutions, insertions and deletions
LR_DEPTH = {"dyck1": 12, "anbn": 12, "latch": 12, "palindrome": 8, "dyck2": 6, "dyck3": 4, "json": 4}
MEMBER_DEPTH = {"dyck1": 12, "anbn": 12, "latch": 12, "palindrome": 12, "dyck2": 8, "dyck3": 6, "json": 7}


def _members(language, depth):
    """Members up to ``depth`` symbols, by extending viable prefixes only (uses the language's
    own next-set oracle, itself checked exhaustively in test_languages.py)."""
    out, todo = [], [[]]
    while todo:
        p = todo.pop()
        for a in language.allowed_next(p):
            if a == language.end_id:
                out.append(p)
            elif len(p) < depth:
                todo.append([*p, a])
    return out


@pytest.mark.parametrize("name", list(TABLE1))
def test_table1_automaton_accepts_exactly_the_language(name):
    auto, language = table1_automaton(name), TABLE1[name]()
    sym = language.symbols[:-1]

    def agree(w):
        expected = len(w) > 0 and language.accepts([*w, language.end_id])  # Table 1 rejects ε
        assert auto.accepts([sym[i] for i in w]) == expected, " ".join(sym[i] for i in w)

    for n in range(LR_DEPTH[name] + 1):
        for w in itertools.product(range(len(sym)), repeat=n):
            agree(list(w))
    members = _members(language, MEMBER_DEPTH[name])
    assert len(members) > 5
    for w in members[:: max(1, len(members) // 150)]:
        agree(w)
        for i in range(len(w) + 1):
            for a in range(len(sym)):
                agree([*w[:i], a, *w[i:]])
                if i < len(w):
                    agree([*w[:i], a, *w[i + 1 :]])
            if i < len(w):
                agree(w[:i] + w[i + 1 :])


def test_worked_example_of_equation_3():
    trace = table1_automaton("anbn").parse(list("aabb"))
    visited = [s for step in trace.stacks for s in step]
    seq = ["".join(s) for s in dict.fromkeys(visited)]
    assert seq == ["", "a", "aa", "aaS", "aaSb", "aS", "aSb", "S", "S#"]
    assert trace.accepted and trace.output.tolist() == [0, 0, 0, 0, 1]
    assert trace.pops.tolist() == [[0, 0], [0, 0], [0, 0], [3, 0], [3, 0]]
    assert trace.pushes[:, 0].tolist() == [-1, -1, 0, 0, 0]


@pytest.mark.parametrize("name", list(TABLE1))
@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 2**31 - 1))
def test_traces_replay_to_the_parsers_stacks(name, seed):
    auto, language = table1_automaton(name), TABLE1[name]()
    rng = np.random.default_rng(seed)
    for w in (language.sample(rng, (2, 40)), language.sample_negative(rng, (2, 40))):
        word = [language.symbols[i] for i in w[:-1]]
        trace = auto.parse(word)
        assert replay(trace, word, auto.nonterminals) == trace.stacks
        assert trace.pops.shape == trace.pushes.shape == (len(word) + 1, trace.num_actions.max())
        # y_t: w_<t is accepted (Table 1 automata reject the empty word) wherever the lookahead
        # x_t keeps the word viable; after a dead symbol, reductions made for it may differ
        expected = [t > 0 and ok for t, ok in enumerate(language.accepts_prefixes(w))]
        for t in range(len(word) + 1):
            if t == len(word) or w[t] in language.allowed_next(w[:t]):
                assert trace.output[t] == int(expected[t]), (word, t)


def test_latch_as_printed_misses_words_starting_with_1():
    printed, fixed = latch_automaton(as_printed=True), latch_automaton()
    wrong = []
    for n in range(1, 11):
        for w in itertools.product("01", repeat=n):
            odd = w.count("1") % 2 == 1
            assert fixed.accepts(w) == odd
            if printed.accepts(w) != odd:
                wrong.append("".join(w))
    assert wrong and all(w.startswith("1") for w in wrong)


def test_lr_validation():
    with pytest.raises(ValueError, match="unknown symbol 'x'"):
        LRAutomaton(["S"], ["a"], [("a x", None, 1, "S")], ["S"])
    with pytest.raises(ValueError, match="pop count j=3"):
        LRAutomaton(["S"], ["a"], [("a S", None, 3, "S")], ["S"])
    with pytest.raises(ValueError, match="not a nonterminal"):
        LRAutomaton(["S"], ["a"], [("a", None, 1, "a")], ["S"])
    looping = LRAutomaton(["S"], ["a"], [("a", None, 1, "S"), ("S", None, 0, "S")], ["S"], max_reductions=50)
    with pytest.raises(ValueError, match="rules loop"):
        looping.parse(["a"])
    with pytest.raises(ValueError, match="unknown terminal 'z'"):
        table1_automaton("anbn").parse(["z"])
    with pytest.raises(ValueError, match="unknown Table 1 automaton"):
        table1_automaton("dyck9")


@pytest.mark.parametrize(("k", "m"), [(1, 3), (2, 3), (3, 2)])
def test_dyck_km_dfa_object_agrees_with_the_language(k, m):
    from memrnn.languages import DyckKM

    language = DyckKM(k, m)
    dfa = language.dfa()
    assert len(dfa.states) == sum(k**i for i in range(m + 1)) + 1
    for n in range(8):
        for w in itertools.product(range(2 * k), repeat=n):
            ids = [*w, language.end_id]
            assert dfa.accepts([language.symbols[i] for i in ids]) == language.accepts(ids)
