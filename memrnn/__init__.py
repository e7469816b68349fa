"""memrnn: memory-augmented recurrent layers and the formal languages that test them.

Importing the package imports :mod:`memrnn.layers` and :mod:`memrnn.constructions`, which fills
the layer registry (``list_layers``, ``create_layer``).
"""

from memrnn import constructions, layers
from memrnn.core import MemoryLayer, create_layer, list_layers, reference_paths, register_layer

__version__ = "0.1.0"
__all__ = [
    "MemoryLayer",
    "__version__",
    "constructions",
    "create_layer",
    "layers",
    "list_layers",
    "reference_paths",
    "register_layer",
]
