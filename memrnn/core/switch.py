"""The one implementation switch: inside :func:`reference_paths` every memrnn layer runs its
reference loop over ``step`` and every op in ``memrnn.ops`` its reference implementation (for
tests, second derivatives and bit reproduction); outside it, the fastest exact path for the
device and dtype (:mod:`memrnn.ops.dispatch`)."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

_FORCE_REFERENCE = contextvars.ContextVar("memrnn_force_reference", default=False)


@contextlib.contextmanager
def reference_paths() -> Iterator[None]:
    """Run every memrnn layer and op on its reference loop inside this block."""
    token = _FORCE_REFERENCE.set(True)
    try:
        yield
    finally:
        _FORCE_REFERENCE.reset(token)


def forcing_reference() -> bool:
    """Whether :func:`reference_paths` is active."""
    return _FORCE_REFERENCE.get()
