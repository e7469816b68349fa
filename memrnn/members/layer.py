"""M runs of one recurrent layer as one module: :class:`MemberLayer` (``docs/design.md``,
"Members").

Every parameter and buffer carries a leading member dimension ``[M, ...]``; inputs are ``[M, B,
T, input_size]``, outputs ``[M, B, T, output_size]`` and every field of a state ``[M, B, ...]``.
Member ``m`` computes exactly what the layer built with member ``m``'s weights computes alone
(the tests hold it to rounding, gradients and training included).  A layer class with a *member
path* (:data:`MEMBER_PATHS`: its op batched over the members, e.g. the LSTM's) runs all members
in one pass; every other layer runs a loop over its members (each member through the layer's own
``forward`` on its slices of the stacked parameters), correct for every registered layer, and
:attr:`MemberLayer.member_path` names which it is."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from memrnn.core.layer import MemoryLayer
from memrnn.core.state import state_leaves, state_map, state_zip
from memrnn.members.stacking import member_view, stack_modules, unstack_module
from memrnn.ops.members import member_rows


@dataclass(frozen=True)
class MemberPath:
    """A layer class's pass over all members at once.

    ``why_not(layer)``: None when the path covers this layer (its options, training mode), else
    the reason, which :attr:`MemberLayer.member_path` reports.  ``run(layer, x, state, mask)``:
    ``layer`` the stacked module, ``x [M, B, T, n]``, ``state`` the members' stacked state
    ``[M, B, ...]``, ``mask [M, B, T]`` or None -> ``(outputs [M, B, T, out], final state)``."""

    name: str
    why_not: Callable[[nn.Module], str | None]
    run: Callable[[nn.Module, Tensor, Any, Tensor | None], tuple[Tensor, Any]]
    #: the members' initial state at once, ``(layer, batch_size, x) -> state [M, B, ...]`` (what
    #: each member's ``initial_state`` gives, stacked, without a member view each); None: the loop
    initial: Callable[[nn.Module, int, Tensor], Any] | None = None
    #: the members' outputs at their states at once, ``(layer, state [M, B, ...]) -> [M, B,
    #: output_size]`` (each member's ``output_at``, stacked); None: the loop
    output_at: Callable[[nn.Module, Any], Tensor] | None = None
    #: the outputs alone, ``(layer, x, state, mask) -> [M, B, T, out]`` (what :meth:`MemberLayer.outputs`
    #: runs: a path may skip work only the final state needs); None: ``run``'s outputs
    outputs: Callable[[nn.Module, Tensor, Any, Tensor | None], Tensor] | None = None
    #: ``layer -> path or None``: another path for the layers of the class whose options call for
    #: one (:class:`memrnn.layers.StackRNN`'s nondeterministic stacks); None: this one for all
    select: Callable[[nn.Module], MemberPath | None] | None = None
    #: the outputs from token ids, ``(layer, ids [B, T] or [M, B, T], table [M, V, n], state, mask)
    #: -> [M, B, T, out]``, the input at a position being its id's row of the members' embedding
    #: ``table`` (what :meth:`MemberLayer.outputs_from_tokens` runs: a path may fold the lookup
    #: into its first product, as the LSTM's); None: the lookup, then ``outputs``
    tokens: Callable[[nn.Module, Tensor, Tensor, Any, Tensor | None], Tensor] | None = None


#: the member paths by layer class (exact class: a subclass may compute otherwise)
MEMBER_PATHS: dict[type, MemberPath] = {}


def register_member_path(cls: type, path: MemberPath) -> None:
    """Give layer class ``cls`` a pass over all members at once."""
    MEMBER_PATHS[cls] = path


def member_path_of(layer: nn.Module) -> tuple[MemberPath | None, str | None]:
    """``(path, reason)``: the member path of ``layer``'s class (or, for a class that declares
    ``member_path_from = Base``, computing as its base class does, Base's path) and why it does
    not cover ``layer`` (None: it does).  A layer may refuse its path with a method
    ``member_path_refusal() -> str | None`` (e.g. a construction in float32)."""
    cls = type(layer)
    path = MEMBER_PATHS.get(cls)
    if path is None and getattr(cls, "member_path_from", None) is not None:
        path = MEMBER_PATHS.get(cls.member_path_from)
    if path is None:
        return None, f"no member path for {cls.__name__}"
    if path.select is not None:
        path = path.select(layer) or path
    refusal = getattr(layer, "member_path_refusal", None)
    reason = refusal() if refusal is not None else None
    return path, reason if reason is not None else path.why_not(layer)


class MemberLayer(nn.Module):
    """M members of one :class:`~memrnn.core.layer.MemoryLayer`, trained as one model.

    ``layers``: M layers of one type and structure (each built with its own initial weights,
    e.g. under its own seed: :meth:`build`).  Their parameters and buffers are stacked into
    ``self.layer``, a module of the layers' structure whose every tensor is ``[M, ...]`` (a
    checkpoint's keys are the single layer's; :meth:`member` gives member ``m`` back as an
    ordinary layer).  The members share nothing: the gradient of the sum of the members' losses
    is each member's own gradient, in its slice.
    """

    def __init__(self, layers: Sequence[MemoryLayer]) -> None:
        super().__init__()
        layers = list(layers)
        bad = [type(layer).__name__ for layer in layers if not isinstance(layer, MemoryLayer)]
        if bad:
            raise ValueError(f"MemberLayer stacks memrnn MemoryLayers, got {bad[0]}")
        self.members = len(layers)
        self.layer = stack_modules(layers)
        self.input_size, self.output_size = layers[0].input_size, layers[0].output_size

    @classmethod
    def build(cls, factory: Callable[[], MemoryLayer], seeds: Sequence[int]) -> MemberLayer:
        """One member per seed: member ``m`` is ``factory()`` built after
        ``torch.manual_seed(seeds[m])`` (the global generator is restored afterwards), so it has
        the initial weights of the single run with that seed."""
        if isinstance(seeds, int) or not len(seeds):
            raise ValueError(f"seeds must be a non-empty sequence of ints, one per member, got {seeds!r}")
        layers = []
        with torch.random.fork_rng(devices=[]):
            for seed in seeds:
                torch.manual_seed(int(seed))
                layers.append(factory())
        return cls(layers)

    def extra_repr(self) -> str:
        return f"members={self.members}, path={self.member_path!r}"

    @property
    def member_path(self) -> str:
        """How a forward runs: the member path's name, or ``"loop (…)"`` over the members with the
        reason none applies."""
        path, reason = member_path_of(self.layer)
        return path.name if reason is None else f"loop ({reason})"

    def member(self, m: int) -> MemoryLayer:
        """Member ``m`` as an ordinary layer (detached copies of its weights): its ``state_dict``
        loads into the layer class built with the same arguments."""
        return unstack_module(self.layer, self._index(m))

    def _index(self, m: int) -> int:
        if isinstance(m, bool) or not isinstance(m, int) or not -self.members <= m < self.members:
            raise ValueError(
                f"member {m!r} does not exist; this MemberLayer has members 0..{self.members - 1}"
            )
        return m % self.members

    def initial_state(
        self,
        batch_size: int,
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
        **kwargs: Any,
    ) -> Any:
        """Each member's initial state, stacked: every field ``[M, batch_size, ...]`` (``kwargs``,
        e.g. a jump tape's ``input_lengths [B]``, go to every member's ``initial_state``; an
        ``input_lengths [M, B]``, each member's own rows, goes member by member)."""
        path, reason = member_path_of(self.layer)
        first = next(itertools.chain(self.layer.parameters(), self.layer.buffers()), None)
        if reason is None and path.initial is not None and not kwargs and first is not None:
            # every member at once (no member view each: once per training step with initial_output)
            like = torch.empty(
                self.members, 0, device=first.device if device is None else device,
                dtype=first.dtype if dtype is None else dtype,
            )  # fmt: skip
            return path.initial(self.layer, batch_size, like)
        return self._initial_loop(batch_size, device=device, dtype=dtype, **kwargs)

    def _initial_loop(
        self,
        batch_size: int,
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
        **kwargs: Any,
    ) -> Any:
        """:meth:`initial_state` member by member, each under its member view (with keyword
        arguments: an ``input_lengths [M, B]`` goes member by member)."""
        lengths = kwargs.get("input_lengths")
        per_member = isinstance(lengths, Tensor) and lengths.dim() == 2
        if per_member and lengths.shape[0] != self.members:
            raise ValueError(
                f"input_lengths [members, batch] must have {self.members} members first, got {tuple(lengths.shape)}"
            )
        states = []
        for m in range(self.members):
            kw = {**kwargs, "input_lengths": lengths[m]} if per_member else kwargs
            with member_view(self.layer, m) as layer:
                states.append(layer.initial_state(batch_size, device=device, dtype=dtype, **kw))
        return state_zip(lambda *ts: torch.stack(ts), *states)

    @property
    def reads_input_lengths(self) -> bool:
        """Whether the members' state holds each row's input length (the layer's flag)."""
        return bool(getattr(self.layer, "reads_input_lengths", False))

    def output_at(self, state: Any) -> Tensor:
        """Each member's ``output_at`` its slice of ``state``: ``[M, B, output_size]``."""
        path, reason = member_path_of(self.layer)
        if reason is None and path.output_at is not None:
            return path.output_at(self.layer, state)
        outs = []
        for m in range(self.members):
            with member_view(self.layer, m) as layer:
                outs.append(layer.output_at(state_map(lambda t, m=m: t[m], state)))
        return torch.stack(outs)

    def _check(self, x: Tensor, state: Any, mask: Tensor | None) -> tuple[Any, Tensor | None]:
        name = f"MemberLayer({type(self.layer).__name__})"
        if not isinstance(x, Tensor) or x.dim() != 4 or x.shape[0] != self.members:
            got = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
            raise ValueError(
                f"{name} takes inputs [members, batch, time, input_size] = [{self.members}, B, T, "
                f"{self.input_size}], got {got}"
            )
        if state is not None:
            for t in state_leaves(state):
                if t.shape[0] != self.members:
                    raise ValueError(
                        f"{name}: every field of a state has the members first ({self.members}), got a field "
                        f"of shape {tuple(t.shape)}"
                    )
        if mask is not None:
            M, B, T = x.shape[:3]
            if not isinstance(mask, Tensor) or tuple(mask.shape) not in ((B, T), (M, B, T)):
                got = tuple(mask.shape) if isinstance(mask, Tensor) else type(mask).__name__
                raise ValueError(
                    f"{name}: mask must be [batch, time] = {(B, T)} (shared by the members) or [members, "
                    f"batch, time] = {(M, B, T)}, got {got}"
                )
            if mask.dtype != torch.bool:
                raise ValueError(f"{name}: mask must be a bool tensor, got dtype {mask.dtype}")
            if mask.device != x.device:
                raise ValueError(f"{name}: mask is on {mask.device} but the inputs are on {x.device}")
            holes = mask[..., 1:] > mask[..., :-1]  # the member paths read right padding only
            if bool(holes.any()):
                where = [int(v) for v in holes.nonzero()[0]]
                raise ValueError(
                    f"{name}: mask must be right padding (True then False in each row); at {where[:-1]} a real "
                    f"position at t={where[-1] + 1} follows a padded one"
                )
            if mask.dim() == 2:
                mask = mask.expand(M, B, T)
        return state, mask

    def forward(self, x: Tensor, state: Any = None, mask: Tensor | None = None) -> tuple[Tensor, Any]:
        """``x [M, B, T, input_size]``, ``state`` (each field ``[M, B, ...]``, or None: each
        member's initial state), ``mask [B, T]`` or ``[M, B, T]`` (right padding) ->
        ``(outputs [M, B, T, output_size], final state [M, B, ...])``."""
        state, mask = self._check(x, state, mask)
        if self._batched():
            return self._run_path(x, state, mask)
        return self._loop(x, state, mask, outputs_only=False)

    def _batched(self) -> bool:
        return member_path_of(self.layer)[1] is None

    def _run_path(self, x: Tensor, state: Any, mask: Tensor | None, *, outputs_only: bool = False):
        """The member path's ``run`` (``outputs_only``: its ``outputs`` where it has one)."""
        path = member_path_of(self.layer)[0]
        if state is None:  # through the path's initial where it has one
            state = self.initial_state(x.shape[1], device=x.device, dtype=x.dtype)
        if mask is not None and bool(mask.all()):
            mask = None
        if not outputs_only:
            return path.run(self.layer, x, state, mask)
        if path.outputs is not None:
            return path.outputs(self.layer, x, state, mask)
        return path.run(self.layer, x, state, mask)[0]

    def outputs(self, x: Tensor, state: Any = None, mask: Tensor | None = None) -> Tensor:
        """``forward``'s outputs ``[M, B, T, output_size]`` without the final state (each member
        through its layer's ``outputs``, which may skip work the final state needs)."""
        state, mask = self._check(x, state, mask)
        if self._batched():
            return self._run_path(x, state, mask, outputs_only=True)
        return self._loop(x, state, mask, outputs_only=True)

    def outputs_from_tokens(
        self, ids: Tensor, table: Tensor, state: Any = None, mask: Tensor | None = None
    ) -> Tensor:
        """:meth:`outputs` on the members' embeddings of token ids: ``ids [B, T]`` (every member
        reads them) or ``[M, B, T]`` (each member its own), ``table [M, V, input_size]`` (member
        ``m``'s input at a position is ``table[m, id]``; the ids must lie in ``0..V−1``: the
        caller checks them, as :meth:`memrnn.lit.sequence.SequenceModule.checked_ids`) ->
        ``[M, B, T, output_size]``.  Through the member path's ``tokens`` where it has one (the
        LSTM's folds the lookup into its input projection), else the lookup, then :meth:`outputs`."""
        M = self.members
        if not isinstance(table, Tensor) or table.dim() != 3 or table.shape[0] != M:
            got = tuple(table.shape) if isinstance(table, Tensor) else type(table).__name__
            raise ValueError(
                f"outputs_from_tokens takes table [members, vocabulary, input_size] = [{M}, V, n], got {got}"
            )
        if ids.dim() not in (2, 3) or (ids.dim() == 3 and ids.shape[0] != M):
            raise ValueError(f"outputs_from_tokens takes ids [B, T] or [{M}, B, T], got {tuple(ids.shape)}")
        path, reason = member_path_of(self.layer)
        if reason is not None or path.tokens is None:
            return self.outputs(member_rows(table, ids, per_member=ids.dim() == 3), state, mask)
        B, T = ids.shape[-2:]
        state, mask = self._check(table.new_empty(M, B, T, 0), state, mask)
        if state is None:
            state = self.initial_state(B, device=table.device, dtype=table.dtype)
        if mask is not None and bool(mask.all()):
            mask = None
        return path.tokens(self.layer, ids, table, state, mask)

    def _loop(self, x: Tensor, state: Any, mask: Tensor | None, *, outputs_only: bool):
        """The fallback: each member through the layer's own methods on its slices."""
        ys, finals = [], []
        for m in range(self.members):
            state_m = None if state is None else state_map(lambda t, m=m: t[m], state)
            mask_m = None if mask is None else mask[m]
            with member_view(self.layer, m) as layer:
                if outputs_only:
                    ys.append(layer.outputs(x[m], state_m, mask_m))
                else:
                    y, final = layer(x[m], state_m, mask_m)
                    ys.append(y)
                    finals.append(final)
        y = torch.stack(ys)
        return y if outputs_only else (y, state_zip(lambda *ts: torch.stack(ts), *finals))
