"""An mkdocs hook: the results pages' plots, drawn at build time from committed results.

- ``results/plots/dusell-by-length.png``: DuSell & Chiang's CFL table per test length (median
  over seeds of each cell's ``length_curves_test.csv`` under ``benchmarks/results/dusell/``),
  with the length floor ln K / n on the training lengths;
- ``results/plots/speed-ratios.png`` and ``results/plots/speed-scaling.png``: ``python -m
  benchmarks``' CSV files of the 2-core CPU (``benchmarks/results/cpu-2core-*.csv``);
- ``results/plots/hewitt-fig3.png``: the Figure 3 table of ``docs/results/hewitt-fig3.md``.

Nothing drawn here is committed; a missing input fails the build."""

from __future__ import annotations

import csv
import io
import json
import math
import statistics
from pathlib import Path

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"

DUSELL_TASKS = {  # task: (title, K = the number of training lengths, the floor's ln K)
    "marked_reversal": ("Marked reversal", 20),
    "unmarked_reversal": ("Unmarked reversal", 21),
    "padded_reversal": ("Padded reversal", 41),
    "dyck": ("Dyck", 21),
    "hardest_cfl": ("Hardest CFL", 41),
}
DUSELL_MODELS = {
    "lstm": "LSTM",
    "superposition": "Superposition",
    "stratification": "Stratification",
    "ns": "NS-RNN",
    "rns": "RNS-RNN",
}


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    return buf.getvalue()


def _curve(cell_seed: Path) -> dict[int, float]:
    """One seed's test gap per length, from the run folder its ``result.json`` names."""
    result = json.loads((cell_seed / "result.json").read_text())
    run_id = Path(result["checkpoint"]).parts[-3]
    path = cell_seed / "memrnn" / run_id / "length_curves_test.csv"
    with path.open() as f:
        return {int(float(r["length"])): float(r["ce_gap"]) for r in csv.DictReader(f)}


def dusell_by_length() -> bytes:
    import matplotlib.pyplot as plt

    fig, grid = plt.subplots(2, 3, figsize=(12, 7.5))
    axes = grid.flat
    for ax, (task, (title, k)) in zip(axes, DUSELL_TASKS.items(), strict=False):
        for model, label in DUSELL_MODELS.items():
            seeds = sorted((RESULTS / "dusell" / f"{model}_{task}").glob("seed*"))
            curves = [_curve(s) for s in seeds if (s / "result.json").exists()]
            if not curves:
                continue
            lengths = sorted(set.intersection(*(set(c) for c in curves)))
            ax.plot(lengths, [statistics.median(c[n] for c in curves) for n in lengths], label=label, lw=1.3)
        train = range(41, 82)  # 40–80 symbols + END
        ax.plot(train, [math.log(k) / n for n in train], "k--", lw=1, label="length floor ln K / n")
        ax.axvline(81.5, color="0.6", lw=0.8)
        ax.set_title(title)
        ax.set_xlabel("test length (END counted)")
        ax.set_yscale("log")
    for ax in grid[:, 0]:
        ax.set_ylabel("test gap, nats/token (median of 3 seeds)")
    handles, labels = grid[0, 0].get_legend_handles_labels()
    grid[1, 2].axis("off")
    grid[1, 2].legend(handles, labels, loc="center")
    fig.suptitle("DuSell & Chiang's CFL table, 20 epochs on the 2-core CPU: the gap per test length")
    fig.tight_layout()
    return _png(fig)


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open() as f:
        return list(csv.DictReader(f))


def speed_ratios() -> bytes:
    import matplotlib.pyplot as plt

    rows = [
        r
        for r in _rows(RESULTS / "cpu-2core-throughput.csv")
        if (r["size"], r["batch"], r["T"]) == ("64", "64", "256")
    ]
    rows.sort(key=lambda r: float(r["fwdbwd_ratio"]))
    fig, ax = plt.subplots(figsize=(7, 0.28 * len(rows) + 1.2))
    ax.barh([r["layer"] for r in rows], [float(r["fwdbwd_ratio"]) for r in rows], color="tab:blue")
    ax.axvline(1.0, color="k", lw=1)
    ax.axvline(0.5, color="0.5", lw=0.8, ls="--")
    ax.set_xlabel("forward+backward tokens/s ÷ nn.LSTM's (size 64, batch 64, T 256)")
    ax.set_title("python -m benchmarks on the 2-core CPU")
    return _png(fig)


def speed_scaling() -> bytes:
    import matplotlib.pyplot as plt

    rows = _rows(RESULTS / "cpu-2core-scaling.csv")
    lengths = [int(c[1:]) for c in rows[0] if c.startswith("T")]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for r in rows:
        ax.plot(lengths, [float(r[f"T{t}"]) for t in lengths], marker=".", lw=1.5 if r["layer"] == "nn.LSTM" else 0.9,
                label=f"{r['layer']} (slope {float(r['slope']):.2f})", color="k" if r["layer"] == "nn.LSTM" else None)  # fmt: skip
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("T")
    ax.set_ylabel("forward+backward seconds")
    ax.set_title("Time against sequence length (2-core CPU)")
    ax.legend(fontsize=6, ncol=2)
    return _png(fig)


def _markdown_table(text: str, header_start: str) -> list[list[str]]:
    lines = text[text.index(header_start) :].splitlines()
    table = []
    for line in lines:
        if not line.startswith("|"):
            break
        table.append([c.strip() for c in line.strip().strip("|").split("|")])
    return [table[0], *table[2:]]


def hewitt_fig3() -> bytes:
    import matplotlib.pyplot as plt

    table = _markdown_table((ROOT / "docs" / "results" / "hewitt-fig3.md").read_text(), "| tokens |")
    header, rows = table[0], table[1:]
    tokens = [float(r[0]) for r in rows]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for j, name in enumerate(header[1:], 1):
        values = [float(r[j]) if r[j] not in ("", "—") else math.nan for r in rows]
        values = [max(v, 1e-6) for v in values]  # 0 drawn at the axis' floor
        ax.plot(tokens, values, marker="o", label=f"Dyck-{name}", ls="--" if "init" in name else "-")
    ax.axhline(1e-4, color="k", lw=0.8, ls=":", label="the paper's bar at 2·10⁷ tokens (< 10⁻⁴)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_ylim(5e-7, 2)
    ax.set_xlabel("training tokens")
    ax.set_ylabel("test bracket-closing error (median of 3 seeds; 0 drawn at 10⁻⁶)")
    ax.set_title("Hewitt et al.'s Figure 3 on the 2-core CPU")
    ax.legend(fontsize=7, ncol=2)
    return _png(fig)


PLOTS = {
    "results/plots/dusell-by-length.png": dusell_by_length,
    "results/plots/speed-ratios.png": speed_ratios,
    "results/plots/speed-scaling.png": speed_scaling,
    "results/plots/hewitt-fig3.png": hewitt_fig3,
}


def on_files(files: Files, config) -> Files:
    import matplotlib

    matplotlib.use("Agg")
    for uri, draw in PLOTS.items():
        files.append(File.generated(config, uri, content=draw()))
    return files
