"""The LightningCLI behind ``train.py``."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import lightning as L
from lightning.pytorch.cli import LightningCLI, SaveConfigCallback


class SaveConfigToLoggers(SaveConfigCallback):
    """Write the resolved config to ``<log dir>/config.yaml`` (Lightning's behaviour) and also
    log it to every logger as the hyper-parameter ``cli`` (on W&B: the run's config, nested as
    in the YAML), so a dashboard shows exactly what ran."""

    def save_config(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        config = self.parser.dump(self.config, skip_none=False, format="json")
        import json

        for logger in trainer.loggers:
            logger.log_hyperparams({"cli": json.loads(config)})


class MemrnnCLI(LightningCLI):
    """LightningCLI with the data module's vocabulary linked into the model.  Any
    LightningModule / LightningDataModule is accepted by ``class_path`` (memrnn's: SequenceModule
    with a SplitDataModule, RSMModule with RSMDataModule); the model must take ``vocab_size``,
    ``num_symbols`` and ``bracket_types`` and the data module must provide them."""

    def add_arguments_to_parser(self, parser) -> None:
        # The sizes follow from the language; users never set them (they are derived values,
        # so they do not appear in --print_config).
        parser.link_arguments("data.vocab_size", "model.init_args.vocab_size", apply_on="instantiate")
        parser.link_arguments("data.num_symbols", "model.init_args.num_symbols", apply_on="instantiate")
        parser.link_arguments("data.bracket_types", "model.init_args.bracket_types", apply_on="instantiate")


def build_cli(
    args: Sequence[str] | None = None,
    *,
    run: bool = True,
    default_config_files: Sequence[str | Path] = (),
) -> MemrnnCLI:
    """Build (and by default run) the CLI; ``args=None`` reads ``sys.argv``.

    ``default_config_files`` are read before any ``--config`` (``train.py`` passes
    ``configs/defaults.yaml``).  With ``run=False`` there are no subcommands: the CLI only
    parses and instantiates (``cli.model``, ``cli.datamodule``, ``cli.trainer``).
    """
    defaults = {"default_config_files": [str(p) for p in default_config_files]}
    return MemrnnCLI(
        L.LightningModule,
        L.LightningDataModule,
        subclass_mode_model=True,
        subclass_mode_data=True,
        args=list(args) if args is not None else None,
        run=run,
        save_config_callback=SaveConfigToLoggers,
        save_config_kwargs={"overwrite": True},
        parser_kwargs={sub: defaults for sub in ("fit", "validate", "test", "predict")} if run else defaults,
    )
