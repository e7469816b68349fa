"""Accuracy by output position of a model trained on one of Delétang et al.'s (2023) tasks:
where, in its outputs, a checkpoint is right (:func:`memrnn.analysis.output_position_accuracy`).

    python scripts/chomsky_positions.py CHECKPOINT [--lengths 41 60 100] [--count 256] [--bin 5]

Prints a table: one row per ``--bin`` output positions (1-based; for a reversal, position ``j``
needs a stack of ``j`` cells), one column per input length, each cell the mean accuracy over
``--count`` fresh inputs of that length (drawn from ``--seed``, not the test split's), then each
length's mean over its outputs.  The task is the checkpoint's (``--task`` to override).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from memrnn.analysis import output_position_accuracy  # noqa: E402
from memrnn.data import transduction_batch  # noqa: E402
from memrnn.languages.state_tracking import transduction_task  # noqa: E402
from memrnn.lit import SequenceModule  # noqa: E402


@torch.no_grad()
def position_table(
    module: SequenceModule, task: str, lengths: list[int], count: int, seed: int
) -> dict[int, torch.Tensor]:
    """Input length -> accuracy ``[L]`` by output position, of ``module`` on ``count`` inputs."""
    module.eval()
    spec = transduction_task(task)
    device = next(module.parameters()).device
    out = {}
    for n in lengths:
        b = {k: v.to(device) for k, v in transduction_batch(spec, n, count, seed).items()}
        logits = next(iter(module.heads_out(b["input"], b["mask"], b["input_lengths"]).values()))
        start = torch.zeros_like(b["input_lengths"]) if spec.aligned else b["input_lengths"]
        out[n], _ = output_position_accuracy(logits.argmax(-1), b["target"], start)
    return out


def format_table(table: dict[int, torch.Tensor], bin_size: int) -> str:
    """The markdown table the script prints."""
    longest = max(len(v) for v in table.values())
    lines = ["| output positions | " + " | ".join(f"n = {n}" for n in table) + " |",
             "|---|" + "---|" * len(table)]  # fmt: skip
    for lo in range(0, longest, bin_size):
        hi = min(lo + bin_size, longest)
        cells = []
        for acc in table.values():
            part = acc[lo:hi]
            part = part[~torch.isnan(part)]
            cells.append(f"{part.mean():.3f}" if len(part) else "")
        lines.append(f"| {lo + 1}–{hi} | " + " | ".join(cells) + " |")
    means = [acc[~torch.isnan(acc)].mean() for acc in table.values()]
    lines.append("| all | " + " | ".join(f"{m:.3f}" if not math.isnan(m) else "" for m in means) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> str:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("checkpoint", type=Path)
    ap.add_argument("--task", help="the task's name (default: the checkpoint's data module's)")
    ap.add_argument("--lengths", type=int, nargs="+", default=[41, 60, 100])
    ap.add_argument("--count", type=int, default=256)
    ap.add_argument("--seed", type=int, default=12345)
    ap.add_argument("--bin", type=int, default=5, dest="bin_size")
    args = ap.parse_args(argv)
    if not args.checkpoint.is_file():
        ap.error(f"no checkpoint at {args.checkpoint}")
    task = args.task
    if task is None:
        saved = torch.load(args.checkpoint, map_location="cpu", weights_only=False)
        task = (saved.get("datamodule_hyper_parameters") or {}).get("task")
        if task is None:
            ap.error(
                f"{args.checkpoint} names no task (no Chomsky data module's hyper-parameters): give --task"
            )
    module = SequenceModule.load_from_checkpoint(args.checkpoint, map_location="cpu")
    text = format_table(position_table(module, task, args.lengths, args.count, args.seed), args.bin_size)
    print(f"{args.checkpoint}: {task}, {args.count} inputs per length (seed {args.seed})")
    print(text)
    return text


if __name__ == "__main__":
    main()
