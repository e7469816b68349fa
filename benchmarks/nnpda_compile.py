"""Does ``torch.compile`` pay for the nnPDA?  The evidence behind memrnn shipping no compiled path.

    python benchmarks/nnpda_compile.py              # CPU, the suite's headline cell
    python benchmarks/nnpda_compile.py --device cuda

Times, at num_states 64, stack symbols 4, depth 64, 16 input symbols, batch 64, T 256:

* ``fused eager``: ``NNPDA.forward`` under ``no_grad`` (the hand-written ``memrnn.ops.nnpda.cpu.NNPDASequence``);
* ``compiled step``: the same forward with everything but the bucketed contraction of each step
  (stack reading, outer product, ``h_H``, actions, the stack mix ``π``, the next reading) as one
  ``torch.compile`` d function (Inductor), the contraction eager (``TokenBuckets.contract``);
* ``nn.LSTM`` forward and forward+backward of the same state size, the suite's baseline.

It also checks that the compiled forward gives the fused path's states (to 1e-5).  Compile time
is reported on its own line (Inductor caches compiled code on disk: the first run on a machine
pays more).  The compiled step only replaces the elementwise kernels, so its
forward is bounded below by the contraction, which is why it cannot reach the baseline.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.run import _reexec_with_heap_malloc, allocator, median_time
from memrnn.layers import NNPDA
from memrnn.ops.buckets import TokenBuckets


def make_step(n: int, D: int, H: float):
    """The elementwise part of one nnPDA step (action ``identity``), as a pure function:
    ``z [B, O]`` and ``[C; K; tail] [B, D+2, m2]`` -> next state, next ``[C; K; tail]`` and
    the next step's ``Q ⊗ R`` ``[B, n·L]``."""

    def step(z: torch.Tensor, P: torch.Tensor, mix: torch.Tensor, e1: torch.Tensor):
        q = torch.sigmoid(z[:, :n] * H - H / 2)
        a = z[:, n:]
        wh = (e1 + a[:, :2] @ mix)[:, :, None, None]
        above = torch.cat([a[:, None, 2:], P[:, 1:D]], 1)
        mixed = P[:, 1 : D + 1] * wh[:, 1] + above * wh[:, 0] + P[:, 2 : D + 2] * wh[:, 2] - H / 2
        tail = torch.sigmoid(P[:, D + 1 :] * H - H / 2)
        nxt = torch.cat([P[:, :1], torch.sigmoid(mixed), tail], 1)
        top = nxt[:, 1]
        r = torch.cat([top, 1 - top.amax(-1, keepdim=True)], -1)
        return q, nxt, (q[:, :, None] * r[:, None, :]).flatten(1)

    return step


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--T", type=int, default=256)
    args = ap.parse_args()
    _reexec_with_heap_malloc()  # the suite's allocator setting (benchmarks/run.py docstring)
    dev, B, T = args.device, args.batch, args.T
    n, m1, m2, D = 64, 16, 4, 64
    torch.manual_seed(0)
    layer = NNPDA(m1, n, m2, depth=D).to(dev)
    ids = torch.randint(0, m1, (B, T), device=dev)
    x = F.one_hot(ids, m1).float()
    H = float(layer.sensitivity)
    weight = layer.weight().detach()
    O, L = weight.shape[0], m2 + 1
    wk = weight.permute(2, 1, 3, 0).reshape(m1, n * L, O)
    mix = torch.tensor([[1.0, -1.0, 0.0], [0.0, -1.0, 1.0]], device=dev) * H
    e1 = torch.tensor([0.0, H, 0.0], device=dev)
    step = make_step(n, D, H)

    def forward(fn):
        buckets = TokenBuckets(ids, m1)
        st = layer.initial_state(B, device=dev)
        P = torch.cat([torch.zeros_like(st.stack[:, :1]), st.stack, st.tail[:, None]], 1)
        top = P[:, 1]
        r = torch.cat([top, 1 - top.amax(-1, keepdim=True)], -1)
        qr = (st.q[:, :, None] * r[:, None, :]).flatten(1)
        qs = []
        for t in range(T):
            z = buckets.contract(t, qr, wk)
            q, P, qr = fn(z, P, mix, e1)
            qs.append(q)
        return torch.stack(qs, 1)

    with torch.no_grad():
        t_fused = median_time(lambda: layer(x), dev)
        ref = layer(x)[0][..., :n]
        compiled = torch.compile(step, dynamic=False)
        t0 = time.perf_counter()
        out = forward(compiled)
        if dev == "cuda":
            torch.cuda.synchronize()
        t_compile = time.perf_counter() - t0
        torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
        t_comp = median_time(lambda: forward(compiled), dev)
        t_eager_step = median_time(lambda: forward(step), dev)
    lstm = torch.nn.LSTM(m1, n, batch_first=True).to(dev)
    with torch.no_grad():
        t_lstm_f = median_time(lambda: lstm(x), dev)
    xg = x.clone().requires_grad_()
    t_lstm_fb = median_time(lambda: lstm(xg)[0].sum().backward(), dev)
    print(f"torch {torch.__version__}, {dev}, {torch.get_num_threads()} threads, {allocator()}; "
          f"B {B}, T {T}, n {n}, depth {D}")  # fmt: skip
    print(f"compile (first call, Inductor): {t_compile:.1f} s\n")
    print("| forward | ms | × fused eager |\n|---|---|---|")
    for name, t in (("nnPDA fused eager (memrnn)", t_fused), ("nnPDA compiled step + eager contraction", t_comp),
                    ("nnPDA same step, not compiled", t_eager_step), ("nn.LSTM forward", t_lstm_f),
                    ("nn.LSTM forward+backward", t_lstm_fb)):  # fmt: skip
        print(f"| {name} | {t * 1e3:.1f} | {t_fused / t:.2f} |")


if __name__ == "__main__":
    main()
