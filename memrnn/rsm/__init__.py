"""The reservoir stack machine of Paaßen, Schulz & Hammer 2021: the machine (Algorithms 2 and 4),
its readouts, the LR(1) oracle readout, the echo state network baseline, the teacher signals
(Algorithm 4's 5-tuples) and the paper's experiment as a Lightning module and data module.

The machine is fitted in closed form and run with a symbolic stack, so it is not a
:class:`memrnn.core.MemoryLayer`; its reservoir is (:class:`memrnn.layers.Reservoir`).
"""

from memrnn.rsm.esn import EchoStateNetwork
from memrnn.rsm.experiment import (
    RSMDataModule,
    RSMModule,
    fit_machine,
    make_esn,
    make_machine,
    make_reservoir,
    predictions_error,
    task_data,
)
from memrnn.rsm.machine import (
    InnerLoopLimitError,
    ReservoirStackMachine,
    RSMContext,
    RSMOutput,
    StackDepthError,
)
from memrnn.rsm.oracle import LROracle
from memrnn.rsm.readouts import LogisticClassifier, RidgeClassifier, RidgeReadout, SVMClassifier
from memrnn.rsm.teacher import copy_actions, lr_batch, transduction_batch

__all__ = [
    "EchoStateNetwork",
    "InnerLoopLimitError",
    "LROracle",
    "LogisticClassifier",
    "RSMContext",
    "RSMDataModule",
    "RSMModule",
    "RSMOutput",
    "ReservoirStackMachine",
    "RidgeClassifier",
    "RidgeReadout",
    "SVMClassifier",
    "StackDepthError",
    "copy_actions",
    "fit_machine",
    "lr_batch",
    "make_esn",
    "make_machine",
    "make_reservoir",
    "predictions_error",
    "task_data",
    "transduction_batch",
]
