"""Memory layers; importing this module registers them (``memrnn.core.list_layers``)."""

from memrnn.layers.counters import CounterLSTM, CounterLSTMState, ReLUCounter, ReLUCounterState
from memrnn.layers.elman import ElmanRNN, ElmanState, JordanRNN, JordanState
from memrnn.layers.esn import EchoStateNetwork
from memrnn.layers.gated import GRULayer, GRUState, LSTMLayer, LSTMState
from memrnn.layers.nnpda import NNPDA, NNPDAState, StackOverflowError
from memrnn.layers.readouts import LogisticClassifier, RidgeClassifier, RidgeReadout, SVMClassifier
from memrnn.layers.reservoir import Reservoir, ReservoirState
from memrnn.layers.rsm import (
    InnerLoopLimitError,
    LROracle,
    ReservoirStackMachine,
    RSMContext,
    RSMOutput,
    StackDepthError,
)
from memrnn.layers.second_order import SecondOrderRNN, SecondOrderState

__all__ = [
    "NNPDA",
    "CounterLSTM",
    "CounterLSTMState",
    "EchoStateNetwork",
    "ElmanRNN",
    "ElmanState",
    "GRULayer",
    "GRUState",
    "InnerLoopLimitError",
    "JordanRNN",
    "JordanState",
    "LROracle",
    "LSTMLayer",
    "LSTMState",
    "LogisticClassifier",
    "NNPDAState",
    "RSMContext",
    "RSMOutput",
    "ReLUCounter",
    "ReLUCounterState",
    "Reservoir",
    "ReservoirStackMachine",
    "ReservoirState",
    "RidgeClassifier",
    "RidgeReadout",
    "SVMClassifier",
    "SecondOrderRNN",
    "SecondOrderState",
    "StackDepthError",
    "StackOverflowError",
]
