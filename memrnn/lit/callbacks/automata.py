"""Callbacks that hold a trained layer against a construction: an nnPDA's stack actions against the
language's PDA (and the PDA read back from its weights), an LSTM against Hewitt's construction,
and the callback that starts training from that construction."""

from __future__ import annotations

from typing import Any, Literal

import lightning as L
from lightning.pytorch.utilities import rank_zero_info
from matplotlib.figure import Figure

from memrnn.analysis.hewitt import hewitt_agreement
from memrnn.analysis.nnpda import pda_rules_table, stack_action_agreement
from memrnn.analysis.plots import trace_heatmaps
from memrnn.analysis.reference import Feature
from memrnn.constructions import extract_pda
from memrnn.constructions.hewitt import hewitt_init_
from memrnn.lit.callbacks.base import Comparison, TraceComparison


class StackActions(TraceComparison):
    """Compare an nnPDA's learned stack actions with the language's PDA on probe strings
    (Stogin et al. 2020), and extract the PDA the network implements.

    After every ``every_n_epochs``-th validation: the layer's ``trace`` gives ``push`` (``p+``),
    ``pop`` (``p−``) and ``push_vector`` (``C``) at every step of ``BOS w_1 .. w_n``; they are
    quantized at 1/2 and compared with the PDA's operation at the same step (``BOS``: no-op).
    Logged as ``<split>/stack/``: ``action_acc`` (all steps), ``push_acc``, ``pop_acc``,
    ``noop_acc`` (per PDA action), ``symbol_acc`` (pushed symbol, argmax ``C``, under the best
    matching of the layer's stack symbols to the PDA's) and ``extracted_states``: the size of the
    PDA read back from the weights (:func:`~memrnn.constructions.extract_pda`, reachable
    states).  The extracted rules are the table ``extracted_pda`` (CSV and W&B) and stay in
    ``self.extracted``; the heatmap draws the PDA's and the layer's action codes (+1 push,
    −1 pop, 0 no-op) above ``push``, ``pop`` and ``push_vector``.

    Needs a layer whose ``trace`` reports ``push``/``pop``/``push_vector`` (``NNPDA``) and a
    language with a ``pda()``.  Arguments as :class:`TraceComparison`.
    """

    key = "stack"
    #: the PDA read back from the weights at the last comparison
    extracted: Any = None

    def heatmap(self, language, strings, trace, decoded) -> Figure:
        """The PDA's action codes (steps) and the layer's (crosses) above the layer's
        ``push``, ``pop`` and ``push_vector`` for one probe string."""

        b, s = self.figure_string, strings[self.figure_string]
        keys = self.heatmap_keys or ("push", "pop", "push_vector")
        return trace_heatmaps(
            {k: trace[k][b, : len(s)].numpy() for k in keys},
            ["BOS", *(language.symbols[t] for t in s[:-1])],
            reference={"action": Feature("class", decoded["pda_action"])},
            decoded={"action": decoded["layer_action"]},
            title=f"StackActions: probe string {b} (+1 push, -1 pop, 0 no-op; x: the layer)",
        )

    def compare_trace(self, language, strings, trace, mask):
        metrics, pda_codes, layer_codes = stack_action_agreement(language, strings, trace, mask)
        b, n = self.figure_string, len(strings[self.figure_string])
        decoded = {
            "pda_action": pda_codes[b, :n].numpy().astype(float),
            "layer_action": layer_codes[b, :n].numpy().astype(float),
        }
        return metrics, decoded

    def compare(self, trainer: L.Trainer, pl_module: L.LightningModule, split: str) -> Comparison | None:
        result = super().compare(trainer, pl_module, split)
        if result is None:
            return None

        layer, language = pl_module.layer, trainer.datamodule.language
        vocab = [*language.symbols, "BOS"]
        if layer.input_size == len(vocab) and hasattr(layer, "stack_symbols"):
            pda = extract_pda(
                layer,
                alphabet=vocab,
                stack_alphabet=[f"k{i}" for i in range(layer.stack_symbols)],
                ignore=["BOS"],
                method="reachable",
            )
            self.extracted = pda
            result.metrics["extracted_states"] = float(len(pda.states))
            result.tables["extracted_pda"] = pda_rules_table(pda)
        return result


class HewittComparison(TraceComparison):
    """Compare an LSTM trained on Dyck-(k,m) with Hewitt's LSTM construction (Hewitt et al. 2020, E.6, G.2)
    on probe strings.

    After every ``every_n_epochs``-th validation, logged as ``<split>/hewitt/``:

    * ``slot{j}_h_acc``, ``slot{j}_c_acc`` and their means ``slot_h_acc``, ``slot_c_acc``: held-out
      accuracy of a linear probe decoding stack slot ``j`` (bottom first: empty or which
      bracket) from ``h_t`` and from ``c_t`` (fit on the first half of the probe strings).  The
      construction stores every slot in ``c`` and only the top in ``h``.
    * ``saturation_i``, ``_f``, ``_o``: the fraction of gate values within ``0.05`` of 0 or 1
      (the construction: 1.0).
    * ``match_i``, ``match_f``, ``match_o``, ``match_c``: mean absolute correlation of the
      learned units with the construction's (``3m⌈log2 k⌉ − m`` units, the same probe strings),
      paired one to one by an optimal assignment (:func:`~memrnn.analysis.matching.match_units`).

    Figures: the default trace heatmap and ``gate_correlation`` (``|corr|`` of learned units,
    ordered by their match, against the construction's, per gate).  Needs an LSTM layer
    (``trace`` with ``i``, ``f``, ``o``, ``c``, ``h``) and a Dyck-(k,m) language.
    """

    key = "hewitt"

    def compare_trace(self, language, strings, trace, mask):
        metrics, self._corr = hewitt_agreement(language, strings, trace, mask)
        return metrics, {}

    def compare(self, trainer: L.Trainer, pl_module: L.LightningModule, split: str) -> Comparison | None:
        result = super().compare(trainer, pl_module, split)
        if result is not None and self.figures and getattr(self, "_corr", None):
            import matplotlib.pyplot as plt

            fig, axes = plt.subplots(1, 4, figsize=(16, 4), squeeze=False)
            for ax, (g, c) in zip(axes[0], self._corr.items(), strict=True):
                im = ax.imshow(c, vmin=0, vmax=1, aspect="auto", cmap="viridis")
                ax.set_title(f"{g}: |corr| learned (rows, matched) vs construction")
                ax.set_xlabel("construction unit")
            axes[0, 0].set_ylabel("learned unit")
            fig.colorbar(im, ax=axes[0, -1])
            fig.tight_layout()
            result.figures["gate_correlation"] = fig
        return result


class HewittInit(L.Callback):
    """Start from Hewitt's construction: at the first ``setup`` (fit, validate or test; before a
    checkpoint is restored, so resuming keeps the trained weights; never again, so a
    ``trainer.test()`` after ``fit`` sees the trained model),
    :func:`~memrnn.constructions.hewitt_init_` sets the module's LSTM (``layer``),
    ``embedding`` and generator head.

    Args:
        scale: multiplies the constructed weights (``hewitt_init_``; 1 = exact, saturated).
        encoding: ``"log"`` (``3m⌈log2 k⌉ − m`` units) or ``"one_hot"`` (``mk``).
        k, m: default: the data module's language's.
        freeze_embedding: keep the token features fixed (default).  The construction's input
            weights are ``≈ λ = 52``, so the embedding's gradient is amplified ``~λ²`` times and
            any optimizer step on it (SGD 0.5 or Adam 0.01, measured) wrecks the stack within
            a few steps.
    """

    def __init__(
        self,
        scale: float = 1.0,
        encoding: Literal["one_hot", "log"] = "log",
        k: int | None = None,
        m: int | None = None,
        freeze_embedding: bool = True,
    ) -> None:
        self.scale, self.encoding, self.k, self.m = scale, encoding, k, m
        self.freeze_embedding = freeze_embedding
        self.spec = None

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if self.spec is not None:  # once: a later trainer.test() must not reset the trained weights
            return

        language = getattr(trainer.datamodule, "language", None)
        k = self.k if self.k is not None else getattr(language, "k", None)
        m = self.m if self.m is not None else getattr(language, "m", None)
        if k is None or m is None:
            raise ValueError("HewittInit needs k and m, or a Dyck-(k,m) data module")
        if getattr(pl_module, "readout_activation", "identity") != "identity":
            raise ValueError(
                "HewittInit sets the readout for the layer's outputs themselves; this model's heads read "
                f"readout_activation={pl_module.readout_activation!r} of them (use 'identity')"
            )
        head = pl_module.heads["generator"] if "generator" in pl_module.heads else None  # noqa: SIM401 (ModuleDict)
        self.spec = hewitt_init_(
            pl_module.layer,
            k,
            m,
            encoding=self.encoding,
            scale=self.scale,
            embedding=pl_module.embedding,
            readout=head,
        )
        if self.freeze_embedding:
            pl_module.embedding.weight.requires_grad_(False)
        rank_zero_info(
            f"HewittInit: Dyck-({k},{m}) {self.encoding} construction ({self.spec.hidden_size} units) x{self.scale}"
            + (", token features frozen" if self.freeze_embedding else "")
        )
