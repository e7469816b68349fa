"""Lightning modules, metrics, callbacks, loggers and the CLI."""

from memrnn.lit.callbacks import CountingReport, CrossEntropyReport, LengthCurves
from memrnn.lit.generator import GeneratorModule
from memrnn.lit.loggers import WandbLogger
from memrnn.lit.metrics import (
    AcceptorAccuracy,
    BracketClosingAccuracy,
    CrossEntropyGap,
    NextSetAccuracy,
    PerLengthStats,
)
from memrnn.lit.sequence import SequenceModule

__all__ = [
    "AcceptorAccuracy",
    "BracketClosingAccuracy",
    "CountingReport",
    "CrossEntropyGap",
    "CrossEntropyReport",
    "GeneratorModule",
    "LengthCurves",
    "NextSetAccuracy",
    "PerLengthStats",
    "SequenceModule",
    "WandbLogger",
]
