"""PDA -> nnPDA (Stogin et al. 2020 Definition B.9, appendix E) and back."""

import functools

import numpy as np
import pytest
import torch

from memrnn.analysis.nnpda import deviation_from_ideal, pda_walks
from memrnn.constructions import encode_pda, extract_pda, ideal_pda_run
from memrnn.constructions.pda import PDAInitializedNNPDA
from memrnn.languages import DyckN, Latch, dyck1_pda
from memrnn.languages.automata import EMPTY
from memrnn.languages.counting import AnBn
from memrnn.languages.json_lite import JsonLite
from memrnn.languages.reversal import Palindrome
from memrnn.layers import StackOverflowError

PDAS = {
    "dyck1_appendix_e": dyck1_pda,
    "dyck2": lambda: DyckN(2).pda(),
    "anbn": lambda: AnBn().pda(),
    "palindrome": lambda: Palindrome().pda(),
}


@functools.cache
def words_of(name, max_len):
    return all_words(PDAS[name](), max_len)


def all_words(pda, max_len):
    """Every string up to ``max_len`` as padded ids, lengths and the PDA's verdicts (one
    depth-first pass over the prefix tree, so each prefix is run once)."""
    m = len(pda.alphabet)
    words, labels = [], []
    todo = [((), pda.start, ())]
    while todo:
        word, q, stack = todo.pop()
        words.append(word)
        labels.append(q in pda.accept if q is not None else False)
        if len(word) == max_len:
            continue
        for k in range(m):
            a = pda.alphabet[k]
            nxt = pda.delta.get((q, a, stack[-1] if stack else EMPTY)) if q is not None else None
            if nxt is None:
                todo.append(((*word, k), None, stack))
                continue
            q2, op = nxt
            s2 = stack[:-1] if op[0] == "pop" else (*stack, op[1]) if op[0] == "push" else stack
            todo.append(((*word, k), q2, s2))
    ids = torch.zeros(len(words), max_len, dtype=torch.long)
    lengths = torch.tensor([len(w) for w in words])
    for i, w in enumerate(words):
        ids[i, : len(w)] = torch.tensor(w, dtype=torch.long)
    return ids, lengths, torch.tensor(labels)


def net_accepts(enc, ids, lengths):
    mask = torch.arange(ids.shape[1])[None] < lengths[:, None]
    with torch.no_grad():
        _, state = enc.layer(enc.inputs(ids), mask=mask)
    q = state.q
    return (q.amax(-1) > 0.5) & (enc.readout.accept[q.argmax(-1)] > 0.5)


def test_appendix_e_dyck1_accepts_and_rejects_the_papers_strings():
    enc = encode_pda(dyck1_pda(), sensitivity=10.0, depth=8)
    # appendix E's tensors, entry by entry (index order i, j, k, l; l = 0 non-empty, 1 empty)
    w = enc.layer.weight_q.detach()
    eye, to_reject = torch.eye(2, dtype=w.dtype), torch.tensor([[0.0, 0.0], [1.0, 1.0]], dtype=w.dtype)
    for k, l, want in [
        (0, 0, eye),
        (0, 1, eye),
        (1, 0, eye),
        (1, 1, to_reject),
        (2, 0, to_reject),
        (2, 1, eye),
    ]:
        torch.testing.assert_close(w[:, :, k, l], want, atol=0, rtol=0)
    assert (enc.layer.weight_push[:, 0] == 1).all() and (enc.layer.weight_push[:, 1:] == 0).all()
    assert (enc.layer.weight_pop[:, 1] == 1).all() and (enc.layer.weight_pop[:, [0, 2]] == 0).all()
    words = ["lre", "llrre", "llrlrre", "re", "llre", "llrrre"]
    assert enc.accepts([list(s) for s in words]) == [True, True, True, False, False, False]
    q = enc.final_state([list(s) for s in words]).q
    assert (q.amax(-1) > 0.99).all(), "final states are within 0.01 of one-hot at H = 10"


@pytest.mark.parametrize("name", list(PDAS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_encoded_pda_agrees_with_the_runner_on_every_short_string(name, dtype):
    pda = PDAS[name]()
    max_len = 10 if len(pda.alphabet) <= 3 else 8
    ids, lengths, labels = words_of(name, max_len)
    enc = encode_pda(pda, sensitivity=10.0, depth=max_len, dtype=dtype, strict=True)
    got = net_accepts(enc, ids, lengths)
    assert labels.any() and (~labels).any()
    bad = (got != labels).nonzero().flatten()
    assert len(bad) == 0, (
        f"{len(bad)} disagreements, e.g. {[pda.alphabet[i] for i in ids[bad[0], : lengths[bad[0]]]]}"
    )


def long_strings(pda, rng, count, max_len, mountains=1 / 3):
    """Random walks (steered to close at the end) and, a share ``mountains`` of them, strings
    that push for half their length then pop (depth ~ length / 2), some with rare noise."""
    lengths = [int(x) for x in rng.integers(max_len // 2, max_len + 1, size=count)]
    deep = max(2, round(count * mountains))
    end = "END" if "END" in pda.alphabet else "e"
    return (
        pda_walks(pda, rng, lengths[: count - deep], steer=True, noise=0, end=end)
        + pda_walks(pda, rng, lengths[count - deep : count - deep // 2], mountain=True, noise=0, end=end)
        + pda_walks(
            pda, rng, lengths[count - deep // 2 :], mountain=True, steer=True, noise=1 / max_len, end=end
        )
    )


def check_long(name, count, max_len, dtype, sensitivity=10.0, mountains=1 / 3, chunk=100):
    """The encoded PDA classifies every string as the runner does and stays within 0.01 of the
    ideal PDA at every step; strings run in chunks of similar stack depth (the window is sized
    per chunk, so shallow walks do not pay for deep mountains)."""
    pda = PDAS[name]()
    rng = np.random.default_rng(7)
    words = long_strings(pda, rng, count, max_len, mountains)
    depth = [max((len(s.stack) for s in pda.run(w)), default=0) for w in words]
    want = torch.tensor([pda.accepts(w) for w in words])
    assert want.any() and (~want).any()
    order = sorted(range(count), key=depth.__getitem__)
    for start in range(0, count, chunk):
        rows = order[start : start + chunk]
        enc = encode_pda(pda, sensitivity=sensitivity, depth=depth[rows[-1]] + 1, dtype=dtype)
        ids, mask = enc.ids([words[i] for i in rows])
        dev = deviation_from_ideal(enc.layer, ids, mask)
        assert not dev.overflow.any()
        got = (dev.q.amax(-1) > 0.5) & (enc.readout.accept[dev.q.argmax(-1)] > 0.5)
        bad = int((got != want[rows]).sum())
        assert bad == 0, f"{bad} of {len(rows)} strings disagree"
        # Theorem 3.7 at H = 10: every state and every stack cell within 0.01 of the ideal, at every step
        assert dev.q_err.max() < 0.01 and dev.stack_err.max() < 0.01


@pytest.mark.parametrize("name", list(PDAS))
def test_encoded_pda_agrees_on_long_random_strings(name):
    check_long(name, 60, 600, torch.float32)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(PDAS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_encoded_pda_agrees_on_1000_random_strings_up_to_length_10_000(name, dtype):
    check_long(name, 1000, 10_000, dtype, mountains=0.05)


@pytest.mark.parametrize("name", [*PDAS, "json_lite"])
def test_extract_of_encode_is_the_same_pda(name):
    pda = JsonLite().pda() if name == "json_lite" else PDAS[name]()
    enc = encode_pda(pda)
    back = extract_pda(
        enc.layer,
        alphabet=enc.vocabulary,
        stack_alphabet=pda.stack_alphabet,
        states=pda.states,
        accept=pda.accept,
    )
    assert back == pda, back.diff(pda)


def test_extraction_survives_noise_and_the_reachable_method_finds_the_live_part():
    pda = DyckN(2).pda()
    enc = encode_pda(pda, sensitivity=10.0)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in (enc.layer.weight_q, enc.layer.weight_push, enc.layer.weight_pop, enc.layer.weight_c):
            p.add_(0.1 * (2 * torch.rand(p.shape, generator=gen, dtype=p.dtype) - 1))
    basis = extract_pda(
        enc.layer,
        alphabet=enc.vocabulary,
        stack_alphabet=pda.stack_alphabet,
        states=pda.states,
        accept=pda.accept,
    )
    assert basis == pda, basis.diff(pda)
    reach = extract_pda(
        enc.layer,
        alphabet=enc.vocabulary,
        stack_alphabet=pda.stack_alphabet,
        method="reachable",
        accept=lambda code: bool(code[pda.q_index["acc"]] > 0.5),
    )
    assert len(reach.states) == 2
    for w in (["(", ")", "END"], ["(", "[", "]", ")", "END"], ["(", "]", "END"], ["END"], [")"]):
        assert reach.accepts(w) == pda.accepts(w)


def test_vocabulary_with_an_ignored_bos_symbol():
    lang = AnBn()
    enc = encode_pda(lang.pda(), vocabulary=[*lang.symbols, "BOS"], ignore=["BOS"])
    assert enc.accepts([["BOS", "a", "b", "END"], ["BOS", "a", "END"], ["BOS", "a", "BOS", "b", "END"]]) == [
        True,
        False,
        True,
    ]
    with pytest.raises(ValueError, match="'c' is not in the automaton's alphabet"):
        encode_pda(lang.pda(), vocabulary=[*lang.symbols, "c"])
    with pytest.raises(ValueError, match="unknown symbol 'z'"):
        enc.accepts([["z"]])


def test_ideal_run_is_the_pda():
    pda = DyckN(2).pda()
    enc = encode_pda(pda, depth=6)
    word = ["(", "[", "]", "(", ")", ")", "END"]
    ids, mask = enc.ids([word])
    run = ideal_pda_run(enc.layer, ids, mask)
    steps = pda.run(word)
    for t, s in enumerate(steps, start=1):
        assert pda.states[int(run.q[0, t].argmax())] == s.next_state
        depth = int(run.stack[0, t].sum())
        assert depth == len(s.stack)
        tops = [pda.stack_alphabet[int(run.stack[0, t, i].argmax())] for i in range(depth)]
        assert tops == list(reversed(s.stack))
    assert run.push[0].tolist() == [1, 1, 0, 1, 0, 0, 0]


def test_strict_overflow_names_the_step_and_row():
    enc = encode_pda(AnBn().pda(), depth=3, strict=True)
    ids, mask = enc.ids([["a", "b", "END"], ["a", "a", "a", "a", "b"]])
    with pytest.raises(StackOverflowError, match=r"step t=3 \(0-based\), batch row 1.*depth=3"):
        enc.layer(enc.inputs(ids), mask=mask)
    with pytest.raises(StackOverflowError, match="batch row 1"):
        enc.layer.trace(enc.inputs(ids), mask=mask)
    enc.layer.strict = False
    tr = enc.layer.trace(enc.inputs(ids), mask=mask)
    assert tr["overflow"][1].tolist() == [0, 0, 0, 1, 0] and tr["overflow"][0].sum() == 0
    assert tr["size"][1].tolist() == [1, 2, 3, 3, 2]


def test_one_hot_input_is_checked():
    enc = encode_pda(AnBn().pda())
    x = enc.inputs(torch.tensor([[0, 1]]))
    x[0, 1, 0] = 0.5
    with pytest.raises(ValueError, match="row 0, step 1 is not one-hot"):
        enc.layer(x)


def test_a_language_given_for_a_pda_is_told_to_pass_its_pda():
    """``encode_pda(DyckN(2))`` failed with "no attribute 'alphabet'"."""
    with pytest.raises(
        ValueError,
        match=r"encode_pda takes a deterministic PDA \(memrnn.languages.DPDA\), got DyckN .*"
        r"encode_pda\(DyckN\(n=2, p=0.5, q=0.25\).pda\(\)\)",
    ):
        encode_pda(DyckN(2))
    with pytest.raises(ValueError, match=r"got Latch .*Latch has no pda\(\) \(these languages do: DyckN"):
        encode_pda(Latch())
    with pytest.raises(ValueError, match=r"got str 'dyck'"):
        encode_pda("dyck")
    with pytest.raises(ValueError, match=r"PDAInitializedNNPDA needs a language with a pda\(\) .*got Latch"):
        PDAInitializedNNPDA(3, Latch())
    assert encode_pda(DyckN(2).pda()).accepts([["(", ")", "END"]]) == [True]  # the named conversion works


def test_the_ideal_run_and_extraction_take_the_construction_or_its_layer():
    enc = encode_pda(DyckN(2).pda(), depth=4)
    ids, mask = enc.ids([["(", "[", "]", ")", "END"]])
    torch.testing.assert_close(ideal_pda_run(enc, ids, mask).q, ideal_pda_run(enc.layer, ids, mask).q)
    pda = extract_pda(enc, alphabet=enc.vocabulary, stack_alphabet=enc.source.stack_alphabet)
    assert len(pda.states) == len(enc.source.states) and pda.alphabet == enc.source.alphabet
    with pytest.raises(ValueError, match=r"ideal_pda_run reads an nnPDA .*got Linear"):
        ideal_pda_run(torch.nn.Linear(2, 2), ids)
    with pytest.raises(
        ValueError, match=r"ids must be an integer tensor \[batch, time\].*torch.float32 \(1, 5\)"
    ):
        ideal_pda_run(enc, ids.float())
    with pytest.raises(ValueError, match=r"mask must be a tensor \[batch, time\] = \(1, 5\), got \(5,\)"):
        ideal_pda_run(enc, ids, mask[0])
