"""Checks every ``MemoryLayer`` applies to what it is given, and its dtype policy.

* **Inputs** are floating ``[batch, time, input_size]`` (``[batch, input_size]`` for ``step``);
  integer inputs are refused with a pointer to an embedding or one-hot vectors.
* **Dtype policy** (one for every layer): a layer computes in its own floating dtype (the
  dtype of its parameters, as ``torch.nn`` layers do); inputs and states of another floating
  dtype raise a ``ValueError`` naming both.  Frozen layers whose weights are constants (the
  reservoirs) set ``dtype_policy = "follow"`` and compute in the input's dtype instead.
* **Autocast** (CPU or CUDA, bf16 or fp16): inputs of any floating dtype are accepted, and the
  recurrence, its state and the fused paths' accumulation stay in the layer's dtype (float32):
  a counter or a stack kept in bf16 stops being exact after a few hundred steps (bf16 has 8
  significand bits: 256 + 1 rounds to 256), and fp16 overflows at 65,504.  Outputs come back in
  the layer's dtype; the layers around it (``nn.Linear`` heads) run in the autocast dtype as
  usual.  ``LSTMLayer``/``GRULayer`` on CUDA are the exception: cuDNN runs them in the autocast
  dtype natively (as ``nn.LSTM``), and their final state is cast back to the layer's dtype.
* **States** are checked like inputs: the type (the layer's state ``NamedTuple``; a plain tuple
  or list of the fields in order is accepted and converted), the batch size, every field's
  shape, dtype and device, each against ``initial_state``; the message names the field and
  the expected layout.  A bare tensor given as the state that looks like a mask (bool, or
  ``[B, T]`` like the inputs) is named as one: ``forward(x, state=None, mask=None)``.
"""

from __future__ import annotations

import functools
import inspect
import math
import numbers
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor


class StateTemplate:
    """The structure of a layer's state, read once from ``initial_state(1)``: the state type,
    its field names, and each field's shape after the batch and whether it is floating."""

    def __init__(self, example: Any) -> None:
        self.cls = type(example)
        self.fields: tuple[str, ...] = tuple(getattr(example, "_fields", ())) or tuple(
            str(i) for i in range(len(example))
        )
        self.shapes = tuple(tuple(t.shape[1:]) for t in example)
        self.floating = tuple(t.is_floating_point() for t in example)
        self.dtypes = tuple(t.dtype for t in example)

    def layout(self, batch: int | str = "B") -> str:
        """``LSTMState(h [B, 1, 5], c [B, 1, 5])``."""
        parts = [
            f"{name} [{', '.join(str(d) for d in (batch, *shape))}]"
            for name, shape in zip(self.fields, self.shapes, strict=True)
        ]
        return f"{self.cls.__name__}({', '.join(parts)})"


def _shape(t: Any) -> str:
    return f"[{', '.join(str(d) for d in t.shape)}]" if isinstance(t, Tensor) else type(t).__name__


def check_state(
    layer_name: str,
    template: StateTemplate,
    state: Any,
    batch: int,
    *,
    device: torch.device,
    dtype: torch.dtype,
    steps: int | None = None,
) -> Any:
    """Return ``state`` as the layer's state type after checking it against ``template``;
    raise ``ValueError`` naming the first mismatch and the expected layout.

    ``dtype`` is the dtype the layer computes in (every floating field must have it);
    ``device`` the inputs' device; ``steps`` the inputs' ``T`` (``forward``; ``None`` for
    ``step``): a bare tensor given as the state that is bool, or ``[B, T]``, is taken for the
    mask it looks like, and the message says to pass it as ``mask=``.
    """
    expected = template.layout(batch)
    where = f"{layer_name} expects a state {expected} (batch first; a plain tuple in this order works too)"
    if isinstance(state, Tensor):
        got = f"a bare tensor of shape {_shape(state)} ({state.dtype})"
        masklike = state.dtype == torch.bool or (
            steps is not None
            and tuple(state.shape) == (batch, steps)
            and (batch, steps) != (batch, *template.shapes[0])
        )
        if masklike:
            call = (
                f"pass it as mask=... ({layer_name}.forward(x, state=None, mask=None))"
                if steps is not None
                else f"step(x_t, state) takes no mask: run {layer_name}.forward(x, mask=mask) over the sequence"
            )
            layout = "[B, T]" if steps is not None else "[B]"
            raise ValueError(
                f"{layer_name}'s second argument is the state; got {got}, which looks like a mask {layout}: {call}"
            )
        if len(template.fields) == 1:
            raise ValueError(f"{where}; got {got}: wrap it as ({template.fields[0]},)")
        raise ValueError(
            f"{where}; got {got}: the state has {len(template.fields)} fields "
            f"({', '.join(template.fields)}), pass them all as {template.cls.__name__}"
            f"({', '.join(template.fields)}) or a tuple in this order"
        )
    if not isinstance(state, (tuple, list)):
        raise ValueError(f"{where}; got {type(state).__name__}")
    is_named = hasattr(state, "_fields")
    if is_named and not isinstance(state, template.cls):
        got = f"{type(state).__name__}({', '.join(f'{n} {_shape(t)}' for n, t in zip(state._fields, state, strict=True))})"
        raise ValueError(f"{where}; got the state of another layer, {got}")
    if len(state) != len(template.fields):
        raise ValueError(f"{where}; got a {type(state).__name__} of {len(state)} fields")
    if not is_named:
        state = template.cls(*state)
    for name, t, shape, floating, dt in zip(
        template.fields, state, template.shapes, template.floating, template.dtypes, strict=True
    ):
        if not isinstance(t, Tensor):
            raise ValueError(f"{where}; field {name!r} is a {type(t).__name__}, not a tensor")
        if tuple(t.shape) != (batch, *shape):
            if t.dim() == len(shape) + 1 and tuple(t.shape[1:]) == shape:
                raise ValueError(
                    f"{where}; the state has batch size {t.shape[0]} but the inputs have batch size {batch}"
                )
            hint = ""
            if t.dim() == len(shape) + 1 and t.dim() >= 2 and tuple(t.shape) == (shape[0], batch, *shape[1:]):
                hint = (
                    " (that is torch's [num_layers, batch, hidden] layout of nn.LSTM/nn.GRU states: "
                    "memrnn states are batch first, use .transpose(0, 1))"
                )
            raise ValueError(
                f"{where}; field {name!r} has shape {_shape(t)}, expected "
                f"[{', '.join(str(d) for d in (batch, *shape))}]{hint}"
            )
        want = dtype if floating else dt
        if t.dtype != want:
            raise ValueError(
                f"{where}; field {name!r} has dtype {t.dtype} but the layer computes in {want} "
                f"(convert the state, e.g. state_map(lambda t: t.to({want}), state))"
            )
        if t.device != device:
            raise ValueError(f"{where}; field {name!r} is on {t.device} but the inputs are on {device}")
    return state


def check_features(layer_name: str, x: Any, input_size: int, *, dims: int) -> None:
    """``x`` is a floating tensor with ``dims`` dimensions whose last one is ``input_size``."""
    layout = "[batch, time, {}]" if dims == 3 else "[batch, {}]"
    layout = layout.format(input_size)
    if not isinstance(x, Tensor) or x.dim() != dims:
        shape = _shape(x)
        raise ValueError(f"{layer_name} expects inputs {layout}, got {shape}")
    if x.shape[-1] != input_size:
        raise ValueError(
            f"{layer_name} has input_size={input_size} but the inputs have {x.shape[-1]} features "
            f"(shape {tuple(x.shape)})"
        )
    if not x.is_floating_point():
        raise ValueError(
            f"{layer_name} reads float features {layout}, got {x.dtype} inputs: token ids need an "
            f"embedding (nn.Embedding(vocab, {input_size})) or one-hot vectors "
            f"(F.one_hot(ids, {input_size}).float())"
        )


def check_dtype(layer_name: str, x: Tensor, layer_dtype: torch.dtype | None, policy: str) -> torch.dtype:
    """The dtype the layer computes in for inputs ``x`` (see the module docstring); raises
    naming both dtypes when the policy is ``"match"`` and they differ."""
    if policy == "follow" or layer_dtype is None:
        return x.dtype
    if x.dtype != layer_dtype and not torch.is_autocast_enabled(x.device.type):
        raise ValueError(
            f"{layer_name} has {layer_dtype} parameters but the inputs are {x.dtype}: convert the "
            f"layer (layer.to({x.dtype})) or the inputs (x.to({layer_dtype})); under torch.autocast "
            f"any floating input is accepted"
        )
    return layer_dtype


def exporting() -> bool:
    """Whether ``torch.export`` is tracing (layers then take their reference loops)."""
    is_exporting = getattr(torch.compiler, "is_exporting", None)
    return bool(is_exporting and is_exporting())


def autocast_in_layer_dtype(fn: Callable) -> Callable:
    """Wrap a layer's ``forward``/``step``/``trace(x, state, ...)``: under autocast (on ``x``'s
    device type) run it with autocast off, ``x`` and the floating fields of a given state cast
    to the layer's dtype (module docstring), unless the layer runs natively under autocast
    (``layer.native_autocast(x)``)."""

    @functools.wraps(fn)
    def wrapper(self, x, state=None, *args, **kwargs):
        if not isinstance(x, Tensor) or not x.is_floating_point():
            return fn(self, x, state, *args, **kwargs)
        kind = x.device.type
        if not torch.is_autocast_enabled(kind) or self.native_autocast(x):
            return fn(self, x, state, *args, **kwargs)
        dtype = self.layer_dtype() or torch.float32
        if isinstance(state, (tuple, list)):
            fields = [t.to(dtype) if isinstance(t, Tensor) and t.is_floating_point() else t for t in state]
            state = type(state)(*fields) if hasattr(state, "_fields") else type(state)(fields)
        with torch.autocast(kind, enabled=False):
            return fn(self, x.to(dtype), state, *args, **kwargs)

    wrapper._memrnn_guarded = True  # type: ignore[attr-defined]
    return wrapper


# -- constructor arguments ---------------------------------------------------------------------
def _integer(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def positive_int(name: str, value: Any) -> int:
    """``int(value)`` if it is an integer >= 1 (Python or NumPy, not a bool), else a
    ``ValueError`` naming ``name`` and the value."""
    if not _integer(value) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def nonnegative_int(name: str, value: Any) -> int:
    """``int(value)`` if it is an integer >= 0 (Python or NumPy, not a bool), else a
    ``ValueError`` naming ``name`` and the value."""
    if not _integer(value) or value < 0:
        raise ValueError(f"{name} must be a non-negative integer, got {value!r}")
    return int(value)


def finite_float(name: str, value: Any, *, positive: bool = False, nonnegative: bool = False) -> float:
    """``float(value)`` if it is a finite real number (and > 0 or >= 0 when asked), else
    ``ValueError`` naming ``name`` (NaN and infinities included: they make every output NaN)."""
    if isinstance(value, bool) or (
        not isinstance(value, (int, float)) and not (isinstance(value, Tensor) and value.numel() == 1)
    ):
        raise ValueError(f"{name} must be a real number, got {value!r}")
    v = float(value)
    if not math.isfinite(v):
        raise ValueError(f"{name} must be finite, got {v}")
    if positive and not v > 0:
        raise ValueError(f"{name} must be positive, got {v}")
    if nonnegative and not v >= 0:
        raise ValueError(f"{name} must be >= 0, got {v}")
    return v


def check_kwargs(what: str, cls: type, kwargs: dict[str, Any], *, given: tuple[str, ...] = ()) -> None:
    """Raise ``ValueError`` naming ``what`` and each key of ``kwargs`` that ``cls(...)`` does not
    take (or that the caller already passes: ``given``), with the keys it does take, instead of
    the ``TypeError`` from deep inside the constructor.  A removed implementation flag
    (``fused``, ``bptt``) raises :func:`check_removed_arguments`'s ``TypeError`` naming its
    replacement."""
    check_removed_arguments(what, kwargs)
    params = inspect.signature(cls.__init__).parameters
    named = [
        n
        for n, p in params.items()
        if n != "self" and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and n not in given
    ]
    taken = [k for k in kwargs if k in given]
    unknown = [k for k in kwargs if k not in named and k not in given]
    if taken:
        raise ValueError(
            f"{what}: {', '.join(map(repr, taken))} is set by the layer itself; pass it to the layer"
        )
    if unknown:
        raise ValueError(
            f"{what} has no argument {', '.join(map(repr, unknown))}; it takes {', '.join(named) or 'none'}"
        )


# -- implementation flags removed by the one switch (issue 66) --------------------------------------
#: constructor arguments that once chose an implementation, and what replaces each (refused for
#: one release with this message, then they become unknown arguments like any other)
REMOVED_ARGUMENTS: dict[str, str] = {
    "fused": (
        "use memrnn.reference_paths() (the reference loop, double backward) or "
        "memrnn.ops.dispatch.implementation('cpu'|'native'|'triton')"
    ),
    "bptt": (
        "the GRU's hand-written backpropagation through time is memrnn.ops.dispatch.implementation('bptt') "
        "(or memrnn.ops.gru.gru_sequence(..., impl='bptt')); the default stays torch's own GRU kernel"
    ),
}


def check_removed_arguments(what: str, kwargs: dict[str, Any]) -> None:
    """A ``TypeError`` naming ``what``, each removed implementation flag among ``kwargs``
    (:data:`REMOVED_ARGUMENTS`) and its replacement; nothing when there is none.  A checkpoint
    that stores such a flag loads after ``python -m memrnn.lit.upgrade <checkpoint>``."""
    removed = [k for k in kwargs if k in REMOVED_ARGUMENTS]
    if removed:
        why = "; ".join(f"{k}= was removed: {REMOVED_ARGUMENTS[k]}" for k in removed)
        raise TypeError(
            f"{what}: {why}. Nothing but memrnn.reference_paths() and implementation(...)/impl= chooses "
            f"an implementation; a checkpoint or config that stores {', '.join(removed)} loads after "
            f"`python -m memrnn.lit.upgrade <checkpoint>` (or drop the key from the config)"
        )


def refuses_removed_arguments(cls: type) -> type:
    """Class decorator: ``cls(...)`` given a removed implementation flag (``fused=``, ``bptt=``)
    raises :func:`check_removed_arguments`'s error instead of Python's bare "unexpected keyword".
    The signature seen by ``inspect`` (LightningCLI, the registry) stays ``cls.__init__``'s own."""
    init = cls.__init__

    @functools.wraps(init)
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        check_removed_arguments(type(self).__name__, kwargs)
        init(self, *args, **kwargs)

    cls.__init__ = __init__  # type: ignore[misc]
    return cls
