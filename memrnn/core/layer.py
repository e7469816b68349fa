"""The one interface every memory layer implements (``docs/design.md``).

Conventions
-----------
* Batch first: inputs ``[B, T, input_size]``, outputs ``[B, T, output_size]``, and every
  tensor of a state has the batch as its leading dimension.
* ``forward(x, state=None, mask=None) -> (outputs, final_state)``, always.
* ``mask`` is a bool tensor ``[B, T]`` for right padding (each row is True up to its length,
  then False).  Outputs at padded positions are exactly zero, and masked steps freeze the
  state, so the final state of each row is its state after its own last real token.
* ``forward`` in this base class is the reference loop over ``step``.  A subclass may
  override it with a fast path; the tests prove the two equal (outputs, states, gradients).
* ``trace`` returns per-step diagnostics ``[B, T, ...]`` and never changes ``forward``.
* A given state is checked like the inputs (type, batch, every field's shape, dtype and
  device against ``initial_state``), by ``forward``, ``trace`` and ``step`` alike; inputs follow
  one dtype policy, autocast included (:mod:`memrnn.core.checks`).
"""

from __future__ import annotations

import functools
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, ClassVar, Generic, Literal, TypeVar

import torch
from torch import Tensor, nn

from memrnn.core.checks import (
    StateTemplate,
    autocast_in_layer_dtype,
    check_dtype,
    check_features,
    check_state,
    exporting,
)
from memrnn.core.state import state_stack, state_where
from memrnn.core.switch import forcing_reference

S = TypeVar("S")


class MemoryLayer(nn.Module, ABC, Generic[S]):
    """Base class of every memrnn recurrent layer.

    Subclasses set ``input_size`` and ``output_size`` and implement ``initial_state`` and
    ``step``.  They may override ``forward`` with a fast path and ``trace_step`` to expose
    diagnostics (gates, stack actions, counters).
    """

    input_size: int
    output_size: int
    #: ``"match"``: inputs and states must have the layer's dtype (its parameters'), else a
    #: ``ValueError`` names both; ``"follow"``: the layer computes in the input's dtype (frozen
    #: layers whose constant weights are cast per call).  :mod:`memrnn.core.checks`.
    dtype_policy: ClassVar[Literal["match", "follow"]] = "match"

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Guard what a subclass defines: ``step`` checks its inputs and state (the loops call
        the unchecked ``_unchecked_step``), and ``forward``/``step``/``trace`` keep the
        recurrence in the layer's dtype under autocast."""
        super().__init_subclass__(**kwargs)
        _guard(cls)

    # -- to implement (abstract: a subclass without them cannot be instantiated) -------------
    @abstractmethod
    def initial_state(
        self, batch_size: int, *, device: torch.device | str | None = None, dtype: torch.dtype | None = None
    ) -> S:
        """The state before the first token, every tensor ``[batch_size, ...]``."""

    @abstractmethod
    def step(self, x_t: Tensor, state: S) -> tuple[Tensor, S]:
        """One time step: ``x_t [B, input_size]`` -> ``(y_t [B, output_size], next state)``."""

    def trace_step(self, x_t: Tensor, state: S) -> tuple[Tensor, S, dict[str, Tensor]]:
        """``step`` plus diagnostics ``{name: [B, ...]}``; the default reports none."""
        y, new = self._unchecked_step(x_t, state)
        return y, new, {}

    def _unchecked_step(self, x_t: Tensor, state: S) -> tuple[Tensor, S]:
        """The subclass's ``step`` without the checks (set by ``__init_subclass__``)."""
        raise NotImplementedError  # replaced on every subclass that defines step

    # -- shared machinery ---------------------------------------------------------------------
    def _default_factory(
        self, device: torch.device | str | None, dtype: torch.dtype | None
    ) -> dict[str, Any]:
        """Device and dtype for new state tensors: the arguments, else those of the parameters."""
        ref = next(iter(self.parameters()), None)
        if ref is None:
            ref = next(iter(self.buffers()), None)
        if device is None:
            device = ref.device if ref is not None else torch.device("cpu")
        if dtype is None:
            dtype = ref.dtype if ref is not None and ref.is_floating_point() else torch.get_default_dtype()
        return {"device": device, "dtype": dtype}

    def layer_dtype(self) -> torch.dtype | None:
        """The floating dtype the layer computes in: its parameters' (else its buffers'), or
        ``None`` for a layer with neither."""
        for t in (*self.parameters(), *self.buffers()):
            if t.is_floating_point():
                return t.dtype
        return None

    def native_autocast(self, x: Tensor) -> bool:
        """Whether this call runs natively under autocast (the default: no, the recurrence stays
        in the layer's dtype; :mod:`memrnn.core.checks`)."""
        return False

    def state_template(self) -> StateTemplate:
        """The structure of the state (type, fields, per-field shape after the batch), read once
        from ``initial_state(1)``."""
        template = self.__dict__.get("_state_template_cache")
        if template is None:
            template = StateTemplate(self.initial_state(1))
            self.__dict__["_state_template_cache"] = template
        return template

    def check_state(self, state: Any, batch_size: int, x: Tensor) -> S:
        """``state`` checked against ``initial_state`` for inputs ``x`` (type, batch, every
        field's shape, dtype and device; a plain tuple of the fields is converted), or the
        initial state when ``state`` is None.  Raises ``ValueError`` naming the field and the
        expected layout."""
        dtype = check_dtype(type(self).__name__, x, self.layer_dtype(), self.dtype_policy)
        if state is None:
            return self.initial_state(batch_size, device=x.device, dtype=dtype)
        return check_state(
            type(self).__name__,
            self.state_template(),
            state,
            batch_size,
            device=x.device,
            dtype=dtype,
            steps=x.shape[1] if x.dim() == 3 else None,
        )

    def check_inputs(self, x: Tensor, state: S | None, mask: Tensor | None) -> tuple[S, Tensor | None]:
        """Validate ``x``, ``state`` and ``mask``; return the state to start from and the mask.

        Returns ``mask=None`` when every position is real, so fast paths can skip masking.
        """
        check_features(type(self).__name__, x, self.input_size, dims=3)
        batch, steps = x.shape[0], x.shape[1]
        if exporting() and not isinstance(steps, int):
            raise ValueError(
                f"{type(self).__name__} exports with a fixed sequence length: its time loop is unrolled "
                f"over T, so T cannot be a dynamic dimension. Mark only the batch dynamic "
                f"(dynamic_shapes={{'x': {{0: Dim('batch')}}}}) and export once per length you need"
            )
        state = self.check_state(state, batch, x)
        if mask is not None:
            if not isinstance(mask, Tensor) or mask.dtype != torch.bool:
                got = mask.dtype if isinstance(mask, Tensor) else type(mask).__name__
                raise ValueError(f"mask must be a bool tensor, got dtype {got}")
            if tuple(mask.shape) != (batch, steps):
                raise ValueError(
                    f"mask must have shape [batch, time] = {(batch, steps)}, got {tuple(mask.shape)}"
                )
            if mask.device != x.device:
                raise ValueError(f"mask is on {mask.device} but the inputs are on {x.device}")
            # one host sync for both questions: is it right padding, is anything padded
            holes = mask[:, 1:] > mask[:, :-1]
            has_holes, full = (bool(v) for v in torch.stack([holes.any(), mask.all()]).tolist())
            if has_holes:
                row, t = (int(v) for v in holes.nonzero()[0])
                raise ValueError(
                    f"mask must be right padding (True then False in each row); row {row} has a "
                    f"real position at t={t + 1} after a padded one"
                )
            if full:
                mask = None
        return state, mask

    def check_step(self, x_t: Tensor, state: S | None) -> S:
        """What ``step`` checks: ``x_t [B, input_size]`` and the state, as :meth:`check_inputs`."""
        check_features(type(self).__name__, x_t, self.input_size, dims=2)
        return self.check_state(state, x_t.shape[0], x_t)

    def forward(self, x: Tensor, state: S | None = None, mask: Tensor | None = None) -> tuple[Tensor, S]:
        """Run the layer over ``x [B, T, input_size]``; returns ``(y [B, T, output_size], final_state)``.

        This is the reference loop over ``step``.
        """
        state, mask = self.check_inputs(x, state, mask)
        outputs, state, _ = self._loop(x, state, mask, with_trace=False)
        return outputs, state

    def outputs(self, x: Tensor, state: S | None = None, mask: Tensor | None = None) -> Tensor:
        """``forward``'s outputs ``[B, T, output_size]`` without the final state, for callers that
        do not need it (a language model's training step).  A layer may compute them faster
        than ``forward`` (``LSTMLayer``/``GRULayer`` skip the packed sequences that each row's exact
        final state needs); the tests prove them equal to ``forward(...)[0]``, gradients
        included.  The default calls ``forward``."""
        return self(x, state, mask)[0]

    def trace(self, x: Tensor, state: S | None = None, mask: Tensor | None = None) -> dict[str, Tensor]:
        """Per-step diagnostics: ``output`` ``[B, T, output_size]``, every state field as
        ``state.<name>`` ``[B, T, ...]`` (the state after each step), and whatever ``trace_step``
        reports.  Padded positions hold zeros (outputs, diagnostics) or the frozen state.
        """
        state, mask = self.check_inputs(x, state, mask)
        outputs, _, extra = self._loop(x, state, mask, with_trace=True)
        return {"output": outputs, **extra}

    def _loop(
        self,
        x: Tensor,
        state: S,
        mask: Tensor | None,
        *,
        with_trace: bool,
        step: Callable[[Tensor, S], tuple[Tensor, S]] | None = None,
    ) -> tuple[Tensor, S, dict[str, Tensor]]:
        """The masked time loop shared by ``forward``, ``trace`` and fast paths.

        ``step`` replaces ``self.step`` (a fast path passes a step over precomputed inputs,
        e.g. ``x`` already projected); ``with_trace`` uses ``trace_step`` instead.
        """
        batch = x.shape[0]
        step = step or self._unchecked_step
        ys: list[Tensor] = []
        states: list[S] = []
        diags: list[dict[str, Tensor]] = []
        masks = mask.unbind(1) if mask is not None else [None] * x.shape[1]
        # unbind(1), never x[:, t]: indexing makes the backward pass O(T^2) (docs/ecosystem.md, trap 6).
        for x_t, m_t in zip(x.unbind(1), masks, strict=True):
            if with_trace:
                y_t, new, diag = self.trace_step(x_t, state)
            else:
                (y_t, new), diag = step(x_t, state), {}
            if m_t is not None:
                new = state_where(m_t, new, state)
                y_t = torch.where(m_t[:, None], y_t, torch.zeros_like(y_t))
                diag = {k: torch.where(m_t.view(-1, *([1] * (v.dim() - 1))), v, 0) for k, v in diag.items()}
            state = new
            ys.append(y_t)
            if with_trace:
                states.append(state)
                diags.append(diag)
        outputs = torch.stack(ys, 1) if ys else x.new_zeros(batch, 0, self.output_size)
        extra: dict[str, Tensor] = {}
        if with_trace and states:
            stacked = state_stack(states, 1)
            names = getattr(stacked, "_fields", None) or [str(i) for i in range(len(stacked))]
            for name, leaf in zip(names, stacked, strict=True):
                extra[f"state.{name}"] = leaf
            for key in diags[0]:
                extra[key] = torch.stack([d[key] for d in diags], 1)
        return outputs, state, extra


def _guard(cls: type) -> None:
    """Install the checks of :class:`MemoryLayer` on what ``cls`` itself defines."""
    own = cls.__dict__
    step_fn = own.get("step")
    if (
        step_fn is not None
        and not getattr(step_fn, "_memrnn_guarded", False)
        and not getattr(step_fn, "__isabstractmethod__", False)
    ):
        raw = own["step"]
        cls._unchecked_step = raw

        @functools.wraps(raw)
        def step(self, x_t, state=None):
            return raw(self, x_t, self.check_step(x_t, state))

        step._memrnn_guarded = True  # type: ignore[attr-defined]
        cls.step = autocast_in_layer_dtype(step)
    for name in ("forward", "outputs", "trace"):
        if name in own and not getattr(own[name], "_memrnn_guarded", False):
            fn = own[name]
            if name in ("forward", "outputs") and cls is not MemoryLayer:
                fn = _reference_when_asked(fn, outputs_only=name == "outputs")
            setattr(cls, name, autocast_in_layer_dtype(fn))


def _reference_when_asked(forward: Callable, outputs_only: bool = False) -> Callable:
    """Run the reference loop over ``step`` instead of the fast path inside
    :func:`memrnn.core.switch.reference_paths` (the one switch for tests, second derivatives and
    bit reproduction), and under ``torch.export`` (and ``torch.onnx.export(dynamo=True)``): plain
    tensor operations, unrolled over the fixed sequence length, where the fast paths hold
    hand-written autograd Functions, in-place buffers and host syncs that export cannot trace."""

    @functools.wraps(forward)
    def wrapper(self, x, state=None, mask=None):
        if exporting() or forcing_reference():
            out = MemoryLayer.forward(self, x, state, mask)
            return out[0] if outputs_only else out
        return forward(self, x, state, mask)

    return wrapper


_guard(MemoryLayer)
