"""Callbacks shared by the configs, by kind: the comparison base (:mod:`.base`), reports of what the
module computes (:mod:`.reports`), probes of a layer's internals (:mod:`.probes`) and comparisons
with constructions (:mod:`.automata`).  Each comparison is a plain function in
:mod:`memrnn.analysis` that notebooks and scripts call without a Trainer."""

from memrnn.lit.callbacks.automata import HewittComparison, HewittInit, StackActions
from memrnn.lit.callbacks.base import Comparison, ModelComparison, TraceComparison
from memrnn.lit.callbacks.probes import CounterProbe, LinearProbe
from memrnn.lit.callbacks.reports import CountingReport, CrossEntropyReport, LengthCurves, ProgressBar

__all__ = [
    "Comparison",
    "CounterProbe",
    "CountingReport",
    "CrossEntropyReport",
    "HewittComparison",
    "HewittInit",
    "LengthCurves",
    "LinearProbe",
    "ModelComparison",
    "ProgressBar",
    "StackActions",
    "TraceComparison",
]
