"""Sizes of the Dyck-(k,m) generators (Hewitt et al. 2020): the four Hewitt constructions, Theorem 1's
naive one (Minsky's construction on the DFA) and Theorem 6's lower bound.

    python benchmarks/hewitt_sizes.py [--build]

Every Hewitt size is the hidden size of a layer built by memrnn (``--build`` also builds the
log-encoding layers, up to k = 100,000, and checks them); the naive size is ``|Q|·2k + 1`` with
``|Q| = Σ_{i≤m} k^i`` (built for the small cases by ``tests/constructions/test_minsky.py``).
The ratio column is naive / LSTM-log units: what the LSTM construction saves.
"""

from __future__ import annotations

import argparse

from memrnn.constructions import HewittLSTM, HewittSimpleRNN, construction_sizes

KS = (2, 8, 32, 128, 1024, 100_000)
MS = (1, 3, 5, 8)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--build", action="store_true", help="build the log-encoding layers and check their sizes"
    )
    args = ap.parse_args()
    cols = (
        "k",
        "m",
        "srnn 2mk",
        "lstm mk",
        "srnn 6mL-2m",
        "lstm 3mL-m",
        "naive |Q|2k+1",
        "bound m*log2k",
        "naive/lstm-log",
    )
    print(" | ".join(f"{c:>14}" for c in cols))
    for k in KS:
        for m in MS:
            s = construction_sizes(k, m)
            if args.build:
                for cls, key in ((HewittLSTM, "lstm_log"), (HewittSimpleRNN, "srnn_log")):
                    layer = cls(k=k, m=m, encoding="log")
                    assert layer.hidden_size == s[key], (k, m, key, layer.hidden_size)
            row = (
                k,
                m,
                s["srnn_one_hot"],
                s["lstm_one_hot"],
                s["srnn_log"],
                s["lstm_log"],
                f"{s['naive']:.3g}",
                f"{s['lower_bound_bits']:.1f}",
                f"{s['naive'] / s['lstm_log']:.3g}",
            )
            print(" | ".join(f"{v:>14}" for v in row))


if __name__ == "__main__":
    main()
