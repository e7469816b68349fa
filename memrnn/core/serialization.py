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
