"""Which implementation of a recurrence runs: one rule for every mechanism in ``memrnn.ops``.

Each mechanism has a reference loop under autograd (obviously right; double backward works), a
fast path of torch operations with a hand-written backward (``"cpu"``; it also runs on GPUs), and
Triton kernels (``"triton"``: one launch per sequence and direction).  :func:`choose` picks

* ``"reference"`` inside :func:`memrnn.core.switch.reference_paths` (tests, second derivatives, bit reproduction);
* ``"triton"`` for CUDA tensors of float32, bfloat16 or float16 (or the dtypes a mechanism's
  kernels name) when Triton is importable and the mechanism's kernel covers the options (other
  dtypes take ``"cpu"``);
* ``"native"`` for CPU tensors of float32 or float64 when the mechanism has a C++ time loop
  (:mod:`memrnn.ops.native`: the same hand-written BPTT as ``"cpu"``, its loops compiled) and it
  built (``MEMRNN_NATIVE=0`` turns it off);
* ``"cpu"`` otherwise.
An explicit ``impl`` wins; ``"triton"`` on CPU tensors needs Triton's interpreter
(``TRITON_INTERPRET=1``, set before memrnn's kernels are first imported), as the tests use it.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import os
from collections.abc import Iterator

import torch
from torch import Tensor

from memrnn.core.switch import forcing_reference, reference_paths
from memrnn.ops.native import disabled as native_disabled
from memrnn.ops.native import native_available

IMPLS = ("reference", "cpu", "native", "triton")
_FORCED = contextvars.ContextVar("memrnn_forced_impl", default=None)
__all__ = [
    "IMPLS",
    "choose",
    "forcing_reference",
    "implementation",
    "interpreting",
    "native_available",
    "reference_paths",
    "triton_available",
]


@contextlib.contextmanager
def implementation(name: str) -> Iterator[None]:
    """Force one implementation for every op inside the block (tests and debugging: e.g. the
    Triton kernels on CPU tensors under ``TRITON_INTERPRET=1``).  Ops whose kernels do not cover
    a case (a vocabulary too large, an activation without a kernel) still take the CPU path."""
    if name not in IMPLS:
        raise ValueError(f"unknown implementation {name!r}; choose one of {', '.join(IMPLS)}")
    token = _FORCED.set(name)
    try:
        yield
    finally:
        _FORCED.reset(token)


@functools.cache
def triton_available() -> bool:
    """Whether ``import triton`` works here."""
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


def interpreting() -> bool:
    """Whether Triton's interpreter is on (kernels run on CPU tensors)."""
    return os.environ.get("TRITON_INTERPRET", "") not in ("", "0")


#: the storage dtypes memrnn's Triton kernels take unless a mechanism says otherwise
TRITON_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def choose(
    x: Tensor,
    impl: str | None = None,
    *,
    triton_ok: bool = True,
    native_ok: bool = False,
    triton_dtypes: tuple[torch.dtype, ...] = TRITON_DTYPES,
    triton_default: bool = True,
) -> str:
    """The implementation for inputs ``x`` (module docstring); ``native_ok``: the mechanism has a
    C++ loop for these options; ``triton_dtypes``: the dtypes its kernels take on CUDA (the
    nondeterministic stack's: float32 and float64); ``triton_default``: whether CUDA tensors go
    to the kernels unforced (False: only inside ``implementation("triton")``)."""
    if impl is None and _FORCED.get() is not None:
        impl = _FORCED.get()
        if (impl == "triton" and not triton_ok) or (impl == "native" and not native_ok):
            impl = "cpu"
    if impl is not None:
        if impl not in IMPLS:
            raise ValueError(f"unknown implementation {impl!r}; choose one of {', '.join(IMPLS)}")
        if impl == "native":
            _check_native(x, native_ok)
        if impl == "triton":
            if not triton_available():
                raise ValueError("impl='triton' needs Triton (pip install triton)")
            if x.device.type != "cuda" and not interpreting():
                raise ValueError(
                    f"impl='triton' on {x.device.type} tensors needs Triton's interpreter (TRITON_INTERPRET=1)"
                )
        return impl
    if forcing_reference():
        return "reference"
    if (
        triton_ok
        and triton_default
        and x.device.type == "cuda"
        and x.dtype in triton_dtypes
        and triton_available()
    ):
        return "triton"
    if native_ok and _native_fits(x) and native_available():
        return "native"
    return "cpu"


def _native_fits(x: Tensor) -> bool:
    return x.device.type == "cpu" and x.dtype in (torch.float32, torch.float64)


def _check_native(x: Tensor, native_ok: bool) -> None:
    if not native_ok:
        raise ValueError("impl='native': this op has no C++ loop for these options; use 'cpu'")
    if not _native_fits(x):
        raise ValueError(
            f"impl='native' runs on CPU tensors of float32 or float64, got {x.device.type} {x.dtype}"
        )
    if not native_available():
        why = "MEMRNN_NATIVE=0" if native_disabled() else "its build failed (see the warning)"
        raise ValueError(f"impl='native': memrnn's C++ loops are off here ({why})")
