"""W&B logging that needs no account: offline unless one is configured."""

from __future__ import annotations

import netrc
import os
from typing import Any

from lightning.pytorch.loggers import WandbLogger as _WandbLogger
from lightning.pytorch.utilities import rank_zero_info


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

    ``log_model`` (``True``: the best and last checkpoints at the end of training; ``"all"``:
    every checkpoint as it is saved) uploads ``ModelCheckpoint``'s files as W&B model
    artifacts when the run is online; offline it is switched off with a message (Lightning
    refuses the combination), and the checkpoints stay in the run's checkpoint folder.
    """

    def __init__(
        self, *args: Any, offline: bool | None = None, log_model: bool | str = False, **kwargs: Any
    ) -> None:
        if log_model not in (True, False, "all"):
            raise ValueError(f"log_model must be true, false or 'all', got {log_model!r}")
        if offline is None:
            mode = os.environ.get("WANDB_MODE", "").lower()
            offline = mode in ("offline", "dryrun", "disabled") or (
                mode != "online" and not wandb_credentials_found()
            )
        if offline and log_model:
            rank_zero_info(
                f"W&B is offline: log_model={log_model!r} is switched off (checkpoints stay on disk; "
                "artifacts need an online run)"
            )
            log_model = False
        kwargs["log_model"] = log_model
        if kwargs.get("save_dir"):
            os.makedirs(kwargs["save_dir"], exist_ok=True)
        super().__init__(*args, offline=offline, **kwargs)
        if self._wandb_init.get("anonymous") is None:  # W&B warns on every run that it has no effect
            self._wandb_init.pop("anonymous", None)
