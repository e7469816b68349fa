"""The one table of activation functions memrnn's layers accept by name.

Each layer accepts a subset (its ``*_ACTIVATIONS`` tuple) and resolves a name with
:func:`resolve_activation`, which also takes ``-`` for ``_`` (``saturated-linear``) and names the
choices when a name is unknown.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor


def heaviside(x: Tensor) -> Tensor:
    """Strict Heaviside step ``H(x) = 1 if x > 0 else 0``.

    Cotterell et al.'s (2023) text says "1 if the input is non-negative", but its worked Minsky example
    (``(U h + V[b]) - 1 = [0, 1, -1, 0] -> [0, 1, 0, 0]``) needs ``H(0) = 0``; we follow the
    example.  Written as ``sign(relu(x))`` so that autograd sees the true derivative, 0 almost
    everywhere, instead of cutting the graph.
    """
    return torch.sign(torch.relu(x))


def saturated_linear(x: Tensor) -> Tensor:
    """Saturated linear ``min(max(x, 0), 1)`` (Siegelmann & Sontag; Cotterell et al. 2023 "saturated sigmoid")."""
    return torch.clamp(x, 0.0, 1.0)


def identity(x: Tensor) -> Tensor:
    """``x`` itself (a linear unit)."""
    return x


def softmax(x: Tensor) -> Tensor:
    """Softmax over the last dimension (``[..., units]``)."""
    return torch.softmax(x, dim=-1)


#: every activation by name; layers accept subsets of it
ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {
    "tanh": torch.tanh,
    "sigmoid": torch.sigmoid,
    "relu": torch.relu,
    "heaviside": heaviside,
    "saturated_linear": saturated_linear,
    "identity": identity,
    "softmax": softmax,
}
#: the element-wise squashing functions of hidden units (Elman RNN, ReLU counter)
HIDDEN_ACTIVATIONS = ("tanh", "sigmoid", "relu", "heaviside", "saturated_linear")


def resolve_activation(name: str, allowed: Sequence[str], what: str = "activation") -> str:
    """The table key of ``name`` (``-`` read as ``_``) if ``allowed`` has it, else a ``ValueError``
    that names ``what``, the value and the choices."""
    key = name.replace("-", "_") if isinstance(name, str) else name
    if key not in allowed:
        raise ValueError(f"unknown {what} {name!r}; choose one of {', '.join(sorted(allowed))}")
    return key
