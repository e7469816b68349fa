"""Every hand-written backward is re-entrant (docs/design.md, "One implementation switch"): a
second backward through the same graph (``retain_graph=True``) gives the first one's gradients
exactly and changes nothing the first one returned."""

import pytest
import torch

from memrnn.layers.stack_rnn import StackRNN
from memrnn.ops.dispatch import implementation, native_available

STACK_MEMORIES = ("superposition", "stratification", "queue", "deque", "tape", "tape_jump")


def _two_backwards(loss, inputs):
    first = torch.autograd.grad(loss, inputs, retain_graph=True)
    kept = [g.clone() for g in first]
    again = torch.autograd.grad(loss, inputs, retain_graph=True)
    return first, kept, again


@pytest.mark.parametrize("impl", ["cpu", "native"])
@pytest.mark.parametrize("controller", ["lstm", "elman"])
@pytest.mark.parametrize("memory", STACK_MEMORIES)
def test_stack_rnn_backward_twice_gives_the_same_gradients(memory, controller, impl):
    """The new user's repro: the stratification stack, the queue and the DeQue's Python paths
    once kept views of the first backward's gradient buffer (a second backward added into it)."""
    if impl == "native" and not native_available():
        pytest.skip("memrnn's C++ loops did not build here")
    torch.manual_seed(0)
    args = {"jump": 2} if memory == "tape_jump" else {}
    m = StackRNN(
        2, 3, memory=memory, controller=controller, width=2, depth=3, memory_args=args, dtype=torch.float64
    )
    x = torch.randn(2, 6, 2, dtype=torch.float64, requires_grad=True)
    s0 = m.initial_state(2)
    s0 = type(s0)(*(t + 0.3 * torch.randn_like(t) if t.is_floating_point() else t for t in s0))
    leaves = [t.requires_grad_() for t in s0 if t.is_floating_point()]
    with implementation(impl):
        y, final = m(x, s0)
    loss = y.pow(2).sum() + sum(t.pow(2).sum() for t in final if t.is_floating_point())
    inputs = [x, *leaves, *m.parameters()]
    first, kept, again = _two_backwards(loss, inputs)
    for a, b, c in zip(first, kept, again, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)  # the first result is untouched
        torch.testing.assert_close(c, b, rtol=0, atol=0)  # the second equals it
