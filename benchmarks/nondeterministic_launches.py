"""GPU kernel launches per step of the nondeterministic stack RNN (DuSell & Chiang's RNS-RNN and
the vector RNS-RNN), counted on any machine: each torch operation that computes (views and
allocations excluded) is at least one CUDA launch, each Triton launch is one.  Compares the
torch step (``impl="cpu"``: what CUDA ran before the Triton run) with the Triton run
(``impl="triton"``; on a machine without a GPU under Triton's interpreter), the controller's
operations included, forward and backward.

    python -m benchmarks.nondeterministic_launches            # RNS-RNN, 2 states x 3 symbols
    python -m benchmarks.nondeterministic_launches --vector-size 5

Two counts: the stack alone on given transition weights (its launches on CUDA), and the whole
layer as it decomposes on CPU (on CUDA ``lstm_cell`` is one fused kernel, so the controller's
share there is smaller).  Per step is the slope between two lengths (one launch of each kernel
per step, whatever its grid and the depth), per sequence the rest (starting the run, the final
window); the runs are short so that the interpreter finishes in seconds.
"""

from __future__ import annotations

import argparse
import contextlib
import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # before memrnn's kernels are imported

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from memrnn.layers import StackRNN
from memrnn.ops.dispatch import implementation
from memrnn.ops.nondeterministic import (
    NondeterministicRun,
    nondeterministic_initial,
    nondeterministic_step,
    vector_nondeterministic_initial,
    vector_nondeterministic_step,
)


class _Count(TorchDispatchMode):
    """Counts the torch operations that compute (not views, aliases, bare allocations or
    operations on no elements) and Triton's launches; operations inside a Triton launch (the
    interpreter's copies) are not counted."""

    FREE = ("empty", "empty_like", "new_empty", "empty_strided", "_to_copy.dtype_layout")

    def __init__(self) -> None:
        super().__init__()
        self.ops = 0
        self.inside_triton = False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        returns = func._schema.returns
        view = bool(returns) and all(r.alias_info is not None and not r.alias_info.is_write for r in returns)
        name = func.__name__
        out = func(*args, **(kwargs or {}))
        empty = all(
            t.numel() == 0 for t in torch.utils._pytree.tree_leaves(out) if isinstance(t, torch.Tensor)
        )
        if not (self.inside_triton or view or empty or name.split(".")[0] in self.FREE):
            self.ops += 1
        return out


@contextlib.contextmanager
def _triton_launches(counter: _Count):
    """Count each Triton launch as one and hide the interpreter's own torch operations."""
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    originals = {cls: cls.run for cls in (InterpretedFunction, JITFunction)}
    launches = {"n": 0}

    def wrap(original):
        def run(self, *args, **kwargs):
            launches["n"] += 1
            counter.inside_triton = True
            try:
                return original(self, *args, **kwargs)
            finally:
                counter.inside_triton = False

        return run

    for cls, original in originals.items():
        cls.run = wrap(original)
    try:
        yield launches
    finally:
        for cls, original in originals.items():
            cls.run = original


def _counted(fn, counter: _Count, launches: dict) -> int:
    before = counter.ops + launches["n"]
    with counter:
        fn()
    return counter.ops + launches["n"] - before


def count_layer(impl: str, vector_size: int, T: int, depth: int, batch: int) -> tuple[int, int]:
    """Launches ``(forward, backward)`` of the RNS-RNN layer (20-unit LSTM controller)
    with ``impl``."""
    torch.manual_seed(0)
    memory_args = {"states": 2, "symbols": 3}
    kind = "nondeterministic"
    if vector_size:
        kind, memory_args["vector_size"] = "vector_nondeterministic", vector_size
    net = StackRNN(3, 20, kind, "lstm", depth=depth, memory_args=memory_args)
    x = torch.randn(batch, T, 3)
    out = {}
    counter = _Count()
    with implementation(impl), _triton_launches(counter) as launches:
        forward = _counted(lambda: out.setdefault("y", net(x)[0]), counter, launches)
        grad = torch.ones_like(out["y"])  # made outside the count, as a loss's gradient would be
        backward = _counted(lambda: out["y"].backward(grad), counter, launches)
    return forward, backward


def count_stack(impl: str, vector_size: int, T: int, depth: int, batch: int) -> tuple[int, int]:
    """Launches ``(forward, backward)`` of the stack alone on given transition weights:
    the torch step (``"cpu"``) in a loop, or one Triton run."""
    gen = torch.Generator().manual_seed(0)
    Q, S = 2, 3
    QS, m = Q * S, vector_size
    gamma, alpha = nondeterministic_initial(batch, Q, S, depth)
    zeta = None
    if m:
        zeta, _ = vector_nondeterministic_initial(batch, Q, S, m, depth, torch.zeros(m))
    shapes = [(QS, QS), (QS, QS), (QS, Q)] + ([(m,)] if m else [])
    ws = [[torch.randn(batch, *sh, generator=gen).requires_grad_() for sh in shapes] for _ in range(T)]
    tops = []

    def forward():
        if impl == "triton":
            run = NondeterministicRun(gamma, alpha, T, states=Q, zeta=zeta, impl="triton")
            for w in ws:
                out = run.step(*w)
                tops.append(out if not m else out[1])
            return
        g, a, z = gamma, alpha, zeta
        for w in ws:
            if m:
                g, a, z, eta = vector_nondeterministic_step(g, a, z, *w, impl="cpu")
                tops.append(eta)
            else:
                g, a = nondeterministic_step(g, a, *w, impl="cpu")
                tops.append(a[:, -1])

    counter = _Count()
    with _triton_launches(counter) as launches:
        fwd = _counted(forward, counter, launches)
        grads = [torch.ones_like(t) for t in tops]  # made outside the count
        bwd = _counted(lambda: torch.autograd.backward(tops, grads), counter, launches)
    return fwd, bwd


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vector-size", type=int, default=0, help="> 0: the vector RNS-RNN, m units per element")
    ap.add_argument("--lengths", type=int, nargs=2, default=[8, 16], help="two lengths: per step = the slope")
    ap.add_argument("--depth", type=int, default=4)
    ap.add_argument("--batch", type=int, default=2)
    args = ap.parse_args(argv)
    what = f"vector RNS-RNN (m = {args.vector_size})" if args.vector_size else "RNS-RNN"
    t1, t2 = args.lengths
    print(f"{what}, 2 states x 3 symbols, LSTM controller 20, depth {args.depth}; torch {torch.__version__}")
    print(
        f"launches per step: the difference between T {t2} and T {t1}, over {t2 - t1} steps; per sequence: the rest"
    )
    print("| what | implementation | per step, forward | backward | forward+backward | per sequence |")
    print("|---|---|---|---|---|---|")
    rows = []
    for what, fn in (("the stack alone", count_stack), ("the layer (CPU ops)", count_layer)):
        for impl, label in (("cpu", "torch step"), ("triton", "Triton run")):
            (f1, b1), (f2, b2) = (fn(impl, args.vector_size, T, args.depth, args.batch) for T in (t1, t2))
            fwd, bwd = (f2 - f1) / (t2 - t1), (b2 - b1) / (t2 - t1)
            fixed = f1 + b1 - t1 * (fwd + bwd)
            rows.append({"what": what, "impl": label, "forward": fwd, "backward": bwd, "sequence": fixed})
            print(f"| {what} | {label} | {fwd:.1f} | {bwd:.1f} | {fwd + bwd:.1f} | {fixed:.0f} |")
    stack = [r["forward"] + r["backward"] for r in rows[:2]]
    print(f"\nthe stack: {stack[0] / stack[1]:.1f}x fewer launches per step with the Triton run")
    return rows


if __name__ == "__main__":
    main()
