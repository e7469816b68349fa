"""Analyses shared by callbacks, scripts and notebooks; they read models and automata and never
the other way round."""

from memrnn.analysis.counting import CountingSweep, counting_sweep
from memrnn.analysis.probe import ProbeResult, fit_linear_probe, probe_features
from memrnn.analysis.reference import Feature, available_features, reference_features

__all__ = [
    "CountingSweep",
    "Feature",
    "ProbeResult",
    "available_features",
    "counting_sweep",
    "fit_linear_probe",
    "probe_features",
    "reference_features",
]
