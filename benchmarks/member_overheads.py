"""What a group's training step pays outside the model, per way of doing it, in one process: the
three costs that grew with the members of a DuSell & Chiang LSTM-20 group (each restart its own
data, the first prediction read at the initial state).

    python -m benchmarks.member_overheads                      # 20 members, batch 10, lengths 40-80
    python -m benchmarks.member_overheads --members 4 --repeats 3

Rows, each the best of ``--repeats`` calls, the two ways interleaved:

* ``collate``: :func:`memrnn.data.datamodule.collate_generator` on ``M × B`` strings (one flat copy
  per field) against a tensor copy per string (what it did before);
* ``initial state + output``: :meth:`MemberLayer.initial_state` and :meth:`MemberLayer.output_at`
  through the member path against each member under its member view;
* ``loss (fwd+bwd)``: :meth:`MemberSequenceModule._outputs_and_losses`' generator loss for all
  members at once against member by member (the loss and its backward alone: the logits are a
  leaf).
"""

from __future__ import annotations

import argparse
import functools
import random
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from memrnn.core import state_map
from memrnn.data.datamodule import IGNORE_INDEX, collate_generator
from memrnn.data.members import member_batch
from memrnn.layers import LSTMLayer
from memrnn.lit.members import MemberSequenceModule
from memrnn.members.stacking import member_view


def _per_row_collate(items: list[dict], bos_id: int) -> dict[str, torch.Tensor]:
    """The input and target of :func:`collate_generator` the way it built them before: a tensor copy per string."""
    lengths = torch.tensor([len(it["ids"]) for it in items], dtype=torch.long)
    steps = int(lengths.max())
    inp = torch.zeros(len(items), steps, dtype=torch.long)
    tgt = torch.full((len(items), steps), IGNORE_INDEX, dtype=torch.long)
    for b, it in enumerate(items):
        inp[b, 0] = bos_id
        inp[b, 1 : len(it["ids"])] = torch.as_tensor(it["ids"][:-1], dtype=torch.long)
        tgt[b, : len(it["ids"])] = torch.as_tensor(it["ids"], dtype=torch.long)
    return {"input": inp, "target": tgt}


def best_pair(a: Callable[[], object], b: Callable[[], object], repeats: int) -> tuple[float, float]:
    """The best of ``repeats`` timings of ``a`` and of ``b``, interleaved, after one call of each (seconds)."""
    a(), b()
    ta, tb = [], []
    for _ in range(repeats):
        for f, ts in ((a, ta), (b, tb)):
            t0 = time.perf_counter()
            f()
            ts.append(time.perf_counter() - t0)
    return min(ta), min(tb)


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--members", type=int, default=20)
    ap.add_argument("--batch", type=int, default=10)
    ap.add_argument("--lengths", type=int, nargs=2, default=[40, 80])
    ap.add_argument("--hidden", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=20)
    args = ap.parse_args(argv)
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    M, B, (lo, hi) = args.members, args.batch, args.lengths
    rng = random.Random(0)
    items = [{"ids": [rng.randrange(5) for _ in range(rng.randint(lo, hi))] + [5]} for _ in range(M * B)]
    new = collate_generator(items, 6)
    old = _per_row_collate(items, 6)
    assert all(torch.equal(new[k], old[k]) for k in old)
    rows = [
        (
            "collate",
            *best_pair(lambda: _per_row_collate(items, 6), lambda: collate_generator(items, 6), args.repeats),
        )
    ]

    torch.manual_seed(0)
    module = MemberSequenceModule(
        seeds=list(range(M)), member_data="independent", loss_reduction="sum_per_string", initial_output=True,
        layer=functools.partial(LSTMLayer, hidden_size=args.hidden), vocab_size=7, num_symbols=6, embedding_dim=6,
    )  # fmt: skip
    layer = module.layer

    def looped():
        state = layer._initial_loop(B)
        outs = []
        for m in range(M):
            with member_view(layer.layer, m) as single:
                outs.append(single.output_at(state_map(lambda t, m=m: t[m], state)))
        return torch.stack(outs)

    assert torch.equal(looped(), layer.output_at(layer.initial_state(B)))
    rows.append(
        (
            "initial state + output",
            *best_pair(looped, lambda: layer.output_at(layer.initial_state(B)), args.repeats),
        )
    )

    batch = collate_generator(items, 6)
    batch = {k: v.view(M, B, *v.shape[1:]) for k, v in batch.items()}
    logits = torch.randn(M, B, batch["input"].shape[-1], 6, requires_grad=True)

    def one_by_one():
        rows_ = [
            module.losses(member_batch(batch, m), {"generator": logits[m]})["generator"] for m in range(M)
        ]
        torch.stack(rows_).sum().backward()

    def at_once():
        module.losses(batch, {"generator": logits})["generator"].sum().backward()

    rows.append(("loss (fwd+bwd)", *best_pair(one_by_one, at_once, args.repeats)))
    print(f"{M} members, batch {B}, lengths {lo}-{hi}, one thread; best of {args.repeats}\n")
    print("| what | before, ms | now, ms | × |\n|---|---|---|---|")
    out = []
    for name, before, now in rows:
        print(f"| {name} | {1e3 * before:.2f} | {1e3 * now:.2f} | {before / now:.1f} |")
        out.append({"what": name, "before_ms": 1e3 * before, "now_ms": 1e3 * now})
    return out


if __name__ == "__main__":
    main()
