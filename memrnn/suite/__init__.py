"""Suites of runs: architectures × tasks × learning rates × seeds as ``train.py`` cells, run
here N at a time, as a SLURM job array or as a W&B sweep, and collected into one results table
with per-length curves.  ``python -m memrnn.suite --help`` is the entry point."""

from memrnn.suite.cluster import slurm_script, wandb_sweep
from memrnn.suite.collect import Results, collect, collect_wandb
from memrnn.suite.runner import cell_status, run_cell, run_local, running_elsewhere
from memrnn.suite.spec import Cell, Suite

__all__ = [
    "Cell",
    "Results",
    "Suite",
    "cell_status",
    "collect",
    "collect_wandb",
    "run_cell",
    "run_local",
    "running_elsewhere",
    "slurm_script",
    "wandb_sweep",
]
