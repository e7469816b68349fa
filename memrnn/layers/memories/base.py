"""What every memory of :mod:`memrnn.layers.memories` shares: the :class:`Memory` base (its action
head, value MLP and step) and the checks of its arguments."""

from __future__ import annotations

import itertools
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import ClassVar, NamedTuple

import torch
from torch import Tensor, nn

from memrnn.core.activations import ACTIVATIONS, resolve_activation
from memrnn.core.checks import positive_int
from memrnn.ops.memory import MemorySpec

#: what a pushed or written vector may pass through
VALUE_ACTIVATIONS = ("sigmoid", "tanh", "identity")


def mlp_sizes(name: str, sizes: Sequence[int]) -> tuple[int, ...]:
    """``sizes`` (an MLP's hidden layer sizes: a list or tuple of positive integers, possibly
    empty) as a tuple, else a ``ValueError`` naming ``name`` and the bad value."""
    if not isinstance(sizes, (list, tuple)):
        raise ValueError(
            f"{name} must be a list or tuple of hidden layer sizes (e.g. (64, 64)), got {sizes!r}"
        )
    for size in sizes:
        try:
            positive_int(name, size)
        except ValueError:
            raise ValueError(
                f"{name}'s hidden layer sizes must be positive integers, got {size!r} in {sizes!r}"
            ) from None
    return tuple(int(size) for size in sizes)


class Memory(nn.Module, ABC):
    """A differentiable data structure driven by a controller's output ``h [B, hidden_size]``.

    Subclasses set ``kind`` (the name the fused paths dispatch on), ``State`` and ``actions``
    (the names of the actions in the head's first outputs), and implement ``initial_state``,
    ``read`` and ``update``.

    ``value_mlp`` (hidden layer sizes; empty by default): the pushed or written value comes from
    an MLP of ``h`` (``value_mlp``, an ``nn.ModuleList`` of ``nn.Linear``, ReLU between layers
    and none after the last; torch's default initialisation) instead of the head's last rows;
    the head then gives the actions only.  Without it the parameters are the head's alone, as
    before the option existed.
    """

    kind: ClassVar[str]
    State: ClassVar[type]
    #: names of the first ``len(actions)`` outputs of the head, in order
    actions: ClassVar[tuple[str, ...]]
    #: ``"softmax"`` over the actions or a ``"sigmoid"`` each
    action_activation: ClassVar[str] = "softmax"
    #: whether the state holds each row's input length (:meth:`with_input_lengths`)
    reads_input_lengths: ClassVar[bool] = False

    def __init_subclass__(cls, spec: MemorySpec | None = None, **kwargs) -> None:
        """``class M(Memory, spec=...)``: a memory of the fused paths takes its ``kind``,
        ``actions`` and ``action_activation`` from its :class:`~memrnn.ops.memory.MemorySpec`
        (``memrnn/ops/<memory>/spec.py``), the one table of them."""
        super().__init_subclass__(**kwargs)
        if spec is not None:
            cls.kind, cls.actions, cls.action_activation = spec.name, spec.actions, spec.action_activation

    def __init__(
        self,
        hidden_size: int,
        width: int,
        depth: int,
        value_activation: str,
        *,
        value_mlp: Sequence[int] = (),
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.hidden_size = positive_int("hidden_size", hidden_size)
        self.width = positive_int("width", width)
        self.depth = positive_int("depth", depth)
        self.value_activation = resolve_activation(value_activation, VALUE_ACTIVATIONS, "value activation")
        self.value_mlp_sizes = mlp_sizes("value_mlp", value_mlp)
        k = len(self.actions)
        fk = {"device": device, "dtype": dtype}
        if not self.value_mlp_sizes:
            self.head = nn.Linear(hidden_size, self._head_size(), **fk)
            self.value_mlp: nn.ModuleList | None = None
            return
        self.head = nn.Linear(hidden_size, k, **fk)  # the actions; the value from the MLP
        sizes = (hidden_size, *self.value_mlp_sizes, self._head_size() - k)
        self.value_mlp = nn.ModuleList(nn.Linear(a, b, **fk) for a, b in itertools.pairwise(sizes))

    def _head_size(self) -> int:
        """Outputs of the head: the actions, then the pushed or written vector (which a value MLP
        gives instead)."""
        return len(self.actions) + self.width

    def reset_parameters(self) -> None:
        """The head's and the value MLP's layers re-drawn (torch's ``nn.Linear`` initialisation)."""
        self.head.reset_parameters()
        for layer in self.value_mlp or ():
            layer.reset_parameters()

    @property
    def reading_size(self) -> int:
        """Units of :meth:`read` (what the controller reads): ``width`` unless a memory reads more."""
        return self.width

    def extra_repr(self) -> str:
        return f"width={self.width}, depth={self.depth}, value_activation={self.value_activation!r}"

    def heads(self, h: Tensor) -> tuple[Tensor, Tensor]:
        """``h [B, hidden_size]`` -> (actions ``[B, len(actions)]``, value ``[B, width]``)."""
        out = self.head(h)
        k = len(self.actions)
        if self.value_mlp is None:
            actions, value = out[:, :k], out[:, k:]
        else:
            actions, value = out, h
            for i, layer in enumerate(self.value_mlp):
                value = layer(value if i == 0 else torch.relu(value))
        return self._action_fn(actions), ACTIVATIONS[self.value_activation](value)

    def value_layers(self) -> tuple[tuple[Tensor, Tensor], ...] | None:
        """The value MLP's ``(weight, bias)`` pairs (:func:`memrnn.ops.stack_rnn.stack_rnn_sequence`'s
        ``value_mlp``), or None without one."""
        if self.value_mlp is None:
            return None
        return tuple((layer.weight, layer.bias) for layer in self.value_mlp)

    def _action_fn(self, a: Tensor) -> Tensor:
        return torch.softmax(a, -1) if self.action_activation == "softmax" else torch.sigmoid(a)

    @abstractmethod
    def initial_state(self, batch_size: int, *, device: torch.device | str, dtype: torch.dtype) -> NamedTuple:
        """The empty structure, every tensor ``[batch_size, ...]``."""

    def check_state(self, state: NamedTuple) -> None:
        """Raise ``ValueError`` when ``state`` cannot be run (default: any state can)."""

    def with_input_lengths(self, state: NamedTuple, input_lengths: Tensor) -> NamedTuple:
        """``state`` with each row's input length ``input_lengths [B]`` (a transduction's input,
        before its blanks) where the memory reads it (:attr:`reads_input_lengths`: the jump
        tape); other memories return ``state`` as it is."""
        return state

    @abstractmethod
    def read(self, state: NamedTuple) -> Tensor:
        """What the controller reads at the next step, ``[B, width]``."""

    @abstractmethod
    def update(self, state: NamedTuple, actions: Tensor, value: Tensor) -> tuple[NamedTuple, Tensor]:
        """One step of the structure; returns the new state and ``overflow [B]``."""

    def step(self, h: Tensor, state: NamedTuple) -> tuple[NamedTuple, dict[str, Tensor]]:
        """Act on ``h [B, hidden_size]``: returns the new state and diagnostics ``{name: [B, ...]}``
        (each action ``[B]``, ``value [B, width]``, ``overflow [B]``)."""
        actions, value = self.heads(h)
        new, overflow = self.update(state, actions, value)
        diag = {name: a for name, a in zip(self.actions, actions.unbind(-1), strict=True)}
        diag.update(value=value, overflow=overflow)
        return new, diag
