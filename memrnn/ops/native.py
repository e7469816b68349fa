"""memrnn's C++ time loops for CPU tensors, compiled on first use.

A recurrence whose step is a few small matrix products and a few hundred elementwise operations
spends most of its time, in Python, dispatching them one at a time; its C++ loop makes the same
calls from C++ and fuses the elementwise parts into plain loops.  The sources live beside their
mechanism (``memrnn/ops/stack_rnn/native.cpp``) and are compiled by
:func:`torch.utils.cpp_extension.load` the first time a process needs them (about 10 s; cached
under torch's extension directory, ``TORCH_EXTENSIONS_DIR``, and rebuilt when a source changes).
They use only ATen and ``TORCH_LIBRARY`` (no pybind11), so the build needs a C++ compiler and
ninja, nothing else.

Where the build cannot run (no compiler, no ninja) memrnn warns once and every mechanism keeps
its Python loop (the same arithmetic, slower).  ``MEMRNN_NATIVE=0`` turns the C++ loops off;
:func:`memrnn.ops.dispatch.implementation` (``"cpu"`` or ``"native"``) picks one per block.
"""

from __future__ import annotations

import functools
import os
import threading
import warnings
from pathlib import Path

import torch

_SOURCES = (Path(__file__).parent / "stack_rnn" / "native.cpp",)
_LOCK = threading.Lock()
__all__ = ["disabled", "load", "native_available"]


def disabled() -> bool:
    """Whether ``MEMRNN_NATIVE=0`` (or ``false``/``off``) turns the C++ loops off."""
    return os.environ.get("MEMRNN_NATIVE", "1").strip().lower() in ("0", "false", "off", "no")


@functools.cache
def _build() -> object | None:
    from torch.utils import cpp_extension

    try:
        cpp_extension.load(
            name="memrnn_native",
            sources=[str(p) for p in _SOURCES],
            extra_cflags=["-O3", "-fopenmp-simd"],
            is_python_module=False,
            verbose=os.environ.get("MEMRNN_NATIVE_VERBOSE", "") not in ("", "0"),
        )
    except Exception as e:  # any build failure: no compiler, no ninja, ...
        warnings.warn(
            f"memrnn: could not build its C++ loops ({type(e).__name__}: {str(e).strip()[-600:]}); "
            "the stack RNNs run their Python loops on CPU (same results, slower). Install a C++ "
            "compiler and ninja (pip install ninja), or set MEMRNN_NATIVE=0 to silence this.",
            RuntimeWarning,
            stacklevel=4,
        )
        return None
    return torch.ops.memrnn_native


def load() -> object | None:
    """The compiled ops (``torch.ops.memrnn_native``), building them on first use; None when
    turned off or when the build failed (warned once)."""
    if disabled():
        return None
    with _LOCK:
        return _build()


def native_available() -> bool:
    """Whether the C++ loops are on and built (builds them on first call)."""
    return load() is not None
