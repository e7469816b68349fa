"""A small registry of layers, so the test suite and notebooks can build any layer by name.

``register_layer(name, tiny=...)`` records a class with a tiny, complete set of constructor
arguments; ``create_layer(name, **overrides)`` builds it from those tiny arguments updated by the
overrides; ``list_layers()`` lists the names.  Configs do not use the registry: they name classes
by ``class_path`` (LightningCLI).

``create_layer(name)`` alone gives the tiny test layer (input size 3, a few units, a stack of
depth 4, ...).  With overrides, the tiny values the overrides leave in place are still used, and
said: a ``UserWarning`` names each tiny size that differs from the class's own default (or fills
an argument without one, like ``input_size``), e.g. ``create_layer("superposition_lstm",
input_size=16, hidden_size=64)`` keeps ``depth=4, width=2`` where ``StackRNN`` defaults to
``depth=32, width=None``.  Pass those arguments too, or build the class directly, to choose them.

The registry is a plain dict, filled by the modules that define layers as they are imported;
``import memrnn`` (which any ``import memrnn.…`` runs first) imports :mod:`memrnn.layers` and
:mod:`memrnn.constructions`, so every built-in layer is registered before it can be asked for.
"""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Callable
from typing import Any, TypeVar

from memrnn.core.checks import check_kwargs
from memrnn.core.serialization import allow_in_checkpoints

T = TypeVar("T", bound=type)

_REGISTRY: dict[str, tuple[type, dict[str, Any]]] = {}
#: overrides that choose no size: ``create_layer(name, dtype=torch.float64)`` is the tiny layer
#: in float64, so it is not told about the tiny values
_FACTORY_KWARGS = ("device", "dtype")


def register_layer(name: str, *, tiny: dict[str, Any], cls: type | None = None) -> Callable[[T], T] | type:
    """Register ``cls`` (or the decorated class) under ``name`` with tiny constructor arguments.

    The same class may be registered under several names with different ``tiny`` arguments
    (for example one per activation), so the interface suite covers each variant.  The string
    and boolean values of ``tiny`` name the variant (``memory="queue"``, ``activation="relu"``);
    its numbers (and ``None``s, lists and dicts) are test sizes, which
    :func:`create_layer` reports when overrides leave them in place.
    """

    def deco(c: T) -> T:
        if name in _REGISTRY and _REGISTRY[name][0] is not c:
            raise ValueError(f"layer name {name!r} is already registered for {_REGISTRY[name][0].__name__}")
        _REGISTRY[name] = (c, dict(tiny))
        allow_in_checkpoints(c)
        return c

    return deco(cls) if cls is not None else deco


def list_layers() -> list[str]:
    """Names of every registered layer, sorted."""
    return sorted(_REGISTRY)


def layer_class(name: str) -> type:
    """The class registered under ``name``."""
    if name not in _REGISTRY:
        raise ValueError(f"unknown layer {name!r}; registered layers: {', '.join(sorted(_REGISTRY))}")
    return _REGISTRY[name][0]


def create_layer(name: str, **overrides: Any) -> Any:
    """Build the layer registered as ``name`` from its tiny arguments updated by ``overrides``.

    ``create_layer(name)`` (or with only ``device``/``dtype``) is the registry's tiny test
    layer.  When other overrides are given, each tiny test size they leave in place that
    differs from the class's own default, or fills an argument without a default, is still
    used and named in a ``UserWarning`` with the class default: ``create_layer("lstm",
    hidden_size=16)`` reads 3 input features (the tiny ``input_size=3``).  The variant's own
    choices (string and boolean values such as ``memory="queue"``) are not reported.  An
    override the class does not take is a ``ValueError`` naming it and the arguments it takes.
    """
    cls = layer_class(name)
    tiny = _REGISTRY[name][1]
    if not any(p.kind is p.VAR_KEYWORD for p in inspect.signature(cls.__init__).parameters.values()):
        check_kwargs(f"create_layer({name!r}, ...): {cls.__name__}", cls, overrides)
    if any(k not in _FACTORY_KWARGS for k in overrides):
        _warn_tiny_values(name, cls, {k: v for k, v in tiny.items() if k not in overrides})
    return cls(**{**tiny, **overrides})


def _warn_tiny_values(name: str, cls: type, kept: dict[str, Any]) -> None:
    """Warn about the tiny test sizes in ``kept`` that differ from ``cls``'s defaults."""
    try:
        params = inspect.signature(cls).parameters
    except (TypeError, ValueError):  # no signature to compare with: nothing to say
        return
    missing = inspect.Parameter.empty
    used, defaults, required = [], [], []
    for key in sorted(kept):
        value = kept[key]
        if isinstance(value, (str, bool)):
            continue  # the registered variant's own choice (memory="queue", activation="relu")
        p = params.get(key)
        default = missing if p is None else p.default
        if default is not missing:
            try:
                same = bool(default == value)
            except Exception:  # tensors and other values without a plain equality
                same = False
            if same:
                continue
            defaults.append(f"{key}={default!r}")
        else:
            required.append(key)
        used.append(f"{key}={value!r}")
    if not used:
        return
    none = f"no default for {', '.join(required)}" if required else ""
    if defaults:
        said = f"{cls.__name__}'s defaults: {', '.join(defaults)}" + (f"; {none}" if none else "")
    else:
        said = f"{cls.__name__} has {none}"
    warnings.warn(
        f"create_layer({name!r}, ...) used the registry's tiny test values {', '.join(used)} "
        f"({said}); pass them to choose, or build {cls.__name__} directly",
        UserWarning,
        stacklevel=3,
    )
