"""The LightningCLI behind ``train.py``.

Beyond Lightning's own CLI it keeps runs apart and honest:

* every run writes its resolved config, checkpoints and figures into its own folder
  (:mod:`memrnn.lit.runs`), also with ``--trainer.logger=false`` (then
  ``runs/no_logger/<time>-<id>/`` unless ``--trainer.default_root_dir`` is given);
* ``--ckpt_path`` continues the checkpoint's run: the same W&B run id (so the same run folder,
  checkpoint folder and best-checkpoint tracking); a file that is not a checkpoint, or a
  config whose model differs from the checkpoint's, stops the run with the difference named
  (Lightning would silently use the checkpoint's model);
* a run that does nothing (``limit_train_batches=0``, ``max_steps=0``, an empty split) ends
  with a warning;
* an experiment config may name the config it overlays (``base: _base.yaml``, relative to
  itself), or several (``base: [_ns.yaml, _dyck.yaml]``, merged in order, later wins):
  ``--config overlay.yaml`` reads as ``--config _base.yaml --config overlay.yaml``
  (:func:`expand_config_bases`, :func:`config_chain`), so the overlay's nested keys merge into the base's by
  jsonargparse's own rules for successive configs (``callbacks+:`` appends);
* argument and config errors end with the one line that matters, instead of a 60-line usage;
* third-party tips printed on every run are silenced, deliberately and by name
  (:func:`quiet_known_noise`).
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import logging
import math
import os
import re
import sys
import time
import traceback
import uuid
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

import lightning as L
import torch
import yaml
from jsonargparse._common import debug_mode_active  # jsonargparse's own debug switch
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn

from memrnn.data.members import MemberData
from memrnn.lit.runs import RUN_KEY, SaveRunConfig, code_version, finish_wandb

#: model arguments that ``train.py`` links from the data module (never typed by users)
LINKED = ("vocab_size", "num_symbols", "bracket_types")
#: values of ``--ckpt_path`` that Lightning resolves itself
SPECIAL_CKPT = ("last", "best", "hpc", "registry")
#: the environment variable that gives a logger-less run (and its DDP workers) one folder
RUN_STAMP = "MEMRNN_RUN_STAMP"


def quiet_known_noise() -> None:
    """Silence, once and by name, what third-party packages print on every run and that says
    nothing about the run:

    * Lightning's advertisements "💡 Tip: … litlogger / litmodels …" (``rank_zero_info``);
    * torch 2.13's deprecation of ``isinstance(treespec, LeafSpec)``, raised from inside
      Lightning's ``_pytree`` helper on every fit.
    Everything else (Lightning's warnings about the run's own settings, W&B's run folder and
    sync command) stays.
    """
    for name in ("lightning.pytorch.utilities.rank_zero", "lightning.fabric.utilities.rank_zero"):
        log = logging.getLogger(name)
        if not any(isinstance(f, _DropTips) for f in log.filters):
            log.addFilter(_DropTips())
    warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)` is deprecated")


class _DropTips(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("💡 Tip:")


def essential_error(message: str) -> str:
    """The one line of a jsonargparse error that says what is wrong (the deepest line of its
    nested explanation), rewritten for the usual case of an unknown option of a class."""
    unknown = re.search(r"Option '([^']+)' is not accepted", message)
    if unknown:
        name = unknown.group(1)
        owner = re.search(r"class_path='([\w.]+)'", message[unknown.end() :])
        if owner:
            return _unknown_option(name, owner.group(1))
        return f"unknown option {name!r}"
    skip = (
        "Given value",
        "Subtypes:",
        "Errors:",
        "- Expected a <class 'NoneType'>",
        "Does not validate against",
    )
    all_lines = message.splitlines()
    lines = [ln for ln in all_lines if ln.strip() and not ln.strip().startswith(skip)]
    if not lines:
        return message.strip()
    deepest = max(lines, key=lambda ln: len(ln) - len(ln.lstrip()))
    text = re.sub(r"^- ", "", deepest.strip())
    text = re.sub(r"(\. Got value: .*)$", "", text)  # the value follows below
    keys = re.findall(r'Parser key "([^"]+)"', "\n".join(all_lines[: all_lines.index(deepest)]))
    if keys and not text.startswith("Parser key"):
        text = f"{keys[-1]}: {text}"
    given = re.search(r"Given value: (.*)|Got value: ([^.]*)", message)
    value = given and (given.group(1) or given.group(2))
    if value and len(value) < 80:
        text += f" (given: {value.strip()})"
    return text


def _unknown_option(name: str, class_path: str) -> str:
    try:
        module, _, attr = class_path.rpartition(".")
        params = [
            p
            for p in inspect.signature(getattr(importlib.import_module(module), attr)).parameters
            if p != "self"
        ]
    except Exception:
        return f"{class_path} has no argument {name!r}"
    close = difflib.get_close_matches(name, params, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"{class_path} has no argument {name!r}{hint}; its arguments: {', '.join(params)}"


class ConciseArgumentParser(LightningArgumentParser):
    """Lightning's parser whose errors end with the one line that matters: jsonargparse prints
    the whole usage (50–90 lines) before a nested explanation; this prints the explanation, a
    pointer to ``--help`` and last ``error: <what is wrong>``."""

    def error(self, message: str, ex: Exception | None = None) -> NoReturn:
        if not self.exit_on_error or debug_mode_active():
            super().error(message, ex)
        parser = getattr(ex, "subcommand_parser", None) or self
        prog = parser.prog.replace(" [options]", "")
        details = message.strip()
        if "\n" in details:
            sys.stderr.write(
                f"{prog}: the arguments were not accepted:\n  " + details.replace("\n", "\n  ") + "\n"
            )
        sys.stderr.write(f"tip: `{prog} --help` lists every option\n")
        sys.stderr.write(f"error: {essential_error(message)}\n")
        self.exit(2)

    def stop(self, error: str, details: str = "") -> NoReturn:
        """Exit 2 with ``details`` (if any) and then ``error: <error>`` as the last line."""
        if details:
            sys.stderr.write(details.rstrip() + "\n")
        sys.stderr.write(f"error: {error}\n")
        self.exit(2)


def read_checkpoint(path: str | Path) -> dict[str, Any]:
    """Load a Lightning checkpoint for its hyper-parameters and run record, or stop with an
    error that says what the file is (never torch's advice to retry with
    ``weights_only=False``, which would run arbitrary code from an unknown file)."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"--ckpt_path {path}: no such file")
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ValueError(
            f"--ckpt_path {path} is not a checkpoint memrnn can read ({type(e).__name__}: {first[:200]}); "
            f"give a .ckpt file written by train.py (runs/<project>/<run id>/checkpoints/)"
        ) from None
    if not isinstance(ckpt, dict) or "state_dict" not in ckpt or "pytorch-lightning_version" not in ckpt:
        kind = f"a dict with keys {sorted(ckpt)[:6]}" if isinstance(ckpt, dict) else type(ckpt).__name__
        raise ValueError(f"--ckpt_path {path} is not a Lightning checkpoint (it holds {kind})")
    return ckpt


def model_differences(config_model: Any, hparams: dict[str, Any]) -> list[str]:
    """Where the model a config asks for differs from the one a checkpoint holds:
    ``["model.init_args.layer.class_path: memrnn.layers.GRULayer (config) vs
    memrnn.layers.LSTMLayer (checkpoint)", …]`` (linked sizes are not compared)."""
    if config_model is None or not hparams:
        return []
    want = config_model.as_dict() if hasattr(config_model, "as_dict") else dict(config_model)
    have = {k: v for k, v in hparams.items() if k not in ("_instantiator", "_class_path")}
    have = {"class_path": hparams.get("_class_path", want.get("class_path")), "init_args": have}
    out: list[str] = []

    def walk(a: Any, b: Any, key: str) -> None:
        if isinstance(a, dict) and isinstance(b, dict):
            for k in a:
                if k in b and not (key == "model.init_args" and k in LINKED):
                    walk(a[k], b[k], f"{key}.{k}")
            return
        if (
            a != b
            and not (isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)) and list(a) == list(b))
            and not _same_class(a, b)
        ):
            out.append(f"{key}: {a!r} (config) vs {b!r} (checkpoint)")

    walk(want, have, "model")
    return out


def _same_class(a: Any, b: Any) -> bool:
    """Whether ``a`` and ``b`` name one class, given as the class or as an import path (a
    config's default is the class, a checkpoint written by the CLI keeps ``"torch.optim.Adam"``)."""

    def resolve(x: Any) -> Any:
        if isinstance(x, str) and "." in x:
            module, _, name = x.rpartition(".")
            try:
                return getattr(importlib.import_module(module), name)
            except (ImportError, AttributeError):
                return x
        return x

    return (isinstance(a, type) or isinstance(b, type)) and resolve(a) is resolve(b)


class MemrnnCLI(LightningCLI):
    """LightningCLI with the data module's vocabulary linked into the model, one folder per run,
    checkpoint-aware resumes and clear errors (module docstring).  Any LightningModule /
    LightningDataModule is accepted by ``class_path`` (memrnn's: SequenceModule with a
    SplitDataModule, RSMModule with RSMDataModule); the model must take ``vocab_size``,
    ``num_symbols`` and ``bracket_types`` and the data module must provide them."""

    _ckpt_run: dict[str, Any] | None = None

    def __init__(self, *args: Any, continue_from: str | Path | None = None, **kwargs: Any) -> None:
        #: the checkpoint whose run this CLI continues without a subcommand (``run=False``):
        #: ``continue_from`` when its model is the config's, else None (``build_cli``)
        self.continue_from: Path | None = None if continue_from is None else Path(continue_from)
        #: why ``continue_from`` was not continued (the first model difference), else None
        self.continue_refused: str | None = None
        super().__init__(*args, **kwargs)

    @property
    def continued_record(self) -> dict[str, Any] | None:
        """What the checkpoint being continued recorded of its run (folder, logger, W&B id and
        its ``code``: :func:`memrnn.lit.runs.run_record`), or None when no run is continued."""
        return self._ckpt_run

    def add_arguments_to_parser(self, parser) -> None:
        # The sizes follow from the language; users never set them (they are derived values,
        # so they do not appear in --print_config).
        for name in LINKED:
            parser.link_arguments(f"data.{name}", f"model.init_args.{name}", apply_on="instantiate")

    # -- checkpoints ----------------------------------------------------------------------------
    def _parse_ckpt_path(self) -> None:
        sub = self.config.get("subcommand")
        if not sub and self.continue_from is not None:
            self._continue_without_subcommand(self.continue_from)
        ckpt_path = self.config[sub].get("ckpt_path") if sub else None
        if ckpt_path and str(ckpt_path) not in SPECIAL_CKPT:
            try:
                ckpt = read_checkpoint(ckpt_path)
            except ValueError as e:
                self.parser.stop(str(e))
            diffs = model_differences(self.config[sub].get("model"), ckpt.get("hyper_parameters", {}))
            if diffs:
                self.parser.stop(
                    f"--ckpt_path {ckpt_path} holds another model than the config asks for "
                    f"({len(diffs)} difference(s)); first: {diffs[0]}",
                    "differences between the config's model and the checkpoint's:\n"
                    + "\n".join(f"  {d}" for d in diffs)
                    + "\nLightning would run the checkpoint's model, not the config's. Pass the config the "
                    "checkpoint was trained with (its run folder keeps it as config.yaml), or leave the model "
                    "out of the config to take the checkpoint's.",
                )
            self._ckpt_run = ckpt.get(RUN_KEY)
            if self._ckpt_run:  # continuing a run: its checkpoint folder is expected to hold files
                warnings.filterwarnings("ignore", message=r"Checkpoint directory .* exists and is not empty")
        super()._parse_ckpt_path()

    def _continue_without_subcommand(self, path: Path) -> None:
        """``continue_from`` (no subcommand): continue the checkpoint's run when it holds the
        config's model; otherwise warn, name the first difference and start a new run."""
        ckpt = read_checkpoint(path)
        diffs = model_differences(self.config.get("model"), ckpt.get("hyper_parameters", {}))
        if diffs:
            self.continue_refused = diffs[0]
            self.continue_from = None
            rank_zero_warn(
                f"not continuing {path}: it holds another model than the config asks for ({diffs[0]}); "
                "starting a new run"
            )
            return
        self._ckpt_run = ckpt.get(RUN_KEY)
        if self._ckpt_run:
            warnings.filterwarnings("ignore", message=r"Checkpoint directory .* exists and is not empty")

    def before_instantiate_classes(self) -> None:
        sub = self.config.get("subcommand")
        if not sub:
            if self._ckpt_run and self.config.get("trainer") is not None:
                logger = self.config.trainer.get("logger")
                if logger not in (False, None):
                    self._continue_wandb_run(logger, self._ckpt_run)
                elif self.config.trainer.get("default_root_dir") is None and self._ckpt_run.get("run_dir"):
                    self.config.trainer.default_root_dir = self._ckpt_run["run_dir"]
            return
        trainer = self.config[sub].trainer
        logger, record = trainer.get("logger"), self._ckpt_run
        if logger in (False, None):
            if trainer.get("default_root_dir") is None:
                if record and record.get("run_dir"):
                    trainer.default_root_dir = record["run_dir"]
                else:
                    stamp = os.environ.setdefault(
                        RUN_STAMP, f"{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:8]}"
                    )
                    trainer.default_root_dir = str(Path("runs") / "no_logger" / stamp)
            return
        if record:
            self._continue_wandb_run(logger, record)

    def _continue_wandb_run(self, logger: Any, record: dict[str, Any]) -> None:
        if not str(record.get("logger", "")).endswith("WandbLogger"):
            return
        if not str(getattr(logger, "class_path", "")).endswith("WandbLogger"):
            return
        args = logger.init_args
        if args.get("id") is None and args.get("version") is None:
            args.id = record["version"]
            rank_zero_info(f"continuing W&B run {record['version']} in {record['run_dir']}")

    def instantiate_classes(self) -> None:
        """Lightning's, but a bad value that a class refuses (its ``ValueError``/``TypeError``)
        ends the run with that message as the last line, not a chained traceback through
        jsonargparse (set ``JSONARGPARSE_DEBUG=1`` for the traceback)."""
        try:
            super().instantiate_classes()
        except (ValueError, TypeError) as e:
            root = e
            while root.__cause__ is not None or root.__context__ is not None:
                root = root.__cause__ or root.__context__
            if debug_mode_active() or not isinstance(root, (ValueError, TypeError)):
                raise
            frames = [
                f for f in traceback.extract_tb(root.__traceback__) if not f.filename.endswith("checks.py")
            ]
            where = frames[-1] if frames else None
            details = (
                f"building the config's objects failed in {where.filename}:{where.lineno} ({where.name})"
                if where
                else ""
            )
            self.parser.stop(f"{type(root).__name__}: {root}", details)

    def after_instantiate_classes(self) -> None:
        super().after_instantiate_classes()
        model, data = getattr(self, "model", None), getattr(self, "datamodule", None)
        independent = getattr(model, "member_data", None) == "independent"
        if independent and data is not None and not isinstance(data, MemberData):
            # each member on its own stream: the config's data module once per member's data seed
            self.datamodule = MemberData.from_seeds(data, model.data_seeds)
        trainer = getattr(self, "trainer", None)
        for cb in getattr(trainer, "callbacks", []):
            if isinstance(cb, SaveRunConfig):
                cb.subcommand = self.subcommand

    # -- running --------------------------------------------------------------------------------
    def _run_subcommand(self, subcommand: str) -> None:
        super()._run_subcommand(subcommand)
        self._warn_if_nothing_ran(subcommand)

    def _warn_if_nothing_ran(self, subcommand: str) -> None:
        t = self.trainer
        if subcommand == "fit" and t.global_step == 0:
            why = f"limit_train_batches={t.limit_train_batches}, max_epochs={t.max_epochs}, max_steps={t.max_steps}"
            if math.isfinite(t.num_training_batches):
                why += f", train batches per epoch={t.num_training_batches}"
            message = f"fit ran 0 optimizer steps: nothing was trained ({why})"
        elif subcommand in ("validate", "test"):
            counts = t.num_val_batches if subcommand == "validate" else t.num_test_batches
            if sum(int(c) for c in counts) > 0:
                return
            message = f"{subcommand} ran 0 batches: nothing was evaluated (limit_{'val' if subcommand == 'validate' else 'test'}_batches or an empty split)"
        else:
            return
        rank_zero_warn(message)
        if t.is_global_zero:
            finish_wandb(t)  # W&B's closing lines would otherwise come after the warning
            sys.stderr.write(f"WARNING: {message}\n")


BASE_KEY = "base"


def config_chain(path: str | Path) -> list[tuple[Path, dict[str, Any]]]:
    """The configs ``path`` is built from, outermost base first: ``[(path, its keys without
    base), …]``, to be merged in this order (later wins).

    A config names its base with a top-level ``base: <path relative to it>``, or several with
    ``base: [<path>, …]`` (``base: [_ns.yaml, _dyck.yaml]``: a model file and a task file).
    The chain is depth first, the bases in the order listed, each before the config naming
    it; a file reached twice (two bases sharing ``_base.yaml``) keeps its first place only.
    A missing base, a cycle, a base that is not a path or a list of paths, or a file that is not
    valid YAML is a ``ValueError`` naming the files (and the line and column of a YAML error)."""
    chain: list[tuple[Path, dict[str, Any]]] = []
    placed: set[Path] = set()

    def visit(current: Path, naming: list[Path]) -> None:
        current = current.resolve()
        if current in naming:
            raise ValueError(f"config bases form a cycle: {' -> '.join(str(p) for p in [*naming, current])}")
        if current in placed:
            return
        named = f" (the base named by {naming[-1]})" if naming else ""
        if not current.is_file():
            raise ValueError(f"config {current}{named}: no such file")
        keys = _read_yaml(current, named) or {}
        if not isinstance(keys, dict):
            raise ValueError(f"config {current} holds {type(keys).__name__}, not a mapping of keys")
        for base in _base_paths(current, keys.pop(BASE_KEY, None)):
            visit(current.parent / base, [*naming, current])
        placed.add(current)
        chain.append((current, keys))

    visit(Path(path), [])
    return chain


def _base_paths(config: Path, base: Any) -> list[str]:
    """The paths a config's ``base:`` names: none, one (a string) or a list of them."""
    if base is None:
        return []
    bases = [base] if isinstance(base, str) else base
    if not isinstance(bases, list) or not bases or not all(isinstance(b, str) and b for b in bases):
        raise ValueError(f"config {config}: base must be a path or a non-empty list of paths, got {base!r}")
    twice = sorted({b for b in bases if bases.count(b) > 1})
    if twice:
        raise ValueError(f"config {config}: base names {', '.join(twice)} more than once")
    return bases


def _read_yaml(path: Path, named: str = "") -> Any:
    """The YAML of ``path``, or a one-line ``ValueError`` naming the file, the line and column
    and what is wrong (PyYAML's own message names ``"<unicode string>"`` over a dozen lines)."""
    try:
        return yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise ValueError(f"config {path}{named} is not valid YAML: {_yaml_problem(e)}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"config {path}{named} cannot be read: {e}") from None


def _yaml_problem(e: yaml.YAMLError) -> str:
    """``line 4, column 1: expected ',' or ']', but got '<stream end>' (while parsing a flow
    sequence that starts at line 3, column 14)``: PyYAML's marks, 1-based."""
    if not isinstance(e, yaml.MarkedYAMLError):
        return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    mark, context_mark = e.problem_mark or e.context_mark, e.context_mark
    text = e.problem or e.context or type(e).__name__
    if mark is not None:
        text = f"line {mark.line + 1}, column {mark.column + 1}: {text}"
    if e.problem and e.context:
        text += f" ({e.context}"
        if context_mark is not None and context_mark is not mark:
            text += f" that starts at line {context_mark.line + 1}, column {context_mark.column + 1}"
        text += ")"
    return text


def expand_config_bases(args: Sequence[str]) -> list[str]:
    """``args`` with every ``--config F`` (or ``--config=F``) whose file names a ``base``
    replaced by ``--config <root base> --config <keys> …``, outermost base first (configs
    without a base pass unchanged).  The keys of each config that names a base go as YAML text
    without the ``base`` key, the form ``--config`` takes besides a path."""
    out: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--config" and i + 1 < len(args):
            value, i = args[i + 1], i + 2
        elif arg.startswith("--config="):
            value, i = arg.split("=", 1)[1], i + 1
        else:
            out.append(arg)
            i += 1
            continue
        path = Path(value)
        chain = config_chain(path) if path.suffix in (".yaml", ".yml") and path.is_file() else []
        if len(chain) < 2:  # YAML text, or a config without a base: jsonargparse reads it as given
            out += ["--config", value]
            continue
        (root, _), *overlays = chain
        out += ["--config", str(root)]
        for _, keys in overlays:  # as YAML text: jsonargparse would reject their base keys
            if keys:
                out += ["--config", yaml.safe_dump(keys, sort_keys=False)]
    return out


def build_cli(
    args: Sequence[str] | None = None,
    *,
    run: bool = True,
    default_config_files: Sequence[str | Path] = (),
    continue_from: str | Path | None = None,
) -> MemrnnCLI:
    """Build (and by default run) the CLI; ``args=None`` reads ``sys.argv``.

    ``default_config_files`` are read before any ``--config`` (``train.py`` passes
    ``configs/defaults.yaml``).  With ``run=False`` there are no subcommands: the CLI only
    parses and instantiates (``cli.model``, ``cli.datamodule``, ``cli.trainer``).
    ``continue_from`` (with ``run=False``) is a checkpoint whose run the trainer continues (its
    W&B run id, so its folder and best-checkpoint tracking) when it holds the config's model;
    pass ``cli.continue_from`` to ``trainer.fit(..., ckpt_path=...)`` (None when refused:
    ``cli.continue_refused`` says why).
    """
    if continue_from is not None and run:
        raise ValueError("continue_from is for run=False; with a subcommand pass --ckpt_path")
    # the code this process runs, read as it starts: the first checkpoint (which records it) can
    # come hours later, when the checkout may have moved on to another commit
    code_version()
    quiet_known_noise()
    given = sys.argv[1:] if args is None else list(args)
    try:
        expanded = expand_config_bases(given)
    except ValueError as e:
        sys.stderr.write(f"error: {e}\n")
        raise SystemExit(2) from None
    if args is None and expanded != given:
        # Lightning warns when args are given beside sys.argv; here they are sys.argv, expanded
        warnings.filterwarnings("ignore", message=r"LightningCLI's args parameter is intended")
    args = None if args is None and expanded == given else expanded
    defaults = {"default_config_files": [str(p) for p in default_config_files]}
    return MemrnnCLI(
        L.LightningModule,
        L.LightningDataModule,
        subclass_mode_model=True,
        subclass_mode_data=True,
        args=args,
        run=run,
        continue_from=continue_from,
        parser_class=ConciseArgumentParser,
        save_config_callback=SaveRunConfig,
        parser_kwargs={sub: defaults for sub in ("fit", "validate", "test", "predict")} if run else defaults,
    )
