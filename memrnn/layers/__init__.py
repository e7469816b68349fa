"""Memory layers (every class here is a :class:`memrnn.core.MemoryLayer`); importing this module
registers them (``memrnn.core.list_layers``)."""

from memrnn.layers.counters import CounterLSTM, CounterLSTMState, ReLUCounter, ReLUCounterState
from memrnn.layers.elman import ElmanRNN, ElmanState, JordanRNN, JordanState
from memrnn.layers.gated import GRULayer, GRUState, LSTMLayer, LSTMState
from memrnn.layers.memories import (
    JumpTape,
    Memory,
    NeuralDeque,
    NeuralQueue,
    NondeterministicStack,
    StratificationStack,
    SuperpositionStack,
    Tape,
    VectorNondeterministicStack,
)
from memrnn.layers.nnpda import NNPDA, NNPDAState, StackOverflowError
from memrnn.layers.reservoir import Reservoir, ReservoirState
from memrnn.layers.second_order import SecondOrderRNN, SecondOrderState
from memrnn.layers.stack_rnn import StackRNN

__all__ = [
    "NNPDA",
    "CounterLSTM",
    "CounterLSTMState",
    "ElmanRNN",
    "ElmanState",
    "GRULayer",
    "GRUState",
    "JordanRNN",
    "JordanState",
    "JumpTape",
    "LSTMLayer",
    "LSTMState",
    "Memory",
    "NNPDAState",
    "NeuralDeque",
    "NeuralQueue",
    "NondeterministicStack",
    "ReLUCounter",
    "ReLUCounterState",
    "Reservoir",
    "ReservoirState",
    "SecondOrderRNN",
    "SecondOrderState",
    "StackOverflowError",
    "StackRNN",
    "StratificationStack",
    "SuperpositionStack",
    "Tape",
    "VectorNondeterministicStack",
]
