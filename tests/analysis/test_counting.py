"""counting_sweep finds the first n where a^n b^n is rejected or a ±1 neighbour accepted."""

from __future__ import annotations

import functools

import pytest
import torch

from memrnn.analysis import counting_sweep, first_counting_failure, strings_acceptor
from memrnn.languages import AnBn, AnBnCn
from memrnn.layers import LSTMLayer
from memrnn.lit import SequenceModule


def oracle_model(language, rule):
    """A SequenceModule whose acceptor logit at every position is ``rule(counts of the prefix)``."""
    model = SequenceModule(functools.partial(LSTMLayer, hidden_size=2), language.input_vocab_size,
                           language.num_symbols, objectives={"acceptor_end": 1.0})  # fmt: skip

    def heads_out(input_ids, mask=None):
        ids = input_ids[:, 1:]
        logits = torch.full(input_ids.shape, -1.0)
        for b in range(ids.shape[0]):
            for t in range(input_ids.shape[1]):
                body = ids[b, :t].tolist()
                counts = [body.count(j) for j in range(language.blocks)]
                logits[b, t] = 1.0 if rule(counts) else -1.0
        return {"acceptor": logits}

    model.heads_out = heads_out
    return model


def test_a_perfect_counter_up_to_7():
    lang = AnBn()
    sweep = counting_sweep(
        model_accepts(oracle_model(lang, lambda c: c[0] == c[1] >= 1 and c[0] <= 7), lang), lang, 12
    )
    assert sweep.first_failure == 8
    assert sweep.positive_ok == [n <= 7 for n in range(1, 13)] and all(k == 4 for k in sweep.negatives_ok)


def test_a_sloppy_comparison_fails_on_neighbours_first():
    lang = AnBnCn()
    sloppy = lambda c: c[0] >= 1 and abs(c[0] - c[1]) <= (1 if c[0] >= 5 else 0) and c[1] == c[2]  # noqa: E731
    sweep = counting_sweep(model_accepts(oracle_model(lang, sloppy), lang), lang, 6)
    # n = 4 already fails: its neighbour a^5 b^4 c^4 has c_a = 5, where the rule is sloppy
    assert sweep.first_failure == 4 and all(sweep.positive_ok)
    assert sweep.negatives_total == 6 and sweep.negatives_ok == [6, 6, 6, 5, 5, 4]


def test_needs_an_acceptor_head():
    lang = AnBn()
    gen = SequenceModule(functools.partial(LSTMLayer, hidden_size=2), 4, 3)
    with pytest.raises(ValueError, match="acceptor objective"):
        counting_sweep(model_accepts(gen, lang), lang, 5)


def model_accepts(model, language):
    return strings_acceptor(lambda w: model.accepts(w, language.bos_id), language)


def test_first_failure_far_out_matches_the_rule():
    """The grid-and-refine search finds the exact first failing n among 10^6 without visiting them all."""
    lang = AnBn()
    for limit in (3, 17, 999, 123_457):
        seen = []

        def accepts(counts, limit=limit, seen=seen):
            seen.extend(counts)
            return [c[0] == c[1] and c[0] <= limit for c in counts]

        assert first_counting_failure(accepts, lang, 1_000_000) == limit + 1
        assert len(seen) < 10_000
    assert first_counting_failure(lambda cs: [c[0] == c[1] for c in cs], lang, 1_000_000) is None
    with pytest.raises(ValueError, match="verdicts"):
        first_counting_failure(lambda cs: [True], lang, 100)
