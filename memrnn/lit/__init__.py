"""Lightning modules, metrics, callbacks, loggers and the CLI."""

from memrnn.lit.callbacks import (
    Comparison,
    CounterProbe,
    CountingReport,
    CrossEntropyReport,
    HewittComparison,
    HewittInit,
    LengthCurves,
    LinearProbe,
    ModelComparison,
    ProgressBar,
    StackActions,
    TraceComparison,
)
from memrnn.lit.loggers import WandbLogger
from memrnn.lit.members import MemberSequenceModule
from memrnn.lit.metrics import (
    AcceptorAccuracy,
    BracketClosingAccuracy,
    CrossEntropyGap,
    NextSetAccuracy,
    PerLengthStats,
)
from memrnn.lit.runs import LearningRateMonitor, ModelCheckpoint, SaveRunConfig, run_dir
from memrnn.lit.sequence import SequenceModule

__all__ = [
    "AcceptorAccuracy",
    "BracketClosingAccuracy",
    "Comparison",
    "CounterProbe",
    "CountingReport",
    "CrossEntropyGap",
    "CrossEntropyReport",
    "HewittComparison",
    "HewittInit",
    "LearningRateMonitor",
    "LengthCurves",
    "LinearProbe",
    "MemberSequenceModule",
    "ModelCheckpoint",
    "ModelComparison",
    "NextSetAccuracy",
    "PerLengthStats",
    "ProgressBar",
    "SaveRunConfig",
    "SequenceModule",
    "StackActions",
    "TraceComparison",
    "WandbLogger",
    "run_dir",
]
