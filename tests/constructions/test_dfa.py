"""DFA -> second-order RNN (Stogin et al. 2020 appendix A, equation 3) and back."""

import itertools

import numpy as np
import pytest
import torch

from memrnn.constructions import encode_dfa, extract_dfa
from memrnn.languages import DFA


def random_dfas(count=20):
    rng = np.random.default_rng(3)
    return [
        DFA.random(rng, int(rng.integers(2, 9)), ("a", "b", "c"), missing_fraction=0.15 * (i % 2))
        for i in range(count)
    ]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_encoded_random_dfas_agree_with_the_runner_on_every_string_up_to_length_8(dtype):
    words = [list(w) for n in range(9) for w in itertools.product("abc", repeat=n)]
    for dfa in random_dfas():
        enc = encode_dfa(dfa, sensitivity=12.0, dtype=dtype)
        got = enc.accepts(words)
        want = [dfa.accepts(w) for w in words]
        assert got == want, f"{dfa}: {sum(g != w for g, w in zip(got, want, strict=True))} disagreements"


def test_extract_of_encode_is_the_same_dfa_basis_and_reachable():
    for dfa in random_dfas():
        enc = encode_dfa(dfa)
        back = extract_dfa(enc.layer, alphabet=enc.vocabulary, states=dfa.states, accept=dfa.accept)
        assert back == dfa, back.diff(dfa)
        reach = extract_dfa(
            enc.layer,
            alphabet=enc.vocabulary,
            method="reachable",
            accept=lambda code, dfa=dfa: any(code[dfa.q_index[q]] > 0.5 for q in dfa.accept),
        )
        words = [list(w) for n in range(7) for w in itertools.product("abc", repeat=n)]
        assert [reach.accepts(w) for w in words] == [dfa.accepts(w) for w in words]
        assert len(reach.states) <= len(dfa.states)


def test_encoded_dfa_is_stable_on_long_strings():
    """The DFA case of Theorem 3.7: after 5,000 symbols the state is still within 0.01 of one-hot."""
    dfa = random_dfas(1)[0]
    enc = encode_dfa(dfa, sensitivity=12.0, dtype=torch.float32)
    rng = np.random.default_rng(0)
    words = [list(rng.choice(["a", "b", "c"], size=5000)) for _ in range(8)]
    assert enc.accepts(words) == [dfa.accepts(w) for w in words]


def test_dfa_equality_and_diff():
    a = DFA(["p", "q"], ["x"], [("p", "x", "q")], "p", ["q"])
    b = DFA(["p", "q"], ["x"], [("p", "x", "p")], "p", ["q"])
    assert a == DFA(["p", "q"], ["x"], [("p", "x", "q")], "p", ["q"]) and a != b
    assert a.diff(b) == ["delta('p', 'x'): 'q' != 'p'"]
    assert len({a, b}) == 2
