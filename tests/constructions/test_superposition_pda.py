"""A deterministic PDA written into a superposition-stack RNN (sigmoid Elman controller driving
Joulin & Mikolov's stack): every short string, long random strings with the stack read step by
step against the PDA's, ignored symbols and clear errors."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from memrnn.constructions import encode_superposition_pda
from tests.constructions.test_pda import PDAS, long_strings


@pytest.mark.parametrize("name", list(PDAS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_every_short_string_is_classified_as_the_pda_does(name, dtype):
    pda = PDAS[name]()
    max_len = {3: 8, 4: 7}.get(len(pda.alphabet), 6)
    words = [list(w) for n in range(max_len + 1) for w in itertools.product(pda.alphabet, repeat=n)]
    # BOS, then max_len symbols: a window of max_len + 1 cells drops nothing, not even the
    # e^(−G)-sized leaks of soft pushes
    enc = encode_superposition_pda(pda, depth=max_len + 1, strict=True, dtype=dtype)
    want = [pda.accepts(w) for w in words]
    assert any(want) and not all(want)
    got = enc.accepts(words)
    bad = [w for w, g, v in zip(words, got, want, strict=True) if g != v]
    assert not bad, f"{len(bad)} disagreements, e.g. {bad[0]}"


@pytest.mark.parametrize("name", list(PDAS))
def test_long_strings_and_the_stack_top_at_every_step(name):
    """40 random strings of 500-1000 symbols in float32: the verdicts, and at every step the
    stack top the controller reads is within 1e-3 of the PDA's (one-hot, 0 when empty); a window
    one cell deeper than the PDA's deepest stack drops only leaks (below 1e-6 a step)."""
    pda = PDAS[name]()
    words = long_strings(pda, np.random.default_rng(3), 40, 1000)
    depth = max(max((len(s.stack) for s in pda.run(w)), default=0) for w in words) + 1
    enc = encode_superposition_pda(pda, depth=depth, dtype=torch.float32)
    want = [pda.accepts(w) for w in words]
    assert any(want) and not all(want)
    assert enc.accepts(words) == want
    ids, mask = enc.ids(words)
    with torch.no_grad():
        tr = enc.layer.trace(enc.inputs(ids), mask=mask)
    g = {z: i for i, z in enumerate(pda.stack_alphabet)}
    worst = 0.0
    for b, w in enumerate(words):
        steps = pda.run(w)  # up to the first missing transition (a dead run)
        if not steps:
            continue
        ideal = torch.zeros(len(steps), len(g))
        for t, s in enumerate(steps):
            if s.stack:
                ideal[t, g[s.stack[-1]]] = 1.0
        worst = max(worst, float((tr["reading"][b, 1 : len(steps) + 1] - ideal).abs().max()))
    assert worst < 1e-3
    assert float(tr["overflow"].max()) < 1e-6


def test_ignored_symbols_hold_state_and_stack():
    pda = PDAS["dyck1_appendix_e"]()
    enc = encode_superposition_pda(pda, vocabulary=[*pda.alphabet, "pad", "BOS"], ignore=["pad"])
    word = [a for a in pda.alphabet if a != "e"]  # e.g. "(", ")"
    plain = [*word, "e"] if "e" in pda.alphabet else word
    padded = [x for a in plain for x in ("pad", a)]
    assert enc.accepts([plain, padded]) == [pda.accepts(plain)] * 2
    assert any(u.startswith("hold ") for u in enc.units) and enc.units[0] == "start"


def test_bad_arguments_are_named():
    pda = PDAS["anbn"]()
    with pytest.raises(ValueError, match="must hold 'BOS'"):
        encode_superposition_pda(pda, vocabulary=pda.alphabet)
    with pytest.raises(ValueError, match="gain must be positive, got 0"):
        encode_superposition_pda(pda, gain=0)
    with pytest.raises(ValueError, match="vocabulary symbol 'x' is not in the automaton's alphabet"):
        encode_superposition_pda(pda, vocabulary=[*pda.alphabet, "x", "BOS"])
