"""memrnn: memory-augmented recurrent layers and the formal languages that test them."""

from memrnn.core import MemoryLayer, create_layer, list_layers, reference_paths, register_layer

__version__ = "0.1.0"
__all__ = ["MemoryLayer", "__version__", "create_layer", "list_layers", "reference_paths", "register_layer"]
