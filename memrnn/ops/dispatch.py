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
* ``"cpu"`` otherwise (for the layers that wrap torch's own recurrent modules, ``LSTMLayer`` and
  ``GRULayer``, that is torch's kernel: ATen on CPU, cuDNN on CUDA).
``"bptt"`` is never picked unforced: it names a hand-written backpropagation through time in torch
operations where a mechanism's ``"cpu"`` path is torch's own kernel (the GRU's
:class:`memrnn.ops.gru.cpu.GRUSequence`); every other mechanism's hand-written backward is its
``"cpu"`` path, which ``"bptt"`` then takes.
An explicit ``impl`` wins; ``"triton"`` on CPU tensors needs Triton's interpreter
(``TRITON_INTERPRET=1``, set before memrnn's kernels are first imported), as the tests use it.

These are the only ways to choose: no layer takes an implementation flag (``fused=``/``bptt=`` were
removed; :data:`memrnn.core.checks.REMOVED_ARGUMENTS`).  The heuristics that pick between exact
paths by size live here, each with a name and a test (:func:`torch_rnn_chunk`, :func:`use_buckets`).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import os
from collections.abc import Iterator
from typing import Protocol

import torch
from torch import Tensor

from memrnn.core.switch import forcing_reference, reference_paths
from memrnn.ops.native import disabled as native_disabled
from memrnn.ops.native import native_available

IMPLS = ("reference", "cpu", "native", "triton", "bptt")
_FORCED = contextvars.ContextVar("memrnn_forced_impl", default=None)
__all__ = [
    "IMPLS",
    "choose",
    "forcing_reference",
    "implementation",
    "interpreting",
    "native_available",
    "reference_paths",
    "torch_rnn_chunk",
    "triton_available",
    "use_buckets",
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
    bptt_ok: bool = False,
) -> str:
    """The implementation for inputs ``x`` (module docstring); ``native_ok``: the mechanism has a
    C++ loop for these options; ``bptt_ok``: it has a ``"bptt"`` path besides its ``"cpu"`` one
    (elsewhere a forced ``"bptt"`` runs ``"cpu"``, the same kind of path); ``triton_dtypes``: the dtypes its kernels take on CUDA (the
    nondeterministic stack's: float32 and float64); ``triton_default``: whether CUDA tensors go
    to the kernels unforced (False: only inside ``implementation("triton")``)."""
    if impl is None and _FORCED.get() is not None:
        impl = _FORCED.get()
        if (
            (impl == "triton" and not triton_ok)
            or (impl == "native" and not native_ok)
            or (impl == "bptt" and not bptt_ok)
        ):
            impl = "cpu"
    if impl is not None:
        if impl not in IMPLS:
            raise ValueError(f"unknown implementation {impl!r}; choose one of {', '.join(IMPLS)}")
        if impl == "native":
            _check_native(x, native_ok)
        if impl == "bptt" and not bptt_ok:
            raise ValueError("impl='bptt': this op's hand-written backward is its 'cpu' path; use 'cpu'")
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


#: steps per call of torch's fused RNN kernels on CPU (:func:`torch_rnn_chunk`)
TORCH_RNN_CHUNK = 256


def torch_rnn_chunk(x: Tensor, *, bidirectional: bool = False) -> int | None:
    """How many steps of ``x [B, T, n]`` each call of torch's fused RNN kernel (``nn.LSTM``,
    ``nn.GRU``, as ``LSTMLayer``/``GRULayer`` run them) takes, the state carried between calls;
    ``None``: the whole sequence in one call.

    torch's CPU kernels slow down per step once a sequence's workspace outgrows the caches
    (``nn.LSTM``, hidden 64, batch 64 on a 2-core CPU: 2.9x the time for 2x the steps from T 512 to
    1024); chunks of :data:`TORCH_RNN_CHUNK` steps keep time linear in T
    (``benchmarks/results/cpu-2core.md``) and change no number (``tests/layers/test_gated.py``).
    CUDA takes one call (chunks of 256 ran T 1024 at 0.43-0.52x plain cuDNN on an H100), and so
    does a bidirectional module (its backward direction needs the whole sequence) or a sequence
    no longer than one chunk."""
    if x.device.type != "cpu" or bidirectional or x.shape[1] <= TORCH_RNN_CHUNK:
        return None
    return TORCH_RNN_CHUNK


#: the bucket slots per batch row up to which :func:`use_buckets` takes the buckets
BUCKET_SLOTS_PER_ROW = 4


class BucketSizes(Protocol):
    """What :func:`use_buckets` reads of a :class:`memrnn.ops.buckets.TokenBuckets`."""

    num_symbols: int
    capacity: int


def use_buckets(buckets: BucketSizes, batch: int) -> bool:
    """Whether the second-order RNN's and the nnPDA's ``"cpu"`` paths run their bucketed
    Functions (:mod:`memrnn.ops.buckets`) rather than their reference loops: buckets beat
    gathering ``B`` weight slices unless the vocabulary is large and sparse (``m·c`` slots, ``m``
    symbols of at most ``c`` rows each, against :data:`BUCKET_SLOTS_PER_ROW` per row of the
    ``batch``, a batch of 0 counted as 1).  Both paths are exact."""
    return buckets.num_symbols * buckets.capacity <= BUCKET_SLOTS_PER_ROW * max(batch, 1)


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
