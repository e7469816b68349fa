"""W&B logging that needs no account: offline unless one is configured."""

from __future__ import annotations

import netrc
import os
from typing import Any

from lightning.pytorch.loggers import WandbLogger as _WandbLogger


def wandb_credentials_found() -> bool:
    """Whether W&B has an API key here (``WANDB_API_KEY`` or a ``~/.netrc`` entry)."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    try:
        path = os.environ.get("NETRC") or os.path.expanduser("~/.netrc")
        hosts = netrc.netrc(path).hosts
    except (FileNotFoundError, netrc.NetrcParseError, OSError):
        return False
    return any("wandb" in host for host in hosts)


class WandbLogger(_WandbLogger):
    """Lightning's ``WandbLogger`` with ``offline=None`` meaning "offline unless W&B has an
    account configured here" (an API key in ``WANDB_API_KEY`` or ``~/.netrc``, or
    ``WANDB_MODE=online``).  Offline runs write real run files under
    ``<save_dir>/wandb/offline-run-*``; upload them later with ``wandb sync <that folder>``.
    """

    def __init__(self, *args: Any, offline: bool | None = None, **kwargs: Any) -> None:
        if offline is None:
            mode = os.environ.get("WANDB_MODE", "").lower()
            offline = mode in ("offline", "dryrun", "disabled") or (
                mode != "online" and not wandb_credentials_found()
            )
        if kwargs.get("save_dir"):
            os.makedirs(kwargs["save_dir"], exist_ok=True)
        super().__init__(*args, offline=offline, **kwargs)
