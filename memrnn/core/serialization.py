"""Let Lightning checkpoints of memrnn models load with torch's safe ``weights_only=True``.

LightningCLI stores the layer argument as ``functools.partial(LayerClass, **init_args)`` and the
data module's language object in the checkpoint's hyper-parameters.  torch >= 2.6 refuses
to unpickle such globals unless they are allow-listed, so ``load_from_checkpoint`` would fail.
Every class given to ``register_layer`` and every ``Language`` subclass is allow-listed
automatically; call ``allow_in_checkpoints`` for anything else you pass through a config.
``functools.partial`` itself is safe to allow: it can only wrap callables that are allowed too.
"""

from __future__ import annotations

import functools

import torch


def allow_in_checkpoints(*objects: object) -> None:
    """Allow-list classes or functions for ``torch.load(weights_only=True)``."""
    add = getattr(torch.serialization, "add_safe_globals", None)
    if add is not None:  # torch < 2.4 has no allow-list (and loads everything)
        add(list(objects))


allow_in_checkpoints(functools.partial)


def _torch_classes(module: object, base: type) -> list[type]:
    return [v for v in vars(module).values() if isinstance(v, type) and issubclass(v, base)]


# SequenceModule keeps its optimizer class and scheduler (a partial of a scheduler class) in its
# hyper-parameters when it is built in Python rather than from YAML.
allow_in_checkpoints(
    *_torch_classes(torch.optim, torch.optim.Optimizer),
    *_torch_classes(torch.optim.lr_scheduler, torch.optim.lr_scheduler.LRScheduler),
    torch.optim.lr_scheduler.ReduceLROnPlateau,
)
