"""A suite: architectures × tasks × learning rates × seeds, each cell one ``train.py`` run.

A suite is a YAML file (``configs/suites/*.yaml``)::

    name: chomsky_dcf                      # runs go to runs/suites/<name>/ unless `out` is given
    defaults: ../defaults.yaml             # read before every config, as train.py does
    architectures:                         # name -> a train.py config, with optional overrides
      lstm: ../chomsky/lstm.yaml
      stack_rnn: {config: ../chomsky/stack_rnn.yaml, args: {model.init_args.layer.init_args.depth: 40}}
      lstm_aux: {config: ../flare/lstm_lm_ns.yaml,   # an architecture may draw its own (below)
                 sample: {model.init_args.objectives.generator: {loguniform: [0.01, 10]}}}
    tasks:                                 # name -> overrides (a mapping or a list of --key=value)
      reverse_string: {data.init_args.task: reverse_string}
    seeds: [0, 1, 2]
    lrs: [1.0e-4, 3.0e-4, 5.0e-4]          # optional; set at `lr_key` (default model.init_args.lr)
    args: {trainer.max_steps: 2000}        # overrides for every cell
    metric: test/acc_mean_over_lengths     # the score the collector tabulates
    mode: max                              # max: higher is better (min: lower)
    select: {metric: val/loss, mode: min}  # optional: tabulate the run with the best validation
    data_seed: 0                           # optional: every cell's data seed (default: the cell's seed)
    test_checkpoint: best                  # or last: test the final weights (default: the best validation's)
    budget: {parameters: 64000}            # optional: each architecture's size set to match it
    sample:                                # optional: hyper-parameters drawn per cell (a trial)
      model.init_args.lr: {loguniform: [1.0e-4, 1.0e-2]}
    slurm: {time: "04:00:00", cpus-per-task: 1}   # #SBATCH options of the array job
    folder: "{arch}_{task}/seed{seed}"     # optional: each cell's folder under `out` (default: its name)
    share_data: true                       # optional: the architectures of a (task, lr, seed) share data
    labels: {arch: {lstm: LSTM}, task: {reverse_string: Reverse}}   # optional: names the tables print
    stats: [median, max, min]              # optional: what a table cell shows (default: mean, median, best)
    floor: true                            # optional: a length-floor column (memrnn.languages.length_floor)

An architecture's config path may contain ``{task}``: each task's cells then start from the
config with the task's name in its place, and every one of them must exist
(``configs/suites/dusell.yaml``: ``ns: ../dusell/ns_{task}.yaml``, one config per model and task).

With a ``budget``, every cell's ``key`` (default ``model.init_args.layer.init_args.hidden_size``;
an architecture may name its own as ``budget_key``, e.g. an nnPDA's ``num_states``, a list of
keys set alike, e.g. FLaRe's embedding of the hidden size, or null to keep its config's size, e.g. a
size the authors' own budget formula gave) is set to the
largest value (up to ``max``, default 4096) whose model has at most ``parameters`` trainable
parameters, so architectures compare at a matched parameter budget (the value is found once per
architecture and task and recorded in the result).

With ``sample``, every cell draws each listed override from its distribution (``loguniform``,
``uniform``: ``[low, high]``; ``int_uniform``: ``[low, high]`` inclusive; ``choice``: a list),
with a generator seeded by the suite's name and the cell's architecture, task, learning rate and
seed: the same cell always draws the same values, and the seeds of one architecture and task are
independent random trials (Butoi et al. 2025 draw each trial's hyper-parameters so, and report
the mean and the best over 10).  An architecture's own ``sample`` adds to the suite's (and wins
on a shared key): what only it has, such as an auxiliary loss's coefficient.  The drawn values
are in the cell's command line, hence in its ``result.json``.

With ``data_seed``, every cell draws its data from that seed (``--data.init_args.seed``) and
only the model's initialisation and the training order follow the cell's seed
(``--seed_everything``): one data set for every seed of an architecture and task, as Hewitt et
al. (2020) use (``generate_mbounded_dyck.py`` seeds the data with constants: one data set per
(k, m, size) for the three model seeds) and as FLaRe's (Butoi et al. 2025) one data file per
language does.  Without it (the default) each cell's seed is also its data seed.

``test_checkpoint`` says which weights a cell tests: ``best`` (default), the checkpoint of the best
validation (``configs/defaults.yaml``'s ``ModelCheckpoint``), or ``last``, the weights training ended
with, as a protocol without a validation set tests them (Delétang et al. 2023: ``training.py``
trains for a fixed number of steps and evaluates the final parameters).

With ``select`` (``{metric: <a validation metric>, mode: min|max}``), ``collect`` tabulates, per
architecture and task, the test score of the run with the best value of that validation metric
over seeds × learning rates (× drawn values), as DuSell & Chiang's ``print_best.py`` picks the
run to test; without it, the mean, median and best test score over them
(:class:`memrnn.suite.collect.Results`).  ``python -m memrnn.suite collect --select-on`` gives or
overrides it.

``folder`` is the pattern of a cell's folder under ``out`` (fields ``{arch}``, ``{task}``,
``{seed}`` and, with ``lrs``, ``{lr}``); ``configs/suites/dusell.yaml`` keeps the layout of the
former ``scripts/dusell_table.py`` (``<model>_<task>/seed<S>``), so that its committed results
(``benchmarks/results/dusell``) are collected as they are.

With ``share_data``, ``run`` starts one process per (task, learning rate, seed) that trains the
cells of every architecture on one data module, built (and its test strings scored: an exact
inside pass per string for DuSell & Chiang's languages) once; every architecture's config must
resolve to the same ``data`` section, else its cell fails naming both
(:func:`memrnn.suite.runner.run_cells`).

``labels`` (``{arch: {name: label}, task: {name: label}}``), ``stats`` (which of ``mean``,
``median``, ``best``, ``max``, ``min`` a table cell shows, in order; DuSell & Chiang's table as
memrnn reports it: ``[median, max, min]``) and ``floor`` (a column of each task's length floor on
its training lengths: :func:`memrnn.languages.length_floor`, the gap a model of the training
distribution has there) shape ``collect``'s table (:class:`memrnn.suite.collect.Results`).

Paths are relative to the suite file.  A cell's command line is, in this order: ``--config``
of its architecture, the suite's ``args``, the task's, the architecture's, the drawn ones, then the
seed (``--seed_everything``, and ``--data.init_args.seed``: ``data_seed`` when given), the learning
rate and the run folder, so later overrides win.  Cells are named
``<arch>/<task>/lr<lr>/seed<seed>`` (no ``lr`` part without ``lrs``); the name is also the cell's
folder under the suite's ``out``.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

#: the keys a suite file may have
SUITE_KEYS = ("name", "description", "defaults", "architectures", "tasks", "seeds", "lrs", "lr_key",
              "args", "metric", "mode", "out", "slurm", "budget", "sample", "select",
              "data_seed", "test_checkpoint", "folder", "share_data", "labels", "stats", "floor")  # fmt: skip
#: arguments that say where a run writes, not what it computes
RUN_FOLDER_ARGS = ("--trainer.logger.init_args.save_dir=", "--trainer.logger.init_args.name=")
#: the module that trains a group of cells as members (:mod:`memrnn.suite.groups`)
MEMBERS_CLASS = "memrnn.lit.members.MemberSequenceModule"
#: the statistics over runs a table cell may show (``stats``)
STATS = ("mean", "median", "best", "max", "min")
#: the distributions ``sample`` draws from, and what each takes
DISTRIBUTIONS = {"loguniform": "[low, high], 0 < low < high", "uniform": "[low, high], low < high",
                 "int_uniform": "[low, high] integers, low <= high", "choice": "a non-empty list"}  # fmt: skip
#: the size a parameter budget sets unless an architecture names another
BUDGET_KEY = "model.init_args.layer.init_args.hidden_size"


def _budget_key(value: Any, where: str) -> str | tuple[str, ...]:
    """An architecture's ``budget_key``: one override key, a list of them (all sized alike), or
    null (an empty list): the budget leaves this architecture at its config's size."""
    if isinstance(value, str) and value:
        return value
    if value is None:
        return ()
    if isinstance(value, list) and all(isinstance(k, str) and k for k in value):
        return tuple(value)
    raise ValueError(f"{where}: budget_key must be an override key, a list of them or null, got {value!r}")


def check_select(value: Any, where: str) -> dict[str, str] | None:
    """A ``select`` rule (``{metric: val/loss, mode: min}``) checked, or None for None; anything
    else raises, naming it.  The metric must be a validation metric (``val/…``): selecting on a
    test score would report the best test score, not the selected run's."""
    if value is None:
        return None
    if not isinstance(value, dict) or set(value) != {"metric", "mode"}:
        raise ValueError(f"{where}: 'select' must be {{metric: <val/...>, mode: min|max}}, got {value!r}")
    metric, mode = value["metric"], value["mode"]
    if not isinstance(metric, str) or not metric.startswith("val/"):
        raise ValueError(f"{where}: select's metric must be a validation metric 'val/...', got {metric!r}")
    if mode not in ("max", "min"):
        raise ValueError(f"{where}: select's mode must be 'max' or 'min', got {mode!r}")
    return {"metric": metric, "mode": mode}


@dataclass(frozen=True)
class Cell:
    """One run of a suite: an architecture on a task at one learning rate (``None``: the
    config's) and seed; ``index`` is its place in :meth:`Suite.cells`."""

    index: int
    arch: str
    task: str
    seed: int
    lr: float | None = None

    @property
    def name(self) -> str:
        """``<arch>/<task>/lr<lr>/seed<seed>``: the cell's id and its folder under the suite's ``out``."""
        lr = "" if self.lr is None else f"lr{self.lr:g}/"
        return f"{self.arch}/{self.task}/{lr}seed{self.seed}"

    @property
    def params(self) -> dict[str, Any]:
        """The cell's coordinates, as a W&B sweep passes them (``--arch=… --task=…``)."""
        out: dict[str, Any] = {"arch": self.arch, "task": self.task, "seed": self.seed}
        if self.lr is not None:
            out["lr"] = self.lr
        return out


def _overrides(value: Any, where: str) -> list[str]:
    """``{key: value}`` or ``["--key=value", …]`` as a list of ``--key=value`` arguments."""
    if value is None:
        return []
    if isinstance(value, dict):
        out = []
        for k, v in value.items():
            text = v if isinstance(v, str) else yaml.safe_dump(v, default_flow_style=True).strip()
            text = text.removesuffix("\n...").strip()
            out.append(f"--{str(k).removeprefix('--')}={text}")
        return out
    if isinstance(value, list) and all(isinstance(a, str) and a.startswith("--") for a in value):
        return list(value)
    raise ValueError(
        f"{where}: expected a mapping of overrides or a list of '--key=value' strings, got {value!r}"
    )


def _distribution(spec: Any, where: str) -> tuple[str, Any]:
    """A ``sample`` entry (``{loguniform: [low, high]}`` …) as ``(kind, arguments)``; anything else
    raises, naming it."""
    if not isinstance(spec, dict) or len(spec) != 1 or next(iter(spec)) not in DISTRIBUTIONS:
        kinds = "; ".join(f"{{{k}: {v}}}" for k, v in DISTRIBUTIONS.items())
        raise ValueError(f"{where}: expected one of {kinds}; got {spec!r}")
    kind, arg = next(iter(spec.items()))
    numbers = (
        isinstance(arg, list)
        and len(arg) == 2
        and all(isinstance(x, int | float) and not isinstance(x, bool) for x in arg)
    )
    ok = {
        "loguniform": numbers and 0 < arg[0] < arg[1],
        "uniform": numbers and arg[0] < arg[1],
        "int_uniform": numbers and all(isinstance(x, int) for x in arg) and arg[0] <= arg[1],
        "choice": isinstance(arg, list) and len(arg) > 0,
    }[kind]
    if not ok:
        raise ValueError(f"{where}: {kind} takes {DISTRIBUTIONS[kind]}; got {arg!r}")
    return kind, list(arg)


@dataclass(frozen=True)
class Architecture:
    """A ``train.py`` config and the overrides this suite adds to it.  A config path with
    ``{task}`` in it is one config per task (``task_configs``; ``config`` is then the pattern)."""

    config: Path
    args: list[str] = field(default_factory=list)
    #: the override (or overrides, all set to one value) a parameter budget sizes
    budget_key: str | tuple[str, ...] = BUDGET_KEY
    #: override key -> ``(distribution, arguments)``, drawn per cell beside the suite's
    sample: dict[str, tuple[str, Any]] = field(default_factory=dict)
    #: task -> its config, when ``config`` names ``{task}``
    task_configs: dict[str, Path] = field(default_factory=dict)

    def sized(self, value: int) -> list[str]:
        """The overrides that give this architecture size ``value`` under a parameter budget: one
        per ``budget_key`` (several when sizes go together, e.g. FLaRe's embedding of the hidden
        size)."""
        keys = (self.budget_key,) if isinstance(self.budget_key, str) else self.budget_key
        return [f"--{k}={value}" for k in keys]

    def config_for(self, task: str) -> Path:
        """The config a cell of ``task`` starts from."""
        return self.task_configs.get(task, self.config)


@dataclass
class Suite:
    """A parsed suite file (module docstring); build it with :meth:`load`."""

    name: str
    path: Path
    architectures: dict[str, Architecture]
    tasks: dict[str, list[str]]
    seeds: list[int]
    lrs: list[float]
    lr_key: str
    args: list[str]
    metric: str
    mode: str
    out: Path
    defaults: Path | None = None
    description: str = ""
    slurm: dict[str, Any] = field(default_factory=dict)
    #: ``{"parameters": N, "max": M}`` or ``None`` (module docstring)
    budget: dict[str, int] | None = None
    #: override key -> ``(distribution, arguments)`` (module docstring)
    sample: dict[str, tuple[str, Any]] = field(default_factory=dict)
    #: ``{"metric": "val/…", "mode": "min" | "max"}`` or ``None`` (module docstring)
    select: dict[str, str] | None = None
    #: every cell's data seed, or ``None``: the cell's seed (module docstring)
    data_seed: int | None = None
    #: the weights a cell tests: ``"best"`` (validation) or ``"last"`` (module docstring)
    test_checkpoint: str = "best"
    #: a cell's folder under ``out``, a pattern of ``{arch} {task} {lr} {seed}`` (None: its name)
    folder: str | None = None
    #: the architectures of one (task, lr, seed) train in one process on one data module
    share_data: bool = False
    #: ``{"arch": {name: label}, "task": {name: label}}``: what the tables print
    labels: dict[str, dict[str, str]] = field(default_factory=dict)
    #: what a table cell shows over runs, in order (:data:`STATS`)
    stats: tuple[str, ...] = ("mean", "median", "best")
    #: a column of each task's length floor in the table
    floor: bool = False

    @classmethod
    def load(cls, path: str | Path, *, out: str | Path | None = None) -> Suite:
        """Read and check a suite file; ``out`` overrides its run folder."""
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"no suite file {str(path)!r}")
        raw = yaml.safe_load(path.read_text()) or {}
        if not isinstance(raw, dict):
            raise ValueError(f"{path}: a suite is a mapping, got {type(raw).__name__}")
        unknown = sorted(set(raw) - set(SUITE_KEYS))
        if unknown:
            raise ValueError(f"{path}: unknown suite key(s) {unknown}; a suite has {list(SUITE_KEYS)}")
        for key in ("name", "architectures", "tasks", "seeds", "metric"):
            if key not in raw:
                raise ValueError(f"{path}: the suite has no {key!r}")
        here = path.parent

        def existing(p: str, what: str) -> Path:
            full = (here / p).resolve()
            if not full.is_file():
                raise FileNotFoundError(f"{path}: {what} {p!r} does not exist (looked at {full})")
            return full

        if not isinstance(raw["tasks"], dict) or not raw["tasks"]:
            raise ValueError(f"{path}: 'tasks' must be a non-empty mapping name -> overrides")
        tasks = {str(k): _overrides(v, f"{path}: task {k!r}") for k, v in raw["tasks"].items()}
        archs: dict[str, Architecture] = {}
        if not isinstance(raw["architectures"], dict) or not raw["architectures"]:
            raise ValueError(f"{path}: 'architectures' must be a non-empty mapping name -> config")
        for name, spec in raw["architectures"].items():
            if isinstance(spec, str):
                spec = {"config": spec}
            if (
                not isinstance(spec, dict)
                or set(spec) - {"config", "args", "budget_key", "sample"}
                or "config" not in spec
            ):
                raise ValueError(
                    f"{path}: architecture {name!r} must be a config path or "
                    f"{{config:, args:, budget_key:, sample:}}, got {spec!r}"
                )
            config, per_task = str(spec["config"]), {}
            if "{task}" in config:  # one config per task; the pattern stands for them
                for t in tasks:
                    per_task[t] = existing(
                        config.replace("{task}", t), f"architecture {name!r}'s config for {t!r}"
                    )
                config_path = (here / config).resolve()
            else:
                config_path = existing(config, f"architecture {name!r}'s config")
            archs[str(name)] = Architecture(
                config_path,
                _overrides(spec.get("args"), f"{path}: architecture {name!r}"),
                _budget_key(spec.get("budget_key", BUDGET_KEY), f"{path}: architecture {name!r}"),
                {
                    str(k): _distribution(v, f"{path}: architecture {name!r}'s sample {k!r}")
                    for k, v in (spec.get("sample") or {}).items()
                },
                per_task,
            )
        seeds = raw["seeds"]
        if not isinstance(seeds, list) or not seeds or not all(isinstance(s, int) and s >= 0 for s in seeds):
            raise ValueError(f"{path}: 'seeds' must be a non-empty list of integers >= 0, got {seeds!r}")
        lrs = raw.get("lrs") or []
        if not isinstance(lrs, list) or not all(isinstance(x, int | float) and x > 0 for x in lrs):
            raise ValueError(f"{path}: 'lrs' must be a list of positive numbers, got {lrs!r}")
        for what, values in (("seed", seeds), ("learning rate", lrs)):
            if len(set(values)) != len(values):
                raise ValueError(f"{path}: a {what} is listed twice in {values!r}")
        mode = raw.get("mode", "max")
        if mode not in ("max", "min"):
            raise ValueError(f"{path}: 'mode' must be 'max' or 'min', got {mode!r}")
        budget = raw.get("budget")
        if budget is not None:
            if (
                not isinstance(budget, dict)
                or set(budget) - {"parameters", "max"}
                or "parameters" not in budget
            ):
                raise ValueError(f"{path}: 'budget' must be {{parameters: N, max: M}}, got {budget!r}")
            for k, v in budget.items():
                if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                    raise ValueError(f"{path}: budget {k} must be a positive int, got {v!r}")
        sample = {
            str(k): _distribution(v, f"{path}: sample {k!r}") for k, v in (raw.get("sample") or {}).items()
        }
        data_seed = raw.get("data_seed")
        if data_seed is not None and (
            isinstance(data_seed, bool) or not isinstance(data_seed, int) or data_seed < 0
        ):
            raise ValueError(f"{path}: 'data_seed' must be an integer >= 0 (or absent), got {data_seed!r}")
        select = check_select(raw.get("select"), str(path))
        test_checkpoint = raw.get("test_checkpoint", "best")
        if test_checkpoint not in ("best", "last"):
            raise ValueError(f"{path}: 'test_checkpoint' must be 'best' or 'last', got {test_checkpoint!r}")
        folder = raw.get("folder")
        if folder is not None:
            needs = ["arch", "task", "seed", *(["lr"] if lrs else [])]
            try:
                names = {f: f"<{f}>" for f in ("arch", "task", "seed", "lr")}
                filled = str(folder).format(**names)
            except (KeyError, IndexError, ValueError) as e:
                raise ValueError(f"{path}: 'folder' may name only {{arch}}, {{task}}, {{seed}}, {{lr}}: "
                                 f"{folder!r} ({e!r})") from None  # fmt: skip
            lacking = [f for f in needs if f"<{f}>" not in filled]
            if lacking or not isinstance(folder, str) or folder.startswith("/"):
                raise ValueError(f"{path}: 'folder' {folder!r} must be a relative pattern with "
                                 f"{', '.join('{' + f + '}' for f in needs)}")  # fmt: skip
        labels = raw.get("labels") or {}
        if (
            not isinstance(labels, dict)
            or set(labels) - {"arch", "task"}
            or not all(isinstance(v, dict) for v in labels.values())
        ):
            raise ValueError(f"{path}: 'labels' must be {{arch: {{name: label}}, task: {{name: label}}}}, "
                             f"got {labels!r}")  # fmt: skip
        stats = raw.get("stats", ["mean", "median", "best"])
        if not isinstance(stats, list) or not stats or any(x not in STATS for x in stats):
            raise ValueError(f"{path}: 'stats' must be a non-empty list of {list(STATS)}, got {stats!r}")
        for key in ("share_data", "floor"):
            if not isinstance(raw.get(key, False), bool):
                raise ValueError(f"{path}: {key!r} must be true or false, got {raw[key]!r}")
        slurm = raw.get("slurm") or {}
        if not isinstance(slurm, dict):
            raise ValueError(f"{path}: 'slurm' must be a mapping of #SBATCH options, got {slurm!r}")
        for name in [*archs, *tasks]:
            if not name or "/" in name or name.startswith(("lr", "seed")) or name != name.strip():
                raise ValueError(
                    f"{path}: {name!r} cannot name an architecture or a task (no '/', no 'lr…'/'seed…')"
                )
        return cls(
            name=str(raw["name"]),
            path=path.resolve(),
            architectures=archs,
            tasks=tasks,
            seeds=[int(s) for s in seeds],
            lrs=[float(x) for x in lrs],
            lr_key=str(raw.get("lr_key", "model.init_args.lr")),
            args=_overrides(raw.get("args"), f"{path}: args"),
            metric=str(raw["metric"]),
            mode=mode,
            out=Path(out if out is not None else raw.get("out", f"runs/suites/{raw['name']}")),
            defaults=existing(raw["defaults"], "defaults") if raw.get("defaults") else None,
            description=str(raw.get("description", "")),
            slurm={str(k): v for k, v in slurm.items()},
            budget=None if budget is None else {"max": 4096, **budget},
            sample=sample,
            select=select,
            data_seed=data_seed,
            test_checkpoint=test_checkpoint,
            folder=folder,
            share_data=bool(raw.get("share_data", False)),
            labels={k: {str(a): str(b) for a, b in v.items()} for k, v in labels.items()},
            stats=tuple(stats),
            floor=bool(raw.get("floor", False)),
        )

    def cells(self) -> list[Cell]:
        """Every cell, architectures outermost, then tasks, learning rates and seeds."""
        lrs: list[float | None] = list(self.lrs) or [None]
        grid = itertools.product(self.architectures, self.tasks, lrs, self.seeds)
        return [Cell(i, a, t, s, lr) for i, (a, t, lr, s) in enumerate(grid)]

    def cell(self, name: str | None = None, **params: Any) -> Cell:
        """The cell named ``name`` (``lstm/parity_check/lr0.0003/seed0``) or with the given
        coordinates (``arch=``, ``task=``, ``seed=``, ``lr=``, as a W&B sweep passes them)."""
        cells = self.cells()
        if name is not None:
            found = [c for c in cells if c.name == name.strip("/")]
            if not found:
                raise KeyError(f"suite {self.name!r} has no cell {name!r}; e.g. {cells[0].name!r}")
            return found[0]
        for key, known in (("arch", self.architectures), ("task", self.tasks)):
            if params.get(key) not in known:
                raise KeyError(f"suite {self.name!r} has no {key} {params.get(key)!r}; it has {list(known)}")
        seed, lr = int(params.get("seed", -1)), params.get("lr")
        if seed not in self.seeds:
            raise KeyError(f"suite {self.name!r} has no seed {params.get('seed')!r}; it has {self.seeds}")
        if (lr is None) != (not self.lrs) or (
            lr is not None and not any(math.isclose(float(lr), x, rel_tol=1e-9) for x in self.lrs)
        ):
            raise KeyError(f"suite {self.name!r} has no learning rate {lr!r}; it has {self.lrs or 'none'}")
        for c in cells:
            if (c.arch, c.task, c.seed) == (params["arch"], params["task"], seed) and (
                lr is None or math.isclose(float(lr), c.lr or 0.0, rel_tol=1e-9)
            ):
                return c
        raise AssertionError("unreachable: every coordinate was checked")  # pragma: no cover

    def cell_dir(self, cell: Cell) -> Path:
        """The cell's folder: ``<out>/<cell name>``, or ``<out>/<folder>`` with the suite's
        ``folder`` pattern filled in."""
        if self.folder is None:
            return self.out / cell.name
        lr = "" if cell.lr is None else f"{cell.lr:g}"
        return self.out / self.folder.format(arch=cell.arch, task=cell.task, seed=cell.seed, lr=lr)

    def subset(self, **wanted: Any) -> Suite:
        """This suite with only the given ``arch``, ``task``, ``seed`` and ``lr`` values (lists;
        None or empty: all), e.g. to collect part of it; an unknown value raises ``KeyError``."""
        parts = {"arch": self.architectures, "task": self.tasks, "seed": self.seeds, "lr": self.lrs}
        for key, values in wanted.items():
            bad = [v for v in values or [] if v not in parts[key]]
            if bad:
                raise KeyError(f"suite {self.name!r} has no {key} {bad}; it has {list(parts[key])}")
        keep = {k: wanted.get(k) or list(v) for k, v in parts.items()}
        return dataclasses.replace(
            self,
            architectures={k: v for k, v in self.architectures.items() if k in keep["arch"]},
            tasks={k: v for k, v in self.tasks.items() if k in keep["task"]},
            seeds=[s for s in self.seeds if s in keep["seed"]],
            lrs=[x for x in self.lrs if x in keep["lr"]],
        )

    def label(self, kind: str, name: str) -> str:
        """What the tables print for architecture (``kind="arch"``) or task ``name``."""
        return self.labels.get(kind, {}).get(name, name)

    def sampled(self, cell: Cell) -> dict[str, Any]:
        """The values ``sample`` draws for ``cell`` (module docstring): always the same for the
        same suite name and cell coordinates."""
        rng = random.Random(f"{self.name}|{cell.arch}|{cell.task}|{cell.lr}|{cell.seed}")
        sample = {**self.sample, **self.architectures[cell.arch].sample}
        out: dict[str, Any] = {}
        for key in sorted(sample):
            kind, arg = sample[key]
            if kind == "loguniform":
                out[key] = math.exp(rng.uniform(math.log(arg[0]), math.log(arg[1])))
            elif kind == "uniform":
                out[key] = rng.uniform(arg[0], arg[1])
            elif kind == "int_uniform":
                out[key] = rng.randint(arg[0], arg[1])
            else:
                out[key] = rng.choice(arg)
        return out

    def data_seed_of(self, cell: Cell) -> int:
        """The seed ``cell`` draws its data from: the suite's ``data_seed``, else the cell's seed."""
        return cell.seed if self.data_seed is None else self.data_seed

    def cli_args(self, cell: Cell) -> list[str]:
        """The cell's ``train.py`` arguments after the subcommand (module docstring's order)."""
        arch = self.architectures[cell.arch]
        drawn = _overrides(self.sampled(cell), f"suite {self.name!r}: sample")
        seeds = [f"--seed_everything={cell.seed}", f"--data.init_args.seed={self.data_seed_of(cell)}"]
        args = ["--config", str(arch.config_for(cell.task)), *self.args, *self.tasks[cell.task], *arch.args,
                *drawn, *seeds]  # fmt: skip
        if cell.lr is not None:
            args.append(f"--{self.lr_key}={cell.lr!r}")
        args += [
            f"--trainer.logger.init_args.save_dir={self.cell_dir(cell)}",
            f"--trainer.logger.init_args.name={self.name}:{cell.name}",
        ]
        return args

    # -- members: the cells that differ only in seed and learning rate, as one process ----------
    def _member_shared_args(self, cell: Cell) -> list[str]:
        """What ``cell``'s arguments give every cell of its members group: without its seed, its
        learning rate (when it is the model's ``lr``, which members take one each) and run folder."""
        drop = ["--seed_everything=", "--data.init_args.seed=", *RUN_FOLDER_ARGS]
        if self.lr_key == "model.init_args.lr":
            drop.append(f"--{self.lr_key}=")
        return [a for a in self.cli_args(cell) if not a.startswith(tuple(drop))]

    def member_groups(self, cells: Sequence[Cell], members: str | int) -> list[list[Cell]]:
        """``cells`` in groups that run as the members of one process
        (:mod:`memrnn.suite.groups`): one per architecture, task and every other argument, holding
        its seeds and learning rates in the suite's order, split into groups of at most
        ``members`` (``"auto"``: no limit)."""
        if members != "auto" and (isinstance(members, bool) or not isinstance(members, int) or members < 1):
            raise ValueError(f"members must be 'auto' or a whole number >= 1, got {members!r}")
        if self.share_data:
            raise ValueError(
                f"suite {self.name!r} shares data across architectures (share_data); members group a "
                "cell's seeds and learning rates instead: run it without --members, or without share_data"
            )
        by_key: dict[tuple[str, ...], list[Cell]] = {}
        for c in cells:
            by_key.setdefault((c.arch, c.task, *self._member_shared_args(c)), []).append(c)
        out = []
        for group in by_key.values():
            step = len(group) if members == "auto" else int(members)
            out += [group[i : i + step] for i in range(0, len(group), step)]
        return out

    def group_dir(self, cells: Sequence[Cell]) -> Path:
        """Where a members group writes its checkpoints and logs:
        ``<out>/groups/<arch>/<task>/<its cells' lr and seed parts>``."""
        parts = [c.name.split("/", 2)[2].replace("/", "-") for c in cells]
        names = "_".join(parts)
        if len(names) > 120:  # a long group: its first and last member and how many
            names = f"{parts[0]}..{len(parts)}..{parts[-1]}"
        return self.out / "groups" / cells[0].arch / cells[0].task / names

    def group_args(self, cells: Sequence[Cell], member_data: str | None = None) -> list[str]:
        """The ``train.py`` arguments of a members group: the cells' shared arguments, the
        members (each cell's seed, learning rate and, when the cells' data seeds differ, its data
        seed, with ``member_data: independent``) and the group's run folder.  ``member_data``
        (``"independent"``) keeps a group shed from an independent-data one on that path even
        when its members' data seeds coincide (its checkpoint's: each member's batches padded as
        before, so it continues bit for bit)."""
        first = cells[0]
        shared = self._member_shared_args(first)
        for c in cells[1:]:
            if (c.arch, c.task) != (first.arch, first.task) or self._member_shared_args(c) != shared:
                raise ValueError(f"{c.name} and {first.name} differ in more than seed and learning rate: "
                                 "they cannot run as members of one process")  # fmt: skip
        data_seeds = [self.data_seed_of(c) for c in cells]
        independent = len(set(data_seeds)) > 1 or member_data == "independent"
        rows = []
        for c, data_seed in zip(cells, data_seeds, strict=True):
            row: dict[str, Any] = {"seed": c.seed}
            if c.lr is not None and self.lr_key == "model.init_args.lr":
                row["lr"] = c.lr
            if independent:
                row["data_seed"] = data_seed
            rows.append(row)
        folder = self.group_dir(cells)
        return [*shared, f"--model.class_path={MEMBERS_CLASS}", f"--model.init_args.members={json.dumps(rows)}",
                f"--model.init_args.member_data={'independent' if independent else 'shared'}",
                f"--seed_everything={first.seed}", f"--data.init_args.seed={data_seeds[0]}",
                f"--trainer.logger.init_args.save_dir={folder}",
                f"--trainer.logger.init_args.name={self.name}:{folder.relative_to(self.out / 'groups')}"]  # fmt: skip
