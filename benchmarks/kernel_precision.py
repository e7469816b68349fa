"""How far each layer's Triton kernels are from the exact numbers, beside torch's own float32.

    python -m benchmarks.kernel_precision [--device cuda] [--layers superposition_lstm tape_elman ...]

A kernel and the reference loop in float32 never agree to the last bit: their sums run in other
orders, the GPU's ``exp`` and division are a few ulp off, and where a memory has kinks (the
stratification stack's ``min``/``max``) an input at a kink can take either branch.  Whether a
difference between them is rounding or a bug is only decided against the exact numbers: this
script runs each layer's reference loop in float64 on CPU (the truth), then in float32 the
kernels (``implementation("triton")``) and the reference loop (``reference_paths()``) on
``--device``, and the reference loop on CPU, and prints for each the largest error over the
outputs, final states and every gradient, as a fraction of that tensor's largest value.  A kernel
is as exact as torch's float32 when its error is of the order of torch's; the script exits 1 if a
kernel's is more than ``--max-ratio`` (20) times torch's on CPU, or a layer fails.  TF32 is off (IEEE
float32 products), as in the tests.  No strength sits on a kink: stratification strengths are
drawn in [0.05, 0.95].
"""

from __future__ import annotations

import argparse
import copy
import os

import torch

from memrnn.core import create_layer, reference_paths, state_leaves, state_map
from memrnn.ops.dispatch import implementation

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False

#: the layers with Triton kernels (the registry's tiny variants)
LAYERS = (
    "elman", "lstm", "jordan", "relu_counter", "counter_lstm", "second_order", "nnpda",
    "superposition_lstm", "superposition_elman", "stratification_lstm", "stratification_elman",
    "queue_lstm", "queue_elman", "deque_lstm", "deque_elman", "tape_lstm", "tape_elman",
    "tape_jump_lstm", "tape_jump_elman", "nondeterministic_lstm", "vector_nondeterministic_lstm",
)  # fmt: skip
ONE_HOT = ("second_order", "nnpda")


def _inputs(layer: torch.nn.Module, one_hot: bool, batch: int, steps: int, seed: int):
    """float64 CPU inputs (one-hot symbols if ``one_hot``), a padding mask and a perturbed initial
    state."""
    g = torch.Generator().manual_seed(seed)
    if one_hot:
        ids = torch.randint(0, layer.input_size, (batch, steps), generator=g)
        x = torch.nn.functional.one_hot(ids, layer.input_size).double()
    else:
        x = torch.randn(batch, steps, layer.input_size, generator=g, dtype=torch.float64)
    lengths = torch.randint(1, steps + 1, (batch,), generator=g)
    lengths[0] = steps
    mask = torch.arange(steps)[None] < lengths[:, None]
    s0 = state_map(
        lambda t: t + 0.1 * torch.randn(t.shape, generator=g, dtype=t.dtype), layer.initial_state(batch)
    )
    if hasattr(s0, "strengths"):  # in [0.05, 0.95]: off the kinks of min/max
        s0 = s0._replace(
            strengths=0.05 + 0.9 * torch.rand(s0.strengths.shape, generator=g, dtype=torch.float64)
        )
    return x, mask, s0


def _run(layer, x, mask, s0, context, float_inputs: bool) -> dict[str, torch.Tensor | None]:
    """Outputs, final states and the gradients of a fixed loss to the inputs, the initial state and
    every parameter, inside ``context``, by name (a gradient that never arrives is None)."""
    fields = getattr(type(s0), "_fields", [str(i) for i in range(len(state_leaves(s0)))])
    leaves0 = [t.detach().clone().requires_grad_(t.is_floating_point()) for t in state_leaves(s0)]
    s = type(s0)(*leaves0) if hasattr(s0, "_fields") else s0
    x = x.detach().clone().requires_grad_(float_inputs)
    with context:
        y, sT = layer(x, s, mask)
    w = torch.linspace(-1, 1, y.shape[-1], dtype=y.dtype, device=y.device)
    finals = [
        (f"state.{f}", t) for f, t in zip(fields, state_leaves(sT), strict=False) if t.is_floating_point()
    ]
    loss = (y * w).square().sum() + sum((t * t.detach().sin()).sum() for _, t in finals)
    wrt = [("grad x", x)] if float_inputs else []
    wrt += [(f"grad state.{f}", t) for f, t in zip(fields, leaves0, strict=False) if t.requires_grad]
    wrt += [(f"grad {n}", p) for n, p in layer.named_parameters() if p.requires_grad]
    grads = torch.autograd.grad(loss, [t for _, t in wrt], allow_unused=True)
    return {"y": y, **dict(finals), **{n: g for (n, _), g in zip(wrt, grads, strict=True)}}


def errors(name: str, device: str, batch: int = 8, steps: int = 12, seed: int = 0) -> dict:
    """The largest relative error (over every output, state and gradient) of the float32 kernels on
    ``device``, the float32 reference loop on ``device`` and on CPU, against the float64 loop;
    ``"worst"`` names the kernel's worst tensor.  A gradient that arrives in one run and not in
    the other raises, naming it."""
    torch.manual_seed(seed)
    layer = create_layer(name).double()
    float_inputs = name not in ONE_HOT
    x, mask, s0 = _inputs(layer, not float_inputs, batch, steps, seed)
    truth = _run(layer, x, mask, s0, reference_paths(), float_inputs)
    out: dict = {}
    runs = [("kernel", device, implementation("triton")), ("torch cpu", "cpu", reference_paths())]
    if device != "cpu":
        runs.insert(1, (f"torch {device}", device, reference_paths()))
    for label, dev, context in runs:
        l32 = copy.deepcopy(layer).float().to(dev)
        s32 = state_map(lambda t, dev=dev: t.float().to(dev) if t.is_floating_point() else t.to(dev), s0)
        got = _run(l32, x.float().to(dev), mask.to(dev), s32, context, float_inputs)
        worst, where = 0.0, ""
        for key, b in truth.items():
            a = got[key]
            if (a is None) != (b is None):
                raise RuntimeError(
                    f"{label}: {key} {'never arrives' if a is None else 'arrives where float64 has none'}"
                )
            if a is None:
                continue
            b = b.detach()
            scale = float(b.abs().max()) or 1.0
            err = float((a.detach().double().cpu() - b).abs().max()) / scale
            if err >= worst:
                worst, where = err, key
        out[label] = worst
        if label == "kernel":
            out["worst"] = where
    return out


def main(argv: list[str] | None = None) -> tuple[list[dict], list[str]]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--layers", nargs="+", default=list(LAYERS))
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--max-ratio", type=float, default=20.0,
                    help="exit 1 if a kernel's error exceeds this many times torch's float32 error on CPU")  # fmt: skip
    args = ap.parse_args(argv)
    where = torch.cuda.get_device_name() if args.device == "cuda" else "CPU"
    interp = " (Triton's interpreter)" if os.environ.get("TRITON_INTERPRET") == "1" else ""
    print(f"torch {torch.__version__}, {args.device} ({where}){interp}, batch {args.batch}, T {args.steps}; "
          f"largest |error| / largest |value| over outputs, states and gradients, against float64 on CPU")  # fmt: skip
    cols = ["kernel", *([f"torch {args.device}"] if args.device != "cpu" else []), "torch cpu"]
    print(
        "| layer | " + " | ".join(f"{c} float32" for c in cols) + " | kernel / torch cpu | kernel's worst |"
    )
    print("|---|" + "---|" * (len(cols) + 2))
    rows, bad = [], []
    for name in args.layers:
        try:
            e = errors(name, args.device, args.batch, args.steps)
        except Exception as exc:  # one layer's failure is a row, not the end of the table
            print(f"| {name} | failed: {type(exc).__name__}: {str(exc).splitlines()[0][:120]} |")
            bad.append(name)
            continue
        ratio = e["kernel"] / max(e["torch cpu"], 1e-30)
        rows.append({"layer": name, **e, "ratio": ratio})
        cells = " | ".join(f"{e[c]:.1e}" for c in cols)
        print(f"| {name} | {cells} | {ratio:.1f} | {e['worst']} |")
        if ratio > args.max_ratio:
            bad.append(name)
    if bad:
        print(f"more than {args.max_ratio:g}× torch's float32 error, or failed: {', '.join(bad)}")
    return rows, bad


if __name__ == "__main__":
    raise SystemExit(1 if main()[1] else 0)
