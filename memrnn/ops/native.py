"""memrnn's C++ time loops for CPU tensors, compiled on first use.

A recurrence whose step is a few small matrix products and a few hundred elementwise operations
spends most of its time, in Python, dispatching them one at a time; its C++ loop makes the same
calls from C++, fuses the elementwise parts into plain loops, and gives the large products that do
not lie on the recurrence (the input projection, the weight gradients) to a second thread when
torch has one.  The sources live beside their mechanism (``memrnn/ops/stack_rnn/native.cpp``) and
are compiled by :func:`torch.utils.cpp_extension.load` the first time a process needs them (about
15 s; cached under torch's extension directory, ``TORCH_EXTENSIONS_DIR``, and rebuilt when a
source changes).  They use only ATen and ``TORCH_LIBRARY`` (no pybind11), so the build needs a
C++ compiler and ninja, nothing else.  On x86-64 Linux the build is tuned for the CPU it runs on
and cached under a name made from the CPU's instruction sets, so machines of different kinds can
share one cache.

Where the build cannot run (no compiler, no ninja) memrnn warns once and every mechanism keeps
its Python loop (the same arithmetic, slower).  ``MEMRNN_NATIVE=0`` turns the C++ loops off;
:func:`memrnn.ops.dispatch.implementation` (``"cpu"`` or ``"native"``) picks one per block.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import platform
import sys
import threading
import warnings
from pathlib import Path

import torch

#: one extension; the object files are named after the sources, so each name is its own
_SOURCES = (
    Path(__file__).parent / "stack_rnn" / "native.cpp",
    Path(__file__).parent / "nondeterministic" / "native_step.cpp",
)
_LOCK = threading.Lock()
__all__ = ["HEAP_MALLOC_ENV", "cpu_description", "disabled", "load", "native_available"]

#: glibc's heap kept whole: no ``mmap`` for large blocks, no trimming.  By default glibc hands a
#: freed block over 32 MB back to the kernel and faults it in again, page by page, on the next
#: batch (``benchmarks/run.py``'s docstring); with this an RNS-RNN batch of DuSell & Chiang's
#: lengths (forward, backward and Adam on one core) took 369 ms against 409 (README, "Suites").
#: The benchmarks re-run themselves with it and the sweeps start their cell processes with it
#: (:func:`memrnn.suite.runner.worker_env`).
HEAP_MALLOC_ENV = {"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": str(2**36)}


def disabled() -> bool:
    """Whether ``MEMRNN_NATIVE=0`` (or ``false``/``off``) turns the C++ loops off."""
    return os.environ.get("MEMRNN_NATIVE", "1").strip().lower() in ("0", "false", "off", "no")


def _flags() -> list[list[str]]:
    """Compiler flags to try in order: tuned for this CPU first (x86-64 Linux: ``-march=native``,
    3-7% faster here), then portable.  ``-fno-trapping-math`` (no floating-point trap is ever
    enabled here, so no result changes) lets GCC if-convert the selects of the log-sum-exp loops
    over the batch and vectorise them where the CPU has no masked stores (AVX2; with AVX-512 it
    could before): without it GCC 12 leaves them scalar on an AVX2 CPU, 3-4 times slower."""
    portable = ["-O3", "-fopenmp-simd", "-fno-trapping-math"]
    if sys.platform.startswith("linux") and platform.machine() in ("x86_64", "AMD64"):
        return [[*portable, "-march=native"], portable]
    return [portable]


def _cpuinfo() -> tuple[str, str]:
    """The first ``model name`` and ``flags`` lines' values of ``/proc/cpuinfo`` (empty where
    there is none: not Linux)."""
    name = flags = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and not name:
                name = value.strip()
            elif key.strip() in ("flags", "Features") and not flags:
                flags = value.strip()
    return name, flags


def cpu_description() -> str:
    """The CPU the C++ loops are built for and its widest vector extension, for benchmark
    headers: e.g. ``"AMD EPYC, AVX2"``.  Timings of the C++ loops depend on it (AVX-512 against
    AVX2 alone changed which loops GCC vectorised before ``-fno-trapping-math``)."""
    name, flags = _cpuinfo()
    have = set(flags.split())
    vector = next((v for f, v in (("avx512f", "AVX-512"), ("avx2", "AVX2"), ("avx", "AVX"), ("asimd", "NEON"))
                   if f in have), "no vector extension read")  # fmt: skip
    return f"{name or platform.processor() or platform.machine()}, {vector}"


def _cpu_tag() -> str:
    """A short tag of this CPU's instruction sets: builds tuned for one CPU are cached under their
    own name, so a cache shared by different machines (a cluster's home directory) never loads a
    build that this CPU cannot run."""
    text = f"{platform.machine()}|{platform.processor()}|{_cpuinfo()[1]}"
    return hashlib.sha1(text.encode()).hexdigest()[:10]


@functools.cache
def _build() -> object | None:
    import torch.utils.cpp_extension as cpp_extension  # 0.15 s of imports (setuptools): only to build

    errors = []
    for flags in _flags():
        name = f"memrnn_native_{_cpu_tag()}" if "-march=native" in flags else "memrnn_native"
        try:
            cpp_extension.load(
                name=name,
                sources=[str(p) for p in _SOURCES],
                extra_cflags=flags,
                is_python_module=False,
                verbose=os.environ.get("MEMRNN_NATIVE_VERBOSE", "") not in ("", "0"),
            )
        except Exception as e:  # any build failure: no compiler, no ninja, an unknown flag
            errors.append(f"{type(e).__name__}: {str(e).strip()[-600:]}")
            continue
        return torch.ops.memrnn_native
    warnings.warn(
        f"memrnn: could not build its C++ loops ({errors[-1]}); the stack RNNs run their Python "
        "loops on CPU (same results, slower). Install a C++ compiler and ninja (pip install "
        "ninja), or set MEMRNN_NATIVE=0 to silence this.",
        RuntimeWarning,
        stacklevel=4,
    )
    return None


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
