"""Memory layers; importing this module registers them (``memrnn.core.list_layers``)."""

from memrnn.layers.elman import ElmanRNN, ElmanState, JordanRNN, JordanState
from memrnn.layers.gated import GRULayer, GRUState, LSTMLayer, LSTMState

__all__ = [
    "ElmanRNN",
    "ElmanState",
    "GRULayer",
    "GRUState",
    "JordanRNN",
    "JordanState",
    "LSTMLayer",
    "LSTMState",
]
