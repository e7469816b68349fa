"""``torch.compile``, ``torch.export`` and ONNX over every registered layer: does it work, how
many graphs and graph breaks, and does the compiled layer compute the same numbers.

    python -m benchmarks.compile_check                 # every registered layer (about 3 minutes)
    python -m benchmarks.compile_check elman nnpda     # some

Prints one Markdown table: per layer, ``torch.compile`` (forward+backward; graphs, graph breaks and
the first break's reason from ``torch._dynamo.explain``; the largest difference from eager),
``torch.export`` with a dynamic batch (and that a dynamic sequence length is refused with
memrnn's error), and ONNX through ``torch.onnx.export(dynamo=True)`` checked with onnxruntime
when ``onnxscript`` and ``onnxruntime`` are installed.  No timing is asserted anywhere.
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from memrnn.core import create_layer, list_layers

ONE_HOT = ("second_order", "nnpda")


@dataclass
class Result:
    layer: str
    compile_ok: bool = False
    graphs: int = 0
    breaks: int = 0
    reason: str = ""
    compile_err: float = float("nan")
    compile_s: float = 0.0
    export_ok: bool = False
    dynamic_t_refused: bool = False
    export_err: float = float("nan")
    onnx: str = "not run"
    errors: list[str] = field(default_factory=list)


def example(layer, name: str, batch: int = 3, steps: int = 6, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    if name.startswith(ONE_HOT):
        return F.one_hot(
            torch.randint(0, layer.input_size, (batch, steps), generator=g), layer.input_size
        ).float()
    return torch.randn(batch, steps, layer.input_size, generator=g)


def check_compile(name: str, r: Result) -> None:
    torch._dynamo.reset()
    torch.manual_seed(0)
    layer = create_layer(name)
    x = example(layer, name)
    x.requires_grad_(not name.startswith(ONE_HOT))
    start = time.perf_counter()
    explained = torch._dynamo.explain(layer)(x)
    r.graphs, r.breaks = explained.graph_count, explained.graph_break_count
    reasons = [str(b.reason).splitlines()[0] for b in explained.break_reasons]
    # a reason with no break: Dynamo gave up on an inner frame and ran it eagerly (the stack RNNs'
    # implementation switch, a ContextVar), which the graph counts do not show as a break
    r.reason = reasons[0][:90] if reasons and r.breaks else ""
    compiled = torch.compile(layer)
    y, _ = compiled(x)
    (y.square().sum()).backward()
    r.compile_s = time.perf_counter() - start
    y_eager, _ = layer(x)
    r.compile_err = float((y - y_eager).abs().max().detach())
    r.compile_ok = True


def check_export(name: str, r: Result) -> None:
    from torch.export import Dim, export

    torch.manual_seed(0)
    layer = create_layer(name).eval()
    x = example(layer, name)
    program = export(layer, (x,), dynamic_shapes={"x": {0: Dim("batch", min=2)}})
    x2 = example(layer, name, batch=5, seed=1)
    r.export_err = float((program.module()(x2)[0] - layer(x2)[0]).abs().max().detach())
    r.export_ok = True
    try:
        export(layer, (x,), dynamic_shapes={"x": {1: Dim("T", min=2)}})
    except ValueError as e:
        r.dynamic_t_refused = "fixed sequence length" in str(e)


def check_onnx(name: str, r: Result) -> None:
    try:
        import onnxruntime as ort
        import onnxscript  # noqa: F401
    except ImportError:
        r.onnx = "skipped (pip install onnxscript onnxruntime)"
        return
    from torch.export import Dim

    torch.manual_seed(0)
    layer = create_layer(name).eval()
    x = example(layer, name)
    program = torch.onnx.export(
        layer, (x,), dynamo=True, dynamic_shapes={"x": {0: Dim("batch")}}, verbose=False
    )
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"{name}.onnx"
        program.save(str(path))
        session = ort.InferenceSession(str(path))
        x2 = example(layer, name, batch=5, seed=1)
        out = session.run(None, {session.get_inputs()[0].name: x2.numpy()})[0]
    err = float((torch.from_numpy(out) - layer(x2)[0]).abs().max().detach())
    r.onnx = f"ok ({err:.0e})"


def check(name: str, *, onnx: bool = True) -> Result:
    r = Result(name)
    for fn in (check_compile, check_export, *((check_onnx,) if onnx else ())):
        try:
            fn(name, r)
        except Exception as e:  # reported in the table, and by the tests
            r.errors.append(f"{fn.__name__}: {type(e).__name__}: {str(e).splitlines()[0][:200]}")
    return r


def table(results: list[Result]) -> str:
    rows = [
        "| layer | compile fwd+bwd | graphs | graph breaks | first break | max \\|compiled − eager\\| | "
        "export (dynamic batch) | dynamic T | ONNX (onnxruntime) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        rows.append(
            f"| {r.layer} | {'ok' if r.compile_ok else 'FAIL'} | {r.graphs} | {r.breaks} | {r.reason or '–'} | "
            f"{r.compile_err:.0e} | {'ok' if r.export_ok else 'FAIL'} ({r.export_err:.0e}) | "
            f"{'refused with memrnn error' if r.dynamic_t_refused else 'NOT refused'} | {r.onnx} |"
        )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> list[Result]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("layers", nargs="*", help="registered layer names (default: all)")
    parser.add_argument("--no-onnx", action="store_true", help="skip the ONNX column")
    args = parser.parse_args(argv)
    names = args.layers or list_layers()
    unknown = sorted(set(names) - set(list_layers()))
    if unknown:
        parser.error(f"unknown layers {unknown}; registered: {', '.join(list_layers())}")
    torch._logging.set_logs(dynamo=logging.ERROR, export=logging.ERROR)
    torch._dynamo.config.cache_size_limit = 64
    results = [check(n, onnx=not args.no_onnx) for n in names]
    print(f"torch {torch.__version__}")
    print(table(results))
    for r in results:
        for e in r.errors:
            print(f"{r.layer}: {e}")
    return results


if __name__ == "__main__":
    main()
