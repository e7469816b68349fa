"""Lightning modules, metrics, callbacks, loggers and the CLI."""

from memrnn.lit.callbacks import CrossEntropyReport
from memrnn.lit.generator import GeneratorModule
from memrnn.lit.loggers import WandbLogger
from memrnn.lit.metrics import CrossEntropyGap

__all__ = ["CrossEntropyGap", "CrossEntropyReport", "GeneratorModule", "WandbLogger"]
