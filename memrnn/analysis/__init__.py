"""Analyses shared by callbacks, scripts and notebooks; they read models and automata and never
the other way round."""

from memrnn.analysis.counting import CountingSweep, counting_sweep

__all__ = ["CountingSweep", "counting_sweep"]
