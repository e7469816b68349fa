"""Learning Dyck-(k,m) from Hewitt's construction vs torch's default initialisation (Hewitt et al. 2020
section 8's setting: an LSTM of 3m⌈log2 k⌉ − m units, embedding 2k + 10, Adam, batch 10).

    python scripts/hewitt_init_study.py [--k 8] [--m 3] [--tokens 200000] [--seeds 0 1 2]

Every ``--eval-every`` optimiser steps, Hewitt's bracket-closing accuracy (H.4) on 20k validation
tokens; prints, per initialisation and seed, the training tokens seen when the accuracy first
reaches 0.99 (``-`` if never), the accuracy before training, the lowest on the way (and when),
the tokens at which it is back at 0.99 after that low, and the final one.  The Hewitt initialisations freeze the token features (``HewittInit``'s default).  Initialisations: ``default`` (torch),
``hewitt x1`` (the exact construction, HewittInit scale 1), ``hewitt x0.1`` (scaled down so the
gates are unsaturated).
"""

from __future__ import annotations

import argparse
import functools
import os

import lightning as L
import torch

from memrnn.constructions import hewitt_units
from memrnn.data import FormalLanguageDataModule
from memrnn.data.datamodule import IGNORE_INDEX
from memrnn.languages import DyckKM
from memrnn.layers import LSTMLayer
from memrnn.lit import HewittInit, SequenceModule


class TokenClock(L.Callback):
    """Counts training tokens and records ``(tokens, val/closing)`` after each validation (the
    first record, at 0 tokens, is the model before training)."""

    def __init__(self) -> None:
        self.tokens = 0
        self.curve: list[tuple[int, float]] = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.tokens += int((batch["target"] != IGNORE_INDEX).sum())

    def on_validation_end(self, trainer, pl_module) -> None:
        c = trainer.callback_metrics.get("val/closing")
        if c is not None:
            self.curve.append((self.tokens, float(c)))


def run(
    k: int,
    m: int,
    tokens: int,
    seed: int,
    init: str,
    eval_every: int,
    lr: float,
    optimizer: str,
    clip: float | None,
) -> TokenClock:
    L.seed_everything(seed, verbose=False)
    lang = DyckKM(k, m)
    dm = FormalLanguageDataModule(
        lang, preset="hewitt", train_tokens=tokens, val_tokens=20_000, test_tokens=1000, batch_size=10,
        eval_batch_size=256, seed=seed,
    )  # fmt: skip
    model = SequenceModule(
        functools.partial(LSTMLayer, hidden_size=hewitt_units(k, m)),
        lang.input_vocab_size,
        lang.num_symbols,
        embedding_dim=2 * k + 10,
        lr=lr,
        optimizer={"adam": torch.optim.Adam, "sgd": torch.optim.SGD}[optimizer],
        bracket_types=k,
    )
    clock = TokenClock()
    callbacks: list[L.Callback] = [clock]
    if init.startswith("hewitt"):
        callbacks.append(HewittInit(scale=float(init.split("x")[1])))  # embedding frozen
    trainer = L.Trainer(
        max_epochs=1, val_check_interval=eval_every, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, callbacks=callbacks, num_sanity_val_steps=0,
        gradient_clip_val=clip,
    )  # fmt: skip
    if init.startswith("hewitt"):  # the accuracy at the start (HewittInit runs again in fit, identically)
        from memrnn.constructions import hewitt_init_

        hewitt_init_(model.layer, k, m, scale=float(init.split("x")[1]), embedding=model.embedding,
                     readout=model.heads["generator"])  # fmt: skip
        model.embedding.weight.requires_grad_(False)
    trainer.validate(model, dm, verbose=False)
    trainer.fit(model, dm)
    return clock


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--m", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=200_000)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--eval-every", type=int, default=50, help="optimiser steps between evaluations")
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--optimizer", default="adam", choices=["adam", "sgd"])
    ap.add_argument("--clip", type=float, default=None, help="gradient norm clipping")
    ap.add_argument("--inits", nargs="+", default=["default", "hewittx1", "hewittx0.1"])
    args = ap.parse_args()
    torch.set_num_threads(max(1, int(os.environ.get("OMP_NUM_THREADS", "2"))))
    print(
        f"Dyck-({args.k},{args.m}), LSTM {hewitt_units(args.k, args.m)} units, {args.optimizer} lr {args.lr}, batch 10"
    )
    print(
        f"{'init':>12} {'seed':>5} {'tokens to 0.99':>15} {'at start':>11} {'min':>7} {'at tokens':>10} "
        f"{'back to 0.99':>13} {'final':>7}"
    )
    for init in args.inits:
        for seed in args.seeds:
            clock = run(
                args.k, args.m, args.tokens, seed, init, args.eval_every, args.lr, args.optimizer, args.clip
            )
            hit = next((t for t, c in clock.curve if c >= 0.99), None)
            first = clock.curve[0][1] if clock.curve else float("nan")
            final = clock.curve[-1][1] if clock.curve else float("nan")
            i_low = min(range(len(clock.curve)), key=lambda i: clock.curve[i][1]) if clock.curve else 0
            t_low, low = clock.curve[i_low] if clock.curve else (0, float("nan"))
            back = next((t for t, c in clock.curve[i_low:] if c >= 0.99), None)
            print(
                f"{init:>12} {seed:>5} {hit if hit is not None else '-':>15} {first:>11.4f} {low:>7.4f} {t_low:>10} "
                f"{back if back is not None else '-':>13} {final:>7.4f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
