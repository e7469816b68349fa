"""What every hand-written ``torch.autograd.Function`` in memrnn shares."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable


def first_order(backward: Callable) -> Callable:
    """Decorate a ``Function.backward``: first order (``once_differentiable``: differentiating
    it again raises torch's clear error) and run with autocast off.

    The layers run their fused forwards with autocast off and in the layer's dtype
    (:mod:`memrnn.core.checks`); a ``loss.backward()`` called inside an autocast region must not
    cast the hand-written backward's products either (``torch.amp.custom_bwd`` does this for one
    device type; this does it for the device of the incoming gradients)."""
    inner = once_differentiable(backward)

    @functools.wraps(backward)
    def wrapper(ctx, *grads):
        kinds = {g.device.type for g in grads if isinstance(g, Tensor)}
        with contextlib.ExitStack() as stack:
            for kind in kinds:
                if torch.is_autocast_enabled(kind):
                    stack.enter_context(torch.autocast(kind, enabled=False))
            return inner(ctx, *grads)

    return wrapper
