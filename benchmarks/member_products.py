"""The member step's products at a job's shapes, each in the orientation memrnn uses against the
other one (for the head, the one torch's autograd uses), in one process, alternating (best of
``--repeats`` rounds of ``--calls`` calls each, µs per call).

    python -m benchmarks.member_products                      # the default job's shapes, one thread
    python -m benchmarks.member_products --members 10 --rows 816 --hidden 16 --vocab 5 --embedding 14

Shapes: M members, R = B·T rows (the default job: batch 16, T 51 → 816), a head of ``--vocab``
outputs over ``--hidden`` units (:class:`memrnn.members.MemberLinear`), an LSTM of ``--hidden``
units over an embedding of ``--embedding``.

Rows:

* ``head forward``: ``baddbmm(b, x, wᵀ)`` (``[R, V]`` out: what ``nn.Linear``'s batched form
  does) against ``(w xᵀ + b)ᵀ`` made contiguous (``MemberLinear`` on CPU);
* ``head weight grad``: ``xᵀ g`` (``[H, V]``, autograd's for ``baddbmm``) against ``(gᵀ x)ᵀ``;
* ``LSTM weight grads``, ``LSTM input grad``: ``FusedLSTMSequence``'s products (the long dimension
  last) against the other orientation (from token ids the member path runs only ``w_rec``'s:
  :class:`memrnn.ops.lstm.cpu.FusedLSTMTokens`);
* ``head input grad``: ``g w``, the fast orientation either way;
* ``fused LSTM forward`` / ``backward``: the C++ cell alone (``lstm_fused_forward`` on a copy of
  the projection, ``lstm_fused_backward``, into buffers reused between calls), no baseline (its ATen loop is
  :class:`memrnn.ops.lstm.cpu.LSTMSequence`).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import torch

from memrnn.ops.native import cpu_description


def _best_us(fn: Callable[[], object], calls: int) -> float:
    t = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - t) / calls * 1e6


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--members", type=int, default=10)
    ap.add_argument("--rows", type=int, default=816, help="B·T, the tokens of a batch")
    ap.add_argument("--batch", type=int, default=16, help="B (the fused cell's rows per step)")
    ap.add_argument("--hidden", type=int, default=16)
    ap.add_argument("--vocab", type=int, default=5)
    ap.add_argument("--embedding", type=int, default=14)
    ap.add_argument("--calls", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    g = torch.Generator().manual_seed(0)
    M, R, H, V, E = args.members, args.rows, args.hidden, args.vocab, args.embedding
    G = 4 * H
    h, w, b, gy = (torch.randn(*s, generator=g) for s in ((M, R, H), (M, V, H), (M, V), (M, R, V)))
    hp, x, ga, w_in = (torch.randn(*s, generator=g) for s in ((M, R, H), (M, R, E), (M, R, G), (M, G, E)))
    cases: list[tuple[str, Callable[[], object] | None, Callable[[], object]]] = [
        (
            "head forward",
            lambda: torch.baddbmm(b[:, None], h, w.transpose(1, 2)),
            lambda: torch.baddbmm(b[:, :, None], w, h.transpose(1, 2)).transpose(1, 2).contiguous(),
        ),
        (
            "head weight grad",
            lambda: torch.bmm(h.transpose(1, 2), gy).transpose(1, 2),
            lambda: torch.bmm(gy.transpose(1, 2), h),
        ),
        ("head input grad", None, lambda: torch.bmm(gy, w)),
        (
            "LSTM weight grads",
            lambda: (torch.bmm(ga.transpose(1, 2), hp), torch.bmm(ga.transpose(1, 2), x)),
            lambda: (torch.bmm(hp.transpose(1, 2), ga), torch.bmm(x.transpose(1, 2), ga)),
        ),
        (
            "LSTM input grad",
            lambda: torch.bmm(ga, w_in),
            lambda: torch.bmm(w_in.transpose(1, 2), ga.transpose(1, 2)).transpose(1, 2).contiguous(),
        ),
    ]
    from memrnn.ops.native import load

    ops = load()
    if ops is not None:
        T = max(1, R // args.batch)
        proj = torch.randn(M, args.batch, T, G, generator=g) * 0.5
        w_rec = torch.randn(M, G, H, generator=g) * 0.3
        h0, bias = torch.zeros(M, args.batch, H), torch.zeros(M, G)
        acts = proj.clone()
        _, c_out, xs, _ = ops.lstm_fused_forward(acts, bias, w_rec, h0, h0, H)
        ghs = torch.randn(M, args.batch, T + 1, H, generator=g)
        # the cell's buffers reused from call to call, as memrnn.ops.scratch serves them in training
        proj_buf, ga_buf = torch.empty_like(proj), torch.empty_like(acts)
        cases += [
            (
                "fused LSTM forward",
                None,
                lambda: ops.lstm_fused_forward(proj_buf.copy_(proj), bias, w_rec, h0, h0, H),
            ),
            (
                "fused LSTM backward",
                None,
                lambda: ops.lstm_fused_backward(acts, c_out, xs, w_rec, ghs, None, H, ga_buf, None, None),
            ),
        ]
    best: dict[tuple[str, str], float] = {}
    for _ in range(args.repeats):
        for name, base, fast in cases:
            for kind, fn in (("torch", base), ("memrnn", fast)):
                if fn is None:
                    continue
                fn()
                us = _best_us(fn, args.calls)
                best[name, kind] = min(best.get((name, kind), us), us)
    print(
        f"M {M}, rows {R} (batch {args.batch}), hidden {H}, vocab {V}, embedding {E}; {args.threads} thread(s); "
        f"{cpu_description()}; torch {torch.__version__}"
    )
    print("| product | the other orientation, µs | memrnn's, µs | × |")
    print("|---|---|---|---|")
    rows = []
    for name, _, _ in cases:
        base_us = best.get((name, "torch"))
        fast_us = best[name, "memrnn"]
        ratio = None if base_us is None else base_us / fast_us
        rows.append({"product": name, "torch_us": base_us, "memrnn_us": fast_us, "ratio": ratio})
        if base_us is None:
            print(f"| {name} | (the same) | {fast_us:.1f} | |")
        else:
            print(f"| {name} | {base_us:.1f} | {fast_us:.1f} | {ratio:.2f} |")
    return rows


if __name__ == "__main__":
    main()
