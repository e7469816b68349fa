"""A suite cell's members against the cells one process each, one optimizer step at a time: how far
each member's loss and parameters are from its cell's (``benchmarks/results/members-suite-cpu-2core.md``).

    python -m benchmarks.members_divergence --suite configs/suites/chomsky_cpu.yaml --arch stack_rnn --task even_pairs --steps 200

Builds the group's :class:`memrnn.lit.members.MemberSequenceModule` and each cell's
:class:`memrnn.lit.SequenceModule` from the suite (``Suite.group_args``, ``Suite.cli_args``), then
steps both on their own data loaders with the configs' optimizer and gradient clipping at 1, and
prints every ``--every`` steps each member's loss difference and the largest parameter difference.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from memrnn.lit.cli import build_cli
from memrnn.members.optim import clip_grad_norm_per_member_
from memrnn.suite import Suite


def _optimizer(model):
    opt = model.configure_optimizers()
    return opt["optimizer"] if isinstance(opt, dict) else opt


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--suite", default="configs/suites/chomsky_cpu.yaml")
    ap.add_argument("--arch", required=True)
    ap.add_argument("--task", required=True)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--every", type=int, default=20)
    ap.add_argument("--clip", type=float, default=1.0)
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    suite = Suite.load(args.suite, out="/tmp/members_divergence")
    cells = [c for c in suite.cells() if c.arch == args.arch and c.task == args.task]
    if not cells:
        raise SystemExit(f"error: suite {suite.name!r} has no cells of {args.arch}/{args.task}")
    defaults = ["configs/defaults.yaml"]
    group = build_cli(
        [*suite.group_args(cells), "--trainer.logger=false"], run=False, default_config_files=defaults
    )
    members = group.model.train()
    group.datamodule.setup("fit")
    member_opt, member_batches = _optimizer(members), iter(group.datamodule.train_dataloader())
    singles = []
    for c in cells:
        cli = build_cli(
            [*suite.cli_args(c), "--trainer.logger=false"], run=False, default_config_files=defaults
        )
        cli.datamodule.setup("fit")
        singles.append((cli.model.train(), _optimizer(cli.model), iter(cli.datamodule.train_dataloader())))
    for step in range(args.steps):
        _, losses = members._outputs_and_losses(next(member_batches))
        totals = members._total(losses)
        totals.sum().backward()
        clip_grad_norm_per_member_(list(members.parameters()), args.clip, members.members)
        member_opt.step()
        member_opt.zero_grad()
        gaps = []
        for m, (model, opt, batches) in enumerate(singles):
            batch = next(batches)
            out = model.heads_out(batch["input"], batch["mask"], batch.get("input_lengths"))
            loss = model._total(model.losses(batch, out))
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
            opt.step()
            opt.zero_grad()
            gaps.append(abs(loss.item() - totals[m].item()))
        if step % args.every == 0 or step == args.steps - 1:
            worst = 0.0
            for m, (model, _, _) in enumerate(singles):
                mine = members.member_module(m).state_dict()
                for k, v in model.state_dict().items():
                    if v.is_floating_point():
                        worst = max(worst, (v - mine[k]).abs().max().item())
            print(
                f"step {step:4d}  loss gaps {' '.join(f'{g:.1e}' for g in gaps)}  max parameter gap {worst:.1e}"
            )


if __name__ == "__main__":
    main()
