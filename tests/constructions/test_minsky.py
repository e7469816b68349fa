"""Minsky's PFSA -> Heaviside RNN construction (Cotterell et al. 2023), its inverse, Theorem 1's naive
Dyck-(k,m) generator and the tightness checks."""

import itertools
import math

import numpy as np
import pytest
import torch
from torch import nn

from memrnn.analysis.generation import exhaustive_generation_check
from memrnn.constructions.hewitt_spec import construction_sizes, dyck_state_count
from memrnn.constructions.minsky import (
    dyck_pfsa,
    encode_pfsa,
    extract_pfsa,
    finite_mass,
    minimize_pfsa,
    naive_dyck_generator,
    tightness,
)
from memrnn.languages import DyckKM
from memrnn.languages.automata import DFA, PFSA
from memrnn.layers import ElmanRNN


def worked_example() -> PFSA:
    return PFSA(
        ["q0", "q1"],
        ["a", "b"],
        [("q0", "a", "q0", 0.7), ("q0", "b", "q1", 0.3), ("q1", "a", "q0", 1.0)],
        "q0",
    )


def test_the_worked_example_of_cotterell_et_al():
    rnn = encode_pfsa(worked_example(), log_zero=-1000.0)
    assert rnn.units[:4] == ("(q0, a)", "(q0, b)", "(q1, a)", "(q1, b)")
    assert rnn.vocabulary == ("a", "b", "END", "BOS") and rnn.outputs == ("a", "b", "END")
    U = rnn.layer.weight_hh.detach()[:4, :4]
    V = rnn.layer.weight_ih.detach()[:4, :2]
    # the paper's U; its last column (q1, b) is zero here: that pair has probability 0, our PFSA
    # drops it, and the unit can never be on
    paper_u = torch.tensor([[1, 0, 1, 0], [1, 0, 1, 0], [0, 1, 0, 1], [0, 1, 0, 1.0]], dtype=torch.float64)
    paper_u[:, 3] = 0
    torch.testing.assert_close(U, paper_u)
    torch.testing.assert_close(V, torch.tensor([[1, 0], [0, 1], [1, 0], [0, 1.0]], dtype=torch.float64))
    torch.testing.assert_close(rnn.layer.bias.detach(), -torch.ones(5, dtype=torch.float64))
    E = rnn.readout.weight.detach()[:2, :4].T  # the paper writes E as units x symbols
    l7, l3 = math.log(0.7), math.log(0.3)
    # column (q, a) holds the distribution of delta(q, a) (the paper's example uses q's: erratum)
    torch.testing.assert_close(
        E, torch.tensor([[l7, l3], [0, -1000], [l7, l3], [-1000, -1000.0]], dtype=torch.float64)
    )
    # one update step: from (q0, a), read b -> (q0, b), now in q1: P(a) = 1 (the paper says 0.7)
    h = torch.tensor([[1.0, 0, 0, 0, 0]], dtype=torch.float64)
    x = torch.tensor([[0, 1.0, 0, 0]], dtype=torch.float64)
    out, _ = rnn.layer.step(x, type(rnn.layer.initial_state(1))(h))
    torch.testing.assert_close(out, torch.tensor([[0, 1.0, 0, 0, 0]], dtype=torch.float64))
    probs = rnn.readout(out).softmax(-1)[0, :2].detach()
    torch.testing.assert_close(probs, torch.tensor([1.0, 0.0], dtype=torch.float64))


def random_pfsa(rng, n_states, alphabet, zero_fraction=0.2) -> PFSA:
    dfa = DFA.random(rng, n_states, alphabet)
    trans, final = [], {}
    for q in dfa.states:
        w = rng.dirichlet(np.ones(len(alphabet) + 1))
        w[:-1][rng.random(len(alphabet)) < zero_fraction] = 0.0  # some impossible symbols
        w[-1] = max(w[-1], 0.05)  # every state can end
        w /= w.sum()
        trans += [(q, a, dfa.delta[(q, a)], float(p)) for a, p in zip(alphabet, w[:-1], strict=True) if p > 0]
        final[q] = float(w[-1])
    return PFSA(dfa.states, alphabet, trans, dfa.start, final)


def all_log_probs(rnn, max_length):
    """Network log p(w, END) for every string up to max_length: ``log_prob`` on all of them at
    once (variable lengths in one batch), checked against the logits read position by position."""
    alphabet = rnn.source.alphabet
    words = [w for n in range(max_length + 1) for w in itertools.product(alphabet, repeat=n)]
    got = rnn.log_prob(words).tolist()
    for w in words[:: max(1, len(words) // 50)]:  # a sample, by hand
        ids, _ = rnn.ids([w])
        with torch.no_grad():
            logits, _ = rnn(ids)
        target = [alphabet.index(a) for a in w] + [len(alphabet)]
        lp = logits[0].double().log_softmax(-1)[torch.arange(len(target)), torch.tensor(target)].sum()
        assert abs(float(lp) - got[words.index(w)]) < 1e-9
    return dict(zip(words, got, strict=True))


@pytest.mark.parametrize(
    "seed,n_states,alphabet", [(0, 3, ("a", "b")), (1, 5, ("a", "b")), (2, 4, ("a", "b", "c"))]
)
@pytest.mark.parametrize("prune", [False, True])
def test_string_probabilities_equal_the_pfsa(seed, n_states, alphabet, prune):
    pfsa = random_pfsa(np.random.default_rng(seed), n_states, alphabet)
    rnn = encode_pfsa(pfsa, prune=prune)
    assert rnn.layer.hidden_size == (len(rnn.units)) and (
        prune or len(rnn.units) == n_states * len(alphabet) + 1
    )
    got = all_log_probs(rnn, 8)
    assert len(got) == sum(len(alphabet) ** n for n in range(9))
    worst = 0.0
    for w, lp in got.items():
        ref = pfsa.log_prob(w)
        assert rnn.accepts([w]) == [ref > -math.inf]
        if ref == -math.inf:
            assert lp < -500  # log 0 as log_zero
        else:
            worst = max(worst, abs(math.exp(lp) - math.exp(ref)))
    assert worst < 1e-8


def test_sigmoid_variant_matches_heaviside():
    pfsa = random_pfsa(np.random.default_rng(4), 4, ("a", "b"))
    h = all_log_probs(encode_pfsa(pfsa), 6)
    s = all_log_probs(encode_pfsa(pfsa, activation="sigmoid", beta=20.0), 6)
    worst = max(abs(math.exp(h[w]) - math.exp(s[w])) for w in h)
    assert worst < 1e-6


def test_extraction_reads_the_pfsa_back():
    pfsa = random_pfsa(np.random.default_rng(5), 4, ("a", "b", "c"))
    raw = extract_pfsa(encode_pfsa(pfsa), minimize=False)
    back = extract_pfsa(encode_pfsa(pfsa))
    assert len(raw.states) > len(pfsa.states)  # one hidden state per (q, a) pair
    assert len(back.states) == len(minimize_pfsa(pfsa).states) <= len(pfsa.states)
    for n in range(6):
        for w in itertools.product(pfsa.alphabet, repeat=n):
            a = pfsa.log_prob(w)
            for b in (raw.log_prob(w), back.log_prob(w)):
                assert (a == b == -math.inf) or abs(math.exp(a) - math.exp(b)) < 1e-9


def test_extraction_refuses_a_network_with_too_many_states():
    torch.manual_seed(0)
    layer = ElmanRNN(4, 6, activation="tanh", dtype=torch.float64)
    with pytest.raises(ValueError, match="more than max_states=50"):
        extract_pfsa((layer, nn.Linear(6, 3, dtype=torch.float64), ["a", "b"]), max_states=50)


def test_finite_mass():
    assert finite_mass(dyck_pfsa(DyckKM(3, 2))) == pytest.approx(1.0, abs=1e-12)
    pfsa = random_pfsa(np.random.default_rng(6), 4, ("a", "b"))
    ref = np.exp(pfsa.length_log_probs(400)).sum()
    assert finite_mass(pfsa) == pytest.approx(ref, abs=1e-9) and ref == pytest.approx(1.0, abs=1e-9)
    # a trap: from q1 the string never ends, so half the mass leaks to infinite strings
    leak = PFSA(["q0", "q1"], ["a"], [("q0", "a", "q1", 0.5), ("q1", "a", "q1", 1.0)], "q0", {"q0": 0.5})
    assert finite_mass(leak) == pytest.approx(0.5)
    # the Minsky RNN of the trap is a softmax model: log_zero gives END e^-1000 > 0 in exact
    # arithmetic, so the bounded-dynamics theorem calls it tight, while the automaton it
    # computes in floating point (extracted) is not
    rnn = encode_pfsa(leak)
    rep = tightness("heaviside", rnn.readout, end_id=1)
    assert rep.tight and rep.log_min_end < -900
    assert finite_mass(extract_pfsa(rnn)) == pytest.approx(0.5)


def test_tightness_reports():
    torch.manual_seed(0)
    out = nn.Linear(5, 3, dtype=torch.float64)
    rep = tightness("tanh", out, end_id=2)
    assert rep.bounded and rep.tight and math.isfinite(rep.log_min_end)
    # the bound is a true lower bound: p(END | h) at random corners of the box is above it
    h = torch.randint(0, 2, (1000, 5), dtype=torch.float64) * 2 - 1
    assert float(out(h).log_softmax(-1)[:, 2].min()) >= rep.log_min_end - 1e-12
    unb = tightness("relu", out, end_id=2)
    assert not unb.bounded and unb.tight is None
    grow = torch.arange(1, 50, dtype=torch.float64)[:, None] * torch.ones(1, 5, dtype=torch.float64)
    assert tightness("relu", out, end_id=2, hidden=grow).condition_holds is False


@pytest.mark.parametrize("k,m", [(2, 1), (2, 2), (3, 2), (2, 3)])
def test_naive_construction_generates_dyck(k, m):
    rnn = naive_dyck_generator(k, m)
    assert rnn.layer.hidden_size == dyck_state_count(k, m) * 2 * k + 1 == construction_sizes(k, m)["naive"]
    lang = DyckKM(k, m)
    report = exhaustive_generation_check(rnn, lang, 10, 1 / (4 * k))
    assert report.exact and report.max_disallowed < 1e-100
    # its probabilities are H.1's (no length window): exact generator of the distribution
    rng = np.random.default_rng(0)
    heav = naive_dyck_generator(k, m, activation="heaviside")
    for _ in range(20):
        s = lang.sample(rng)
        with torch.no_grad():
            logits, _ = heav(torch.tensor([[lang.bos_id, *s[:-1]]]))
        lp = logits[0].double().log_softmax(-1)[torch.arange(len(s)), torch.tensor(s)]
        np.testing.assert_allclose(lp.numpy(), lang.token_log_probs(s), atol=1e-12)


def test_minsky_rejects_bad_arguments():
    with pytest.raises(ValueError, match="activation must be"):
        encode_pfsa(worked_example(), activation="tanh")
    with pytest.raises(ValueError, match="log_zero must be negative"):
        encode_pfsa(worked_example(), log_zero=0.0)
    with pytest.raises(ValueError, match="unknown symbol 'z' in string 0 at position 1"):
        encode_pfsa(worked_example()).log_prob([["a", "z"]])
