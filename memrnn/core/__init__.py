"""The MemoryLayer interface, state helpers and the layer registry."""

from memrnn.core.layer import MemoryLayer
from memrnn.core.registry import create_layer, layer_class, list_layers, register_layer
from memrnn.core.serialization import allow_in_checkpoints
from memrnn.core.state import (
    state_batch_size,
    state_detach,
    state_index,
    state_leaves,
    state_map,
    state_stack,
    state_where,
    state_zip,
)
from memrnn.core.switch import reference_paths

__all__ = [
    "MemoryLayer",
    "allow_in_checkpoints",
    "create_layer",
    "layer_class",
    "list_layers",
    "reference_paths",
    "register_layer",
    "state_batch_size",
    "state_detach",
    "state_index",
    "state_leaves",
    "state_map",
    "state_stack",
    "state_where",
    "state_zip",
]
