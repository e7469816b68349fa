"""The authors' initialisations (:mod:`memrnn.lit.init`, ``SequenceModule(init=…)``), each against a
transcription of its code's rule: which parameters are drawn from which ``U(−a, a)`` (the largest
draw within ``a`` and above ``0.75 a``: a bound too small or too large fails) and which are 0.

DuSell & Chiang: ``torch_extras/layer.py`` ``xavier_uniform_`` (``a = √3 · gain · √(2 / (fan_in +
fan_out))``) for every ``Layer``, biases 0, ``U(−0.1, 0.1)`` for the rest (``model_util.py``);
FLaRe: rau's ``smart_init`` + ``uniform_fallback(0.1)`` (``model_interface.py``); Hewitt et al.:
``lm.py``'s readout ``U(−√h, √h)``, ``b = 0``."""

from __future__ import annotations

import functools
import math

import pytest
import torch

from memrnn.layers import LSTMLayer, StackRNN
from memrnn.lit import SequenceModule
from memrnn.lit.init import dusell_init_, flare_init_, gain, hewitt_init_, memory_blocks, xavier_bound


def their_xavier_bound(fan_in: int, fan_out: int, gain: float) -> float:
    """``torch_extras.layer.xavier_uniform_``'s bound, transcribed."""
    std = gain * math.sqrt(2.0 / (fan_in + fan_out))
    return math.sqrt(3.0) * std


def drawn_within(t: torch.Tensor, a: float) -> None:
    """``t`` looks drawn from ``U(−a, a)``: every value within ``a``, the largest above ``0.75 a``
    (for the sizes here a draw below that has probability < 1e-4)."""
    top = float(t.detach().abs().max())
    assert top <= a * (1 + 1e-6), f"{top} > {a}"
    assert top >= 0.75 * a, f"{top} < 0.75 * {a}: drawn with a smaller bound"


def module(layer, vocab=6, symbols=5, **kw) -> SequenceModule:
    torch.manual_seed(0)
    return SequenceModule(layer, vocab_size=vocab, num_symbols=symbols, **kw)


def test_xavier_bound_is_theirs():
    for fan_in, fan_out, g in [(20, 3, 1.0), (20, 20, 5 / 3), (64, 1, 1.0)]:
        assert xavier_bound(fan_in, fan_out, g) == pytest.approx(their_xavier_bound(fan_in, fan_out, g))
    # their Layer.get_gain: softmax and identity are linear; sigmoid 1, tanh 5/3
    assert [gain(a) for a in ("softmax", "identity", "sigmoid", "tanh")] == [1.0, 1.0, 1.0, 5 / 3]
    with pytest.raises(ValueError, match="no Xavier gain for activation 'gelu'"):
        gain("gelu")


@pytest.mark.parametrize(("memory", "value_gain"), [("superposition", 1.0), ("stratification", 5 / 3)])
def test_dusell_init_on_their_stack_rnns(memory, value_gain):
    """Joulin & Mikolov's stack (actions ``Layer(h, 3, Softmax)``, push ``Layer(h, m, Sigmoid)``)
    and Grefenstette et al.'s (strengths ``Layer(h, 2, Sigmoid)``, value ``Layer(h, m, Tanh)``):
    each block of memrnn's one head drawn as its own Layer; the readout ``OutputLayerWrapper``'s
    Layer; zero biases; the LSTM controller ``U(−0.1, 0.1)``; the one-hot input untouched."""
    hidden, width = 20, 20
    model = module(functools.partial(StackRNN, hidden_size=hidden, memory=memory, width=width, depth=8),
                   embedding="one_hot", init="dusell")  # fmt: skip
    head = model.layer.memory.head
    k = len(model.layer.memory.actions)
    drawn_within(head.weight[:k], their_xavier_bound(hidden, k, 1.0))
    drawn_within(head.weight[k:], their_xavier_bound(hidden, width, value_gain))
    drawn_within(model.readout.weight, their_xavier_bound(hidden, 5, 1.0))
    assert (head.bias == 0).all() and (model.readout.bias == 0).all()
    for p in model.layer.controller.parameters():
        drawn_within(p, 0.1)
    assert torch.equal(model.embedding.weight, torch.eye(6))  # frozen one-hot: not drawn


def test_dusell_init_leaves_the_nondeterministic_stacks_heads_to_the_uniform_fallback():
    """Their NS-RNN's ``operation_layer`` and the vector stack's ``pushed_vector_layer`` are plain
    ``torch.nn.Linear`` (not ``Layer``\\ s): ``U(−s, s)``, biases too; the learned bottom too."""
    model = module(
        functools.partial(StackRNN, hidden_size=16, memory="vector_nondeterministic", depth=8,
                          memory_args={"states": 2, "symbols": 3, "vector_size": 5}),
        embedding="one_hot", init="dusell", init_scale=0.2,
    )  # fmt: skip
    memory = model.layer.memory
    assert memory_blocks(memory) == []
    for p in (memory.head.weight, memory.head.bias, memory.bottom):
        drawn_within(p, 0.2)
    drawn_within(model.readout.weight, their_xavier_bound(16, 5, 1.0))


def test_flare_init_is_smart_init_with_a_uniform_fallback():
    """FLaRe's LSTM recognizer with both auxiliary heads: the recognition and next-symbol heads
    (rau ``Layer``\\ s) Xavier with zero biases; the embedding, the tied language-modelling head,
    the LSTM's weights and its one bias (``bias_hh`` 0: rau's ``use_extra_bias=False``) and the
    learned initial state ``U(−s, s)``."""
    hidden, s = 24, 0.05
    model = module(
        functools.partial(LSTMLayer, hidden_size=hidden, num_layers=2, learned_initial_state=True),
        vocab=6, symbols=6, embedding_dim=hidden, objectives={"acceptor_end": 1, "generator": 1, "next_set": 1},
        tie_embeddings=True, init="flare", init_scale=s,
    )  # fmt: skip
    drawn_within(model.heads["acceptor"].weight, their_xavier_bound(hidden, 1, 1.0))
    drawn_within(model.heads["next_set"].weight, their_xavier_bound(hidden, 6, 1.0))
    assert (model.heads["acceptor"].bias == 0).all() and (model.heads["next_set"].bias == 0).all()
    drawn_within(model.embedding.weight, s)
    assert model.heads["generator"].weight is model.embedding.weight
    rnn = model.layer.rnn
    for layer in range(2):
        for name in ("weight_ih", "weight_hh", "bias_ih"):
            drawn_within(getattr(rnn, f"{name}_l{layer}"), s)
        assert (getattr(rnn, f"bias_hh_l{layer}") == 0).all()
    drawn_within(model.layer.h0_input, s)
    # with rau's one bias (extra_bias=False) there is no bias_hh parameter to zero: the same draws
    one = module(
        functools.partial(LSTMLayer, hidden_size=hidden, num_layers=2, learned_initial_state=True, extra_bias=False),
        vocab=6, symbols=6, embedding_dim=hidden, objectives={"acceptor_end": 1}, init="flare", init_scale=s,
    )  # fmt: skip
    assert not [n for n, _ in one.named_parameters() if "bias_hh" in n]
    drawn_within(one.layer.rnn.bias_ih_l1, s)


def test_hewitt_init_is_their_readout_and_torchs_elsewhere():
    """``lm.TraditionalLanguageModel``: ``readout_W ~ U(−√h, √h)`` (``upper_init = sqrt(hidden_size)``),
    ``readout_b = 0``; every other parameter as torch draws it (the same as ``init="torch"``)."""
    hidden = 9
    hewitt = module(functools.partial(LSTMLayer, hidden_size=hidden), init="hewitt")
    torch_ = module(functools.partial(LSTMLayer, hidden_size=hidden))
    drawn_within(hewitt.readout.weight, math.sqrt(hidden))
    assert (hewitt.readout.bias == 0).all()
    theirs = dict(torch_.named_parameters())
    for name, p in hewitt.named_parameters():
        if not name.startswith("heads."):
            assert torch.equal(p, theirs[name]), name
    linear = torch.nn.Linear(16, 3)
    hewitt_init_(linear, generator=torch.Generator().manual_seed(0))
    drawn_within(linear.weight, 4.0)


def test_an_lstm_forget_bias_is_kept_and_the_functions_take_a_generator():
    layer = LSTMLayer(4, 6, forget_bias=1.0)
    dusell_init_(layer, 0.1)
    b = layer.rnn.bias_ih_l0.detach()
    assert (b[6:12] - 1).abs().max() <= 0.1 and b[6:12].min() > 0.8  # the forget gate's block: 1 ± 0.1
    assert b[:6].abs().max() <= 0.1
    a, b2 = LSTMLayer(4, 6), LSTMLayer(4, 6)
    flare_init_(a, 0.1, generator=torch.Generator().manual_seed(3))
    flare_init_(b2, 0.1, generator=torch.Generator().manual_seed(3))
    for p, q in zip(a.parameters(), b2.parameters(), strict=True):
        assert torch.equal(p, q)


def test_bad_schemes_and_scales_are_named():
    factory = functools.partial(LSTMLayer, hidden_size=4)
    with pytest.raises(
        ValueError, match="init must be one of 'torch', 'dusell', 'hewitt', 'flare', 'haiku', got 'xavier'"
    ):
        module(factory, init="xavier")
    with pytest.raises(ValueError, match=r"init='hewitt' has no scale .* got 0.1"):
        module(factory, init="hewitt", init_scale=0.1)
    with pytest.raises(ValueError, match=r"init='torch' has no scale"):
        module(factory, init_scale=0.1)
    with pytest.raises(ValueError, match=r"init_scale must be a positive number, got -0.1"):
        module(factory, init="dusell", init_scale=-0.1)
    with pytest.raises(ValueError, match=r"init='hewitt' draws the generator's readout .* no generator head"):
        module(factory, init="hewitt", objectives={"acceptor_end": 1.0})
    with pytest.raises(
        ValueError, match=r"init='hewitt' draws the generator's readout .* tied to the embedding"
    ):
        module(factory, init="hewitt", embedding_dim=4, tie_embeddings=True)


#: the stddev of a standard normal cut at ±2 (haiku's TruncatedNormal does not rescale it)
TRUNCATED_STD = 0.8796


def haiku_drawn(t: torch.Tensor, fan_in: int) -> None:
    """``t`` looks drawn from haiku's ``TruncatedNormal(1/√fan_in)``: every value within 2
    stddevs, the sample's stddev that of the cut normal (within 6%: the tensors here hold >= 2,000
    values)."""
    std = 1 / math.sqrt(fan_in)
    assert float(t.abs().max()) <= 2 * std * (1 + 1e-6)
    assert float(t.std()) == pytest.approx(TRUNCATED_STD * std, rel=0.06)


def test_haiku_init_is_delétang_et_als_haiku_defaults():
    """``models/*.py`` at haiku's defaults: ``hk.Linear`` weights truncated normal (1/√fan_in), biases
    0; ``hk.LSTM`` one linear map over ``[x ; h]`` (fan-in input + hidden) and the forget gate's +1;
    ``hk.VanillaRNN``'s two maps by their own fan-ins; the Tape-RNN's write MLP and the heads too."""
    lstm = module(
        functools.partial(LSTMLayer, hidden_size=64, forget_bias=1.0), init="haiku", embedding="one_hot"
    )
    rnn = lstm.layer.rnn
    for w in (rnn.weight_ih_l0, rnn.weight_hh_l0):
        haiku_drawn(w, 6 + 64)
    bias = rnn.bias_ih_l0 + rnn.bias_hh_l0
    assert torch.equal(bias[64:128], torch.ones(64)) and bias[:64].abs().sum() == bias[128:].abs().sum() == 0
    assert float(lstm.readout.weight.abs().max()) <= 2 / math.sqrt(64)  # [5, 64]: too few to test the spread
    assert lstm.readout.bias.abs().sum() == 0
    tape = module(
        functools.partial(StackRNN, hidden_size=64, memory="tape_jump", controller="elman", width=8, depth=40,
                          controller_args={"activation": "relu"}, memory_args={"write_mlp": [64, 64]}),
        init="haiku", embedding="one_hot",
    )  # fmt: skip
    c = tape.layer.controller
    haiku_drawn(c.weight_hh, 64)  # hk.VanillaRNN's hidden_to_hidden
    assert float(c.weight_ih.abs().max()) <= 2 / math.sqrt(6 + 8)  # input_to_hidden (input and reading)
    assert c.bias.abs().sum() == 0
    memory = tape.layer.memory
    haiku_drawn(memory.value_mlp[1].weight, 64)  # the write MLP's 64 -> 64 layer
    assert float(memory.head.weight.abs().max()) <= 2 / math.sqrt(64)
    assert all(m.bias.abs().sum() == 0 for m in [memory.head, *memory.value_mlp])
    assert tape.embedding.weight.requires_grad is False  # the one-hot identity is left alone
