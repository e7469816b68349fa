"""The initialisations of the authors' code, applied to a whole model after it is built
(embedding, recurrent layer, heads): :class:`memrnn.lit.SequenceModule`'s ``init`` option.

Each is a plain function over modules.  ``torch`` leaves every module's own initialisation
(``nn.Embedding`` N(0, 1), ``nn.LSTM`` U(±1/√h), ``nn.Linear`` Kaiming-uniform, …).

``dusell`` — DuSell & Chiang (2020, 2022): ``utils/model_util.py`` ``CFLModelInterface.initialize``
(``bdusell/nondeterministic-stack-rnn``) calls ``torch_extras.init.xavier_uniform_init(model,
generator, fallback)``: every ``torch_extras.layer.Layer`` (a linear layer with its activation)
Xavier-uniform with the activation's gain (``calculate_gain``), its bias 0; every other parameter
``U(−s, s)`` with ``s = --init-scale`` (0.1).  Their 2023 code (``bdusell/stack-attention``,
``smart_init`` with ``uniform_fallback``) applies the same rule.  Which parts of their models are
``Layer``\\ s, and so which parts of memrnn's get Xavier:

* the readout (``OutputLayerWrapper``: one ``Layer``, no activation, gain 1), and here every head of
  the sequence module given as ``readouts``;
* the superposition stack's heads (Joulin & Mikolov: the actions ``Layer(h, 3, Softmax)``, gain 1;
  the pushed vector ``Layer(h, width, Sigmoid)``, gain 1) and the stratification stack's
  (Grefenstette et al.: the strengths ``Layer(h, 2, Sigmoid)``, gain 1; the value ``Layer(h, width,
  Tanh)``, gain 5/3).  memrnn's memory ``head`` is one ``nn.Linear`` whose first rows are the
  actions and the rest the value: each block is drawn as its own ``Layer`` (its own fan-out and
  gain).  The queue, the DeQue and the tape, which their code does not have, follow the same rule
  (action rows gain 1, value rows the value activation's gain; a ``value_mlp``'s layers gain
  √2 before a ReLU and the value activation's after the last);
* not the nondeterministic stacks' heads: their ``operation_layer`` (and the vector stack's
  ``pushed_vector_layer``) are plain ``torch.nn.Linear``, so weights and biases are ``U(−s, s)``,
  as the vector stack's learned bottom.

Everything else — the LSTM's weights and both biases (``nn.LSTM``), an embedding, a learned initial
state — is ``U(−s, s)``.

``flare`` — Butoi et al. (2025): ``RecognitionModelInterface.initialize``
(``rycolab/neural-network-recognizers``, ``model_interface.py``) calls rau's ``smart_init(model,
generator, fallback=uniform_fallback(init_scale))`` (``--init-scale 0.1``): the same rule (rau's
``Layer`` Xavier-uniform, bias 0; ``LayerNorm`` 1 and 0, none in an RNN), over FLaRe's model: the
recognition head and the next-symbol head are ``Layer``\\ s (Xavier, gain 1); the embedding, the
language-modelling head tied to it, the RNN's weights and the learned initial state's inputs are
``U(−s, s)``.  rau's RNNs drop torch's redundant second bias (``use_extra_bias=False``:
``bias_hh`` a constant 0): a trainable ``bias_hh`` starts at 0 here, so that ``b_ih + b_hh`` is
``U(−s, s)`` as rau's one bias (it then trains as a second copy of it; ``LSTMLayer(extra_bias=False)``
has rau's one bias; ``ElmanRNN`` has one already).

``hewitt`` — Hewitt et al. (2020): ``lm.TraditionalLanguageModel.__init__``
(``john-hewitt/dyckkm-learning``): the readout ``W ~ U(−√h, √h)`` for ``h`` hidden units (not
``1/√h``), ``b = 0``; torch's defaults elsewhere (``nn.Embedding`` N(0, 1), ``nn.LSTM``).
Not to be confused with :class:`memrnn.lit.HewittInit`, which sets their *construction*'s weights.

``haiku`` — Delétang et al. (2023): their models (``models/rnn.py``, ``stack_rnn.py``,
``tape_rnn.py``, ``google-deepmind/neural_networks_chomsky_hierarchy``) are haiku modules at haiku's
default initialisers: every ``hk.Linear``'s weight ``TruncatedNormal(stddev=1/√fan_in)`` (a standard
normal cut at ±2, times the stddev), its bias 0.  ``hk.LSTM`` is one ``Linear`` over ``[x ; h]``
(fan-in input + hidden, one bias 0, and the forget gate's constant +1: ``LSTMLayer(forget_bias=1)``);
``hk.VanillaRNN`` two (fan-ins input and hidden, both biases 0).  So here every ``nn.Linear`` (heads,
the memories' heads and write MLPs) and every ``LSTMLayer``/``ElmanRNN`` weight is drawn so, biases 0;
anything else (an embedding) keeps torch's.

Only trainable parameters are drawn (a frozen one-hot embedding is left as it is); an
``LSTMLayer``'s ``forget_bias`` is added again after the draw.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import torch
from torch import Tensor, nn

from memrnn.layers.elman import ElmanRNN
from memrnn.layers.gated import LSTMLayer
from memrnn.layers.memories import Memory

#: the schemes :func:`initialize_` knows
SCHEMES = ("torch", "dusell", "hewitt", "flare", "haiku")
#: each scheme's ``s`` when none is given (``--init-scale`` in the authors' scripts); None: no scale
DEFAULT_SCALE = {"torch": None, "dusell": 0.1, "hewitt": None, "flare": 0.1, "haiku": None}
#: ``torch.nn.init.calculate_gain``'s name of memrnn's activation names
_GAIN_NAMES = {
    "identity": "linear",
    "softmax": "linear",
    "sigmoid": "sigmoid",
    "tanh": "tanh",
    "relu": "relu",
}


def gain(activation: str) -> float:
    """Xavier's gain for a layer followed by ``activation`` (``torch.nn.init.calculate_gain``, the
    authors' ``Layer.get_gain``: softmax and identity count as linear, 1)."""
    if activation not in _GAIN_NAMES:
        raise ValueError(f"no Xavier gain for activation {activation!r}; known: {', '.join(_GAIN_NAMES)}")
    return torch.nn.init.calculate_gain(_GAIN_NAMES[activation])


def xavier_bound(fan_in: int, fan_out: int, gain: float = 1.0) -> float:
    """Xavier-uniform's bound ``a`` of ``U(−a, a)``: ``gain · √(6 / (fan_in + fan_out))`` (the
    authors' ``torch_extras.layer.xavier_uniform_``: ``√3 · gain · √(2 / (fan_in + fan_out))``)."""
    return gain * math.sqrt(6.0 / (fan_in + fan_out))


def xavier_rows_(
    linear: nn.Linear, blocks: Sequence[tuple[int, float]], *, generator: torch.Generator | None = None
) -> None:
    """``linear``'s weight drawn by blocks of rows, each as its own Xavier-uniform layer: ``blocks``
    ``[(rows, gain), …]`` covering every output row in order; the bias set to 0."""
    weight = linear.weight
    if sum(rows for rows, _ in blocks) != weight.shape[0]:
        raise ValueError(f"blocks {list(blocks)} do not cover the {weight.shape[0]} rows of {linear}")
    with torch.no_grad():
        start = 0
        for rows, g in blocks:
            a = xavier_bound(weight.shape[1], rows, g)
            weight[start : start + rows].uniform_(-a, a, generator=generator)
            start += rows
        if linear.bias is not None:
            linear.bias.zero_()


def memory_blocks(memory: Memory) -> list[tuple[nn.Linear, list[tuple[int, float]]]]:
    """The linear layers of ``memory`` that the authors' code builds as Xavier ``Layer``\\ s, each
    with its blocks of rows (:func:`xavier_rows_`); none for the nondeterministic stacks (their
    heads are plain ``nn.Linear``: the uniform fallback)."""
    if memory.kind in ("nondeterministic", "vector_nondeterministic"):
        return []
    k = len(memory.actions)
    value_gain = gain(memory.value_activation)
    if memory.value_mlp is None:
        return [(memory.head, [(k, 1.0), (memory.head.out_features - k, value_gain)])]
    layers = [(memory.head, [(k, 1.0)])]
    mlp = list(memory.value_mlp)
    for i, layer in enumerate(mlp):
        layers.append((layer, [(layer.out_features, value_gain if i == len(mlp) - 1 else gain("relu"))]))
    return layers


def _uniform_rest_(model: nn.Module, scale: float, done: set[int], generator: torch.Generator | None) -> None:
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad and id(p) not in done:
                p.uniform_(-scale, scale, generator=generator)


def _check_scale(scale: float) -> float:
    if (
        isinstance(scale, bool)
        or not isinstance(scale, (int, float))
        or not math.isfinite(scale)
        or scale <= 0
    ):
        raise ValueError(f"init_scale must be a positive number, got {scale!r}")
    return float(scale)


def dusell_init_(
    model: nn.Module,
    scale: float = 0.1,
    *,
    readouts: Iterable[nn.Linear] = (),
    generator: torch.Generator | None = None,
) -> None:
    """DuSell & Chiang's initialisation (module docstring): ``readouts`` and the memories' heads
    Xavier-uniform with their activations' gains and zero biases, every other trainable parameter
    of ``model`` ``U(−scale, scale)``."""
    _xavier_layers_uniform_rest_(model, _check_scale(scale), readouts, generator)
    _restore_forget_bias(model)


def _xavier_layers_uniform_rest_(
    model: nn.Module, scale: float, readouts: Iterable[nn.Linear], generator: torch.Generator | None
) -> None:
    """The rule of :func:`dusell_init_` and :func:`flare_init_` (``forget_bias`` not restored)."""
    done: set[int] = set()
    layers = [(r, [(r.out_features, 1.0)]) for r in readouts]
    layers += [pair for m in model.modules() if isinstance(m, Memory) for pair in memory_blocks(m)]
    for linear, blocks in layers:
        if not isinstance(linear, nn.Linear):
            raise ValueError(f"readouts must be nn.Linear layers, got {type(linear).__name__}")
        if linear.weight.requires_grad:
            xavier_rows_(linear, blocks, generator=generator)
        done.update(id(p) for p in linear.parameters())
    _uniform_rest_(model, scale, done, generator)


def flare_init_(
    model: nn.Module,
    scale: float = 0.1,
    *,
    readouts: Iterable[nn.Linear] = (),
    generator: torch.Generator | None = None,
) -> None:
    """FLaRe's initialisation (module docstring): rau's ``smart_init`` with ``uniform_fallback(scale)``,
    the rule of :func:`dusell_init_`, and every ``nn.LSTM``/``nn.GRU``/``nn.RNN``'s ``bias_hh`` 0
    (rau's RNNs have one bias)."""
    _xavier_layers_uniform_rest_(model, _check_scale(scale), readouts, generator)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.RNNBase) and m.bias:
                for name, p in m.named_parameters():
                    if name.startswith("bias_hh"):
                        p.zero_()
    _restore_forget_bias(model)


def hewitt_init_(readout: nn.Linear, *, generator: torch.Generator | None = None) -> None:
    """Hewitt et al.'s readout: ``W ~ U(−√h, √h)`` with ``h = readout.in_features``, ``b = 0``
    (``lm.TraditionalLanguageModel``; module docstring); nothing else changes."""
    if not isinstance(readout, nn.Linear):
        raise ValueError(f"hewitt_init_ sets an nn.Linear readout, got {type(readout).__name__}")
    bound = math.sqrt(readout.in_features)
    with torch.no_grad():
        readout.weight.uniform_(-bound, bound, generator=generator)
        if readout.bias is not None:
            readout.bias.zero_()


def _truncated_normal_(w: Tensor, fan_in: int, generator: torch.Generator | None) -> None:
    """haiku's ``TruncatedNormal(stddev=1/√fan_in)``: a normal of that stddev cut at ±2 stddevs."""
    std = 1.0 / math.sqrt(fan_in)
    nn.init.trunc_normal_(w, 0.0, std, -2 * std, 2 * std, generator=generator)


def haiku_init_(model: nn.Module, *, generator: torch.Generator | None = None) -> None:
    """Delétang et al.'s haiku models' initialisation (module docstring): every trainable
    ``nn.Linear`` weight and every ``LSTMLayer``/``ElmanRNN`` weight truncated normal with stddev
    ``1/√fan_in`` (an LSTM's fan-in: its input and hidden units together, haiku's one ``Linear``
    over ``[x ; h]``), every bias of those 0; an ``LSTMLayer``'s ``forget_bias`` added back."""
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.Linear):
                named = list(m.named_parameters())
                fan = {"weight": m.in_features}
            elif isinstance(m, LSTMLayer):
                named = list(m.rnn.named_parameters())
                inputs = {
                    n.removeprefix("weight_ih"): p.shape[1] for n, p in named if n.startswith("weight_ih")
                }
                fan = {
                    n: inputs[n.removeprefix("weight_ih").removeprefix("weight_hh")] + m.hidden_size
                    for n, _ in named
                    if n.startswith(("weight_ih", "weight_hh"))
                }
            elif isinstance(m, ElmanRNN):
                named = list(m.named_parameters())
                fan = {n: p.shape[1] for n, p in named if n.startswith(("weight_ih", "weight_hh"))}
            else:
                continue
            for name, p in named:
                if not p.requires_grad or not name.startswith(("weight", "bias")):
                    continue
                if name in fan:
                    _truncated_normal_(p, fan[name], generator)
                else:  # a bias
                    p.zero_()
    _restore_forget_bias(model)


def _restore_forget_bias(model: nn.Module) -> None:
    """Add each ``LSTMLayer``'s ``forget_bias`` back after a scheme re-drew its biases."""
    for m in model.modules():
        if isinstance(m, LSTMLayer) and m.forget_bias:
            m._add_forget_bias()


def check_init(init: str, scale: float | None) -> float | None:
    """The scale ``init`` uses (``scale``, else its default), or a ``ValueError`` naming an unknown
    scheme or a scale given to a scheme that has none."""
    if init not in SCHEMES:
        raise ValueError(f"init must be one of {', '.join(map(repr, SCHEMES))}, got {init!r}")
    if DEFAULT_SCALE[init] is None:
        if scale is not None:
            raise ValueError(
                f"init={init!r} has no scale (init_scale applies to 'dusell' and 'flare'), got {scale!r}"
            )
        return None
    return _check_scale(DEFAULT_SCALE[init] if scale is None else scale)
