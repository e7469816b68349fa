"""Convert a checkpoint written before :class:`~memrnn.lit.SequenceModule` took its optimizer and
schedule as objects: ``python -m memrnn.lit.upgrade old.ckpt [new.ckpt]``.

Such checkpoints keep ``optimizer: "adam"`` (a name), ``lr_decay``/``lr_patience`` (the numbers of a
``ReduceLROnPlateau``) and may name the former ``memrnn.lit.GeneratorModule`` (a ``SequenceModule``
with the generator objective, its default).  Checkpoints written before the one implementation
switch (issue 66) may give a memrnn layer ``fused=`` or ``bptt=``: those flags are dropped, with a
note (an implementation is chosen by :func:`memrnn.reference_paths` and
``memrnn.ops.dispatch.implementation``, not stored).  The conversion rewrites only those hyper-parameters;
weights, optimizer state and the run record stay as they are.  Without ``new.ckpt`` the file is
rewritten in place.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import inspect
from pathlib import Path
from typing import Any

import torch

from memrnn.core.checks import REMOVED_ARGUMENTS

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
    for key, value in list(hp.items()):
        hp[key] = _drop_removed_flags(value, key, changes)
    return hp, changes


def _takes(cls: Any, name: str) -> bool:
    """Whether ``cls(...)`` (a memrnn class) still has the argument ``name``."""
    try:
        return name in inspect.signature(cls).parameters
    except (TypeError, ValueError):
        return True  # nothing to compare with: keep it


def _resolve(class_path: str) -> Any:
    module, _, name = class_path.rpartition(".")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        return None


def _drop_removed_flags(value: Any, where: str, changes: list[str]) -> Any:
    """``value`` without the removed implementation flags (``fused``, ``bptt``:
    :data:`memrnn.core.checks.REMOVED_ARGUMENTS`) of the memrnn classes it builds, as a config's
    ``class_path``/``init_args`` or as a ``functools.partial``, at any depth; each drop is noted
    in ``changes``.  Flags a class still takes stay."""
    if isinstance(value, dict):
        out = {k: _drop_removed_flags(v, f"{where}.{k}", changes) for k, v in value.items()}
        path, args = out.get("class_path"), out.get("init_args")
        if isinstance(path, str) and path.startswith("memrnn.") and isinstance(args, dict):
            cls = _resolve(path)
            kept = {k: v for k, v in args.items() if not _removed(cls, k, v, path, where, changes)}
            out["init_args"] = kept
        return out
    if isinstance(value, (list, tuple)) and not hasattr(value, "_fields"):
        return type(value)(_drop_removed_flags(v, f"{where}[{i}]", changes) for i, v in enumerate(value))
    if isinstance(value, functools.partial) and getattr(value.func, "__module__", "").startswith("memrnn."):
        name = f"{value.func.__module__}.{value.func.__qualname__}"
        kept = {
            k: _drop_removed_flags(v, f"{where}.{k}", changes)
            for k, v in value.keywords.items()
            if not _removed(value.func, k, v, name, where, changes)
        }
        return functools.partial(value.func, *value.args, **kept)
    return value


def _removed(cls: Any, key: str, value: Any, name: str, where: str, changes: list[str]) -> bool:
    if key not in REMOVED_ARGUMENTS or cls is None or _takes(cls, key):
        return False
    changes.append(f"{where}: {name}({key}={value!r}) dropped: {key}= was removed; {REMOVED_ARGUMENTS[key]}")
    return True


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
