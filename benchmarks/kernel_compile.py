"""Compile every Triton kernel memrnn launches for real GPUs, ahead of time, on any machine.

    python -m benchmarks.kernel_compile                        # sm_90 (H100/H200) and sm_80 (A100)
    python -m benchmarks.kernel_compile --targets 90 --dtypes float32 bfloat16
    python -m benchmarks.kernel_compile --targets 90 --quick   # each kernel and memory once
    python -m benchmarks.kernel_compile --targets 90 --layers superposition_lstm deque_elman

Triton's interpreter (``TRITON_INTERPRET=1``, the default test run) checks what the kernels
compute, not that they compile: a kernel can pass under the interpreter and still fail in
Triton's compiler, or spill registers to local memory on the GPU.  This script runs every layer
that has kernels (and, as :data:`MEMBER_LAYERS`, the member paths that launch them with the
members as a grid axis) forward and backward, then forward under ``torch.no_grad`` (the stack
kernels' launches without history), on CPU tensors with the kernels forced
(:func:`memrnn.ops.dispatch.implementation`), records each kernel launch instead of running it,
and compiles each distinct launch for the chosen GPU targets through Triton's compiler down to a
cubin (``ptxas`` ships with Triton).  It prints one row per kernel and target: registers per
thread, spill stores and stack frame per thread (the log of Triton's own ``ptxas -v`` run), shared
memory and compile time.  No GPU is needed; ``tests/ops/test_kernels_compile.py`` runs it for sm_90:
``--quick`` in the default test run (:data:`QUICK_LAYERS`: a third of the launches, each kernel
and each of the stack kernels' memories compiled once), every launch with ``bash scripts/dev.sh
slow``.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import io
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

# the kernels must be compiled functions, not the interpreter's: before triton is imported
os.environ.pop("TRITON_INTERPRET", None)
os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
if "TRITON_CACHE_DIR" not in os.environ:  # compile for real each run (the times are part of the table)
    os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="memrnn_triton_cache_")
    atexit.register(shutil.rmtree, os.environ["TRITON_CACHE_DIR"], True)

import torch
import triton
from triton.backends.compiler import BaseBackend, GPUTarget
from triton.compiler import ASTSource
from triton.runtime.jit import JITFunction

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# the kernel modules, imported while the interpreter is off: their kernels are compiled functions
import memrnn.ops.counter.triton
import memrnn.ops.elman.triton
import memrnn.ops.jordan.triton
import memrnn.ops.lstm.triton
import memrnn.ops.nnpda.triton
import memrnn.ops.nondeterministic.triton
import memrnn.ops.second_order_rnn.triton
import memrnn.ops.stack_rnn.triton  # noqa: F401
from memrnn.core import create_layer
from memrnn.members import MemberLayer
from memrnn.ops.dispatch import implementation

#: the layers whose forward and backward launch every kernel memrnn has, and their sizes here
#: (the benchmark's headline cell: state 64)
LAYERS: dict[str, dict[str, Any]] = {
    "elman": {"input_size": 16, "hidden_size": 64},
    "jordan": {"input_size": 16, "hidden_size": 64, "feedback_size": 64},
    "relu_counter": {"input_size": 16, "hidden_size": 62},
    "counter_lstm": {"input_size": 16, "hidden_size": 62},
    "second_order": {"input_size": 16, "hidden_size": 64},
    "nnpda": {"input_size": 16, "num_states": 64, "stack_symbols": 4, "depth": 64},
    "superposition_lstm": {"input_size": 16, "hidden_size": 64, "width": 8, "depth": 32},
    "superposition_elman": {"input_size": 16, "hidden_size": 64, "width": 8, "depth": 32},
    "stratification_lstm": {"input_size": 16, "hidden_size": 64, "width": 8, "depth": 32},
    "stratification_elman": {"input_size": 16, "hidden_size": 64, "width": 8, "depth": 32},
    "queue_lstm": {"input_size": 16, "hidden_size": 64, "width": 8, "depth": 32},
    "tape_lstm": {"input_size": 16, "hidden_size": 64, "width": 8, "depth": 32},
    "tape_elman": {"input_size": 16, "hidden_size": 64, "width": 8, "depth": 32},
    "tape_jump_lstm": {
        "input_size": 16,
        "hidden_size": 64,
        "width": 8,
        "depth": 32,
        "memory_args": {"jump": 5},
    },
    "tape_jump_elman": {
        "input_size": 16,
        "hidden_size": 64,
        "width": 8,
        "depth": 32,
        "memory_args": {"jump": 5},
    },
    "deque_lstm": {"input_size": 16, "hidden_size": 64, "width": 8, "depth": 32},
    "deque_elman": {"input_size": 16, "hidden_size": 64, "width": 8, "depth": 32},
    # DuSell & Chiang's sizes: 2 states × 3 symbols (and vectors of 5); depth above the 4 steps
    "nondeterministic_lstm": {
        "input_size": 16,
        "hidden_size": 20,
        "depth": 16,
        "memory_args": {"states": 2, "symbols": 3},
    },
    "vector_nondeterministic_lstm": {
        "input_size": 16,
        "hidden_size": 20,
        "depth": 16,
        "memory_args": {"states": 2, "symbols": 3, "vector_size": 5},
    },
}
#: the layers whose member path (issue 67: M runs as one model, :class:`memrnn.members.MemberLayer`)
#: runs memrnn's kernels with the members as a grid axis (row tiles × members), run as
#: :data:`MEMBERS` members of these sizes: ``<layer>_members`` (the LSTM's is :class:`memrnn.layers.LSTMLayer`,
#: whose single run is torch's own).  A member launch that types as a single one (same signature,
#: constants and alignment: the member is ``tl.program_id(1)``, no argument) is the same cubin and
#: no row of its own.  Not in ``--quick``: their kernels are the plain recurrences'.
MEMBER_LAYERS: dict[str, dict[str, Any]] = {
    "lstm_members": {"input_size": 16, "hidden_size": 64},
    "elman_members": {"input_size": 16, "hidden_size": 64},
}
MEMBERS = 4
#: ``--quick``: the layers whose launches reach every kernel and every code path that a
#: constexpr selects, once: each kernel of the plain recurrences; the stack kernels once per
#: memory (each memory is its own constexpr branch), with the Elman controller where the memory has
#: one (it compiles in about half the LSTM's time) and the LSTM controller once (the queue has only
#: it); the nondeterministic stack's kernels plain and vector.  Of each of their kernels, only the
#: first launch is compiled (the others differ by an argument the JIT specialises to 1).  This
#: catches a kernel that no longer compiles, in any memory, in half the time: 38 of the 64 sm_90
#: float32 launches, 32 of their 69 s of compiling in ``benchmarks/results/kernels-compiled.md``
#: (and each memory's forward without history, under ``torch.no_grad``: 6 launches more).
QUICK_LAYERS = (
    "elman",
    "jordan",
    "relu_counter",
    "counter_lstm",
    "second_order",
    "nnpda",
    "superposition_elman",
    "stratification_elman",
    "queue_lstm",
    "tape_elman",
    "tape_jump_elman",
    "deque_elman",
    "nondeterministic_lstm",
    "vector_nondeterministic_lstm",
)


#: the stack RNNs' memories in :data:`LAYERS` (a layer per memory and controller)
STACK_FAMILIES = ("superposition", "stratification", "queue", "tape", "deque")


def _family(layer: str) -> str:
    """A layer's name without its controller: ``deque_elman`` -> ``deque``."""
    return layer.removesuffix("_lstm").removesuffix("_elman") if layer.startswith(STACK_FAMILIES) else layer


def check_quick_layers() -> None:
    """:data:`QUICK_LAYERS` has a layer of every family of :data:`LAYERS` (a memory added there
    must be added here), both controllers of the stack kernels, and nothing else."""
    unknown = [name for name in QUICK_LAYERS if name not in LAYERS]
    missing = sorted({_family(n) for n in LAYERS} - {_family(n) for n in QUICK_LAYERS})
    stack = [n for n in QUICK_LAYERS if n.startswith(STACK_FAMILIES)]
    controllers = {n.rsplit("_", 1)[1] for n in stack}
    if unknown or missing or controllers != {"lstm", "elman"}:
        raise ValueError(
            f"QUICK_LAYERS must name layers of LAYERS ({unknown} are not), cover each family "
            f"(missing: {missing}) and both stack controllers (has {sorted(controllers)})"
        )


try:  # the JIT's own typing of a launch's arguments (Triton >= 3.3): ints equal to 1 become
    # constants, pointers and ints divisible by 16 get ``tt.divisibility = 16``.  Compiling without
    # these attributes compiles other code than a real launch does: Triton 3.6 compiled the
    # stratification kernels here but failed on the GPU once its loads were specialised for
    # 16-byte alignment (``memrnn.ops.stack_rnn.triton._scan``)
    from triton._C.libtriton import native_specialize_impl as specialize
except ImportError:  # older Triton: the plain signature below, no alignment attributes
    specialize = None
#: the layers whose kernels also take float64 (the nondeterministic stack's log weights)
FLOAT64_LAYERS = ("nondeterministic_lstm", "vector_nondeterministic_lstm")
ONE_HOT = ("second_order", "nnpda")
TORCH_TO_TRITON = {
    torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16", torch.float64: "fp64",
    torch.int64: "i64", torch.int32: "i32", torch.int16: "i16", torch.int8: "i8", torch.uint8: "u8",
    torch.bool: "i1",
}  # fmt: skip
OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg")
#: the suffix of a layer's name in the rows its forward under ``torch.no_grad`` launches first
NO_GRAD = "_no_grad"


def record_launches(
    dtypes: list[torch.dtype],
    batch: int = 64,
    steps: int = 4,
    layers: Sequence[str] | None = None,
    first_only: bool = False,
) -> list[dict[str, Any]]:
    """Run each layer of ``layers`` (default :data:`LAYERS` and :data:`MEMBER_LAYERS`) forward and
    backward with the kernels forced and record every launch (kernel, signature, constexprs,
    options) instead of running it; with ``first_only``, only the first launch of each kernel by
    each layer."""
    launches: dict[tuple, dict[str, Any]] = {}
    seen: set[tuple] = set()  # every launch's full key, so that a forward under no_grad adds only its own
    original = JITFunction.run
    current = {"layer": ""}  # the layer being run: the first to launch a kernel names its row

    def record(self: JITFunction, *args: Any, grid: Any, warmup: bool, **kwargs: Any) -> None:
        options = {k: kwargs.pop(k) for k in OPTIONS if k in kwargs}
        bound = dict(zip((p.name for p in self.params), args, strict=False)) | kwargs
        signature, constexprs, attrs = {}, {}, {}
        for i, p in enumerate(self.params):
            v = bound.get(p.name, p.default)
            if p.is_constexpr:
                signature[p.name], constexprs[p.name] = "constexpr", v
            elif specialize is not None:  # as the JIT types a real launch (see `specialize`)
                kind, attr = specialize(BaseBackend, v, p.is_const, not p.do_not_specialize,
                                        not p.do_not_specialize_on_alignment)  # fmt: skip
                signature[p.name] = kind
                if kind == "constexpr":
                    constexprs[p.name] = v
                elif attr:
                    attrs[(i,)] = BaseBackend.parse_attr(attr)
            elif isinstance(v, torch.Tensor):
                signature[p.name] = "*" + TORCH_TO_TRITON[v.dtype]
            elif isinstance(v, bool):
                signature[p.name] = "i1"
            elif isinstance(v, int):
                signature[p.name] = "i32" if -(2**31) <= v < 2**31 else "i64"
            elif isinstance(v, float):
                signature[p.name] = "fp32"
            else:
                raise TypeError(f"{self.__name__}: cannot type argument {p.name}={v!r}")
        key = (self.__name__, tuple(sorted(signature.items())), tuple(sorted(constexprs.items())),
               tuple(sorted(attrs)))  # fmt: skip
        if current["layer"].endswith(NO_GRAD) and key in seen:
            return  # the training forward's launch again: only a launch without history is new
        seen.add(key)
        if first_only:
            key = (self.__name__, current["layer"])
        launches.setdefault(key, {"fn": self, "name": self.__name__, "signature": signature,
                                  "constexprs": constexprs, "attrs": attrs, "options": options,
                                  "layer": current["layer"]})  # fmt: skip

    JITFunction.run = record  # type: ignore[method-assign]
    os.environ["TRITON_INTERPRET"] = "1"  # lets the dispatch send CPU tensors to the kernels
    try:
        for name in (*LAYERS, *MEMBER_LAYERS) if layers is None else layers:
            current["layer"] = name
            for dtype in dtypes:
                if dtype == torch.float64 and name not in FLOAT64_LAYERS:
                    continue
                lead: tuple[int, ...] = ()
                if name in MEMBER_LAYERS:
                    base, kwargs, lead = name.removesuffix("_members"), MEMBER_LAYERS[name], (MEMBERS,)
                    layer = MemberLayer.build(lambda b=base, k=kwargs: create_layer(b, **k), range(MEMBERS))
                    layer = layer.to(dtype)
                else:
                    layer = create_layer(name, **LAYERS[name]).to(dtype)
                gen = torch.Generator().manual_seed(0)
                if name in ONE_HOT:
                    ids = torch.randint(0, layer.input_size, (batch, steps), generator=gen)
                    x = torch.nn.functional.one_hot(ids, layer.input_size).to(dtype)
                else:
                    shape = (*lead, batch, steps, layer.input_size)
                    x = torch.randn(shape, generator=gen).to(dtype).requires_grad_()
                with implementation("triton"):
                    y, _ = layer(x)
                    y.float().sum().backward()
                    # the forward that nothing will differentiate (evaluation): the stack kernels'
                    # launches without history (a ring of slots, issue 69) are compiled code of their own
                    current["layer"] = name + NO_GRAD
                    with torch.no_grad():
                        layer(x.detach())
                    current["layer"] = name
    finally:
        JITFunction.run = original  # type: ignore[method-assign]
        os.environ.pop("TRITON_INTERPRET", None)
    return list(launches.values())


def ptxas_usage(ptx: str, arch: int) -> dict[str, int]:
    """Registers per thread, spill stores and stack frame (bytes per thread) of the kernel in
    ``ptx``, as ``ptxas -v`` reports them, run the way Triton runs it for ``sm_<arch>``."""
    from triton.backends.nvidia.compiler import get_ptxas, sm_arch_from_capability

    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / "kernel.ptx"
        src.write_text(ptx)
        cmd = [get_ptxas(arch).path, "-v", "--regAllocOptLevel=2", f"--gpu-name={sm_arch_from_capability(arch)}",
               str(src), "-o", str(Path(d) / "kernel.cubin")]  # fmt: skip
        log = subprocess.run(cmd, capture_output=True, text=True, check=True).stderr
    return ptxas_log_usage(log)


def ptxas_log_usage(log: str) -> dict[str, int]:
    """Registers, stack frame and spill stores read from a ``ptxas -v`` log (-1 registers where
    the log has no such line)."""
    regs = re.search(r"Used (\d+) registers", log)
    frame = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores", log)
    return {
        "regs": int(regs.group(1)) if regs else -1,
        "stack": int(frame.group(1)) if frame else 0,
        "spills": int(frame.group(2)) if frame else 0,
    }


def compile_with_ptxas_log(src: ASTSource, arch: int, options: dict[str, Any]) -> tuple[Any, str]:
    """``triton.compile`` for ``sm_<arch>`` and the log of Triton's own ``ptxas -v`` run (which it
    prints when ``TRITON_DUMP_PTXAS_LOG`` is on; empty for a kernel from Triton's cache, or a
    Triton without the knob), so that the resources need no second ``ptxas`` run."""
    nvidia = getattr(getattr(triton, "knobs", None), "nvidia", None)
    if nvidia is None or not hasattr(nvidia, "dump_ptxas_log"):
        return triton.compile(src, target=GPUTarget("cuda", arch, 32), options=options), ""
    printed = io.StringIO()
    with nvidia.scope(), contextlib.redirect_stdout(printed):
        nvidia.dump_ptxas_log = True
        compiled = triton.compile(src, target=GPUTarget("cuda", arch, 32), options=options)
    return compiled, printed.getvalue()


def dot_precisions(ttir: str) -> str:
    """The products (``tt.dot``) of a kernel's Triton IR by input precision, e.g. ``"ieee×6"`` or
    ``"ieee×4, tf32×2"``: every ``tl.dot`` and any sum of broadcast products the compiler rewrote
    into a dot (Triton 3.6 made those TF32), read before ``tf32x3`` is split into three TF32
    products."""
    counts: dict[str, int] = {}
    for line in re.findall(r"= tt\.dot(?:_scaled)? [^\n]*", ttir):
        found = re.search(r"inputPrecision = (\w+)", line)
        kind = found.group(1) if found else "ieee"  # the printer leaves out the default, IEEE
        counts[kind] = counts.get(kind, 0) + 1
    return ", ".join(f"{k}×{n}" for k, n in sorted(counts.items())) or "none"


def compile_all(launches: list[dict[str, Any]], targets: list[int]) -> list[dict[str, Any]]:
    """Each launch compiled for each target (``sm_<target>``), with its resources."""
    rows = []
    # Triton's ptxas step leaves its .ptx sources in the temporary directory: give it one that goes
    saved, scratch = tempfile.tempdir, tempfile.TemporaryDirectory(prefix="memrnn_kernel_compile_")
    tempfile.tempdir = scratch.name
    try:
        _compile_into(rows, launches, targets)
    finally:
        tempfile.tempdir = saved
        scratch.cleanup()
    return rows


def _compile_into(rows: list[dict[str, Any]], launches: list[dict[str, Any]], targets: list[int]) -> None:
    for launch in launches:
        for arch in targets:
            src = ASTSource(
                fn=launch["fn"],
                signature=launch["signature"],
                constexprs=launch["constexprs"],
                attrs=launch["attrs"],
            )
            start = time.perf_counter()
            compiled, log = compile_with_ptxas_log(src, arch, launch["options"])
            seconds = time.perf_counter() - start
            usage, source = ptxas_log_usage(log), "triton"
            if usage["regs"] < 0:  # no log of Triton's run: run ptxas -v as Triton does
                usage, source = ptxas_usage(compiled.asm["ptx"], arch), "rerun"
            dtypes = sorted(
                {t for t in launch["signature"].values() if t.startswith("*fp") or t.startswith("*bf")}
            )
            rows.append({
                "kernel": launch["name"], "layer": launch["layer"], "target": f"sm_{arch}", "dtypes": ",".join(d[1:] for d in dtypes),
                "warps": launch["options"].get("num_warps", 4), "regs": usage["regs"],
                "spills": usage["spills"], "stack": usage["stack"], "shared": compiled.metadata.shared,
                "seconds": seconds, "products": dot_precisions(compiled.asm["ttir"]), "ptxas": source,
            })  # fmt: skip


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--targets", type=int, nargs="+", default=[90, 80], help="compute capabilities")
    ap.add_argument(
        "--dtypes", nargs="+", default=["float32"], choices=["float32", "bfloat16", "float16", "float64"]
    )
    ap.add_argument("--quick", action="store_true",
                    help="each kernel and each stack memory once (QUICK_LAYERS), not every launch")  # fmt: skip
    ap.add_argument(
        "--layers", nargs="+", choices=[*LAYERS, *MEMBER_LAYERS], help="only these layers' launches"
    )
    args = ap.parse_args(argv)
    dtypes = [getattr(torch, d) for d in args.dtypes]
    if args.quick:
        check_quick_layers()
    layers = QUICK_LAYERS if args.quick else (*LAYERS, *MEMBER_LAYERS)
    if args.layers:
        layers = tuple(n for n in layers if n in args.layers)
    launches = record_launches(dtypes, layers=layers, first_only=args.quick)
    rows = compile_all(launches, args.targets)
    print(f"triton {triton.__version__}, torch {torch.__version__}; {len(launches)} distinct launches "
          f"{'(--quick: the first of each kernel by each layer) ' if args.quick else ''}"
          f"from {', '.join(layers)} (state 64, batch 64); compiled without a GPU; resources of "
          f"{sum(r['ptxas'] == 'triton' for r in rows)} of {len(rows)} from Triton's own ptxas -v log")  # fmt: skip
    head = ["kernel", "first launched by", "target", "storage", "warps", "registers/thread", "spill stores (bytes/thread)",
            "stack frame (bytes/thread)", "shared bytes", "compile s", "products"]  # fmt: skip
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for r in rows:
        cells = [r["kernel"], r["layer"], r["target"], r["dtypes"], r["warps"], r["regs"], r["spills"], r["stack"],
                 r["shared"], f"{r['seconds']:.1f}", r["products"]]  # fmt: skip
        print("| " + " | ".join(str(c) for c in cells) + " |")
    return rows


if __name__ == "__main__":
    main()
