"""Layers built to run inside the one implementation switch (issue 66): what the removed
``fused=False``/``bptt=True`` variants were, now the same classes under :func:`memrnn.reference_paths`
or ``memrnn.ops.dispatch.implementation(...)``."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any


def under(
    cls: Callable[..., Any], context: Callable[[], contextlib.AbstractContextManager]
) -> Callable[..., Any]:
    """A constructor of ``cls`` layers whose ``forward``/``outputs``/``trace`` run inside
    ``context()``: :func:`memrnn.reference_paths` (the reference loops) or an implementation
    (``implementation("bptt")``: the GRU's hand-written BPTT)."""

    def make(*args: Any, **kwargs: Any) -> Any:
        layer = cls(*args, **kwargs)
        for name in ("forward", "outputs", "trace"):
            method = getattr(layer, name)

            def run(*a: Any, _method: Callable = method, **k: Any) -> Any:
                with context():
                    return _method(*a, **k)

            setattr(layer, name, run)
        return layer

    return make
