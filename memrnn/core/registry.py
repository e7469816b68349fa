"""A small registry of layers, so the test suite and notebooks can build any layer by name.

``register_layer(name, tiny=...)`` records a class with a tiny, complete set of constructor
arguments; ``create_layer(name, **overrides)`` builds it; ``list_layers()`` lists the names.
Configs do not use the registry: they name classes by ``class_path`` (LightningCLI).

The registry is a plain dict, filled by the modules that define layers as they are imported;
``import memrnn`` (which any ``import memrnn.…`` runs first) imports :mod:`memrnn.layers` and
:mod:`memrnn.constructions`, so every built-in layer is registered before it can be asked for.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from memrnn.core.serialization import allow_in_checkpoints

T = TypeVar("T", bound=type)

_REGISTRY: dict[str, tuple[type, dict[str, Any]]] = {}


def register_layer(name: str, *, tiny: dict[str, Any], cls: type | None = None) -> Callable[[T], T] | type:
    """Register ``cls`` (or the decorated class) under ``name`` with tiny constructor arguments.

    The same class may be registered under several names with different ``tiny`` arguments
    (for example one per activation), so the interface suite covers each variant.
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
    """Build the layer registered as ``name`` from its tiny arguments updated by ``overrides``."""
    cls = layer_class(name)
    kwargs = {**_REGISTRY[name][1], **overrides}
    return cls(**kwargs)
