"""One LightningModule for every objective: generator (next token), next-allowed-set prediction
(Suzgun et al.'s multi-hot targets) and acceptor (a label per prefix, or at each string's own
end), alone or combined with coefficients.  Embedding -> any MemoryLayer -> one head per
objective."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

import lightning as L
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.optim import Optimizer
from torch.optim.lr_scheduler import ReduceLROnPlateau

from memrnn.core.checks import finite_float
from memrnn.core.layer import MemoryLayer
from memrnn.data.datamodule import IGNORE_INDEX, LanguageDataModule, bos_inputs
from memrnn.lit.init import check_init, dusell_init_, flare_init_, haiku_init_, hewitt_init_
from memrnn.lit.metrics import PerLengthStats, length_curves_from
from memrnn.lit.objectives import (
    LOSS_REDUCTIONS,
    NEEDS,
    OBJECTIVES,
    READOUT_ACTIVATIONS,
    LRSchedulerCallable,
    TiedReadout,
    acceptor_end_logits,
    check_bool,
    check_initial_output,
    check_layer_factory,
    check_objectives,
    check_optimizer,
    check_tie,
    computed_metrics,
    curve_stats,
    embedding_width,
    make_metrics,
    update_metrics,
)

#: the module, and the names of :mod:`memrnn.lit.objectives` it has always offered
__all__ = [
    "LOSS_REDUCTIONS",
    "NEEDS",
    "OBJECTIVES",
    "READOUT_ACTIVATIONS",
    "LRSchedulerCallable",
    "SequenceModule",
    "TiedReadout",
    "acceptor_end_logits",
    "check_optimizer",
]

#: where a checkpoint keeps the value its epoch's ``ReduceLROnPlateau`` step reads
#: (:meth:`SequenceModule.on_train_epoch_end`)
PLATEAU_KEY = "memrnn_plateau"


class SequenceModule(L.LightningModule):
    """A sequence model over a formal language, trained on one or several objectives.

    ``h = layer(E · x)``; heads: ``generator`` logits ``[B, T, num_symbols]`` (masked
    cross-entropy; Hewitt et al. 2020 Definitions 2–3), ``next_set`` logits ``[B, T, num_symbols]``
    (binary cross-entropy against the allowed-next multi-hot set), ``acceptor`` logit
    ``[B, T]`` (binary cross-entropy against the per-prefix label, or at each string's own end).
    Every head reads ``readout_activation(h)``.

    Args:
        layer: a callable of the embedding size returning a ``MemoryLayer`` (YAML:
            ``class_path`` with ``init_args`` that omit ``input_size``; in Python e.g.
            ``functools.partial(LSTMLayer, hidden_size=64)``, not a built module).
        vocab_size, num_symbols: linked from the data module.
        embedding_dim: size of the learned token embedding (default 16).
        embedding: ``"learned"`` (default) or ``"one_hot"``: the layer reads one-hot token
            vectors of size ``vocab_size`` (a frozen identity embedding; leave
            ``embedding_dim`` out), as tensor RNNs and the nnPDA expect (Stogin et al. 2020).
        objectives: ``{name: coefficient}`` over ``generator``, ``next_set``, ``acceptor_end``,
            ``acceptor_prefix``; the loss is the weighted sum of their mean losses.
        optimizer: the optimizer class (default ``torch.optim.Adam``, as every paper memrnn
            reproduces); in YAML its import path, e.g. ``optimizer: torch.optim.SGD``.
        lr, weight_decay: the optimizer's learning rate and weight decay.
        optimizer_args: its other arguments, e.g. ``{momentum: 0.9}`` or ``{betas: [0.9, 0.98]}``.
        lr_scheduler: a callable of the optimizer returning a scheduler, stepped once per
            validation (default none); in YAML a ``class_path``, e.g. Hewitt et al.'s (2020, H.3)
            ``torch.optim.lr_scheduler.ReduceLROnPlateau`` with ``factor: 0.5, patience: 0``.
        lr_monitor: the metric a ``ReduceLROnPlateau`` watches (default ``val/ce`` with the
            generator objective, else ``val/loss``).  Gradient clipping is the Trainer's
            ``gradient_clip_val``.
        bracket_types: ``k`` of a bracket language (linked from the data): adds Hewitt's
            bracket-closing metric to validation and test.
        max_length: longest string length kept apart in the per-length curves (longer ones
            share the last bucket).
        loss_reduction: how the ``generator`` and ``next_set`` losses average their positions:
            ``"token"`` (default: over every scored position of the batch), ``"string"`` (over
            each string's positions, then over the strings that have any: the recognizer
            benchmark's auxiliary losses, Butoi et al. 2025) or ``"sum_per_string"`` (each
            string's *sum* over its positions, then the mean over the strings that have any:
            DuSell & Chiang's ``sequence_losses.sum(1).mean()``, ``utils/train_util.py``, so that a
            ``gradient_clip_val`` clips what their ``clip_grad_norm_`` clips; the loss is ``n + 1``
            times the token mean on strings of ``n`` symbols).  A ``next_set_mask`` in the batch
            says which positions have a next-symbol set (default: every real one).
        select_on: the objective whose validation loss ``val/loss`` is (what checkpoints, early
            stopping and a plateau schedule watch), the weighted total then going to
            ``val/loss_total``; default: ``val/loss`` is the total.  The recognizer benchmark
            selects on the recognition loss alone (``acceptor_end``).  With several objectives
            each one's is logged as ``val/loss_<name>``.
        readout_activation: applied to the layer's outputs ``h [B, T, H]`` before every head:
            ``"identity"`` (default: the heads read ``h``) or ``"relu"`` (``Linear(relu(h))``,
            the readout of Delétang et al.'s 2023 public code, ``models/rnn.py``).
        initial_output: no start symbol.  The batches keep their ``BOS`` first input, but the
            layer does not read it: it runs on ``input[:, 1:]`` (``n`` steps for ``n`` symbols, not
            ``n + 1``) and position 0 is the layer's output *at its initial state*
            (``layer.output_at(initial_state)``: ``h_0``, 0 unless the layer learns it), so the
            first symbol is predicted from the initial state and every shape after the layer
            (targets, masks, the acceptor read at ``lengths − 1``, per-length curves) is
            unchanged.  With ``h_0 = 0`` the first logits are the heads' biases.  This is rau's
            ``include_first=True``, which DuSell & Chiang's models (2020, 2022, 2023; one-hot
            inputs, no ``BOS``) and FLaRe's RNNs and LSTMs (Butoi et al. 2025) use; ``False``
            (default): the layer reads ``BOS`` first, one more step (memrnn's models).  Needs a
            layer with ``output_at`` (LSTMLayer, GRULayer, ElmanRNN, a StackRNN with one of
            them as controller; not bidirectional).
        dropout: in training mode, dropout of this probability on the embedding's output (the
            layer's input) and on the layer's output (before the heads; with ``initial_output``
            its first position too): FLaRe's ``DropoutUnidirectional`` before and after the RNN
            (Butoi et al. 2025, ``model_interface.py``; their scripts use 0.1, with the same rate
            between stacked layers: the layer's own ``dropout``).  Default 0.
        tie_embeddings: the ``generator`` head is the input embedding, without a bias
            (:class:`TiedReadout`: output id ``i`` scores ``h · E_i``): FLaRe's language-modelling
            head (rau's ``get_shared_embeddings`` and ``TiedLinear``, ``bias=False``), which it ties
            only when there is one (``--use-language-modeling-head``; the next-symbol head is never
            tied).  Needs the ``generator`` objective, ``embedding="learned"`` and
            ``embedding_dim`` equal to the layer's ``output_size`` (FLaRe: both ``hidden_units``).
        init: the initialisation of the whole model, applied once it is built
            (:mod:`memrnn.lit.init`): ``"torch"`` (default: each module's own), ``"dusell"``
            (DuSell & Chiang's ``model_util.initialize``: the heads and the superposition and
            stratification stacks' heads Xavier-uniform with their activations' gains, zero biases,
            every other parameter ``U(−s, s)``), ``"flare"`` (Butoi et al.'s: rau's ``smart_init``
            with ``uniform_fallback(s)``, the same rule, the recurrent layers' second bias 0) or
            ``"hewitt"`` (Hewitt et al. 2020, ``lm.py``: the generator's readout ``W ~ U(−√h,
            √h)``, ``b = 0``; torch's elsewhere) or ``"haiku"`` (Delétang et al. 2023's haiku
            defaults: linear and recurrent weights truncated normal with stddev ``1/√fan_in``,
            biases 0).
        init_scale: ``s`` of ``"dusell"`` and ``"flare"`` (their ``--init-scale``; default 0.1, the
            value of their scripts); refused with the other schemes.
        restart_optimizer_on_decay: whenever a scheduler step lowers the learning rate, the
            optimizer's state is reset (Adam's moments and step count: a restarted Adam), as
            Hewitt et al.'s (2020, appendix H.3) text describes; their code keeps Adam's state
            (``training_regimen.py``), as memrnn does by default.  Needs an ``lr_scheduler``.

    The generator's loss reads the batch's ``loss_target`` when it has one (a
    :class:`memrnn.data.ChomskyDataModule` with ``loss_positions="outputs"``: every output
    position, the terminator's padding included), else ``target``; its metrics and per-length
    curves always score ``target``.

    Validation/test log, per objective: ``ce``, ``ce_exact``, ``ce_gap``, ``acc``, ``ppl``
    (+ ``closing``, ``closing_error`` and the side constraints for bracket languages);
    ``next_set_token``, ``next_set_sequence``; ``accept_end``, ``accept_prefix``.
    """

    def __init__(
        self,
        layer: Callable[[int], MemoryLayer],
        vocab_size: int,
        num_symbols: int,
        embedding_dim: int | None = None,
        objectives: Mapping[str, float] | None = None,
        optimizer: type[Optimizer] = torch.optim.Adam,
        lr: float = 1e-2,
        weight_decay: float = 0.0,
        optimizer_args: Mapping[str, Any] | None = None,
        lr_scheduler: LRSchedulerCallable | None = None,
        lr_monitor: str | None = None,
        bracket_types: int | None = None,
        max_length: int = 1024,
        embedding: Literal["learned", "one_hot"] = "learned",
        loss_reduction: Literal["token", "string", "sum_per_string"] = "token",
        select_on: str | None = None,
        readout_activation: Literal["identity", "relu"] = "identity",
        initial_output: bool = False,
        dropout: float = 0.0,
        tie_embeddings: bool = False,
        init: Literal["torch", "dusell", "hewitt", "flare", "haiku"] = "torch",
        init_scale: float | None = None,
        restart_optimizer_on_decay: bool = False,
    ) -> None:
        super().__init__()
        objectives = check_objectives(objectives)
        check_layer_factory(layer)
        if readout_activation not in READOUT_ACTIVATIONS:
            raise ValueError(
                f"readout_activation must be one of {', '.join(map(repr, READOUT_ACTIVATIONS))}, "
                f"got {readout_activation!r}"
            )
        self.readout_activation = readout_activation
        if loss_reduction not in LOSS_REDUCTIONS:
            raise ValueError(
                f"loss_reduction must be one of {', '.join(map(repr, LOSS_REDUCTIONS))}, got {loss_reduction!r}"
            )
        self.initial_output = check_bool("initial_output", initial_output)
        self.tie_embeddings = check_bool("tie_embeddings", tie_embeddings)
        self.restart_optimizer_on_decay = check_bool("restart_optimizer_on_decay", restart_optimizer_on_decay)
        dropout = finite_float("dropout", dropout)
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        init_scale = check_init(init, init_scale)
        if select_on is not None and select_on not in objectives:
            raise ValueError(
                f"select_on={select_on!r} is not one of the objectives ({', '.join(objectives)})"
            )
        self.loss_reduction, self.select_on = loss_reduction, select_on
        # language models predict their own input ids (num_symbols <= vocab_size); transductions
        # (Delétang et al.'s cycle navigation: 3 input symbols, 5 outputs) may predict more classes
        if num_symbols < 1 or vocab_size < 1:
            raise ValueError(f"need num_symbols >= 1 and vocab_size >= 1, got {num_symbols=} {vocab_size=}")
        embedding_dim = embedding_width(embedding, embedding_dim, vocab_size)
        check_optimizer(optimizer, optimizer_args)
        if lr_scheduler is not None and not callable(lr_scheduler):
            raise ValueError(f"lr_scheduler must be a callable of the optimizer, got {lr_scheduler!r}")
        if restart_optimizer_on_decay and lr_scheduler is None:
            raise ValueError(
                "restart_optimizer_on_decay=True restarts the optimizer when a scheduler lowers the learning "
                "rate, but lr_scheduler is None (e.g. torch.optim.lr_scheduler.ReduceLROnPlateau)"
            )
        self.save_hyperparameters()
        self.optimizer_class, self.optimizer_args = optimizer, dict(optimizer_args or {})
        self.lr_scheduler = lr_scheduler
        self.objectives = objectives
        self.lr_monitor = lr_monitor or (
            "val/ce" if "generator" in objectives and select_on is None else "val/loss"
        )
        if embedding == "one_hot":  # a frozen identity: the layer sees one-hot token vectors
            self.embedding = nn.Embedding.from_pretrained(torch.eye(vocab_size), freeze=True)
        else:
            self.embedding = nn.Embedding(vocab_size, embedding_dim)
        self.layer = layer(embedding_dim)
        if not isinstance(self.layer, MemoryLayer):
            raise ValueError(
                f"layer must build a memrnn MemoryLayer, got {type(self.layer).__name__} "
                "(memrnn.layers has LSTMLayer, GRULayer, ElmanRNN, … for torch's recurrent modules)"
            )
        self.vocab_size, self.num_symbols = vocab_size, num_symbols
        if getattr(self.layer, "bidirectional", False) and {"next_set", "acceptor_prefix"} & set(objectives):
            raise ValueError(
                f"a bidirectional layer reads every position's future, which next_set and acceptor_prefix "
                f"targets are about; objectives {sorted(objectives)} need a unidirectional layer"
            )
        if self.initial_output:
            check_initial_output(self.layer)
        #: FLaRe's dropout before and after the layer (``dropout``), or None
        self.input_dropout = nn.Dropout(dropout) if dropout else None
        self.output_dropout = nn.Dropout(dropout) if dropout else None
        if self.tie_embeddings:
            check_tie(
                self.objectives,
                embedding,
                embedding_dim,
                self.layer.output_size,
                self.num_symbols,
                self.vocab_size,
            )
        self.heads = self._make_heads(self.layer.output_size)
        self._initialize(init, init_scale)
        for split in ("val", "test"):
            setattr(
                self,
                f"{split}_metrics",
                make_metrics(self.objectives, self.num_symbols, bracket_types, "acceptor" in self.heads),
            )
            setattr(
                self,
                f"{split}_by_length",
                PerLengthStats(curve_stats(self.objectives), max_length=max_length),
            )
        #: per-length curves of the last validation/test epoch (``length_curves()``'s output)
        self.curves: dict[str, dict[str, list[float]]] = {}

    def setup(self, stage: str) -> None:
        """A language model's targets are its next inputs: a bidirectional layer would read them
        (a transduction's outputs, read at blank inputs, are fine)."""
        dm = getattr(self._trainer, "datamodule", None) if self._trainer is not None else None
        if (
            getattr(self.layer, "bidirectional", False)
            and "generator" in self.objectives
            and isinstance(dm, LanguageDataModule)
        ):
            raise ValueError(
                f"{type(dm).__name__}'s generator targets are the next inputs, which a bidirectional layer "
                "reads: use a unidirectional layer to model the language"
            )

    def _initialize(self, init: str, scale: float | None) -> None:
        """``init``'s scheme over the whole model (:mod:`memrnn.lit.init`)."""
        if init == "torch":
            return
        if init == "haiku":
            haiku_init_(self)
            return
        if init == "hewitt":
            readout = self.heads["generator"] if "generator" in self.heads else None  # noqa: SIM401 (ModuleDict)
            if not isinstance(readout, nn.Linear):
                raise ValueError(
                    "init='hewitt' draws the generator's readout (Hewitt et al.'s U(-sqrt(h), sqrt(h))), but "
                    + (
                        "it is tied to the embedding"
                        if readout is not None
                        else "this model has no generator head"
                    )
                )
            hewitt_init_(readout)
            return
        readouts = [head for head in self.heads.values() if isinstance(head, nn.Linear)]  # not a tied one
        scheme = dusell_init_ if init == "dusell" else flare_init_
        scheme(self, scale, readouts=readouts)

    def _make_heads(self, hidden: int) -> nn.ModuleDict:
        """One linear head per output the objectives read: ``generator`` and ``next_set``
        ``hidden -> num_symbols``, ``acceptor`` ``hidden -> 1`` (each reads
        ``readout_activation(h)``); with ``tie_embeddings`` the generator's is a
        :class:`TiedReadout`."""
        heads = nn.ModuleDict()
        for name in ("generator", "next_set"):
            if name == "generator" and name in self.objectives and self.tie_embeddings:
                heads[name] = TiedReadout(self.embedding, self.num_symbols)
            elif name in self.objectives:
                heads[name] = nn.Linear(hidden, self.num_symbols)
        if {"acceptor_end", "acceptor_prefix"} & set(self.objectives):
            heads["acceptor"] = nn.Linear(hidden, 1)
        return heads

    def length_curves(self, split: str) -> dict[str, list[float]]:
        """Per string length (``END`` counted for generators, symbols + 1 for acceptors):
        ``length``, ``count`` and, per objective, ``ce``, ``ce_gap``, ``acc`` (generator),
        ``next_set_sequence``, ``accept_end``; computed from the last evaluation epoch."""
        return self.curves.get(split, {})

    def _finish_curves(self, split: str) -> None:
        metric = getattr(self, f"{split}_by_length")
        if not metric.update_called:
            return
        out = self.curves_from(metric)
        self.curves[split] = out
        for name, score in self.curve_scores(out).items():
            self.log(f"{split}/{name}", torch.tensor(score, dtype=torch.float32))

    def curve_scores(self, curves: Mapping[str, list[float]]) -> dict[str, float]:
        """The scores of an evaluation's per-length curves: ``<curve>_mean_over_lengths`` (Delétang
        et al.'s (2023) score: every length weighs the same, however many strings it has) and
        ``acc_scaled_mean_over_lengths`` (Grazzi et al.'s (2025) scaled accuracy, chance =
        1 / num_symbols)."""
        out = {}
        for name, mean in self.curve_means(curves).items():
            out[f"{name}_mean_over_lengths"] = mean
            if name == "acc" and self.num_symbols > 1:
                chance = 1.0 / self.num_symbols
                out["acc_scaled_mean_over_lengths"] = (mean - chance) / (1.0 - chance)
        return out

    @staticmethod
    def curve_means(curves: Mapping[str, list[float]]) -> dict[str, float]:
        """Delétang et al.'s (2023) score of each accuracy curve: its mean over the lengths."""
        return {
            name: sum(curves[name]) / len(curves[name])
            for name in ("acc", "accept_end", "next_set_sequence")
            if curves.get(name)
        }

    #: the per-length curves of an evaluation's ``PerLengthStats`` (then reset)
    curves_from = staticmethod(length_curves_from)

    @property
    def readout(self) -> nn.Linear:
        """The generator head (it reads ``readout_activation(h)``, not ``h``)."""
        return self.heads["generator"]

    # -- forward and losses ---------------------------------------------------------------------
    def checked_ids(self, input_ids: Tensor) -> Tensor:
        """``input_ids`` as the embedding takes them (``long`` or ``int32``), or a ``ValueError``
        naming a non-integer dtype or an unknown token id (checked on CPU and outside training
        steps: on accelerators it costs a host sync)."""
        if not isinstance(input_ids, Tensor):
            raise ValueError(f"input_ids must be a tensor of token ids, got {type(input_ids).__name__}")
        if input_ids.is_floating_point() or input_ids.is_complex() or input_ids.dtype == torch.bool:
            raise ValueError(
                f"input_ids must hold integer token ids (torch.long), got dtype {input_ids.dtype}; "
                "convert with input_ids.long() if they are whole numbers"
            )
        if input_ids.dtype not in (torch.long, torch.int32):  # torch's embedding takes no int8/16, uint8
            input_ids = input_ids.long()
        if input_ids.device.type == "cpu" or not self.training:
            # a host sync on accelerators: training batches from memrnn's data modules are valid
            # by construction, so the check runs there only outside training steps
            bad = (input_ids < 0) | (input_ids >= self.vocab_size)
            if bool(bad.any()):
                raise ValueError(
                    f"unknown token id {int(input_ids[bad][0])}; the model has ids 0..{self.vocab_size - 1}"
                )
        return input_ids

    def embed(self, input_ids: Tensor) -> Tensor:
        """``input_ids [B, T]`` (checked: :meth:`checked_ids`) -> their embeddings ``[B, T, E]``."""
        return self.embedding(self.checked_ids(input_ids))

    def encode(
        self, input_ids: Tensor, mask: Tensor | None = None, input_lengths: Tensor | None = None
    ) -> Tensor:
        """``input_ids [B, T]`` -> the layer's outputs ``[B, T, H]``.  ``input_lengths [B]`` (a
        transduction's input, before the blanks) go into the initial state of a layer that reads
        them (``layer.reads_input_lengths``; ``layer.initial_state(B, input_lengths=…)``: a
        :class:`memrnn.layers.StackRNN` on Delétang et al.'s jump tape,
        :class:`memrnn.layers.memories.JumpTape`); other layers ignore them."""
        x = self.embed(input_ids)
        if self.input_dropout is not None:
            x = self.input_dropout(x)
        state = None  # x [..., B, T, E]: with members (MemberSequenceModule) [M, B, T, E]
        if input_lengths is not None and getattr(self.layer, "reads_input_lengths", False):
            state = self.layer.initial_state(
                x.shape[-3], device=x.device, dtype=x.dtype, input_lengths=input_lengths
            )
        # the final state is not needed: layers may skip it (LSTMLayer/GRULayer skip packing)
        if self.initial_output:
            h = self._outputs_from_initial_state(x, state, mask)
        else:
            h = self.layer.outputs(x, state=state, mask=mask)
        return h if self.output_dropout is None else self.output_dropout(h)

    def _outputs_from_initial_state(self, x: Tensor, state: Any, mask: Tensor | None) -> Tensor:
        """``initial_output``: the layer's output at its initial state, then its outputs on
        ``x[..., 1:, :]`` (the input without ``BOS``), ``[..., B, T, H]`` as the layer's on all of
        ``x`` (leading dimensions: members)."""
        if x.shape[-2] == 0:
            return self.layer.outputs(x, state=state, mask=mask)
        if state is None:
            state = self.layer.initial_state(x.shape[-3], device=x.device, dtype=x.dtype)
        first = self.layer.output_at(state).unsqueeze(-2)
        if mask is not None:  # a row with no position at all (none from memrnn's data) stays zero
            first = first * mask[..., :1, None].to(first.dtype)
        rest = self.layer.outputs(x[..., 1:, :], state=state, mask=None if mask is None else mask[..., 1:])
        return torch.cat([first.to(rest.dtype), rest], -2)

    def heads_out(
        self, input_ids: Tensor, mask: Tensor | None = None, input_lengths: Tensor | None = None
    ) -> dict[str, Tensor]:
        """Every head's logits: ``generator``/``next_set`` ``[B, T, num_symbols]``,
        ``acceptor`` ``[B, T]``, each read from ``readout_activation(h)``; ``input_lengths`` as
        :meth:`encode`."""
        hidden = READOUT_ACTIVATIONS[self.readout_activation](self.encode(input_ids, mask, input_lengths))
        out = {name: head(hidden) for name, head in self.heads.items()}
        if "acceptor" in out:
            out["acceptor"] = out["acceptor"][..., 0]
        return out

    def forward(self, input_ids: Tensor, mask: Tensor | None = None) -> Tensor:
        """The first objective's logits (generator: ``[B, T, num_symbols]``)."""
        out = self.heads_out(input_ids, mask)
        return out[next(iter(self.heads))]

    @torch.no_grad()
    def accepts(self, strings: Sequence[Sequence[int]], bos_id: int, *, batch_size: int = 64) -> list[bool]:
        """The acceptor head's verdict (logit > 0, read at each string's own end) on token-id
        strings ``w_1 .. w_n`` (``END`` dropped; ``bos_id`` is prepended, as the data modules do),
        in eval mode and batches of ``batch_size``.  Feeds :func:`memrnn.analysis.counting_sweep`
        through :func:`memrnn.analysis.strings_acceptor`."""
        if "acceptor" not in self.heads:
            raise ValueError(
                f"accepts needs a model trained with an acceptor objective; this one has {list(self.objectives)}"
            )
        was_training = self.training
        self.eval()
        device = next(self.parameters()).device
        verdicts: list[bool] = []
        try:
            for start in range(0, len(strings), batch_size):
                inp, mask, lengths = bos_inputs(strings[start : start + batch_size], bos_id)
                out = self.heads_out(inp.to(device), mask.to(device))
                verdicts += (acceptor_end_logits(out["acceptor"], lengths) > 0).tolist()
        finally:
            self.train(was_training)
        return verdicts

    def losses(self, batch: Mapping[str, Tensor], out: Mapping[str, Tensor]) -> dict[str, Tensor]:
        """Each objective's mean loss on ``batch`` (the generator's over ``loss_target`` when the
        batch has it, else over ``target``).  Logits with leading dimensions (``[M, B, T, V]``:
        members, :class:`memrnn.lit.members.MemberSequenceModule`) give each loss per member
        (``[M]``)."""
        mask = batch["mask"]
        losses = {}
        for name in self.objectives:
            missing = [k for k in NEEDS[name] if k not in batch]
            if missing:
                raise ValueError(
                    f"objective {name!r} needs batch keys {missing}; this data module gives {sorted(batch)}"
                    + (" (set next_sets: true on the data module)" if name == "next_set" else "")
                )
            if name == "generator":
                # the loss positions (a transduction's every output position), else the scored ones
                target = batch.get("loss_target", batch["target"])
                logits = out["generator"]
                lead = logits.shape[:-3]
                per = F.cross_entropy(
                    logits.reshape(-1, *logits.shape[-2:]).transpose(1, 2),
                    target.expand(*lead, *target.shape[-2:]).reshape(-1, target.shape[-1]),
                    ignore_index=IGNORE_INDEX,
                    reduction="none",
                ).view(*lead, *target.shape[-2:])
                losses[name] = self._reduce(per, target != IGNORE_INDEX)
            elif name == "next_set":
                logits = out["next_set"]
                target = batch["next_set"].to(logits.dtype).expand(logits.shape)
                per = F.binary_cross_entropy_with_logits(logits, target, reduction="none").mean(-1)
                losses[name] = self._reduce(per, batch.get("next_set_mask", mask))
            elif name == "acceptor_end":
                last = acceptor_end_logits(out["acceptor"], batch["lengths"])
                label = batch["label"].to(last.dtype).expand(last.shape)
                if last.dim() == 1:  # one run: torch's mean reduction, as always (bit for bit)
                    losses[name] = F.binary_cross_entropy_with_logits(last, label)
                else:
                    losses[name] = F.binary_cross_entropy_with_logits(last, label, reduction="none").mean(-1)
            else:
                logits = out["acceptor"]
                label = batch["prefix_label"].to(logits.dtype).expand(logits.shape)
                per = F.binary_cross_entropy_with_logits(logits, label, reduction="none")
                losses[name] = _sum_bt(per * mask) / mask.sum().clamp_min(1)
        return losses

    def _reduce(self, per: Tensor, scored: Tensor) -> Tensor:
        """The mean of the losses ``per [..., B, T]`` at the ``scored [B, T]`` positions, over all
        of them (``loss_reduction="token"``), or per string (its mean, ``"string"``, or its sum,
        ``"sum_per_string"``), then over the strings that have any; leading dimensions (members)
        stay.  ``scored [M, B, T]`` (a batch per member) counts each member's own positions; per
        string, each of its strings must have one (the caller's check)."""
        per = per * scored
        if self.loss_reduction == "token":
            return _sum_bt(per) / _sum_bt(scored).clamp_min(1)
        counts = scored.sum(-1)
        rows = counts > 0
        if counts.dim() > 1:  # a batch per member, [M, B, T]: every string has a scored position
            sums = per.sum(-1) if self.loss_reduction == "sum_per_string" else per.sum(-1) / counts
            return sums.sum(-1) / rows.sum(-1).clamp_min(1)
        if self.loss_reduction == "sum_per_string":
            return _sum_last(per.sum(-1)[..., rows]) / rows.sum().clamp_min(1)
        return _sum_last(per.sum(-1)[..., rows] / counts[rows]) / rows.sum().clamp_min(1)

    def _total(self, losses: Mapping[str, Tensor]) -> Tensor:
        return sum(self.objectives[k] * v for k, v in losses.items())

    # -- steps ----------------------------------------------------------------------------------
    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        losses = self.losses(batch, self.heads_out(batch["input"], batch["mask"], batch.get("input_lengths")))
        loss = self._total(losses)
        if self._logging_step():
            n = int(batch["mask"].shape[0])
            self.log("train/loss", loss, prog_bar=True, batch_size=n)
            if len(losses) > 1:
                self.log_dict({f"train/loss_{k}": v for k, v in losses.items()}, batch_size=n)
        return loss

    def _logging_step(self) -> bool:
        """Whether this training step's loss goes to Lightning's logging: only on the steps whose
        metrics the trainer sends to its loggers (Lightning's own rule, every
        ``log_every_n_steps``-th optimizer step, and every step under ``fast_dev_run``) and the
        epoch's last step (so the epoch ends with the loss in ``callback_metrics``).  The step
        values are all Lightning keeps of ``train/loss`` (no epoch mean), and ``self.log`` costs
        about 0.7 ms a call, as much as a whole step of the default job's model on a CPU
        (``benchmarks/train_loop.py``).  Every step when a callback monitors a ``train/``
        metric (a checkpoint or early stopping on the training loss reads it at any step)."""
        trainer = self._trainer
        if trainer is None:
            return False
        if any(str(getattr(cb, "monitor", None) or "").startswith("train/") for cb in trainer.callbacks):
            return True
        connector = getattr(trainer, "_logger_connector", None)
        if connector is None:  # a Lightning without it: log every step, as before
            return True
        last = getattr(getattr(trainer.fit_loop.epoch_loop, "batch_progress", None), "is_last_batch", True)
        return bool(connector.should_update_logs or trainer.fast_dev_run or last)

    def _eval_step(self, batch: dict[str, Tensor], split: str) -> None:
        out = self.heads_out(batch["input"], batch["mask"], batch.get("input_lengths"))
        losses = self.losses(batch, out)
        n = int(batch["mask"].shape[0])
        total = self._total(losses)
        if self.select_on is None:
            self.log(f"{split}/loss", total, batch_size=n, sync_dist=True)
        else:
            self.log(f"{split}/loss", losses[self.select_on], batch_size=n, sync_dist=True)
            self.log(f"{split}/loss_total", total, batch_size=n, sync_dist=True)
        if len(losses) > 1:
            self.log_dict({f"{split}/loss_{k}": v for k, v in losses.items()}, batch_size=n, sync_dist=True)
        update_metrics(getattr(self, f"{split}_metrics"), self.objectives, batch, out)
        # per-length curves by the string's length (``input_lengths``: a transduction's input)
        lengths = batch.get("input_lengths", batch["lengths"])
        getattr(self, f"{split}_by_length").update(self._per_string(batch, out), lengths)

    def _per_string(self, batch: Mapping[str, Tensor], out: Mapping[str, Tensor]) -> Tensor:
        """``[B, S]`` statistics of each string for the per-length curves (:func:`memrnn.lit.objectives.curve_stats`)."""
        mask = batch["mask"]
        cols = []
        if "generator" in self.objectives:
            logits, target = out["generator"], batch["target"]
            nll = F.cross_entropy(
                logits.transpose(1, 2).double(), target, ignore_index=IGNORE_INDEX, reduction="none"
            )
            scored = (target != IGNORE_INDEX) & mask  # transductions score their output positions only
            # no exact reference (the recognizer benchmark): NaN, and the curves give no ce_gap
            ref = batch.get("ref_logprob")
            exact = (
                -(ref.double() * mask).sum(1)
                if ref is not None
                else nll.new_full(nll.shape[:1], float("nan"))
            )
            cols += [nll.sum(1), exact, scored.sum(1).double()]
            cols.append(((logits.argmax(-1) == target) & mask).sum(1).double())
        if "next_set" in self.objectives:
            ns_mask = batch.get("next_set_mask", mask)
            ok = ((out["next_set"] > 0) == batch["next_set"].bool()).all(-1) | ~ns_mask
            rows = ns_mask.any(1)
            cols += [(ok.all(1) & rows).double(), rows.double()]
        if "acceptor" in self.heads:
            last = acceptor_end_logits(out["acceptor"], batch["lengths"])
            cols.append(((last > 0) == batch["label"].bool()).double())
        return torch.stack(cols, dim=1)

    def _eval_epoch_end(self, split: str) -> None:
        logs = computed_metrics(getattr(self, f"{split}_metrics"), split)
        shown = {f"val/{k}" for k in ("ce_gap", "accept_end", "next_set_sequence")}
        for key, value in logs.items():
            # already reduced across ranks by torchmetrics; averaging equal values changes nothing
            self.log(key, value.float(), prog_bar=key in shown, sync_dist=True)
        self._finish_curves(split)

    def _eval_epoch_start(self, split: str) -> None:
        # A previous trainer.validate() ran under inference_mode and may have left inference
        # tensors in the metric states; resetting re-creates ordinary tensors.
        for metric in getattr(self, f"{split}_metrics").values():
            metric.reset()
        getattr(self, f"{split}_by_length").reset()

    def on_validation_epoch_start(self) -> None:
        self._eval_epoch_start("val")

    def on_test_epoch_start(self) -> None:
        self._eval_epoch_start("test")

    def validation_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        self._eval_step(batch, "val")

    def on_validation_epoch_end(self) -> None:
        self._eval_epoch_end("val")
        if self._trainer is not None and not self._trainer.sanity_checking:
            self._validated_in_fit = True

    def test_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        self._eval_step(batch, "test")

    def on_test_epoch_end(self) -> None:
        self._eval_epoch_end("test")

    def configure_optimizers(self):
        opt = self.optimizer_class(
            self.parameters(),
            lr=self.hparams.lr,
            weight_decay=self.hparams.weight_decay,
            **self.optimizer_args,
        )
        if self.lr_scheduler is None:
            return opt
        sched = self.lr_scheduler(opt)
        conf = {"scheduler": sched, "interval": "epoch"}
        if isinstance(sched, ReduceLROnPlateau):
            conf["monitor"] = self.lr_monitor
        return {"optimizer": opt, "lr_scheduler": conf}

    # -- resuming: the plateau step Lightning skips ---------------------------------------------
    def _plateau_value(self) -> Any:
        """What this epoch's ``ReduceLROnPlateau`` step reads: the last validation's
        ``lr_monitor`` (None when no validation gave it)."""
        value = self._trainer.callback_metrics.get(self.lr_monitor) if self._trainer is not None else None
        return None if value is None else float(value)

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        value = self._plateau_value()
        if value is not None:
            checkpoint[PLATEAU_KEY] = value

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self._restored_plateau = checkpoint.get(PLATEAU_KEY)

    def on_train_start(self) -> None:
        """Take the plateau step that a fit continued from an epoch's end skips (below)."""
        self._validated_in_fit = False
        trainer = self._trainer
        if trainer is not None and trainer.fit_loop.resumed_on_epoch_end:
            self._take_skipped_plateau_step(trainer.current_epoch - 1)

    def on_train_epoch_end(self) -> None:
        """Take the plateau step that Lightning skips in the epoch a fit restarts in (below)."""
        trainer = self._trainer
        if trainer is not None and trainer.fit_loop.restarting:
            self._take_skipped_plateau_step(trainer.current_epoch)

    def _take_skipped_plateau_step(self, epoch: int) -> None:
        """The ``ReduceLROnPlateau`` step of ``epoch`` that Lightning (2.6) does not take when a fit
        continues from a checkpoint.

        Lightning steps a plateau schedule after each training epoch, after the epoch's
        ``on_train_epoch_end`` (where ``last.ckpt`` is written), on the monitored value of the
        epoch's validation.  A fit continued from that ``last.ckpt`` starts at the next epoch
        (``resumed_on_epoch_end``), and one continued from a checkpoint written inside an epoch
        finishes it *restarting*, when Lightning skips the step ("metric-based schedulers require
        access to metrics and those are not currently saved in the checkpoint").  Either way the
        continued run's learning rate fell one epoch late, if at all, against the run never stopped
        (measured: 4 epochs of a plateau at patience 0 halve the rate 3 times straight through, 2
        times when stopped after 2).  The checkpoint keeps the value (``memrnn_plateau``) and the
        step is taken here, so that a continued run is the uninterrupted one."""
        trainer = self._trainer
        # the epoch's own validation when one ran in this fit (a restart inside an epoch), else the
        # checkpoint's (the sanity check's values are of a few batches)
        fresh = getattr(self, "_validated_in_fit", False)
        value = self._plateau_value() if fresh else getattr(self, "_restored_plateau", None)
        if value is None:
            return
        for config in trainer.lr_scheduler_configs:
            if (
                config.reduce_on_plateau
                and config.interval == "epoch"
                and (epoch + 1) % config.frequency == 0
            ):
                self._step_skipped_plateau(config.scheduler, value)

    def _step_skipped_plateau(self, scheduler: Any, value: Any) -> None:
        self.lr_scheduler_step(scheduler, torch.tensor(value))

    def lr_scheduler_step(self, scheduler: Any, metric: Any) -> None:
        """Lightning's step of the scheduler; with ``restart_optimizer_on_decay``, a step that
        lowers any group's learning rate then empties the optimizer's state (Adam restarts: its
        moments and step count from zero, as for a new optimizer)."""
        optimizer = getattr(scheduler, "optimizer", None)
        before = [group["lr"] for group in optimizer.param_groups] if optimizer is not None else []
        super().lr_scheduler_step(scheduler, metric)
        lowered = optimizer is not None and any(
            group["lr"] < lr for group, lr in zip(optimizer.param_groups, before, strict=True)
        )
        if self.restart_optimizer_on_decay and lowered:
            optimizer.state.clear()


def _sum_bt(per: Tensor) -> Tensor:
    """The sum over the batch and time of ``per [..., B, T]``: one run's full ``sum()`` (the
    reduction it has always had, bit for bit), members' per member."""
    return per.sum() if per.dim() == 2 else per.sum((-2, -1))


def _sum_last(x: Tensor) -> Tensor:
    """The sum over the last dimension: one run's full ``sum()`` of ``[B]``, members' per member."""
    return x.sum() if x.dim() == 1 else x.sum(-1)
