"""The modules that carry Hewitt et al.'s explicit Dyck-(k,m) stacks (Hewitt et al. 2020,
appendices D–G): :class:`HewittLSTM` and :class:`HewittSimpleRNN` (memrnn layers with the
constructed weights), :func:`hewitt_init_` (set them into any LSTM or RNN module), and
:func:`encode_dyck`, the complete generators as :class:`~memrnn.constructions.Construction`.

The constructions, their constants and the paper's errata are documented with the specification
in :mod:`memrnn.constructions.hewitt_spec`, whose names this module also exports.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import Tensor, nn

from memrnn.constructions.hewitt_spec import (
    ARCHS,
    Arch,
    DenseWeights,
    Encoding,
    HewittSpec,
    hewitt_spec,
)
from memrnn.constructions.result import BOS, Construction
from memrnn.core.checks import refuses_removed_arguments
from memrnn.core.registry import register_layer
from memrnn.core.serialization import allow_in_checkpoints
from memrnn.languages.dyck import DyckKM
from memrnn.layers.elman import ElmanRNN
from memrnn.layers.gated import LSTMLayer


# -- layers ----------------------------------------------------------------------------------------
def _target_rnn(module: nn.Module) -> tuple[str, nn.Module]:
    if isinstance(module, LSTMLayer):
        if module.num_layers != 1 or module.bidirectional:
            raise ValueError(
                "hewitt_init_ needs a one-layer, unidirectional LSTM, got "
                f"num_layers={module.num_layers}, bidirectional={module.bidirectional}"
            )
        return "lstm", module.rnn
    if isinstance(module, nn.LSTM):
        if module.num_layers != 1 or module.bidirectional or module.proj_size:
            raise ValueError("hewitt_init_ needs a one-layer, unidirectional nn.LSTM without proj_size")
        return "lstm", module
    if isinstance(module, ElmanRNN):
        if module.num_layers != 1 or module.bidirectional:
            raise ValueError(
                "hewitt_init_ needs a one-layer, unidirectional ElmanRNN, got "
                f"num_layers={module.num_layers}, bidirectional={module.bidirectional}"
            )
        if module.activation != "sigmoid":
            raise ValueError(
                f"Hewitt's Simple RNN uses the sigmoid (Definition 2); this ElmanRNN has activation={module.activation!r}"
            )
        return "srnn", module
    raise TypeError(
        f"hewitt_init_ sets an nn.LSTM, LSTMLayer or sigmoid ElmanRNN, got {type(module).__name__}"
    )


def hewitt_init_(
    module: nn.Module,
    k: int,
    m: int,
    *,
    encoding: Encoding = "log",
    scale: float = 1.0,
    embedding: nn.Embedding | None = None,
    readout: nn.Linear | None = None,
    beta: float = 20.0,
    lam: float | None = None,
    zeta: float | None = None,
) -> HewittSpec:
    """Set Hewitt's construction into an existing recurrent module, in place.

    ``module``: an ``nn.LSTM`` or :class:`~memrnn.layers.LSTMLayer` (one layer; the LSTM
    construction) or a sigmoid :class:`~memrnn.layers.ElmanRNN` (the Simple RNN one).  Its
    hidden size must be at least the construction's (:func:`hewitt_units`); the construction
    takes the first units and the rest get zero weights (inert in an LSTM: ``c`` stays 0).

    Inputs: with ``embedding`` (an ``nn.Embedding`` with ``≥ 2k+2`` rows and
    ``embedding_dim == input_size ≥ 3 + d``), its rows become the compact token features
    (zero-padded) and the module reads them; without one, the module's ``input_size`` must be
    ``2k+2`` (the paper's one-hot inputs, ``E = I``).  ``readout`` (``nn.Linear`` to ``2k+1``
    outputs) gets ``V`` and ``b_v``.

    ``scale`` multiplies every recurrent, input and readout weight (not the embedding): the
    gates' margins become ``scale·β``.  ``scale = 1`` is the exact construction (gates
    saturated: ``σ'(±β) ≈ e^{−β} = 2·10⁻⁹``, so gradients through them vanish); ``scale ≈ 0.1``
    (margins ``±2``, ``σ'(2) = 0.10``) starts training near the construction with gradients
    that flow.  Returns the :class:`HewittSpec` that was set.
    """
    arch, rnn = _target_rnn(module)
    inputs = _input_mode(rnn.input_size, k, embedding)
    spec = hewitt_spec(k, m, arch, encoding, inputs=inputs, beta=beta, lam=lam, zeta=zeta, scale=scale)
    _check_fit(spec, rnn, embedding, readout)
    w = spec.dense()
    H, e = spec.hidden_size, spec.input_size
    with torch.no_grad():
        _set_recurrence(rnn, arch, w, H, e)
        if embedding is not None:
            embedding.weight.zero_()
            embedding.weight[: spec.vocab_size, :e] = w.features.to(embedding.weight)
        if readout is not None:
            readout.weight.zero_()
            readout.weight[:, :H] = w.readout_weight.to(readout.weight)
            readout.bias.copy_(w.readout_bias.to(readout.bias))
    return spec


def _input_mode(input_size: int, k: int, embedding: nn.Embedding | None) -> Literal["compact", "one_hot"]:
    """``"compact"`` features through ``embedding``, or the paper's one-hot tokens without one."""
    if embedding is not None:
        if embedding.embedding_dim != input_size:
            raise ValueError(
                f"embedding_dim={embedding.embedding_dim} must equal the module's input_size={input_size}"
            )
        return "compact"
    if input_size != 2 * k + 2:
        raise ValueError(
            f"without an embedding the module must read one-hot tokens: input_size must be 2k+2 = {2 * k + 2}, "
            f"got {input_size}; pass embedding= to use compact features"
        )
    return "one_hot"


def _check_fit(
    spec: HewittSpec, rnn: nn.Module, embedding: nn.Embedding | None, readout: nn.Linear | None
) -> None:
    """Raise, before anything is written, when the construction does not fit the modules."""
    k, m, H, e = spec.k, spec.m, spec.hidden_size, spec.input_size
    if rnn.hidden_size < H:
        raise ValueError(
            f"Dyck-({k},{m}) with the {spec.encoding} encoding needs {H} hidden units in a {spec.arch}; "
            f"the module has {rnn.hidden_size}"
        )
    if rnn.input_size < e:
        raise ValueError(
            f"the construction reads {e} input features; the module's input_size is {rnn.input_size}"
        )
    if getattr(rnn, "bias_ih_l0" if spec.arch == "lstm" else "bias", None) is None:
        raise ValueError("the construction needs biases; the module was built with bias=False")
    if embedding is not None and embedding.num_embeddings < spec.vocab_size:
        raise ValueError(
            f"the embedding has {embedding.num_embeddings} rows; Dyck-({k},{m}) needs {spec.vocab_size} (2k + END + BOS)"
        )
    if readout is not None and (readout.out_features != 2 * k + 1 or readout.in_features < H):
        raise ValueError(
            f"the readout must map >= {H} features to 2k+1 = {2 * k + 1} symbols, got "
            f"{readout.in_features} -> {readout.out_features}"
        )


def _set_recurrence(rnn: nn.Module, arch: Arch, w: DenseWeights, H: int, e: int) -> None:
    """Zero the module's recurrence and write the construction into its first ``H`` units of
    every gate (``e`` input features), under ``no_grad``."""
    if arch == "lstm":
        w_ih, w_hh, b_ih, b_hh = rnn.weight_ih_l0, rnn.weight_hh_l0, rnn.bias_ih_l0, rnn.bias_hh_l0
    else:
        w_ih, w_hh, b_ih, b_hh = rnn.weight_ih, rnn.weight_hh, rnn.bias, None
    for p in (w_ih, w_hh, b_ih, b_hh):
        if p is not None:
            p.zero_()
    hidden = rnn.hidden_size
    for g in range(4 if arch == "lstm" else 1):
        rows, src = slice(g * hidden, g * hidden + H), slice(g * H, (g + 1) * H)
        w_ih[rows, :e] = w.weight_ih[src].to(w_ih)
        w_hh[rows, :H] = w.weight_hh[src].to(w_hh)
        b_ih[rows] = w.bias[src].to(b_ih)


class _HewittMixin:
    """What the constructed layers share: the spec, the embedding and the readout."""

    spec: HewittSpec

    def token_features(self) -> Tensor:
        """The token features ``[2k+2, input_size]`` this layer reads (rows are token ids)."""
        p = next(self.parameters())
        out = torch.zeros(self.spec.vocab_size, self.input_size, dtype=p.dtype, device=p.device)
        out[:, : self.spec.input_size] = self.spec.features().to(out)
        return out

    def make_embedding(self, freeze: bool = False) -> nn.Embedding:
        """An ``nn.Embedding`` holding :meth:`token_features`."""
        return nn.Embedding.from_pretrained(self.token_features(), freeze=freeze)

    def make_readout(self) -> nn.Linear:
        """An ``nn.Linear(hidden_size, 2k+1)`` holding ``V``, ``b_v`` (F.1)."""
        p = next(self.parameters())
        w = self.spec.dense()
        lin = nn.Linear(self.hidden_size, self.spec.num_symbols, device=p.device, dtype=p.dtype)
        with torch.no_grad():
            lin.weight.copy_(w.readout_weight.to(lin.weight))
            lin.bias.copy_(w.readout_bias.to(lin.bias))
        return lin


def _build_spec(cls_name, input_size, k, m, arch, encoding, inputs, beta, lam, zeta):
    spec = hewitt_spec(k, m, arch, encoding, inputs=inputs, beta=beta, lam=lam, zeta=zeta)
    if input_size is None:
        input_size = spec.input_size
    if input_size < spec.input_size:
        raise ValueError(
            f"{cls_name}(k={k}, m={m}, encoding={encoding!r}) reads {spec.input_size} features; input_size={input_size}"
        )
    return spec, input_size


# The interface suite compares float32 gradients of the fast and reference paths at 1e-5; at
# β = 20 the weights reach ~150 and float32 rounding of the saturated gates alone exceeds that,
# so the registered tiny variants use β = 2 (the same construction, unsaturated).  Exactness at
# the default β is tests/constructions/test_hewitt.py's job.
@register_layer("hewitt_lstm", tiny={"k": 3, "m": 2, "beta": 2.0})
@refuses_removed_arguments
class HewittLSTM(_HewittMixin, LSTMLayer):
    """An :class:`~memrnn.layers.LSTMLayer` carrying Hewitt's Dyck-(k,m) stack (Theorems 3, 5):
    ``mk`` or ``3m⌈log2 k⌉ − m`` units, ``W_c̃ = 0``.  ``self.rnn`` is a plain ``nn.LSTM``.

    As members (:class:`memrnn.members.MemberLayer`) it takes the LSTM's member path in float64
    only (:meth:`member_path_refusal`).

    Args:
        input_size: features read (default: the construction's, ``3 + d`` compact or ``2k+2``
            one-hot); larger sizes get zero columns.
        k, m, encoding, inputs, beta, lam, zeta: the construction (module docstring).
    """

    #: as members it computes as an LSTMLayer (memrnn.members.layer.member_path_of)
    member_path_from = LSTMLayer

    def member_path_refusal(self) -> str | None:
        """Why members of this layer run the loop instead of the LSTM's member path: in float32
        and below, the construction's many zero weights leave gradients that are 0 up to
        rounding, which the member op rounds otherwise than ``nn.LSTM`` and Adam's first step
        turns into moves of a tenth of the learning rate (a member would leave its single run by
        ``~1e-3`` after one step); in float64 the two agree to ``1e-10`` over training."""
        dtype = self.rnn.weight_hh_l0.dtype
        if dtype == torch.float64:
            return None
        return (
            f"{str(dtype).removeprefix('torch.')}: the construction's near-zero gradients round "
            "otherwise than nn.LSTM's, which Adam amplifies"
        )

    def __init__(
        self,
        input_size: int | None = None,
        k: int = 2,
        m: int = 3,
        encoding: Encoding = "log",
        inputs: Literal["compact", "one_hot"] = "compact",
        beta: float = 20.0,
        lam: float | None = None,
        zeta: float | None = None,
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        spec, input_size = _build_spec(
            "HewittLSTM", input_size, k, m, "lstm", encoding, inputs, beta, lam, zeta
        )
        super().__init__(input_size, spec.hidden_size, device=device, dtype=dtype)
        self._set(spec, input_size)

    def _set(self, spec: HewittSpec, input_size: int) -> None:
        w = spec.dense()
        H, e = spec.hidden_size, spec.input_size
        with torch.no_grad():
            self.rnn.weight_ih_l0.zero_()
            self.rnn.weight_ih_l0[:, :e] = w.weight_ih.to(self.rnn.weight_ih_l0)
            self.rnn.weight_hh_l0.copy_(w.weight_hh.to(self.rnn.weight_hh_l0))
            self.rnn.bias_ih_l0.copy_(w.bias.to(self.rnn.bias_ih_l0))
            self.rnn.bias_hh_l0.zero_()
        self.spec = spec
        del H

    def reset_parameters(self) -> None:
        """Back to the construction (not torch's random initialisation)."""
        if hasattr(self, "spec"):
            self._set(self.spec, self.input_size)
        else:
            super().reset_parameters()


@register_layer("hewitt_srnn", tiny={"k": 3, "m": 2, "beta": 2.0})
@refuses_removed_arguments
class HewittSimpleRNN(_HewittMixin, ElmanRNN):
    """A sigmoid :class:`~memrnn.layers.ElmanRNN` carrying Hewitt's Dyck-(k,m) stack
    (Theorems 2, 4): ``2mk`` or ``6m⌈log2 k⌉ − 2m`` units.  Arguments as :class:`HewittLSTM`."""

    #: as members it computes as an ElmanRNN (memrnn.members.layer.member_path_of)
    member_path_from = ElmanRNN

    def __init__(
        self,
        input_size: int | None = None,
        k: int = 2,
        m: int = 3,
        encoding: Encoding = "log",
        inputs: Literal["compact", "one_hot"] = "compact",
        beta: float = 20.0,
        lam: float | None = None,
        zeta: float | None = None,
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        spec, input_size = _build_spec(
            "HewittSimpleRNN", input_size, k, m, "srnn", encoding, inputs, beta, lam, zeta
        )
        self.spec = spec
        super().__init__(input_size, spec.hidden_size, activation="sigmoid", device=device, dtype=dtype)

    def reset_parameters(self) -> None:
        """The construction (``ElmanRNN.__init__`` calls this)."""
        w = self.spec.dense()
        e = self.spec.input_size
        with torch.no_grad():
            self.weight_ih.zero_()
            self.weight_ih[:, :e] = w.weight_ih.to(self.weight_ih)
            self.weight_hh.copy_(w.weight_hh.to(self.weight_hh))
            self.bias.copy_(w.bias.to(self.bias))


allow_in_checkpoints(HewittLSTM)
allow_in_checkpoints(HewittSimpleRNN)


# -- generators ------------------------------------------------------------------------------------
def encode_dyck(
    k: int,
    m: int,
    arch: Arch = "lstm",
    encoding: Encoding = "log",
    *,
    inputs: Literal["compact", "one_hot"] = "compact",
    beta: float = 20.0,
    lam: float | None = None,
    zeta: float | None = None,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> Construction:
    """One of the four Dyck-(k,m) generators (F.1) as a generator
    :class:`~memrnn.constructions.Construction`: embedding (the token features) -> a
    :class:`HewittLSTM` or :class:`HewittSimpleRNN` -> readout ``V``, ``b_v``.

    It reads ``(*DyckKM(k, m).symbols, BOS)``; ``forward(ids)`` gives the logits
    ``[B, T, 2k+1]``, at ``t`` ``p(w_{t+1} | w_{≤t})`` (feed ``BOS`` first); ``accepts`` is
    Definition 5 (every symbol, and ``END``, has probability ``≥ ε``); ``to_torch()`` gives
    ``nn.Embedding -> nn.LSTM / nn.RNN -> nn.Linear``; ``layer.spec`` is the
    :class:`~memrnn.constructions.hewitt_spec.HewittSpec`.
    """
    if arch not in ARCHS:
        raise ValueError(f"unknown arch {arch!r}; choose 'srnn' or 'lstm'")
    cls = HewittLSTM if arch == "lstm" else HewittSimpleRNN
    layer = cls(
        k=k, m=m, encoding=encoding, inputs=inputs, beta=beta, lam=lam, zeta=zeta, device=device, dtype=dtype
    )
    spec, language = layer.spec, DyckKM(k, m)
    return Construction(
        layer,
        layer.make_readout(),
        embedding=layer.make_embedding(),
        vocabulary=(*language.symbols, BOS),
        source=language,
        units=spec.unit_names(),
        task="generator",
        min_log_prob=math.log(spec.constants.epsilon),
    )
