"""The comparisons behind the callbacks, called as a notebook would: plain functions over a
layer's trace, no Trainer."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from memrnn.analysis.counting import (
    construction_counters,
    counter_correlations,
    probe_string,
    reference_counters,
)
from memrnn.analysis.hewitt import construction_trace, dyck_slots, hewitt_agreement
from memrnn.analysis.nnpda import pda_actions, pda_rules_table, stack_action_agreement
from memrnn.analysis.trace import layer_trace
from memrnn.constructions import PDAInitializedNNPDA, encode_dyck
from memrnn.languages import AnBn, DyckKM, DyckN
from memrnn.layers import NNPDA


def one_hot(vocab: int):
    return lambda ids: torch.nn.functional.one_hot(ids, vocab).to(torch.get_default_dtype())


def test_a_pda_initialized_nnpda_takes_the_pdas_actions():
    lang = DyckN(2)
    rng = np.random.default_rng(0)
    strings = lang.sample_many(12, rng, (3, 21))
    layer = PDAInitializedNNPDA(lang.input_vocab_size, language=lang)
    trace, mask = layer_trace(one_hot(lang.input_vocab_size), layer, strings, lang.bos_id)
    assert mask.shape == (12, max(len(s) for s in strings)) and trace["push"].shape[:2] == mask.shape
    metrics, pda_codes, layer_codes = stack_action_agreement(lang, strings, trace, mask)
    assert metrics["action_acc"] == metrics["push_acc"] == metrics["pop_acc"] == 1.0
    assert metrics["symbol_acc"] == 1.0
    assert torch.equal(pda_codes[mask], layer_codes[mask])
    # by hand: "( [ ] )" after BOS pushes twice, then pops twice
    ops, syms = pda_actions(lang, [[lang.symbols.index(c) for c in "([])"] + [lang.end_id]], 6)
    assert ops[0, :5].tolist() == [0, 1, 1, -1, -1]
    assert syms[0, 1] != syms[0, 2] and (syms[0, 3:] == -1).all()
    table = pda_rules_table(lang.pda())
    assert len(table["state"]) == len(lang.pda().delta) and "pop" in table["op"]


def test_stack_agreement_errors_name_what_is_missing():
    lang = AnBn()
    with pytest.raises(ValueError, match=r"traces \['push', 'pop', 'push_vector'\]"):
        stack_action_agreement(
            lang, [[0, 1, lang.end_id]], {"output": torch.zeros(1, 3, 1)}, torch.ones(1, 3)
        )


def test_hewitts_construction_agrees_with_itself():
    lang = DyckKM(3, 2)
    strings = lang.sample_many(16, np.random.default_rng(1), (5, 31))
    trace = construction_trace(lang, strings)
    mask = torch.arange(trace["h"].shape[1])[None] < torch.tensor([len(s) for s in strings])[:, None]
    metrics, corr = hewitt_agreement(lang, strings, trace, mask)
    assert metrics["slot_c_acc"] == 1.0 and metrics["match_c"] > 0.999
    assert all(metrics[f"saturation_{g}"] > 0.999 for g in "ifo")
    assert set(corr) == {"i", "f", "o", "c"} and corr["c"].shape[0] == corr["c"].shape[1]
    # the construction's layer and the generator's embedding traced directly give the same
    g = encode_dyck(3, 2, "lstm", "log", dtype=torch.float64)
    direct, _ = layer_trace(g.embedding, g.layer, strings, lang.bos_id)
    torch.testing.assert_close(direct["c"], trace["c"])
    # slots by hand: "( (" then ")" -> slot 1 holds bracket 0 throughout, slot 2 only after two opens
    slots = dyck_slots(lang, [[0, 0, 3, lang.end_id]], 4)
    assert slots[0, :, 0].tolist() == [0, 1, 1, 1] and slots[0, :, 1].tolist() == [0, 0, 1, 0]


def test_counter_correlations_find_the_counting_unit():
    lang = AnBn()
    string = probe_string(lang, 50)
    refs = reference_counters(lang, string)
    t = len(string)
    ab = refs["a-b"]
    units = {"state.h": np.stack([ab * 0.5 + 1.0, np.sin(np.arange(t)), np.zeros(t)], 1)}
    metrics, table, corr = counter_correlations(units, refs, threshold=0.99)
    assert metrics["units_a-b"] == 1.0 and metrics["best_abs_r_a-b"] == pytest.approx(1.0)
    assert table["unit"] == [0, 1, 2] and corr["state.h"].shape == (3, 1)
    compiled = construction_counters(lang, string)
    assert compiled.shape[0] == t and np.abs(compiled).max() >= 49


def test_layer_trace_gives_cpu_traces_of_bos_and_the_body_with_its_mask():
    layer = NNPDA(3, 2, 2)
    trace, mask = layer_trace(one_hot(3), layer, [[0, 1, 2], [1, 2]], bos_id=2)
    assert all(v.device.type == "cpu" and v.shape[:2] == (2, 3) for v in trace.values())
    assert mask.dtype == torch.bool
    # the trace is the layer's own on BOS + body (END dropped), padded positions zero
    x = one_hot(3)(torch.tensor([[2, 0, 1], [2, 1, 0]]))
    out, _ = layer(x, mask=torch.tensor([[True, True, True], [True, True, False]]))
    torch.testing.assert_close(trace["output"], out)
    assert mask.tolist() == [[True, True, True], [True, True, False]]
