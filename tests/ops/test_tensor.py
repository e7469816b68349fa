"""Second- and third-order contractions: fast (dense and indexed one-hot) against the sums."""

import pytest
import torch
import torch.nn.functional as F

from memrnn.ops import second_order, second_order_reference, third_order, third_order_reference

D64 = torch.float64


def test_second_order_dense_and_indexed_equal_the_sums(gen):
    w = torch.randn(4, 3, 5, generator=gen, dtype=D64, requires_grad=True)
    s = torch.randn(6, 3, generator=gen, dtype=D64, requires_grad=True)
    x = torch.randn(6, 5, generator=gen, dtype=D64)
    ids = torch.randint(0, 5, (6,), generator=gen)
    ref = second_order_reference(w, s, x)
    torch.testing.assert_close(second_order(w, s, x=x), ref, atol=1e-12, rtol=0)
    hot = F.one_hot(ids, 5).to(D64)
    a, b = second_order(w, s, tokens=ids), second_order_reference(w, s, hot)
    torch.testing.assert_close(a, b, atol=1e-12, rtol=0)
    g = torch.randn(a.shape, generator=gen, dtype=D64)
    for u, v in zip(
        torch.autograd.grad((a * g).sum(), (w, s)), torch.autograd.grad((b * g).sum(), (w, s)), strict=True
    ):
        torch.testing.assert_close(u, v, atol=1e-12, rtol=0)


def test_third_order_dense_and_indexed_equal_the_sums(gen):
    w = torch.randn(5, 3, 4, 2, generator=gen, dtype=D64, requires_grad=True)
    q = torch.randn(2, 3, generator=gen, dtype=D64, requires_grad=True)
    r = torch.randn(2, 2, generator=gen, dtype=D64, requires_grad=True)
    x = torch.randn(2, 4, generator=gen, dtype=D64)
    torch.testing.assert_close(
        third_order(w, q, r, x=x), third_order_reference(w, q, r, x), atol=1e-12, rtol=0
    )
    ids = torch.tensor([3, 0])
    a, b = third_order(w, q, r, tokens=ids), third_order_reference(w, q, r, F.one_hot(ids, 4).to(D64))
    torch.testing.assert_close(a, b, atol=1e-12, rtol=0)
    ga = torch.autograd.grad(a.sum(), (w, q, r))
    gb = torch.autograd.grad(b.sum(), (w, q, r))
    for u, v in zip(ga, gb, strict=True):
        torch.testing.assert_close(u, v, atol=1e-12, rtol=0)


def test_exactly_one_input_kind():
    w, s = torch.zeros(2, 2, 2), torch.zeros(1, 2)
    with pytest.raises(ValueError, match="exactly one"):
        second_order(w, s)
    with pytest.raises(ValueError, match="integer"):
        second_order(w, s, tokens=torch.zeros(1))


@pytest.mark.parametrize("vocab", [3, 40])  # 40 >= 4 * batch: the indexed-slice branch
def test_both_one_hot_strategies_equal_the_dense_contraction(vocab, gen):
    w2 = torch.randn(4, 3, vocab, generator=gen, dtype=D64, requires_grad=True)
    w3 = torch.randn(5, 3, vocab, 2, generator=gen, dtype=D64, requires_grad=True)
    s = torch.randn(6, 3, generator=gen, dtype=D64)
    r = torch.rand(6, 2, generator=gen, dtype=D64)
    ids = torch.randint(0, vocab, (6,), generator=gen)
    hot = F.one_hot(ids, vocab).to(D64)
    a, b = second_order(w2, s, tokens=ids), second_order(w2, s, x=hot)
    torch.testing.assert_close(a, b, atol=1e-12, rtol=0)
    torch.testing.assert_close(*(torch.autograd.grad(v.sum(), w2)[0] for v in (a, b)), atol=1e-12, rtol=0)
    a, b = third_order(w3, s, r, tokens=ids), third_order(w3, s, r, x=hot)
    torch.testing.assert_close(a, b, atol=1e-12, rtol=0)
    torch.testing.assert_close(*(torch.autograd.grad(v.sum(), w3)[0] for v in (a, b)), atol=1e-12, rtol=0)
