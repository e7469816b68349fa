"""memrnn's C++ time loops for CPU tensors, compiled on first use.

A recurrence whose step is a few small matrix products and a few hundred elementwise operations
spends most of its time, in Python, dispatching them one at a time; its C++ loop makes the same
calls from C++, fuses the elementwise parts into plain loops, and gives the large products that do
not lie on the recurrence (the input projection, the weight gradients) to a second thread when
torch has one.  The sources live beside their mechanism (``memrnn/ops/stack_rnn/native.cpp``, each
memory's steps in its folder's ``native.h``, ``memrnn/ops/<memory>/native.h``) and are compiled by
:func:`torch.utils.cpp_extension.load` the first time a process needs them.  They use only ATen and
``TORCH_LIBRARY`` (no pybind11), so the build needs a C++ compiler and ninja, nothing else.

One build per environment.  The build goes to a folder of its own under torch's extension
directory (``TORCH_EXTENSIONS_DIR``, else torch's default, ``~/.cache/torch_extensions``), named
by everything that changes the binary (:func:`build_name`): the sources' digest, the compiler
and its flags, torch's version, install folder and C++ ABI (``_GLIBCXX_USE_CXX11_ABI``), the
Python version, and, for the build tuned with ``-march=native`` (x86-64 Linux, 3-7% faster here),
the CPU's instruction sets (so a cache shared by machines of different kinds, a cluster's home
directory, never loads a build this CPU cannot run).  Two virtual environments, two torch
versions or two checkouts of the sources on one machine therefore each keep their own build
instead of rebuilding it on every switch (keyed by the CPU alone, they did: 10 rebuilds of 45-190
s in 70 minutes, each silent).  A build announces itself on stderr before it starts ("building
memrnn's C++ loops, once per environment, ~1 min", with the folder) and says how long it took;
loading a build made earlier prints nothing.  ``python -c "import memrnn.ops.native as n;
n.load()"`` builds (or finds) it now, e.g. before starting many runs that would otherwise wait
for the first one's build.

Why on first use, not at install time: memrnn is installed with ``pip install -e .[dev]``
(``scripts/dev.sh``) or ``pip install``, and neither is a good place for this build.  pip builds
in an isolated environment with a torch of its own choosing (not the user's CUDA or CPU build: a
binary for another torch, which fails to load or, worse, loads), an installed binary goes stale
the day the user upgrades torch, ``-march=native`` at install time bakes in the CPU of the
machine that installed (a container image, a login node), an editable install would share one
binary among every environment that uses the checkout (the thrashing above), and a failed build
would fail the install, whereas the C++ loops are optional.  Built on first use and keyed as
above, the build always matches the torch and CPU that load it, costs once per environment, and
is never required.

Where the build cannot run (no compiler, no ninja) memrnn warns once and every mechanism keeps
its Python loop (the same arithmetic, slower).  ``MEMRNN_NATIVE=0`` turns the C++ loops off;
:func:`memrnn.ops.dispatch.implementation` (``"cpu"`` or ``"native"``) picks one per block.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import platform
import re
import sys
import sysconfig
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import torch

try:  # POSIX only: the build lock (``_build_lock``); Windows keeps torch's own lock alone
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None

#: one extension; the object files are named after the sources, so each name is its own
_SOURCES = (
    Path(__file__).parent / "stack_rnn" / "native.cpp",
    Path(__file__).parent / "nondeterministic" / "native_step.cpp",
    Path(__file__).parent / "lstm" / "native_lstm.cpp",
)
#: the headers the sources include, never compiled on their own (the memories' codes, each memory's
#: steps in its folder's ``native.h``, the helpers they share in ``stack_rnn/native_common.h``, the
#: nondeterministic stack's in ``nondeterministic/native_common.h``): part of the sources' digest,
#: so that a change to one rebuilds
_HEADERS = tuple(sorted(Path(__file__).parent.rglob("*.h")))
_LOCK = threading.Lock()
__all__ = [
    "HEAP_MALLOC_ENV",
    "build_ingredients",
    "build_name",
    "cpu_description",
    "disabled",
    "extensions_root",
    "load",
    "native_available",
]

#: glibc's heap kept whole: no ``mmap`` for large blocks, no trimming.  By default glibc hands a
#: freed block over 32 MB back to the kernel and faults it in again, page by page, on the next
#: batch (``benchmarks/run.py``'s docstring); with this an RNS-RNN batch of DuSell & Chiang's
#: lengths (forward, backward and Adam on one core) took 369 ms against 409 (``docs/guide/suites.md``).
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
    tuned = [[*portable, "-march=native"]] if sys.platform.startswith("linux") and platform.machine() in (
        "x86_64", "AMD64") else []  # fmt: skip
    # -fopenmp first: the member loops share torch's OpenMP pool (native_lstm.cpp's member_chunks);
    # where torch's OpenMP runtime is GNU's (Linux wheels), the build links the same libgomp.so.1
    openmp = [[*f, "-fopenmp"] for f in [*tuned, portable]] if _gnu_openmp() else []
    return [*openmp, *tuned, portable]


def _gnu_openmp() -> bool:
    """Whether torch runs on GNU OpenMP (its libraries need ``libgomp.so.1``): a build with
    ``-fopenmp`` then needs the same runtime, which the loader finds already loaded by torch
    (matched by soname).  Elsewhere (macOS's libomp, MSVC) the build has no ``-fopenmp``, so that
    no second OpenMP runtime can be loaded beside torch's."""
    return "OpenMP" in torch.__config__.parallel_info() and any(
        Path(p).name.startswith("libgomp.so")
        for p in _loaded_libraries()  # not another package's renamed copy
    )


def _loaded_libraries() -> list[str]:
    """The shared libraries this process has mapped (``/proc/self/maps``; empty where there is none)."""
    with contextlib.suppress(OSError):
        return sorted({line.split()[-1] for line in Path("/proc/self/maps").read_text().splitlines()
                       if line.rstrip().endswith(".so") or ".so." in line.split()[-1]})  # fmt: skip
    return []


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


def _python_tag() -> str:
    """This interpreter as its build depends on it, e.g. ``"cpython311"`` (``abiflags`` added:
    a free-threaded ``"cpython313t"`` is another ABI)."""
    major, minor = sys.version_info[:2]
    return f"{sys.implementation.name}{major}{minor}{getattr(sys, 'abiflags', '')}"


def _sources_digest() -> str:
    """sha1 of the C++ sources' and headers' contents (their names included: a header's with its
    folder's, ``deque/native.h``)."""
    h = hashlib.sha1()
    for name, path in [(p.name, p) for p in _SOURCES] + [(f"{p.parent.name}/{p.name}", p) for p in _HEADERS]:
        h.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def build_ingredients(flags: list[str]) -> dict[str, str]:
    """Everything that changes the binary of a build with compiler flags ``flags``, by name: the
    sources' digest, the compiler (``CXX``, as torch's build reads it) and the flags, torch's
    version (and commit), install folder (its headers and libraries; two virtual environments
    with one torch version are two folders) and C++ ABI, the Python version and its headers'
    folder, and the CPU's tag where the flags tune for it (``-march=native``)."""
    return {
        "sources": _sources_digest(),
        "compiler": os.environ.get("CXX", "c++"),
        "flags": " ".join(flags),
        "torch": f"{torch.__version__} {getattr(torch.version, 'git_version', '')}",
        "torch_folder": str(Path(torch.__file__).resolve().parent),
        "cxx11_abi": str(int(bool(torch._C._GLIBCXX_USE_CXX11_ABI))),
        "python": _python_tag(),
        "python_include": sysconfig.get_paths().get("include", ""),
        "cpu": _cpu_tag() if "-march=native" in flags else "portable",
    }


def build_name(flags: list[str]) -> str:
    """The extension's name for a build with ``flags``, also its folder's: readable parts (Python,
    torch) and a digest of all of :func:`build_ingredients`, e.g.
    ``memrnn_native_cpython311_torch2_13_0_cpu_3f9c1e0a2b7d``."""
    parts = build_ingredients(flags)
    digest = hashlib.sha1(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:12]
    version = re.sub(r"\W", "_", torch.__version__)
    return f"memrnn_native_{parts['python']}_torch{version}_{digest}"


def extensions_root() -> Path:
    """Where the builds go: ``TORCH_EXTENSIONS_DIR``, else torch's default root."""
    import torch.utils.cpp_extension as cpp_extension

    root = os.environ.get("TORCH_EXTENSIONS_DIR")
    return Path(root) if root else Path(cpp_extension.get_default_build_root())


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


@contextlib.contextmanager
def _build_lock(folder: Path) -> Iterator[None]:
    """Hold ``folder``'s build lock (``memrnn.lock``, an ``flock`` the kernel lets go of when its
    process dies) while torch builds or loads the extension there.

    torch's own lock (``folder/lock``, a file created to lock and deleted to unlock) outlives a
    process killed in the middle of a build (a SLURM time limit, a Ctrl-C, an OOM kill), and every
    later process then waits for it forever, printing nothing: two runs here sat 30 minutes at 8%
    of a core before anyone looked.  Every process that builds in a memrnn build folder takes this
    lock first, so whoever holds it and still finds torch's lock file knows its builder is dead,
    says so and removes it.  Where ``fcntl`` is missing (Windows) torch's lock alone is used."""
    if fcntl is None:
        yield
        return
    with open(folder / "memrnn.lock", "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            _say(f"waiting for another process that is building memrnn's C++ loops (in {folder})")
            fcntl.flock(handle, fcntl.LOCK_EX)
        stale = folder / "lock"
        if stale.exists():
            _say(f"removed the lock of a build of memrnn's C++ loops that was killed ({stale})")
            stale.unlink(missing_ok=True)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@functools.cache
def _build() -> object | None:
    import torch.utils.cpp_extension as cpp_extension  # 0.15 s of imports (setuptools): only to build

    errors = []
    announced = False
    for flags in _flags():
        name = build_name(flags)
        folder = extensions_root() / name
        start = time.monotonic()
        builds = not (folder / f"{name}{cpp_extension.LIB_EXT}").is_file()
        if builds and not announced:  # a library from an earlier build is loaded without a word
            _say(f"building memrnn's C++ loops, once per environment, ~1 min (in {folder})")
            announced = True
        try:
            folder.mkdir(parents=True, exist_ok=True)
            with _build_lock(folder):
                cpp_extension.load(
                    name=name,
                    sources=[str(p) for p in _SOURCES],
                    extra_include_paths=[str(Path(__file__).parent)],  # "deque/native.h", …
                    extra_cflags=flags,
                    extra_ldflags=["-fopenmp"] if "-fopenmp" in flags else None,
                    build_directory=str(folder),
                    is_python_module=False,
                    verbose=os.environ.get("MEMRNN_NATIVE_VERBOSE", "") not in ("", "0"),
                )
        except Exception as e:  # any build failure: no compiler, no ninja, an unknown flag
            errors.append(f"{type(e).__name__}: {str(e).strip()[-600:]}")
            continue
        if builds:
            _say(f"built memrnn's C++ loops in {time.monotonic() - start:.0f} s ({folder})")
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
