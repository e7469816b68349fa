"""Reservoirs of Paaßen et al. 2021: the worked matrices of docs/references.md, the Legendre delay network's
linear memory, the random reservoir's spectral radius, and the ESN ridge readout.  (The
MemoryLayer contract runs over reservoir_rand/crj/ldn in tests/core/test_interface.py.)"""

import math

import pytest
import torch

from memrnn.core import create_layer
from memrnn.layers.reservoir import (
    Reservoir,
    crj_weights,
    legendre_discrete,
    legendre_matrices,
    legendre_readout,
    pi_digits,
)
from memrnn.rsm.readouts import RidgeReadout


def test_pi_digits():
    assert "".join(map(str, pi_digits(30))) == "314159265358979323846264338327"
    d = pi_digits(5000)
    assert d[762:768] == [9] * 6  # the Feynman point
    assert pi_digits(0) == []


def test_crj_worked_values():
    wc, wj = 0.7, 0.9
    _, W4 = crj_weights(4, 1, wc, wj, 2)
    expected4 = [[0, 0, wj, wc], [wc, 0, 0, 0], [wj, wc, 0, 0], [0, 0, wc, 0]]
    torch.testing.assert_close(W4, torch.tensor(expected4, dtype=torch.float64), atol=0, rtol=0)
    _, W5 = crj_weights(5, 1, wc, wj, 2)
    expected5 = [[0, 0, wj, 0, wc], [wc, 0, 0, 0, 0], [wj, wc, 0, 0, wj], [0, 0, wc, 0, 0], [0, 0, wj, wc, 0]]
    torch.testing.assert_close(W5, torch.tensor(expected5, dtype=torch.float64), atol=0, rtol=0)
    v = 0.7
    U, _ = crj_weights(2, 4, wc, wj, 2, input_weight=v)
    torch.testing.assert_close(U, torch.tensor([[-v, -v, -v, -v], [v, v, -v, v]], dtype=torch.float64))


def test_crj_sign_orders_for_the_five_neuron_example_of_paassen_et_al():
    """π = 3.14159 26535 89793: row by row (docs/references.md) the 5×3 matrix's columns 2 and 3
    coincide; input by input they are three runs of five digits."""
    U, _ = crj_weights(5, 3)
    assert torch.equal(U[:, 1], U[:, 2]) and U[:, 1].tolist() == [-1, 1, 1, 1, 1]
    U, _ = crj_weights(5, 3, sign_order="inputs")
    assert U.T.tolist() == [[-1, -1, -1, -1, 1], [1, -1, 1, 1, -1], [1, 1, 1, 1, 1]]
    layer = Reservoir(3, 5, "crj", sign_order="inputs", dtype=torch.float64)
    assert torch.equal(layer.input_weight, U) and "sign_order='inputs'" in repr(layer)
    with pytest.raises(ValueError, match="'cols'"):
        crj_weights(5, 3, sign_order="cols")
    with pytest.raises(ValueError, match="'cols'"):
        Reservoir(3, 5, "crj", sign_order="cols")


def test_crj_layer_uses_the_construction():
    layer = Reservoir(
        4, 5, "crj", cycle_weight=0.7, jump_weight=0.9, jump_length=2, input_weight=0.7, dtype=torch.float64
    )
    U, W = crj_weights(5, 4, 0.7, 0.9, 2, 0.7)
    assert torch.equal(layer.recurrent_weight, W) and torch.equal(layer.input_weight, U)
    assert layer.activation_name == "tanh" and not list(layer.parameters())


def test_legendre_worked_values():
    A, b = legendre_matrices(3)
    torch.testing.assert_close(
        A, torch.tensor([[-1.0, -1, -1], [3, -3, -3], [-5, 5, -5]], dtype=torch.float64)
    )
    torch.testing.assert_close(b, torch.tensor([1.0, -3, 5], dtype=torch.float64))
    for theta in (1.0, 5.0, 37.5):
        Ad, bd = legendre_discrete(3, theta)
        torch.testing.assert_close(Ad, torch.linalg.matrix_exp(A / theta), atol=1e-12, rtol=1e-12)
        torch.testing.assert_close(
            bd, torch.linalg.solve(A, (Ad - torch.eye(3, dtype=torch.float64)) @ b), atol=1e-12, rtol=1e-10
        )


def test_ldn_layer_is_block_diagonal_and_linear():
    layer = Reservoir(3, kind="ldn", order=4, theta=6.0, dtype=torch.float64)
    assert layer.units == layer.output_size == 12 and layer.activation_name == "identity"
    Ad, bd = legendre_discrete(4, 6.0)
    for c in range(3):
        blk = slice(4 * c, 4 * c + 4)
        torch.testing.assert_close(layer.recurrent_weight[blk, blk], Ad)
        torch.testing.assert_close(layer.input_weight[blk, c], bd)
    assert Reservoir(3, 256, "ldn").order == 85  # units // input_size


def test_ldn_reconstructs_a_delayed_smooth_input():
    """Voelker et al.: u(t − θ') = Σ_i P_i(θ'/θ) h_i(t) for inputs the window's polynomials hold.
    With the zero-order hold, sample ``u_{t−d}`` is held over the window's ``[d, d+1)``: decode
    at ``θ' = d + 1/2``."""
    q, theta, T = 12, 20.0, 200
    layer = Reservoir(1, kind="ldn", order=q, theta=theta, dtype=torch.float64)
    t = torch.arange(T, dtype=torch.float64)
    u = torch.sin(2 * math.pi * t / 60) + 0.5 * torch.cos(2 * math.pi * t / 45)
    h, _ = layer(u[None, :, None])
    for k in (0, 5, 10, 19):
        dec = (h[0] @ legendre_readout(q, [k + 0.5], theta).T)[:, 0]
        err = (dec[60:] - u[60 - k : T - k]).abs().max()
        assert err < 0.01, (k, float(err))


def test_ldn_state_holds_the_last_theta_inputs_for_a_linear_readout(gen):
    """White-noise input: a ridge readout recovers u(t − d) for every d ≤ θ from one LDN block
    (the copy task's requirement)."""
    q, theta, T = 32, 16.0, 3000
    layer = Reservoir(1, kind="ldn", order=q, theta=theta, dtype=torch.float64)
    u = torch.randn(1, T, 1, generator=gen, dtype=torch.float64)
    h, _ = layer(u)
    X = h[0, 100:]
    for d in (0, 4, 8, 12, 16):
        y = u[0, 100 - d : T - d]
        r = RidgeReadout(1e-9).fit(X[:2000], y[:2000])
        err = (r.predict(X[2000:]) - y[2000:]).abs().max()
        assert err < 1e-3, (d, float(err))


def test_rand_reservoir_spectral_radius_and_seed():
    a = Reservoir(3, 50, "rand", spectral_radius=0.8, seed=5, dtype=torch.float64)
    b = Reservoir(3, 50, "rand", spectral_radius=0.8, seed=5, dtype=torch.float64)
    assert torch.equal(a.recurrent_weight, b.recurrent_weight)
    radius = torch.linalg.eigvals(a.recurrent_weight).abs().max()
    assert abs(float(radius) - 0.8) < 1e-10
    c = Reservoir(3, 50, "rand", seed=6)
    assert not torch.equal(a.recurrent_weight.float(), c.recurrent_weight)


def test_leak_and_hoisted_forward(gen):
    layer = Reservoir(2, 6, "rand", leak=0.3, seed=0, dtype=torch.float64)
    x = torch.randn(2, 5, 2, generator=gen, dtype=torch.float64)
    h, s = layer(x)
    ref = torch.zeros(2, 6, dtype=torch.float64)
    for t in range(5):
        ref = 0.7 * ref + 0.3 * torch.tanh(x[:, t] @ layer.input_weight.T + ref @ layer.recurrent_weight.T)
        torch.testing.assert_close(h[:, t], ref)
    torch.testing.assert_close(s.h, ref)


def test_registered_and_constructible():
    for name in ("reservoir_rand", "reservoir_crj", "reservoir_ldn"):
        layer = create_layer(name)
        assert isinstance(layer, Reservoir)
        y, _ = layer(torch.randn(2, 3, layer.input_size))
        assert y.shape == (2, 3, layer.output_size)


def test_reservoir_errors():
    with pytest.raises(ValueError, match="unknown reservoir kind 'esn'"):
        Reservoir(3, 5, "esn")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="units must be a positive integer, got None"):
        Reservoir(3, None, "crj")
    with pytest.raises(ValueError, match="leak must be in"):
        Reservoir(3, 5, leak=0.0)
    with pytest.raises(ValueError, match="ldn order must be >= 1"):
        Reservoir(8, 5, "ldn")
    with pytest.raises(ValueError, match="theta must be positive"):
        Reservoir(2, kind="ldn", order=3, theta=0)
    with pytest.raises(ValueError, match="unknown activation 'relu6'"):
        Reservoir(3, 5, activation="relu6")
