"""Figures for the comparison callbacks and notebooks.  Built on ``matplotlib.figure.Figure``
directly (no pyplot, no global backend), so they are safe in training processes and threads."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from matplotlib.figure import Figure

from memrnn.analysis.reference import Feature


def trace_heatmaps(
    trace: Mapping[str, np.ndarray],
    tokens: Sequence[str],
    *,
    reference: Mapping[str, Feature] | None = None,
    decoded: Mapping[str, np.ndarray] | None = None,
    title: str = "",
) -> Figure:
    """One heatmap per trace quantity (units × time) for one string, with the reference
    automaton's values (and a probe's decoded values) plotted above them.

    Args:
        trace: ``{name: [T, ...]}`` (e.g. ``i``, ``f``, ``c`` of an LSTM; trailing dimensions
            are flattened into units).
        tokens: the ``T`` input tokens, used as the time axis labels.
        reference: ``{name: Feature}`` with ``T`` positions; drawn as step lines.
        decoded: ``{name: [T]}`` a probe's decoding of the same features, drawn dashed.
    """
    names = list(trace)
    steps = len(tokens)
    panels = len(names) + (1 if reference else 0)
    if panels == 0:
        raise ValueError("nothing to plot: no trace quantities and no reference")
    fig = Figure(figsize=(min(16.0, max(6.0, 0.18 * steps + 2)), 1.0 + 1.6 * panels), layout="constrained")
    axes = fig.subplots(panels, 1, sharex=True, squeeze=False)[:, 0]
    row = 0
    if reference:
        ax = axes[0]
        for name, feat in reference.items():
            values = np.asarray(feat.values).reshape(steps, -1)
            for j in range(values.shape[1]):
                label = name if values.shape[1] == 1 else f"{name}[{j}]"
                ax.step(range(steps), values[:, j], where="mid", label=label)
            if decoded and name in decoded:
                dec = np.asarray(decoded[name]).reshape(steps, -1)
                for j in range(dec.shape[1]):
                    ax.plot(
                        range(steps), dec[:, j], "x", markersize=4, label=None if j else f"{name} (probe)"
                    )
        ax.legend(loc="upper right", fontsize="small")
        ax.set_ylabel("reference")
        row = 1
    for name, ax in zip(names, axes[row:], strict=True):
        values = np.asarray(trace[name]).reshape(steps, -1).T
        im = ax.imshow(values, aspect="auto", interpolation="nearest", cmap="RdBu_r")
        lim = float(np.abs(values).max()) or 1.0
        im.set_clim(-lim, lim)
        ax.set_ylabel(f"{name} (unit)")
        ax.set_yticks(range(0, values.shape[0], -(-values.shape[0] // 8)))
        fig.colorbar(im, ax=ax, pad=0.01)
    every = max(1, -(-steps // 60))  # at most ~60 labelled ticks
    axes[-1].set_xticks(range(0, steps, every))
    axes[-1].set_xticklabels(list(tokens)[::every], rotation=90, fontsize="x-small")
    if title:
        fig.suptitle(title)
    return fig


def length_plot(curves: Mapping[str, Sequence[float]], metric: str, *, title: str = "") -> Figure:
    """``metric`` against string length (the ``length`` column of a per-length curve)."""
    if metric not in curves or "length" not in curves:
        raise ValueError(f"need 'length' and {metric!r} columns; have {list(curves)}")
    fig = Figure(figsize=(6, 3.5), layout="constrained")
    ax = fig.subplots()
    ax.plot(curves["length"], curves[metric], marker=".")
    ax.set_xlabel("string length (END counted)")
    ax.set_ylabel(metric)
    ax.grid(alpha=0.3)
    if title:
        ax.set_title(title)
    return fig
