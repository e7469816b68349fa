"""One folder per run, and what a run leaves in it.

Every run has its own folder, the parent of Lightning's checkpoint folder:
``<save_dir>/<project>/<run id>/`` with the W&B logger (``runs/memrnn/<id>/``), the logger's
``<save_dir>/<name>/<version>/`` with any other, and the trainer's ``default_root_dir`` without a
logger (``train.py`` makes that unique per run).  In it:

* ``config.yaml``: the resolved config of the run (a resume or a ``test`` of the same run adds
  ``config.<subcommand>-<n>.yaml`` beside it, never overwriting);
* ``checkpoints/``; every checkpoint also records the run (``checkpoint["memrnn_run"]``: folder,
  logger, W&B run id), so ``train.py … --ckpt_path`` continues the same run;
* ``FAILED``: written when a run dies with an exception (its type, message and traceback); the
  W&B run is finished with exit code 1, so the dashboard shows it as failed.  Training the run
  again (``--ckpt_path`` of its checkpoint) renames it ``FAILED.earlier-<n>``: ``FAILED`` always
  speaks of the latest try.
"""

from __future__ import annotations

import functools
import json
import subprocess
import traceback
import warnings
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import LearningRateMonitor as _LearningRateMonitor
from lightning.pytorch.callbacks import ModelCheckpoint as _ModelCheckpoint
from lightning.pytorch.cli import SaveConfigCallback
from lightning.pytorch.loggers import WandbLogger
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn

import memrnn

#: the key under which checkpoints record their run
RUN_KEY = "memrnn_run"


def run_dir(trainer: L.Trainer) -> Path:
    """The run's own folder (module docstring): the parent of the folder where Lightning's
    ``ModelCheckpoint`` saves by default.  Call it on rank 0 (a W&B run id exists there)."""
    if trainer.loggers:
        logger = trainer.loggers[0]
        save_dir = logger.save_dir if logger.save_dir is not None else trainer.default_root_dir
        version = logger.version
        version = version if isinstance(version, str) else f"version_{version}"
        return Path(save_dir) / str(logger.name) / version
    return Path(trainer.default_root_dir)


def latest_checkpoint(folder: str | Path) -> Path | None:
    """The newest ``last.ckpt`` of the runs under ``folder`` (a run folder, or a folder holding
    run folders), else None: where a killed run continues (:class:`ModelCheckpoint`)."""
    found = sorted(Path(folder).glob("**/checkpoints/last*.ckpt"), key=lambda p: p.stat().st_mtime)
    return found[-1] if found else None


@functools.cache
def code_version() -> dict[str, Any]:
    """The code a run ran: ``commit`` (the git HEAD of the checkout memrnn is imported from, None
    when it is no git checkout, e.g. an installed wheel), ``dirty`` (tracked files changed since
    that commit; None without git), and the ``memrnn`` and ``torch`` versions, as this process
    first saw them (:func:`memrnn.lit.cli.build_cli` reads them as it starts: the code it
    imported).  A changed order of float operations moves a training run's whole trajectory, so
    results of different commits differ: every result names its code."""
    root = Path(memrnn.__file__).resolve().parent.parent
    commit = dirty = None
    try:
        git = ["git", "-C", str(root)]
        top = subprocess.run(
            [*git, "rev-parse", "--show-toplevel"], capture_output=True, text=True, timeout=10
        )
        if top.returncode == 0 and Path(top.stdout.strip()).resolve() == root:
            head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
            if head.returncode == 0:
                commit = head.stdout.strip()
                status = subprocess.run(
                    [*git, "status", "--porcelain", "--untracked-files=no"],
                    capture_output=True,
                    text=True,
                    timeout=30,
                )
                dirty = bool(status.stdout.strip()) if status.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        pass
    return {
        "commit": commit,
        "dirty": dirty,
        "memrnn": str(memrnn.__version__),
        "torch": str(torch.__version__),
    }


def code_label(code: dict[str, Any] | None) -> str:
    """A result's code (:func:`code_version`, as a result records it) as a table names it: the
    commit's first 7 digits, ``+changes`` when the checkout had uncommitted changes, ``memrnn
    <version> (no git)`` without a checkout, ``unrecorded`` for results older than the record."""
    if not code:
        return "unrecorded"
    if not code.get("commit"):
        return f"memrnn {code.get('memrnn')} (no git)"
    return code["commit"][:7] + ("+changes" if code.get("dirty") else "")


def codes_of(record: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """The codes that trained a checkpoint's run, oldest first, from its run record
    (:func:`run_record`): its ``codes``; its ``code`` alone for a record from before memrnn kept
    them; ``[]`` for none."""
    if not isinstance(record, Mapping):
        return []
    if isinstance(record.get("codes"), list):
        return list(record["codes"])
    return [record["code"]] if record.get("code") is not None else []


def code_fields(continued: dict[str, Any] | None) -> dict[str, Any]:
    """A result's ``code`` (:func:`code_version`), ``continued_code`` (the code recorded by the
    checkpoint the run continued, given its run record ``continued``: ``MemrnnCLI.continued_record``;
    None when it continued none or that checkpoint recorded none) and ``continued_codes`` (every
    code that trained that checkpoint, oldest first: a run continued twice names both earlier
    processes' code; ``[]`` when it continued none)."""
    return {
        "code": code_version(),
        "continued_code": None if continued is None else continued.get("code"),
        "continued_codes": codes_of(continued),
    }


def code_line(codes: list[dict[str, Any] | None]) -> str:
    """``"Code: <label> (n runs), ..."`` over results' ``code`` records (:func:`code_label`), for
    the end of a results table; ``""`` when there are none."""
    counts = Counter(code_label(c) for c in codes)
    return (
        "Code: " + ", ".join(f"{c} ({n} run{'s' if n > 1 else ''})" for c, n in sorted(counts.items()))
        if counts
        else ""
    )


def run_record(trainer: L.Trainer, continued: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """What a checkpoint records of its run: the folder, the logger's class and, for W&B, the
    run id and project (rank 0), the code it ran (:func:`code_version`, as ``code``) and
    ``codes``: every code that trained the run, oldest first (those of ``continued``, the record of
    the checkpoint this process continued: :func:`codes_of`; then ``code``)."""
    code = code_version()
    record: dict[str, Any] = {
        "run_dir": str(run_dir(trainer)),
        "code": code,
        "codes": [*codes_of(continued), code],
    }
    if trainer.loggers:
        logger = trainer.loggers[0]
        record["logger"] = f"{type(logger).__module__}.{type(logger).__qualname__}"
        record["name"], record["version"] = str(logger.name), str(logger.version)
    return record


def finish_wandb(trainer: L.Trainer, exit_code: int = 0) -> None:
    """Finish the W&B runs of ``trainer``'s W&B loggers now (exit code 1 marks a run failed on
    the dashboard); a later log call would start a new run, so call this at the end."""
    for logger in trainer.loggers:
        if isinstance(logger, WandbLogger) and logger._experiment is not None:
            logger._experiment.finish(exit_code=exit_code)
            logger._experiment = None


class SaveRunConfig(SaveConfigCallback):
    """``train.py``'s config callback: writes the resolved config into the run's own folder
    (:func:`run_dir`; Lightning's default writes one ``config.yaml`` into the logger's shared
    ``save_dir``, which every run overwrites), logs it to every logger as the hyper-parameter
    ``cli`` (on W&B: the run's config, nested as in the YAML), records the run in every
    checkpoint, and marks a run that dies (``FAILED`` in its folder, W&B exit code 1)."""

    def __init__(self, parser, config, config_filename: str = "config.yaml", **_: Any) -> None:
        super().__init__(parser, config, config_filename, save_to_log_dir=False)
        self.subcommand: str | None = None
        self.continued: dict[str, Any] | None = None  # the continued checkpoint's run record

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if self.already_saved:
            return
        _ = trainer.log_dir  # broadcasts from rank 0: every rank must ask
        if trainer.is_global_zero:
            folder = run_dir(trainer)
            folder.mkdir(parents=True, exist_ok=True)
            if getattr(stage, "value", stage) == "fit" and (folder / "FAILED").is_file():
                # a killed run continued: its folder says so only if this try fails too
                n = 1
                while (folder / f"FAILED.earlier-{n}").exists():
                    n += 1
                (folder / "FAILED").rename(folder / f"FAILED.earlier-{n}")
            path = folder / self.config_filename
            if path.exists():  # a resume or a test of the same run: keep the first config
                # without a subcommand (build_cli(run=False)) the stage is Lightning's TrainerFn
                stem, n = f"config.{self.subcommand or getattr(stage, 'value', stage)}", 1
                while (folder / f"{stem}-{n}.yaml").exists():
                    n += 1
                path = folder / f"{stem}-{n}.yaml"
            with warnings.catch_warnings():  # jsonargparse 4.49 renamed skip_none; Lightning uses it too
                warnings.simplefilter("ignore", DeprecationWarning)
                self.parser.save(self.config, str(path), skip_none=False, overwrite=False, multifile=False)
            self.save_config(trainer, pl_module, stage)
            self.already_saved = True
        self.already_saved = trainer.strategy.broadcast(self.already_saved)

    def save_config(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        config = json.loads(self.parser.dump(self.config, skip_none=False, format="json"))
        for logger in trainer.loggers:
            logger.log_hyperparams({"cli": config})

    def on_load_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict) -> None:
        self.continued = checkpoint.get(RUN_KEY)  # a continued run: its codes go on in ours

    def on_save_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict) -> None:
        if trainer.is_global_zero:
            checkpoint[RUN_KEY] = run_record(trainer, self.continued)

    def on_exception(
        self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException
    ) -> None:
        if not trainer.is_global_zero:
            return
        try:
            folder = run_dir(trainer)
        except Exception:  # the logger itself may be what failed
            folder = Path(trainer.default_root_dir)
        folder.mkdir(parents=True, exist_ok=True)
        text = "".join(traceback.format_exception(type(exception), exception, exception.__traceback__))
        (folder / "FAILED").write_text(f"{type(exception).__name__}: {exception}\n\n{text}")
        finish_wandb(trainer, exit_code=1)
        rank_zero_warn(f"the run failed: marked {folder / 'FAILED'}")


class LearningRateMonitor(_LearningRateMonitor):
    """Lightning's ``LearningRateMonitor`` that stands aside when the trainer has no logger
    (``--trainer.logger=false``) instead of stopping the run (Lightning raises
    "Cannot use LearningRateMonitor callback with Trainer that has no logger")."""

    def on_train_start(self, trainer: L.Trainer, *args: Any, **kwargs: Any) -> None:
        self._off = not trainer.loggers
        if self._off:
            rank_zero_info(
                "LearningRateMonitor: the trainer has no logger, so learning rates are not recorded"
            )
            return
        super().on_train_start(trainer, *args, **kwargs)

    def on_train_batch_start(self, trainer: L.Trainer, *args: Any, **kwargs: Any) -> None:
        if not getattr(self, "_off", False):
            super().on_train_batch_start(trainer, *args, **kwargs)

    def on_train_epoch_start(self, trainer: L.Trainer, *args: Any, **kwargs: Any) -> None:
        if not getattr(self, "_off", False):
            super().on_train_epoch_start(trainer, *args, **kwargs)


class ModelCheckpoint(_ModelCheckpoint):
    """Lightning's ``ModelCheckpoint`` whose ``last.ckpt`` (``save_last=True``) is the state after
    every validation (or training epoch, when it saves there), so a killed run continues from its
    latest epoch (``--ckpt_path=<run>/checkpoints/last.ckpt``; the suite runner does it itself).

    Lightning 2.6 rewrites ``last.ckpt`` only when a top-k checkpoint is saved in the same step:
    a run whose monitored value stopped improving keeps an old ``last.ckpt``, and a resume repeats
    every epoch since.  ``save_last="link"`` and ``save_last=False`` behave as Lightning's."""

    def _latest(self, trainer: L.Trainer) -> None:
        if self.save_last is True and self._last_global_step_saved != trainer.global_step:
            self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        super().on_train_epoch_end(trainer, pl_module)
        if not self._should_skip_saving_checkpoint(trainer) and self._should_save_on_train_epoch_end(trainer):
            self._latest(trainer)

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        super().on_validation_end(trainer, pl_module)
        if not self._should_skip_saving_checkpoint(trainer) and not self._should_save_on_train_epoch_end(
            trainer
        ):
            self._latest(trainer)
