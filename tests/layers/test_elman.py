import math

import pytest
import torch

from memrnn.core.activations import heaviside, saturated_linear
from memrnn.layers import ElmanRNN, JordanRNN


def test_activations_by_hand():
    x = torch.tensor([-2.0, -0.0, 0.0, 0.5, 3.0])
    assert heaviside(x).tolist() == [0, 0, 0, 1, 1]  # H(0) = 0 (Cotterell et al. 2023's example)
    assert saturated_linear(x).tolist() == [0, 0, 0, 0.5, 1]
    layer = ElmanRNN(1, 1, activation="saturated-linear")  # hyphenated alias
    assert layer.activation == "saturated_linear"


def test_minsky_worked_example_of_cotterell_et_al():
    """Cotterell et al. 2023, the Minsky construction's worked update: from (q0, a) reading b, the Heaviside
    Elman RNN with U (out-neighbourhoods), V (reachable-by-symbol) and b = -1 lands on (q0, b)."""
    U = torch.tensor([[1.0, 0, 1, 0], [1, 0, 1, 0], [0, 1, 0, 1], [0, 1, 0, 1]])
    V = torch.tensor([[1.0, 0], [0, 1], [1, 0], [0, 1]])
    layer = ElmanRNN(2, 4, activation="heaviside").double()
    with torch.no_grad():
        layer.weight_hh.copy_(U)
        layer.weight_ih.copy_(V)
        layer.bias.fill_(-1.0)
    h = torch.tensor([[1.0, 0, 0, 0]], dtype=torch.float64)  # (q0, a)
    y, _ = layer.step(torch.tensor([[0.0, 1.0]], dtype=torch.float64), layer.initial_state(1)._replace(h=h))
    assert y.tolist() == [[0, 1, 0, 0]]  # (q0, b)
    # and the pre-activation is the example's [0, 1, -1, 0]
    pre = layer.weight_hh @ h[0] + layer.weight_ih[:, 1] + layer.bias
    assert pre.tolist() == [0, 1, -1, 0]
    # sampling step from (q0, b): logits E^T h = (log 0.7, log 0.3)
    E = torch.tensor([[math.log(0.7), math.log(0.3)]] * 2 + [[0.0, -math.inf]] * 2, dtype=torch.float64)
    probs = torch.softmax(E[1], -1)
    torch.testing.assert_close(probs, torch.tensor([0.7, 0.3], dtype=torch.float64))


def test_elman_equation_by_hand(gen):
    layer = ElmanRNN(3, 4, activation="tanh").double()
    x = torch.randn(2, 5, 3, generator=gen, dtype=torch.float64)
    y, s = layer(x)
    h = torch.zeros(2, 4, dtype=torch.float64)
    for t in range(5):
        h = torch.tanh(x[:, t] @ layer.weight_ih.T + h @ layer.weight_hh.T + layer.bias)
        torch.testing.assert_close(y[:, t], h)
    torch.testing.assert_close(s.h, h)


def test_jordan_feeds_back_the_output(gen):
    layer = JordanRNN(3, 4, feedback_size=5, activation="sigmoid", output_activation="softmax").double()
    x = torch.randn(2, 4, 3, generator=gen, dtype=torch.float64)
    y, s = layer(x)
    r = torch.zeros(2, 5, dtype=torch.float64)
    for t in range(4):
        h = torch.sigmoid(x[:, t] @ layer.weight_ih.T + r @ layer.weight_fb.T + layer.bias)
        r = torch.softmax(h @ layer.weight_out.T, -1)
        torch.testing.assert_close(y[:, t], h)
    torch.testing.assert_close(s.r, r)
    torch.testing.assert_close(s.r.sum(-1), torch.ones(2, dtype=torch.float64))
    tr = layer.trace(x)
    assert set(tr) >= {"h", "r", "output", "state.r"}


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"input_size": 0, "hidden_size": 2}, "input_size must be a positive integer, got 0"),
        ({"input_size": 2, "hidden_size": -1}, "hidden_size must be a positive integer, got -1"),
        ({"input_size": 2, "hidden_size": 2, "activation": "gelu"}, "unknown activation 'gelu'"),
    ],
)
def test_elman_rejects_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ElmanRNN(**kwargs)


def test_jordan_rejects_bad_output_activation():
    with pytest.raises(ValueError, match="unknown output_activation 'max'"):
        JordanRNN(2, 2, 2, output_activation="max")


def test_elman_without_bias_and_repr():
    layer = ElmanRNN(2, 3, bias=False)
    assert layer.bias is None and "bias=False" in repr(layer)
    y, _ = layer(torch.zeros(1, 2, 2))
    assert (y == 0).all()  # tanh(0) with no bias and zero inputs
