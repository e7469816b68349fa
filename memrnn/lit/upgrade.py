"""Convert a checkpoint written before :class:`~memrnn.lit.SequenceModule` took its optimizer and
schedule as objects: ``python -m memrnn.lit.upgrade old.ckpt [new.ckpt]``.

Such checkpoints keep ``optimizer: "adam"`` (a name), ``lr_decay``/``lr_patience`` (the numbers of a
``ReduceLROnPlateau``) and may name the former ``memrnn.lit.GeneratorModule`` (a ``SequenceModule``
with the generator objective, its default).  The conversion rewrites only those hyper-parameters;
weights, optimizer state and the run record stay as they are.  Without ``new.ckpt`` the file is
rewritten in place.
"""

from __future__ import annotations

import argparse
import functools
from pathlib import Path
from typing import Any

import torch

#: the names the former ``optimizer: str`` accepted
LEGACY_OPTIMIZERS = {
    "adam": torch.optim.Adam,
    "adamw": torch.optim.AdamW,
    "rmsprop": torch.optim.RMSprop,
    "sgd": torch.optim.SGD,
}


def upgrade_hparams(hparams: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The hyper-parameters in today's form and a list of what changed (empty: already current)."""
    hp, changes = dict(hparams), []
    name = hp.get("optimizer")
    if isinstance(name, str) and name in LEGACY_OPTIMIZERS:
        cls = LEGACY_OPTIMIZERS[name]
        # the CLI stores import paths, Python-built modules the class
        hp["optimizer"] = f"torch.optim.{cls.__name__}" if "_instantiator" in hp else cls
        changes.append(f"optimizer: {name!r} -> torch.optim.{cls.__name__}")
    if "lr_decay" in hp or "lr_patience" in hp:
        decay, patience = hp.pop("lr_decay", None), hp.pop("lr_patience", 0)
        if decay is None:
            hp["lr_scheduler"] = None
        elif "_instantiator" in hp:
            hp["lr_scheduler"] = {
                "class_path": "torch.optim.lr_scheduler.ReduceLROnPlateau",
                "init_args": {"factor": decay, "patience": patience},
            }
        else:
            hp["lr_scheduler"] = functools.partial(
                torch.optim.lr_scheduler.ReduceLROnPlateau, factor=decay, patience=patience
            )
        changes.append(f"lr_decay={decay}, lr_patience={patience} -> lr_scheduler ReduceLROnPlateau")
    if hp.get("_class_path") == "memrnn.lit.GeneratorModule":
        hp["_class_path"] = "memrnn.lit.SequenceModule"
        changes.append("memrnn.lit.GeneratorModule -> memrnn.lit.SequenceModule")
    return hp, changes


def upgrade_checkpoint(path: str | Path, out: str | Path | None = None) -> list[str]:
    """Rewrite the checkpoint at ``path`` (into ``out`` when given); returns what changed."""
    path = Path(path)
    ckpt = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(ckpt, dict) or "hyper_parameters" not in ckpt:
        raise ValueError(f"{path} is not a Lightning checkpoint with hyper-parameters")
    ckpt["hyper_parameters"], changes = upgrade_hparams(ckpt["hyper_parameters"])
    if changes:
        torch.save(ckpt, out or path)
    return changes


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoint")
    parser.add_argument("out", nargs="?", help="where to write (default: in place)")
    args = parser.parse_args(argv)
    changes = upgrade_checkpoint(args.checkpoint, args.out)
    print("\n".join(changes) if changes else f"{args.checkpoint} is already current")


if __name__ == "__main__":
    main()
