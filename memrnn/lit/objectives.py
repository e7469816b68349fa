"""What :class:`memrnn.lit.SequenceModule` trains and the checks of its arguments: the objectives
and the batch keys each needs, the readout activations and loss reductions, the readout tied to the
embedding (:class:`TiedReadout`) and the acceptor's read at each string's end."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch.nn.functional as F
from torch import Tensor, nn
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LRScheduler, ReduceLROnPlateau
from torchmetrics.classification import MulticlassAccuracy
from torchmetrics.text import Perplexity

from memrnn.core.checks import positive_int
from memrnn.core.layer import MemoryLayer
from memrnn.data.datamodule import IGNORE_INDEX
from memrnn.lit.metrics import AcceptorAccuracy, BracketClosingAccuracy, CrossEntropyGap, NextSetAccuracy

#: ``Callable[[Optimizer], scheduler]``: in YAML a ``class_path`` of ``torch.optim.lr_scheduler``
LRSchedulerCallable = Callable[[Optimizer], LRScheduler | ReduceLROnPlateau]
OBJECTIVES = ("generator", "next_set", "acceptor_end", "acceptor_prefix")
#: ``readout_activation``: applied to the layer's outputs before every head
READOUT_ACTIVATIONS = {"identity": lambda h: h, "relu": F.relu}
#: ``loss_reduction``: how the generator's and next-set's per-position losses make one number
LOSS_REDUCTIONS = ("token", "string", "sum_per_string")
#: batch keys each objective needs (from FormalLanguageDataModule / AcceptorDataModule)
NEEDS = {
    "generator": ("target",),
    "next_set": ("next_set",),
    "acceptor_end": ("label", "lengths"),
    "acceptor_prefix": ("prefix_label",),
}


def acceptor_end_logits(logits: Tensor, lengths: Tensor) -> Tensor:
    """``logits [..., B, T]`` read at each sequence's own last position ``lengths − 1`` ->
    ``[..., B]`` (never the padded end; leading dimensions: members)."""
    index = (lengths - 1).clamp_min(0)[:, None].to(logits.device)
    return logits.gather(-1, index.expand(*logits.shape[:-1], 1))[..., 0]


def check_objectives(objectives: Mapping[str, float] | None) -> dict[str, float]:
    """The objectives with their coefficients (default the generator alone); unknown names and
    non-positive coefficients raise."""
    objectives = dict(objectives or {"generator": 1.0})
    for name, coef in objectives.items():
        if name not in OBJECTIVES:
            raise ValueError(f"unknown objective {name!r}; choose from {', '.join(OBJECTIVES)}")
        if not coef > 0:
            raise ValueError(f"objective {name!r} needs a positive coefficient, got {coef}")
    return objectives


def check_layer_factory(layer: Any) -> None:
    """A clear error for a ``layer`` that is not a callable of the input size: a module instance
    (``nn.LSTM(…)``, a built ``LSTMLayer``) is callable, but calling it with an int crashes deep
    in torch."""
    if isinstance(layer, nn.Module) or not callable(layer):
        what = f"an {type(layer).__name__} instance" if isinstance(layer, nn.Module) else repr(layer)
        raise ValueError(
            f"layer must be a callable of the input size returning a memrnn MemoryLayer, e.g. "
            f"functools.partial(memrnn.layers.LSTMLayer, hidden_size=64) (in YAML a class_path with "
            f"init_args that omit input_size); got {what}"
        )


def embedding_width(embedding: str, embedding_dim: int | None, vocab_size: int) -> int:
    """The layer's input size: ``vocab_size`` for one-hot tokens, else ``embedding_dim`` (16)."""
    if embedding not in ("learned", "one_hot"):
        raise ValueError(f"unknown embedding {embedding!r}; choose 'learned' or 'one_hot'")
    if embedding == "one_hot":
        if embedding_dim not in (None, vocab_size):
            raise ValueError(
                f"embedding='one_hot' feeds vocab_size={vocab_size} features; embedding_dim="
                f"{embedding_dim} would be ignored (leave it out)"
            )
        return vocab_size
    return positive_int("embedding_dim", 16 if embedding_dim is None else embedding_dim)


def check_bool(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be True or False, got {value!r}")
    return value


class TiedReadout(nn.Module):
    """The generator's readout tied to the input embedding, without a bias: ``logits = h ·
    E[:num_symbols]ᵀ`` for the embedding matrix ``E [vocab_size, D]`` (``weight`` *is*
    ``embedding.weight``, one parameter), as FLaRe's language-modelling head (rau's
    ``TiedLinear``: ``linear(x, embeddings[:output_size])``).  The output ids are the first
    ``num_symbols`` input ids (the symbols and ``END``; ``BOS``, the last input id, has no output)."""

    def __init__(self, embedding: nn.Embedding, num_symbols: int) -> None:
        super().__init__()
        self.weight = embedding.weight
        self.in_features, self.out_features = embedding.weight.shape[1], num_symbols
        self.bias = None

    def forward(self, h: Tensor) -> Tensor:
        """``h [..., D]`` -> logits ``[..., num_symbols]``."""
        return F.linear(h, self.weight[: self.out_features])

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias=False, tied"


def check_initial_output(layer: MemoryLayer) -> None:
    """A clear error, at construction, for a layer without an output at its initial state."""
    name = type(layer).__name__
    if not callable(getattr(layer, "output_at", None)):
        raise ValueError(
            f"initial_output=True reads the first position from the layer's output at its initial "
            f"state, but {name} has no output_at(state); LSTMLayer, GRULayer, ElmanRNN and a StackRNN "
            f"over one of them have it"
        )
    try:
        layer.output_at(layer.initial_state(1))
    except ValueError as err:
        raise ValueError(
            f"initial_output=True needs the layer's output at its initial state: {err}"
        ) from None


def check_tie(
    objectives: Mapping[str, float],
    embedding: str,
    embedding_dim: int,
    output_size: int,
    num_symbols: int,
    vocab_size: int,
) -> None:
    """The conditions of ``tie_embeddings`` (FLaRe ties its language-modelling head only)."""
    if "generator" not in objectives:
        raise ValueError(
            f"tie_embeddings=True ties the generator's readout to the input embedding (FLaRe's "
            f"language-modelling head), but the objectives ({', '.join(objectives)}) have no generator"
        )
    if embedding != "learned":
        raise ValueError(f"tie_embeddings=True needs a learned embedding, got embedding={embedding!r}")
    if embedding_dim != output_size:
        raise ValueError(
            f"tie_embeddings=True reads the layer's outputs with the embedding matrix, so embedding_dim "
            f"must equal the layer's output_size={output_size}, got embedding_dim={embedding_dim}"
        )
    if num_symbols > vocab_size:
        raise ValueError(
            f"tie_embeddings=True reads the {num_symbols} output ids from the embedding's first rows, "
            f"but it has vocab_size={vocab_size}"
        )


def check_optimizer(optimizer: type[Optimizer], optimizer_args: Mapping[str, Any] | None) -> None:
    """A clear error for an optimizer that is not a ``torch.optim.Optimizer`` class, or for
    ``optimizer_args`` that repeat the module's own ``lr``/``weight_decay``."""
    if isinstance(optimizer, str):
        raise ValueError(
            f"optimizer={optimizer!r}: give the class (in YAML its import path, e.g. torch.optim.Adam); "
            "a checkpoint written before memrnn took classes converts with "
            "`python -m memrnn.lit.upgrade <checkpoint>`"
        )
    if not (isinstance(optimizer, type) and issubclass(optimizer, Optimizer)):
        raise ValueError(f"optimizer must be a torch.optim.Optimizer class, got {optimizer!r}")
    both = sorted(set(optimizer_args or {}) & {"lr", "weight_decay", "params"})
    if both:
        raise ValueError(
            f"optimizer_args sets {both}; lr and weight_decay are the module's own arguments "
            f"(model.init_args.{both[0]})"
        )


def make_metrics(
    objectives: Mapping[str, float], num_symbols: int, bracket_types: int | None, acceptor: bool
) -> nn.ModuleDict:
    """The torchmetrics of one evaluation split, for the objectives trained (``acceptor``: the
    module has an acceptor head)."""
    metrics = nn.ModuleDict()
    if "generator" in objectives:
        metrics["acc"] = MulticlassAccuracy(num_symbols, average="micro", ignore_index=IGNORE_INDEX)
        metrics["ppl"] = Perplexity(ignore_index=IGNORE_INDEX)
        metrics["gap"] = CrossEntropyGap()
        if bracket_types is not None:
            metrics["closing"] = BracketClosingAccuracy(bracket_types)
    if "next_set" in objectives:
        metrics["next_set"] = NextSetAccuracy()
    if acceptor:
        metrics["accept"] = AcceptorAccuracy()
    return metrics


def update_metrics(
    m: nn.ModuleDict, objectives: Mapping[str, float], batch: Mapping[str, Tensor], out: Mapping[str, Tensor]
) -> None:
    """One evaluation batch into the metrics ``m`` of :func:`make_metrics` (``out``: the heads'
    logits, :meth:`memrnn.lit.SequenceModule.heads_out`)."""
    if "generator" in objectives:
        logits, target = out["generator"], batch["target"]
        m["acc"].update(logits.flatten(0, 1), target.flatten())
        m["ppl"].update(logits.float(), target)
        m["gap"].update(logits, target, batch.get("ref_logprob"))
        if "closing" in m and "distance" in batch:
            m["closing"].update(logits, target, batch["distance"], batch["depth"], batch["full"])
    if "next_set" in m:
        m["next_set"].update(out["next_set"], batch["next_set"], batch.get("next_set_mask", batch["mask"]))
    if "accept" in m:
        m["accept"].update(
            out["acceptor"], batch.get("prefix_label"), batch["label"], batch["mask"], batch["lengths"]
        )


def computed_metrics(m: nn.ModuleDict, split: str) -> dict[str, Tensor]:
    """The epoch's value of every metric of :func:`make_metrics` that was updated, by its logged
    key (``val/acc``, ``val/ce_gap``, ``val/accept_end``, …); the metrics are then reset."""
    logs: dict[str, Tensor] = {}
    for name, metric in m.items():
        if not metric.update_called:
            continue
        value = metric.compute()
        if name in ("acc", "ppl"):
            logs[f"{split}/{name}"] = value
        elif name in ("gap", "closing"):
            logs.update({f"{split}/{k}": v for k, v in value.items()})
        else:
            prefix = {"next_set": "next_set_", "accept": "accept_"}[name]
            logs.update({f"{split}/{prefix}{k}": v for k, v in value.items()})
        metric.reset()
    return logs


def curve_stats(objectives: Mapping[str, float]) -> tuple[str, ...]:
    """The per-string statistics the per-length curves of these objectives sum
    (:class:`memrnn.lit.metrics.PerLengthStats`' names)."""
    names = []
    if "generator" in objectives:
        names += ["nll", "nll_exact", "tokens", "correct"]
    if "next_set" in objectives:
        names += ["next_set_ok", "next_set_rows"]
    if {"acceptor_end", "acceptor_prefix"} & set(objectives):
        names += ["accept_ok"]
    return tuple(names)
