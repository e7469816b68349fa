"""The one construction result: every encoder returns a :class:`Construction` with the same
attributes and methods, in float32 and float64, with batched variable-length strings, a
``state_dict`` round trip, plain-torch export where torch has the layer, and clear errors."""

from __future__ import annotations

import io
import math

import pytest
import torch

from memrnn.constructions import (
    Construction,
    TorchConstruction,
    encode_counter_machine,
    encode_dfa,
    encode_dyck,
    encode_pda,
    encode_pfsa,
    result,
)
from memrnn.languages import AnBn, DyckKM
from memrnn.languages.automata import DFA, PFSA


def parity_dfa() -> DFA:
    """Strings over {a, b} with an even number of a's."""
    return DFA(
        ["even", "odd"],
        ["a", "b"],
        [("even", "a", "odd"), ("odd", "a", "even"), ("even", "b", "even"), ("odd", "b", "odd")],
        "even",
        ["even"],
    )


def ab_pfsa() -> PFSA:
    """a*b with p(a) = 0.6 in the start state, then END."""
    return PFSA(["s", "t"], ["a", "b"], [("s", "a", "s", 0.6), ("s", "b", "t", 0.4)], "s", {"t": 1.0})


def build(name: str, dtype: torch.dtype) -> Construction:
    if name == "dfa":
        return encode_dfa(parity_dfa(), sensitivity=12.0, dtype=dtype)
    if name == "pda":
        return encode_pda(AnBn().pda(), dtype=dtype)
    if name == "pfsa":
        return encode_pfsa(ab_pfsa(), dtype=dtype)
    if name == "counter":
        return encode_counter_machine("anbn", "relu", dtype=dtype)
    return encode_dyck(2, 2, "lstm", "log", dtype=dtype)


def truth(c: Construction, word: list[str]) -> bool:
    """Membership by the source automaton's own symbolic runner (or the Dyck language's)."""
    src = c.source
    if isinstance(src, PFSA):
        return src.log_prob(word) > -math.inf
    if isinstance(src, DyckKM):
        return src.accepts([src.symbols.index(a) for a in word] + [src.end_id])
    return src.accepts(word)


WORDS = {
    "dfa": [[], ["a"], ["a", "b", "a"], ["b", "b"], ["a", "a", "a"]],
    "pda": [
        ["END"],
        ["a", "b", "END"],
        ["a", "a", "b", "b", "END"],
        ["a", "b", "b", "END"],
        ["b", "a", "END"],
    ],
    "pfsa": [["b"], ["a", "b"], ["a", "a", "a", "b"], ["a"], ["b", "a"]],
    "counter": [[], ["a", "b"], ["a", "a", "b", "b"], ["a", "b", "b"], ["b", "a"]],
    "dyck": [[], ["(0", "0)"], ["(1", "(0", "0)", "1)"], ["(0", "1)"], ["(0", "(0", "(0", "0)", "0)", "0)"]],
}
NAMES = list(WORDS)
TASK = {"dfa": "acceptor", "pda": "acceptor", "counter": "acceptor", "pfsa": "generator", "dyck": "generator"}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("name", NAMES)
def test_every_encoder_returns_one_construction(name, dtype):
    c = build(name, dtype)
    assert isinstance(c, Construction) and c.task == TASK[name]
    assert len(c.units) == c.layer.output_size and all(isinstance(u, str) for u in c.units)
    assert c.source is not None and len(c.vocabulary) == c.embedding.num_embeddings
    words = WORDS[name]
    want = [truth(c, w) for w in words]
    assert c.accepts(words) == want and any(want) and not all(want)
    ids, mask = c.ids(words)
    lead = int(c.bos is not None)
    assert ids.shape == (len(words), lead + max(len(w) for w in words))
    assert mask.sum(1).tolist() == [lead + len(w) for w in words]
    with torch.no_grad():
        out, _ = c(ids, mask=mask)
    width = () if c.task == "acceptor" else (len(c.outputs),)
    assert out.shape == (*ids.shape, *width) and out.dtype == dtype
    if c.task == "generator":
        assert c.outputs[-1] == "END" and c.vocabulary == (*c.outputs, "BOS")
        lp = c.log_prob(words)
        assert lp.shape == (len(words),) and lp.dtype == torch.float64
        # every step is <= 0, so a rejected word (one step below min_log_prob) sums below it too
        assert all((v < 0) if ok else (v < c.min_log_prob) for v, ok in zip(lp.tolist(), want, strict=True))
    else:
        with pytest.raises(ValueError, match="log_prob needs a generator"):
            c.log_prob(words)


@pytest.mark.parametrize("name", NAMES)
def test_state_dict_round_trip(name):
    c = build(name, torch.float64)
    buf = io.BytesIO()
    torch.save(c.state_dict(), buf)
    fresh = build(name, torch.float64)
    with torch.no_grad():
        for p in fresh.parameters():
            if p.requires_grad:  # the frozen one-hot embedding stays one-hot
                p.zero_()
    ids, mask = c.ids(WORDS[name])
    with torch.no_grad():
        assert not torch.equal(fresh(ids, mask=mask)[0], c(ids, mask=mask)[0])
    buf.seek(0)
    fresh.load_state_dict(torch.load(buf))
    with torch.no_grad():
        torch.testing.assert_close(fresh(ids, mask=mask)[0], c(ids, mask=mask)[0], atol=0, rtol=0)


@pytest.mark.parametrize("name", NAMES)
def test_to_torch_or_a_clear_error(name):
    c = build(name, torch.float64)
    if name in ("dfa", "pda"):
        layer = type(c.layer).__name__
        with pytest.raises(ValueError, match=f"plain torch has no counterpart of {layer}"):
            c.to_torch()
        return
    if name == "pfsa":  # Heaviside has no torch counterpart; the sigmoid variant has
        with pytest.raises(ValueError, match="activation 'heaviside'"):
            c.to_torch()
        c = encode_pfsa(ab_pfsa(), activation="sigmoid", dtype=torch.float64)
    plain = c.to_torch()
    assert isinstance(plain, TorchConstruction)
    ids, mask = c.ids(WORDS[name])
    with torch.no_grad():
        want, _ = c(ids)
        got = plain(ids)
    torch.testing.assert_close(got[mask], want[mask], atol=1e-9, rtol=0)


@pytest.mark.parametrize("name", NAMES)
def test_bad_input_is_named(name):
    c = build(name, torch.float32)
    with pytest.raises(ValueError, match="unknown symbol 'zz' in string 1 at position 0"):
        c.ids([WORDS[name][1], ["zz"]])
    with pytest.raises(ValueError, match=f"unknown token id {len(c.vocabulary)} at \\[0, 1\\]"):
        c(torch.tensor([[0, len(c.vocabulary)]]))
    with pytest.raises(ValueError, match="single string"):
        c.ids("ab")


@pytest.mark.parametrize("name", NAMES)
def test_ids_given_where_words_are_expected_are_named(name):
    """``Construction.accepts(tensor)`` failed with "Boolean value of Tensor ... is ambiguous"."""
    c = build(name, torch.float32)
    ids, _ = c.ids(WORDS[name])
    methods = ["accepts", "final_state", "ids"] + (["log_prob"] if c.task == "generator" else [])
    for method in methods:
        for bad in (ids, ids.numpy()):
            with pytest.raises(
                ValueError,
                match=rf"Construction\.\w+ takes words, a list of symbol sequences over the vocabulary .*"
                rf"got a {type(bad).__name__} of shape \[{ids.shape[0]}, {ids.shape[1]}\] .*"
                r"run the construction: out, _ = construction\(ids, mask=mask\)",
            ):
                getattr(c, method)(bad)
    assert len(c.accepts(WORDS[name])) == len(WORDS[name])  # words, as documented
    with pytest.raises(ValueError, match=r"single string 'ab' \(a list of one word: \['ab'\]\)"):
        c.accepts("ab")
    assert c.accepts([]) == []


def test_generator_needs_bos_and_end():
    c = encode_pfsa(ab_pfsa())
    with pytest.raises(ValueError, match="a generator reads"):
        Construction(
            c.layer, c.readout, vocabulary=("a", "b", "BOS"), source=None, units=c.units, task="generator"
        )
    with pytest.raises(ValueError, match="unit names for a layer with"):
        Construction(c.layer, c.readout, vocabulary=c.vocabulary, source=None, units=["x"], task="acceptor")
    with pytest.raises(ValueError, match="task must be"):
        Construction(c.layer, c.readout, vocabulary=c.vocabulary, source=None, units=c.units, task="parser")


def test_long_strings_run_in_chunks(monkeypatch):
    """Acceptance after 10^4 symbols (more than one time chunk), and chunks of 7 steps give what
    one pass gives: the state is carried across chunks."""
    c = encode_counter_machine("anbn", "relu", dtype=torch.float64)
    n = 5000
    assert c.accepts([["a"] * n + ["b"] * n, ["a"] * n + ["b"] * (n - 1)]) == [True, False]
    g = encode_dyck(2, 2, "lstm", "log", dtype=torch.float64)
    word = ["(0", "(1", "1)", "0)"] * 2500
    assert g.accepts([word, [*word, "0)"]]) == [True, False]
    words = {"counter": [["a"] * 20 + ["b"] * 20, ["a"] * 9 + ["b"] * 10, ["a", "b"]],
             "dyck": [word[:40], [*word[:38], "(0"], ["(0", "0)"]]}  # fmt: skip
    once = {k: build(k, torch.float64) for k in words}
    whole = {
        k: (once[k].accepts(w), once["dyck"].log_prob(w) if k == "dyck" else None) for k, w in words.items()
    }
    monkeypatch.setattr(result, "CHUNK", 7)
    for k, w in words.items():
        assert once[k].accepts(w) == whole[k][0]
    torch.testing.assert_close(once["dyck"].log_prob(words["dyck"]), whole["dyck"][1], atol=1e-12, rtol=0)
