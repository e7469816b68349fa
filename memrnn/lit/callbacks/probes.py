"""Callbacks that look for the automaton's quantities inside a trained layer: linear probes for
its configuration, and units that count (Weiss et al. 2018 Figure 1)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import lightning as L
import numpy as np
import torch
from matplotlib.figure import Figure

from memrnn.analysis.counting import (
    construction_counters,
    counter_correlations,
    probe_string,
    reference_counters,
    unit_correlations,
)
from memrnn.analysis.probe import probe_features
from memrnn.analysis.reference import available_features, reference_features
from memrnn.core.checks import positive_int
from memrnn.languages.counting import CountingLanguage
from memrnn.lit.callbacks.base import Comparison, ModelComparison, TraceComparison


class LinearProbe(TraceComparison):
    """Decode the reference automaton's configuration from the layer's state with linear maps
    (:func:`memrnn.analysis.probe.fit_linear_probe`): after every validation, fit one probe per
    feature (``stack_top``, ``depth``, ``state`` for a PDA language; ``counter``, ``state`` for a
    counter language; ``state`` for a DFA) on the first half of the probe strings, score it on
    the other half, and log ``<split>/probe/<feature>_acc`` (held-out accuracy),
    ``<feature>_train_acc`` and, for counts, ``<feature>_r2``.

    Args:
        representation: the trace keys whose per-step values, flattened and concatenated, are
            the probe's input; ``"state"`` (default) takes every ``state.*`` field (an LSTM's
            ``h`` and ``c``).
        features: which reference features (default: every one the language has).
        train_fraction: share of the probe strings used to fit.
        Others: as :class:`TraceComparison`.
    """

    key = "probe"

    def __init__(
        self,
        representation: str | Sequence[str] = "state",
        features: Sequence[str] | None = None,
        train_fraction: float = 0.5,
        num_strings: int = 64,
        lengths: tuple[int, int] | None = None,
        seed: int = 0,
        heatmap_keys: Sequence[str] | None = None,
        splits: Sequence[str] = ("val",),
        every_n_epochs: int = 1,
        figures: bool = True,
    ) -> None:
        super().__init__(num_strings, lengths, seed, heatmap_keys, splits, every_n_epochs, figures)
        if not 0 < train_fraction < 1:
            raise ValueError(f"train_fraction must lie in (0, 1), got {train_fraction}")
        self.representation = (representation,) if isinstance(representation, str) else tuple(representation)
        self.features = tuple(features) if features is not None else None
        self.train_fraction = train_fraction
        self.probes: dict[str, Any] = {}

    def _inputs(self, trace: dict[str, torch.Tensor]) -> torch.Tensor:
        keys = []
        for r in self.representation:
            if r == "state":
                keys += [k for k in trace if k.startswith("state.")]
            elif r in trace:
                keys.append(r)
            else:
                raise ValueError(f"representation {r!r} is not in the layer's trace; it has {sorted(trace)}")
        b, t = next(iter(trace.values())).shape[:2]
        return torch.cat([trace[k].reshape(b, t, -1).double() for k in keys], -1)

    def compare_trace(self, language, strings, trace, mask):

        have = available_features(language)
        wanted = self.features or have
        unknown = [f for f in wanted if f not in have]
        if unknown:
            raise ValueError(f"{language} has no reference features {unknown}; it has {list(have)}")
        if not wanted:
            raise ValueError(f"{language} has no reference automaton to probe for")
        refs = [{k: v for k, v in reference_features(language, s).items() if k in wanted} for s in strings]
        n_train = min(max(1, round(len(strings) * self.train_fraction)), len(strings) - 1)
        self.figure_string, self.reference_keys = n_train, tuple(wanted)
        self.probes = probe_features(self._inputs(trace), mask, refs, n_train)
        metrics: dict[str, float] = {}
        for name, res in self.probes.items():
            metrics[f"{name}_acc"] = res.accuracy
            metrics[f"{name}_train_acc"] = res.train_accuracy
            if res.kind == "value":
                metrics[f"{name}_r2"] = res.r2
        # the first held-out string's decoded values, for the figure
        n = len(strings[n_train])
        decoded = {k: np.asarray(r.prediction)[:n] for k, r in self.probes.items()}
        return metrics, decoded


class CounterProbe(ModelComparison):
    """Find counting dimensions in a trained layer (Weiss et al. 2018 Figure 1): feed one long probe string
    (``a^1000 b^1000``, ``a^100 b^100 c^100``, or a sampled string of a PDA language), correlate
    every unit of the layer's state (``state.*`` of its ``trace``: an LSTM's ``h`` and ``c``, a
    GRU's ``h``) with the reference counters (``a-b``, ``b-c`` count differences; ``depth``), and
    compare with the compiled counter machine's counting units (:mod:`memrnn.constructions.counters`,
    LSTM, on the same string).

    Logged as ``<split>/counters/``: ``best_abs_r_<ref>`` (the largest ``|r|`` over all units),
    ``units_<ref>`` (how many units reach ``threshold``) and ``construction_abs_r_<ref>``.  Table
    ``counter_correlations`` (one row per unit); figure ``activations``: the state over the probe
    string with the counting units drawn bold, beside the construction's counters.

    Args:
        n: the probe's block length (default 1000 for two blocks, 100 for three).
        threshold: ``|r|`` at which a unit counts as a counter.
        keys: trace keys to scan (default every ``state.*``).
        splits, every_n_epochs, figures: as :class:`ModelComparison` (default: validation, test).
    """

    key = "counters"

    def __init__(
        self,
        n: int | None = None,
        threshold: float = 0.99,
        keys: Sequence[str] | None = None,
        splits: Sequence[str] = ("val", "test"),
        every_n_epochs: int = 1,
        figures: bool = True,
    ) -> None:
        super().__init__(splits, every_n_epochs, figures)
        if n is not None:
            positive_int("n", n)
        if not 0 < threshold <= 1:
            raise ValueError(f"threshold must lie in (0, 1], got {threshold}")
        self.n, self.threshold = n, threshold
        self.keys = tuple(keys) if keys is not None else None
        self.correlations: dict[str, np.ndarray] = {}

    def analyse(self, pl_module: L.LightningModule, language: Any) -> tuple[Comparison, dict[str, Any]]:
        """The comparison for ``pl_module`` (an embedding and a layer) on ``language``, and the raw
        material of the figure (``string``, ``trace``, ``refs``, ``construction``)."""

        string = probe_string(language, self.n)
        refs = reference_counters(language, string)
        trace, _ = TraceComparison.run_trace(pl_module, language, [string])
        keys = self.keys or tuple(k for k in trace if k.startswith("state."))
        missing = [k for k in keys if k not in trace]
        if missing or not keys:
            raise ValueError(
                f"CounterProbe keys {missing or keys} not in the layer's trace; it has {sorted(trace)}"
            )
        units = {k: trace[k][0].reshape(len(string), -1).double().numpy() for k in keys}
        metrics, table, self.correlations = counter_correlations(units, refs, self.threshold)
        construction = None
        if isinstance(language, CountingLanguage):
            construction = construction_counters(language, string)
            rc = unit_correlations(construction, refs)
            for j, name in enumerate(refs):
                metrics[f"construction_abs_r_{name}"] = float(np.abs(rc[:, j]).max())
        raw = {"string": string, "units": units, "refs": refs, "construction": construction}
        return Comparison(metrics=metrics, tables={"counter_correlations": table}), raw

    def compare(self, trainer: L.Trainer, pl_module: L.LightningModule, split: str) -> Comparison | None:
        language = getattr(trainer.datamodule, "language", None)
        if language is None or not hasattr(pl_module, "layer") or not hasattr(pl_module, "embedding"):
            return None
        result, raw = self.analyse(pl_module, language)
        if self.figures:
            result.figures["activations"] = self.figure(language, raw)
        return result

    def figure(self, language: Any, raw: dict[str, Any]) -> Figure:
        """Weiss et al. 2018 Figure 1: the state over the probe string, counters bold; the construction's."""
        import matplotlib.pyplot as plt

        key = "state.c" if "state.c" in raw["units"] else next(iter(raw["units"]))
        units, r = raw["units"][key], np.abs(self.correlations[key]).max(1)
        panels = 2 if raw["construction"] is not None else 1
        fig, axes = plt.subplots(1, panels, figsize=(7 * panels, 3.5), squeeze=False)
        ax = axes[0, 0]
        for u in range(units.shape[1]):
            bold = r[u] >= self.threshold
            ax.plot(units[:, u], lw=2.0 if bold else 0.7, label=f"unit {u} |r|={r[u]:.3f}" if bold else None)
        ax.set_title(f"learned {key} on the probe ({len(raw['string']) - 1} symbols)")
        ax.set_xlabel("position")
        if (r >= self.threshold).any():
            ax.legend(fontsize=7)
        if raw["construction"] is not None:
            ax = axes[0, 1]
            for j in range(raw["construction"].shape[1]):
                ax.plot(raw["construction"][:, j], lw=2.0, label=f"counter {j}")
            for name, v in raw["refs"].items():
                ax.plot(v, ls=":", color="k", lw=1.0, label=f"#{name}")
            ax.set_title("compiled LSTM counters (|c|, one step behind) and references")
            ax.set_xlabel("position")
            ax.legend(fontsize=7)
        fig.tight_layout()
        return fig
