"""Analyses shared by callbacks, scripts and notebooks; they read models and automata and never
the other way round."""

from memrnn.analysis.counting import (
    Accepts,
    CountingSweep,
    counting_failures,
    counting_sweep,
    first_counting_failure,
    strings_acceptor,
)
from memrnn.analysis.positions import output_position_accuracy
from memrnn.analysis.probe import ProbeResult, fit_linear_probe, probe_features
from memrnn.analysis.reference import Feature, available_features, reference_features

__all__ = [
    "Accepts",
    "CountingSweep",
    "Feature",
    "ProbeResult",
    "available_features",
    "counting_failures",
    "counting_sweep",
    "first_counting_failure",
    "fit_linear_probe",
    "output_position_accuracy",
    "probe_features",
    "reference_features",
    "strings_acceptor",
]
