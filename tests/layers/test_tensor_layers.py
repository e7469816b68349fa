"""SecondOrderRNN and NNPDA input modes: auto, one-hot (checked) and dense agree."""

import pytest
import torch
import torch.nn.functional as F

from memrnn.layers import NNPDA, SecondOrderRNN

D64 = torch.float64


@pytest.mark.parametrize(
    "make",
    [
        lambda mode: SecondOrderRNN(4, 5, one_hot_input=mode),
        lambda mode: NNPDA(4, 3, 2, depth=6, action="sigmoid", one_hot_input=mode),
    ],
    ids=["second_order", "nnpda"],
)
def test_modes_agree_and_auto_keeps_input_gradients(make, gen):
    ids = torch.randint(0, 4, (3, 8), generator=gen)
    x = F.one_hot(ids, 4).to(D64)
    mask = torch.arange(8)[None] < torch.tensor([8, 5, 1])[:, None]
    layers = {}
    for mode in (None, True, False):
        torch.manual_seed(0)
        layers[mode] = make(mode).to(D64)
    ys = {mode: layer(x, mask=mask)[0] for mode, layer in layers.items()}
    torch.testing.assert_close(ys[None], ys[False], atol=1e-12, rtol=0)
    torch.testing.assert_close(ys[True], ys[False], atol=1e-12, rtol=0)
    # auto falls back to the dense path when the input needs a gradient (a learned embedding)
    xg = x.clone().requires_grad_()
    layers[None](xg, mask=mask)[0].sum().backward()
    assert xg.grad is not None and xg.grad.abs().sum() > 0
    # and to the dense path for inputs that are not one-hot
    dense = torch.randn(3, 8, 4, generator=gen, dtype=D64)
    torch.testing.assert_close(layers[None](dense)[0], layers[False](dense)[0], atol=1e-12, rtol=0)
    with pytest.raises(ValueError, match="row 0, step 0 is not one-hot"):
        layers[True](dense)
