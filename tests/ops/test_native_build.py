"""Where memrnn's C++ loops are built and what a build says (``memrnn.ops.native``): one folder per
everything that changes the binary, so that two environments on one machine never rebuild each
other's build, and one announcement on stderr when, and only when, a build runs.  The tests of the
build's name and announcement compile nothing (``cpp_extension.load`` is replaced), so they run
without a compiler too; those of a failed build's fallback, the CPU description and the flags
need the C++ loops built here."""

from __future__ import annotations

import shutil
import sysconfig
from pathlib import Path

import pytest
import torch
from torch.utils import cpp_extension

from memrnn.ops import native
from memrnn.ops.dispatch import choose
from tests.ops.backends import needs_native

TUNED = ["-O3", "-fopenmp-simd", "-fno-trapping-math", "-march=native"]
PORTABLE = ["-O3", "-fopenmp-simd", "-fno-trapping-math"]


def test_the_build_name_changes_with_each_ingredient(monkeypatch, tmp_path):
    """Each of the sources, the compiler, its flags, torch's version, commit, folder and C++ ABI,
    the Python version and headers, and (for the tuned build) the CPU gives another name; the
    name is otherwise stable, and the sources count by content, not by where they lie."""
    base = native.build_name(TUNED)
    assert base == native.build_name(TUNED) and base.startswith("memrnn_native_")
    assert base.isidentifier()  # it is also the extension's module name
    names = {"base": base, "portable flags": native.build_name(PORTABLE)}

    def name_with(what, patch):
        with monkeypatch.context() as m:
            patch(m)
            names[what] = native.build_name(TUNED)

    name_with("torch version", lambda m: m.setattr(torch, "__version__", "9.9.9+cpu"))
    name_with("torch commit", lambda m: m.setattr(torch.version, "git_version", "0" * 40))
    name_with(
        "C++ ABI",
        lambda m: m.setattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", not torch._C._GLIBCXX_USE_CXX11_ABI),
    )
    name_with(
        "torch folder", lambda m: m.setattr(torch, "__file__", str(tmp_path / "venv2/torch/__init__.py"))
    )
    name_with("python", lambda m: m.setattr(native, "_python_tag", lambda: "cpython399"))
    name_with(
        "python headers",
        lambda m: m.setattr(sysconfig, "get_paths", lambda: {"include": str(tmp_path / "include")}),
    )
    name_with("compiler", lambda m: m.setenv("CXX", "clang++"))
    name_with("cpu", lambda m: m.setattr(native, "_cpuinfo", lambda: ("Other", "fpu sse2")))
    with monkeypatch.context() as m:  # the portable build runs on any CPU: not keyed by this one's
        m.setattr(native, "_cpuinfo", lambda: ("Other", "fpu sse2"))
        assert native.build_name(PORTABLE) == names["portable flags"]
    copies = []
    for i, src in enumerate(native._SOURCES):
        (tmp_path / str(i)).mkdir()
        copies.append(shutil.copy(src, tmp_path / str(i) / src.name))
    monkeypatch.setattr(native, "_SOURCES", tuple(Path(c) for c in copies))
    assert native.build_name(TUNED) == base  # the same contents elsewhere: the same build
    with open(copies[0], "a") as fh:
        fh.write("\n// an edit\n")
    names["sources"] = native.build_name(TUNED)
    # the headers the sources include count too, each of them (the memories' codes, each memory's
    # steps, the helpers they share), by folder and contents
    keys = {f"{h.parent.name}/{h.name}" for h in native._HEADERS}
    assert keys >= {"stack_rnn/memory_kinds.h", "stack_rnn/native_common.h", "superposition/native.h",
                    "stratification/native.h", "tape/native.h", "deque/native.h",
                    "nondeterministic/native_common.h"}  # fmt: skip
    headers = []
    for h in native._HEADERS:
        (tmp_path / "h" / h.parent.name).mkdir(parents=True, exist_ok=True)
        headers.append(Path(shutil.copy(h, tmp_path / "h" / h.parent.name / h.name)))
    monkeypatch.setattr(native, "_HEADERS", tuple(headers))
    assert native.build_name(TUNED) == names["sources"]
    for h in headers:
        text = h.read_text()
        h.write_text(text + "\n// an edit\n")
        names[f"header {h.parent.name}/{h.name}"] = native.build_name(TUNED)
        h.write_text(text)
    assert len(set(names.values())) == len(names), names


@pytest.fixture
def fake_builds(monkeypatch, tmp_path):
    """``cpp_extension.load`` replaced by one that records each call and writes the library file a
    real build leaves; the extension directory is a fresh folder; ``native``'s cache is cleared
    before and after (the real build is found again afterwards)."""
    calls: list[dict] = []
    fail: set[str] = set()

    def load(name, sources, extra_cflags, build_directory, **kwargs):
        calls.append({"name": name, "flags": extra_cflags, "folder": build_directory})
        if any(f in fail for f in extra_cflags):
            raise RuntimeError(f"c++: error: unrecognized command-line option {extra_cflags[-1]!r}")
        (tmp_path / "ext" / name / f"{name}{cpp_extension.LIB_EXT}").write_bytes(b"")

    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path / "ext"))
    monkeypatch.setattr(cpp_extension, "load", load)
    monkeypatch.delenv("MEMRNN_NATIVE", raising=False)
    native._build.cache_clear()
    yield calls, fail
    native._build.cache_clear()


def test_a_build_is_announced_once_and_only_when_it_runs(fake_builds, tmp_path, capsys, monkeypatch):
    calls, _ = fake_builds
    assert native.load() is not None
    err = capsys.readouterr().err
    (flags,) = native._flags()[:1]
    folder = tmp_path / "ext" / native.build_name(flags)
    assert calls == [{"name": folder.name, "flags": flags, "folder": str(folder)}]
    assert err.count("building memrnn's C++ loops, once per environment, ~1 min") == 1
    assert f"(in {folder})" in err and "built memrnn's C++ loops in " in err and f"s ({folder})" in err
    native.load()  # the same process: nothing built, nothing said
    assert len(calls) == 1 and capsys.readouterr().err == ""
    native._build.cache_clear()  # a new process of the same environment: loads the earlier build quietly
    native.load()
    assert len(calls) == 2 and calls[1]["folder"] == str(folder) and capsys.readouterr().err == ""
    # another torch: a build of its own, in a folder of its own, announced
    monkeypatch.setattr(torch, "__version__", "9.9.9+cpu")
    native._build.cache_clear()
    native.load()
    assert calls[-1]["folder"] != str(folder)
    assert capsys.readouterr().err.count("building memrnn's C++ loops") == 1


def test_a_failed_tuned_build_falls_back_with_one_announcement(fake_builds, capsys, monkeypatch):
    calls, fail = fake_builds
    monkeypatch.setattr(native, "_flags", lambda: [TUNED, PORTABLE])  # as on x86-64 Linux
    fail.add("-march=native")
    assert native.load() is not None
    err = capsys.readouterr().err
    assert [c["flags"] for c in calls] == [TUNED, PORTABLE]  # the tuned build failed, the portable one ran
    assert err.count("building memrnn's C++ loops") == 1 and f"({calls[1]['folder']})" in err


def test_a_killed_builds_lock_is_removed_not_waited_on(fake_builds, tmp_path, capsys, monkeypatch):
    """torch's lock file left by a process killed mid-build (a SLURM time limit) made every later
    process wait for it forever, silently; the build lock (an flock the kernel drops with its
    process) says so and removes it before torch looks."""
    calls, _ = fake_builds
    (flags,) = native._flags()[:1]
    folder = tmp_path / "ext" / native.build_name(flags)
    folder.mkdir(parents=True)
    (folder / "lock").touch()  # what a killed build leaves
    seen = []
    fake = cpp_extension.load

    def load(**kwargs):
        seen.append((folder / "lock").exists())  # what torch would find
        return fake(**kwargs)

    monkeypatch.setattr(cpp_extension, "load", load)
    assert native.load() is not None
    assert seen == [False] and len(calls) == 1
    assert f"removed the lock of a build of memrnn's C++ loops that was killed ({folder / 'lock'})" in (
        capsys.readouterr().err
    )


def test_a_build_in_progress_is_waited_for_and_said(fake_builds, tmp_path, capsys):
    """While another process holds the build lock (builds), a second one says it waits, then
    builds (finds the build) once the first lets go."""
    import fcntl
    import threading

    calls, _ = fake_builds
    (flags,) = native._flags()[:1]
    folder = tmp_path / "ext" / native.build_name(flags)
    folder.mkdir(parents=True)
    with open(folder / "memrnn.lock", "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        waiter = threading.Thread(target=native.load)
        waiter.start()
        waiter.join(timeout=1.0)
        assert waiter.is_alive() and calls == []  # it waits
        fcntl.flock(held, fcntl.LOCK_UN)
    waiter.join(timeout=10.0)
    assert not waiter.is_alive() and len(calls) == 1
    assert f"waiting for another process that is building memrnn's C++ loops (in {folder})" in (
        capsys.readouterr().err
    )


@needs_native
def test_a_failed_build_warns_once_and_falls_back(monkeypatch):
    """No compiler: one RuntimeWarning naming the cause, then the Python loops."""
    from torch.utils import cpp_extension

    def broken(*args, **kwargs):
        raise RuntimeError("Ninja is required to load C++ extensions")

    monkeypatch.setattr(cpp_extension, "load", broken)
    native._build.cache_clear()
    try:
        with pytest.warns(RuntimeWarning, match="could not build its C\\+\\+ loops .*Ninja is required"):
            assert native.load() is None
        assert choose(torch.zeros(2, 3, 4), native_ok=True) == "cpu"
    finally:
        native._build.cache_clear()
    monkeypatch.undo()
    assert native.native_available()


@needs_native
@pytest.mark.parametrize(
    ("flags", "expected"),
    [("fpu sse2 avx avx2 fma avx512f avx512bw", "Xeon, AVX-512"), ("fpu sse2 avx avx2 fma", "Xeon, AVX2"),
     ("fp asimd", "Xeon, NEON"), ("fpu sse2", "Xeon, no vector extension read")],
)  # fmt: skip
def test_the_cpu_description_names_the_widest_vector_extension(monkeypatch, flags, expected):
    """What the benchmarks print beside CPU timings: the C++ loops' speed depends on it."""
    monkeypatch.setattr(native, "_cpuinfo", lambda: ("Xeon", flags))
    assert native.cpu_description() == expected
    monkeypatch.undo()
    name, _ = native._cpuinfo()
    assert native.cpu_description().count(", ") >= 1 and (
        not name or native.cpu_description().startswith(name)
    )


@needs_native
def test_the_build_flags_let_the_selects_vectorise():
    """Every flag set tried keeps ``-fno-trapping-math``: without it GCC leaves the nondeterministic
    stack's log-sum-exp loops scalar on CPUs without AVX-512 (2-4.5x slower,
    ``benchmarks/results/nondeterministic-cpu-2core.md``)."""
    assert native._flags() and all("-fno-trapping-math" in f and "-O3" in f for f in native._flags())


@needs_native
def test_the_member_loops_share_torchs_openmp_runtime():
    """Where torch runs on GNU OpenMP (Linux wheels), the loops are built with ``-fopenmp`` (the
    member LSTM's chunks run on torch's OpenMP pool: ``member_chunks`` in native_lstm.cpp), and the
    process then holds one OpenMP runtime, torch's own ``libgomp.so.1``: a second one would ignore
    ``torch.set_num_threads`` and compete with torch's spinning workers for the cores."""
    assert native.load() is not None
    if not native._gnu_openmp():
        pytest.skip("torch does not run on GNU OpenMP here: the build has no -fopenmp")
    assert "-fopenmp" in native._flags()[0]
    # the soname the build links (other packages may vendor a renamed copy of their own, e.g.
    # scikit-learn's libgomp-<hash>.so.1.0.0, which no build of ours loads)
    gomp = [p for p in native._loaded_libraries() if Path(p).name.startswith("libgomp.so")]
    assert [Path(p).resolve().parent for p in gomp] == [Path(torch.__file__).resolve().parent / "lib"], gomp
    built = [p for p in native._loaded_libraries() if Path(p).name.startswith("memrnn_native_")]
    assert built and any("-fopenmp" in native.build_ingredients(f)["flags"] and native.build_name(f) in built[0]
                         for f in native._flags()), built  # fmt: skip


def test_a_build_without_openmp_is_tried_after_one_with_it(monkeypatch):
    """A compiler without OpenMP still gets a build: every flag set with ``-fopenmp`` has its
    fallback without it, tried after it."""
    monkeypatch.setattr(native, "_gnu_openmp", lambda: True)
    flags = native._flags()
    with_omp = [f for f in flags if "-fopenmp" in f]
    assert with_omp and flags.index(with_omp[-1]) < min(flags.index(f) for f in flags if "-fopenmp" not in f)
    assert all([x for x in f if x != "-fopenmp"] in flags for f in with_omp)
    monkeypatch.setattr(native, "_gnu_openmp", lambda: False)
    assert not any("-fopenmp" in f for f in native._flags())
