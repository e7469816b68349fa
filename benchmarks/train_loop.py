"""Optimizer steps per second of ``train.py``'s model against the bare PyTorch loop a user would
write for the same model, on the same batches and device, measured in one process.

    python -m benchmarks.train_loop                                    # the default job, CPU
    python -m benchmarks.train_loop --config configs/hewitt/lstm_k8_m3.yaml
    python -m benchmarks.train_loop --config configs/nnpda/nnpda_dyck2.yaml --device cuda

Rows (each: optimizer steps/s, real tokens/s, ratio to the bare loop):

* ``bare torch``: ``nn.Embedding`` → ``nn.LSTM``/``nn.GRU``/``nn.RNN`` (batch first, unpacked) →
  ``nn.Linear``, cross-entropy over the real tokens, the config's optimizer; only for layers with a
  torch equivalent (LSTM, GRU, tanh/ReLU Elman);
* ``module, plain loop``: the config's LightningModule (``training_step``, its
  ``configure_optimizers``) in the same loop;
* ``bare torch, Lightning``: the bare model in a minimal ``LightningModule`` (the same loss)
  under the same ``lightning.Trainer`` as the next row: what Lightning itself costs per step;
* ``module, Lightning``: the config's module under ``lightning.Trainer`` (no logger, no callbacks,
  no validation);
* ``train.py job``: the config's whole trainer (its callbacks and logger; W&B offline into a
  temporary folder) for one epoch of the same batches, timed from the first timed training batch
  to the end of training with the validation loops' time taken out (steps/s of training).

The batches are the config's training batches (its data module, sizes as configured unless
``--batches`` caps them), moved to the device once; every row runs the same ones after a warm-up.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lightning as L
import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from memrnn.data.datamodule import IGNORE_INDEX
from memrnn.layers import ElmanRNN, GRULayer, LSTMLayer
from memrnn.lit.cli import build_cli

ROOT = Path(__file__).resolve().parents[1]
DEFAULTS = ROOT / "configs" / "defaults.yaml"


class BareModel(nn.Module):
    """The model a user writes by hand: embedding, a torch RNN over the padded batch, a linear
    head."""

    def __init__(self, vocab: int, embed: int, rnn: nn.RNNBase, classes: int) -> None:
        super().__init__()
        self.embedding, self.rnn, self.head = (
            nn.Embedding(vocab, embed),
            rnn,
            nn.Linear(rnn.hidden_size, classes),
        )

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.rnn(self.embedding(ids))[0])


def bare_equivalent(model: Any) -> BareModel | None:
    """The hand-written twin of a generator ``SequenceModule`` (None when its layer has none)."""
    layer = model.layer
    embed = model.embedding.embedding_dim
    if isinstance(layer, (LSTMLayer, GRULayer)):
        cls = nn.LSTM if isinstance(layer, LSTMLayer) else nn.GRU
        rnn = cls(embed, layer.hidden_size, layer.num_layers, batch_first=True)
    elif isinstance(layer, ElmanRNN) and layer.activation in ("tanh", "relu"):
        rnn = nn.RNN(embed, layer.hidden_size, nonlinearity=layer.activation, batch_first=True)
    else:
        return None
    if set(model.objectives) != {"generator"}:
        return None
    return BareModel(model.vocab_size, embed, rnn, model.num_symbols)


def optimizer_of(model: L.LightningModule) -> torch.optim.Optimizer:
    """The optimizer ``configure_optimizers`` makes (without its schedule)."""
    out = model.configure_optimizers()
    return out["optimizer"] if isinstance(out, dict) else out


def timed_loop(
    step: Callable[[dict], None], batches: list[dict], warmup: int, sync: Callable[[], None]
) -> float:
    """Seconds per step: the median over three passes of the batches after ``warmup`` steps."""
    for b in batches[:warmup]:
        step(b)
    sync()
    times = []
    for _ in range(3):
        start = time.perf_counter()
        for b in batches:
            step(b)
        sync()
        times.append((time.perf_counter() - start) / len(batches))
    return statistics.median(times)


class StepTimer(L.Callback):
    """Wall time from the first training batch after ``skip`` batches to the end of training,
    less the time spent in validation loops."""

    def __init__(self, skip: int) -> None:
        self.skip, self.start, self.steps, self.seconds = skip, None, 0, float("nan")
        self.validating, self.in_validation = None, 0.0

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if batch_idx == self.skip and self.start is None:
            self.start = time.perf_counter()

    def on_validation_start(self, trainer, pl_module) -> None:
        self.validating = time.perf_counter()

    def on_validation_end(self, trainer, pl_module) -> None:
        if self.start is not None and self.validating is not None:
            self.in_validation += time.perf_counter() - max(self.validating, self.start)
        self.validating = None

    def on_train_end(self, trainer, pl_module) -> None:
        if self.start is not None:
            self.steps = trainer.global_step - self.skip
            self.seconds = time.perf_counter() - self.start - self.in_validation


class BareLightning(L.LightningModule):
    """The bare model in the smallest ``LightningModule``: Lightning's own cost per step."""

    def __init__(self, bare: BareModel, optimizer: torch.optim.Optimizer) -> None:
        super().__init__()
        self.bare, self._opt = bare, (type(optimizer), optimizer.defaults)

    def training_step(self, batch: dict, batch_idx: int) -> torch.Tensor:
        logits = self.bare(batch["input"])
        return F.cross_entropy(logits.flatten(0, 1), batch["target"].flatten(), ignore_index=IGNORE_INDEX)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        cls, defaults = self._opt
        return cls(self.parameters(), **defaults)


def lightning_seconds_per_step(
    module: L.LightningModule,
    batches: list[dict],
    warmup: int,
    device,
    tmp,
    gradient_clip_val: float | None = None,
) -> float:
    """Seconds per optimizer step of ``module`` under a bare ``lightning.Trainer`` (no logger,
    callbacks, checkpoints or validation; ``gradient_clip_val`` as the Trainer's) over ``batches`` once."""
    timer = StepTimer(warmup)
    loader = torch.utils.data.DataLoader(batches, batch_size=None, shuffle=False)
    trainer = L.Trainer(
        accelerator=torch.device(device).type, devices=1, max_epochs=1, logger=False, callbacks=[timer],
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
        limit_val_batches=0, num_sanity_val_steps=0, default_root_dir=tmp, gradient_clip_val=gradient_clip_val,
    )  # fmt: skip
    trainer.fit(module, train_dataloaders=loader)
    return timer.seconds / max(timer.steps, 1)


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(ROOT / "configs/dyck/lstm_k2_m3.yaml"))
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batches", type=int, default=200, help="training batches to time (at most)")
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--skip-job", action="store_true", help="leave out the train.py row")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    tmp = tempfile.mkdtemp(prefix="train_loop_")

    def cli(*extra: str):
        return build_cli(
            ["--config", args.config, f"--trainer.default_root_dir={tmp}", *extra],
            run=False,
            default_config_files=[DEFAULTS],
        )

    torch.manual_seed(0)
    c = cli("--trainer.logger=false")
    model, dm = c.model.to(device), c.datamodule
    dm.setup("fit")
    batches = []
    for i, b in enumerate(dm.train_dataloader()):
        if i >= args.batches:
            break
        batches.append({k: v.to(device) for k, v in b.items()})
    tokens = statistics.mean(float(b["mask"].sum()) for b in batches)
    rows: list[dict[str, Any]] = []

    bare = bare_equivalent(model)
    if bare is not None:
        bare = bare.to(device)
        ref = optimizer_of(model)
        opt = type(ref)(bare.parameters(), **ref.defaults)

        def bare_step(b: dict) -> None:
            logits = bare(b["input"])
            loss = F.cross_entropy(logits.flatten(0, 1), b["target"].flatten(), ignore_index=IGNORE_INDEX)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()

        rows.append({"row": "bare torch", "s_per_step": timed_loop(bare_step, batches, args.warmup, sync)})

    opt_m = optimizer_of(model)

    def module_step(b: dict) -> None:
        loss = model.training_step(b, 0)
        opt_m.zero_grad(set_to_none=True)
        loss.backward()
        opt_m.step()

    rows.append(
        {"row": "module, plain loop", "s_per_step": timed_loop(module_step, batches, args.warmup, sync)}
    )

    if bare is not None:
        bare_lit = BareLightning(bare_equivalent(model).to(device), opt)
        rows.append({"row": "bare torch, Lightning",
                     "s_per_step": lightning_seconds_per_step(bare_lit, batches, args.warmup, device, tmp)})  # fmt: skip
    # no validation here, so no schedule that watches a validation metric: the optimizer alone
    model.configure_optimizers = lambda: type(opt_m)(model.parameters(), **opt_m.defaults)
    rows.append({"row": "module, Lightning",
                 "s_per_step": lightning_seconds_per_step(model, batches, args.warmup, device, tmp)})  # fmt: skip

    if not args.skip_job:
        job = cli(
            f"--trainer.logger.init_args.save_dir={tmp}", "--trainer.max_epochs=1",
            f"--trainer.limit_train_batches={len(batches)}", f"--trainer.accelerator={device.type}",
        )  # fmt: skip
        job_timer = StepTimer(args.warmup)
        job.trainer.callbacks.append(job_timer)
        job.trainer.fit(job.model, datamodule=job.datamodule)
        rows.append({"row": "train.py job (callbacks, W&B offline; validation time taken out)",
                     "s_per_step": job_timer.seconds / max(job_timer.steps, 1)})  # fmt: skip

    base = rows[0]["s_per_step"] if bare is not None else None
    print(f"config {Path(args.config).relative_to(ROOT) if Path(args.config).is_relative_to(ROOT) else args.config}, "
          f"device {device}, torch {torch.__version__}, threads {torch.get_num_threads()}, "
          f"{len(batches)} batches of {statistics.mean(b['mask'].shape[0] for b in batches):.0f} strings, "
          f"{tokens:.0f} real tokens per batch")  # fmt: skip
    print("| loop | steps/s | tokens/s | × bare torch |")
    print("|---|---|---|---|")
    for r in rows:
        r["steps_per_s"] = 1.0 / r["s_per_step"]
        r["tokens_per_s"] = tokens * r["steps_per_s"]
        ratio = f"{base / r['s_per_step']:.2f}" if base else "–"
        print(f"| {r['row']} | {r['steps_per_s']:.0f} | {r['tokens_per_s']:,.0f} | {ratio} |")
    return rows


if __name__ == "__main__":
    main()
