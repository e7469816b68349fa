"""LSTM and GRU layers: torch's fused kernels as the fast path, gate-level references beside them.

Equations (Cotterell et al. 2023; Hochreiter & Schmidhuber 1997; Cho et al. 2014), with torch's gate order
and parameter names, so that ``layer.rnn`` is a plain ``nn.LSTM``/``nn.GRU`` a user can take
out and drop into any model:

LSTM::
    i = σ(W_ii x + b_ii + W_hi h + b_hi)      f = σ(W_if x + b_if + W_hf h + b_hf)
    c̃ = tanh(W_ig x + b_ig + W_hg h + b_hg)   o = σ(W_io x + b_io + W_ho h + b_ho)
    c' = f ⊙ c + i ⊙ c̃                        h' = o ⊙ tanh(c')

GRU::
    r = σ(W_ir x + b_ir + W_hr h + b_hr)      z = σ(W_iz x + b_iz + W_hz h + b_hz)
    n = tanh(W_in x + b_in + r ⊙ (W_hn h + b_hn))
    h' = (1 − z) ⊙ n + z ⊙ h
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from memrnn.core.checks import finite_float, positive_int, refuses_removed_arguments
from memrnn.core.layer import MemoryLayer
from memrnn.core.registry import register_layer
from memrnn.core.switch import forcing_reference
from memrnn.layers.stacking import (
    bidirectional_loop,
    check_dropout,
    check_flag,
    stacked_sequence,
    stepless_error,
)
from memrnn.ops.buckets import masked_outputs
from memrnn.ops.dispatch import torch_rnn_chunk
from memrnn.ops.gru import gru_cell, gru_implementation, gru_sequence


class LSTMState(NamedTuple):
    """State of ``LSTMLayer``: ``h``, ``c`` each ``[B, num_layers * num_directions, hidden_size]``.

    Batch first like every memrnn state, so the layer dimension is the second: the last layer is
    ``state.h[:, -1]`` (``state.h[-1]`` is the last batch row); a bidirectional layer's
    ``state.h[:, 2 * l + d]`` is layer ``l``'s direction ``d`` (0 forward, 1 backward), ``nn.LSTM``'s
    order, so its last layer is ``state.h[:, -2:]``.  ``nn.LSTM`` keeps ``(h_n, c_n)`` as
    ``[num_layers * num_directions, B, hidden_size]``, the same tensors transposed: :meth:`to_torch`
    and :meth:`from_torch` convert (``LSTMLayer.to_torch_state``/``from_torch_state`` also check
    the shapes)."""

    h: Tensor
    c: Tensor

    def to_torch(self) -> tuple[Tensor, Tensor]:
        """``nn.LSTM``'s ``(h, c)``, each ``[num_layers * num_directions, B, hidden_size]`` (contiguous)."""
        return self.h.transpose(0, 1).contiguous(), self.c.transpose(0, 1).contiguous()

    @classmethod
    def from_torch(cls, hx: tuple[Tensor, Tensor]) -> LSTMState:
        """From ``nn.LSTM``'s ``(h, c)``, each ``[num_layers * num_directions, B, hidden_size]``."""
        h, c = hx
        return cls(h.transpose(0, 1), c.transpose(0, 1))


class GRUState(NamedTuple):
    """State of ``GRULayer``: ``h [B, num_layers * num_directions, hidden_size]``, batch first: the
    last layer is ``state.h[:, -1]`` (bidirectional: ``state.h[:, -2:]``, ``nn.GRU``'s order, as
    :class:`LSTMState`).  ``nn.GRU``'s is ``[num_layers * num_directions, B, hidden_size]``, the same
    tensor transposed: :meth:`to_torch` and :meth:`from_torch` convert."""

    h: Tensor

    def to_torch(self) -> Tensor:
        """``nn.GRU``'s ``h`` ``[num_layers * num_directions, B, hidden_size]`` (contiguous)."""
        return self.h.transpose(0, 1).contiguous()

    @classmethod
    def from_torch(cls, h: Tensor) -> GRUState:
        """From ``nn.GRU``'s ``h`` ``[num_layers * num_directions, B, hidden_size]``."""
        return cls(h.transpose(0, 1))


def lstm_pointwise(gates: Tensor, c: Tensor) -> tuple[Tensor, Tensor, tuple[Tensor, Tensor, Tensor, Tensor]]:
    """The LSTM cell after its products (Hochreiter & Schmidhuber 1997, with the forget gate of
    Gers et al. 2000; PyTorch's gate order i, f, g, o): ``gates [B, 4H]`` (pre-activations) and
    ``c [B, H]`` -> ``(h [B, H], c [B, H], (i, f, g, o))``, the gates activated."""
    i, f, g, o = gates.chunk(4, dim=-1)
    i, f, g, o = torch.sigmoid(i), torch.sigmoid(f), torch.tanh(g), torch.sigmoid(o)
    c = f * c + i * g
    return o * torch.tanh(c), c, (i, f, g, o)


def _run_fused(rnn: nn.RNNBase, x: Tensor, hx: tuple[Tensor, ...], mask: Tensor | None):
    """Run a fused torch RNN, batch first, with right-padded ``mask``, in chunks of
    :func:`memrnn.ops.dispatch.torch_rnn_chunk` steps (one call on CUDA or for short sequences).

    ``hx`` holds batch-first states ``[B, L, H]``; returns ``(y [B, T, H], final states)``,
    with zero outputs past each row's length and each row's state after its last real token
    (rows of length 0 keep their initial state).  A bidirectional module runs in one call: its
    backward direction needs the whole sequence.
    """
    chunk = torch_rnn_chunk(x, bidirectional=rnn.bidirectional)
    if chunk is None:
        return _run_fused_chunk(rnn, x, hx, mask)
    ys = []
    masks = mask.split(chunk, 1) if mask is not None else [None] * -(-x.shape[1] // chunk)
    for x_c, m_c in zip(x.split(chunk, 1), masks, strict=True):
        y, hx = _run_fused_chunk(rnn, x_c, hx, m_c)
        ys.append(y)
    return torch.cat(ys, 1), hx


def _run_fused_chunk(rnn: nn.RNNBase, x: Tensor, hx: tuple[Tensor, ...], mask: Tensor | None):
    """One call of the fused kernel (packed when ``mask`` has padding); as :func:`_run_fused`."""
    batch, steps = x.shape[:2]
    out_size = rnn.hidden_size * (2 if rnn.bidirectional else 1)
    if steps == 0:
        return x.new_zeros(batch, 0, out_size), hx
    h_tm = tuple(h.transpose(0, 1).contiguous() for h in hx)  # torch wants [L, B, H]
    arg = h_tm if len(h_tm) > 1 else h_tm[0]
    if mask is None:
        y, out = rnn(x, arg)
        out = out if isinstance(out, tuple) else (out,)
        return y, tuple(h.transpose(0, 1) for h in out)
    lengths = mask.sum(1)
    rows = (lengths > 0).nonzero().squeeze(1)
    if rows.numel() == 0:
        return x.new_zeros(batch, steps, out_size), hx
    sub = tuple(h.index_select(1, rows) for h in h_tm)
    packed = pack_padded_sequence(
        x.index_select(0, rows), lengths.index_select(0, rows).cpu(), batch_first=True, enforce_sorted=False
    )
    y_p, out = rnn(packed, sub if len(sub) > 1 else sub[0])
    out = out if isinstance(out, tuple) else (out,)
    y_sub, _ = pad_packed_sequence(y_p, batch_first=True, total_length=steps)
    if rows.numel() == batch:
        return y_sub, tuple(h.transpose(0, 1) for h in out)
    y = x.new_zeros(batch, steps, out_size).index_copy(0, rows, y_sub)
    final = tuple(h0.index_copy(1, rows, h).transpose(0, 1) for h0, h in zip(h_tm, out, strict=True))
    return y, final


class _FusedRecurrent(MemoryLayer):
    """Shared plumbing of ``LSTMLayer`` and ``GRULayer`` (one wrapped ``nn.LSTM``/``nn.GRU``)."""

    _torch_cls: type[nn.RNNBase]
    _n_state: int

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        bias: bool = True,
        dropout: float = 0.0,
        bidirectional: bool = False,
        learned_initial_state: bool = False,
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        positive_int("input_size", input_size)
        positive_int("hidden_size", hidden_size)
        positive_int("num_layers", num_layers)
        self.input_size, self.hidden_size, self.num_layers = input_size, hidden_size, num_layers
        self.dropout = check_dropout(dropout, num_layers)
        self.bidirectional = check_flag("bidirectional", bidirectional)
        self.num_directions = 2 if self.bidirectional else 1
        self.output_size = hidden_size * self.num_directions
        self.rnn = self._torch_cls(
            input_size,
            hidden_size,
            num_layers,
            bias=bias,
            batch_first=True,
            dropout=self.dropout,
            bidirectional=self.bidirectional,
            device=device,
            dtype=dtype,
        )
        self.learned_initial_state = check_flag("learned_initial_state", learned_initial_state)
        #: ``h_0 = tanh(h0_input)`` per layer and direction ``[num_layers * num_directions, hidden_size]``
        #: (``learned_initial_state``), else None
        self.h0_input = (
            nn.Parameter(
                torch.zeros(num_layers * self.num_directions, hidden_size, device=device, dtype=dtype)
            )
            if self.learned_initial_state
            else None
        )

    def reset_parameters(self) -> None:
        """torch's own initialisation of the wrapped module; ``h0_input`` (``learned_initial_state``)
        back to 0 (rau's constructor: ``h_0 = tanh(0) = 0``, the zero state's)."""
        self.rnn.reset_parameters()
        if self.h0_input is not None:
            with torch.no_grad():
                self.h0_input.zero_()

    def extra_repr(self) -> str:
        return "learned_initial_state=True" if self.learned_initial_state else ""

    def _initial_h(self, batch_size: int, device, dtype) -> Tensor:
        """``h_0 [B, num_layers * num_directions, hidden_size]``: zeros, or ``tanh(h0_input)`` for every
        row (``learned_initial_state``; a copy per row, so fused kernels get a contiguous state)."""
        if self.h0_input is None:
            return self._zeros(batch_size, device, dtype)
        fk = self._default_factory(device, dtype)
        h0 = torch.tanh(self.h0_input).to(**fk)
        return h0.expand(batch_size, *h0.shape).contiguous()

    def output_at(self, state) -> Tensor:
        """The output ``[B, hidden_size]`` the layer gives at ``state``: its top layer's ``h`` (what
        ``step`` returned on reaching ``state``).  At ``initial_state(B)``: the output before any
        input, ``h_0``'s top layer (0, or ``tanh(h0_input)`` with ``learned_initial_state``), what
        rau's ``include_first=True`` puts first (DuSell & Chiang's and FLaRe's models read their
        first prediction there; :class:`memrnn.lit.SequenceModule`'s ``initial_output``).  A
        bidirectional layer has none (its backward direction's output depends on later inputs)."""
        if self.bidirectional:
            raise stepless_error(self, "give an output at a state")
        return state[0][:, -1]

    def native_autocast(self, x: Tensor) -> bool:
        """On CUDA the fused path runs under autocast as ``nn.LSTM``/``nn.GRU`` do (cuDNN in the
        autocast dtype); the final state is cast back to the layer's dtype.  Not inside
        :func:`memrnn.reference_paths`, whose loop computes in the layer's dtype."""
        return x.is_cuda and not forcing_reference()

    def _weights(
        self, layer: int, direction: int | None = None
    ) -> tuple[Tensor, Tensor, Tensor | None, Tensor | None]:
        """``(weight_ih, weight_hh, bias_ih, bias_hh)`` of ``layer``'s ``direction`` (0 forward, 1
        backward: torch's ``_reverse`` parameters).  ``direction=None`` asks for the one direction
        of a unidirectional layer's step; a bidirectional layer has none and raises."""
        if direction is None:
            if self.bidirectional:
                raise stepless_error(self, "give one step's weights")
            direction = 0
        r, sfx = self.rnn, f"_l{layer}" + ("_reverse" if direction else "")
        if r.bias:
            return (
                getattr(r, f"weight_ih{sfx}"),
                getattr(r, f"weight_hh{sfx}"),
                getattr(r, f"bias_ih{sfx}"),
                getattr(r, f"bias_hh{sfx}"),
            )
        return getattr(r, f"weight_ih{sfx}"), getattr(r, f"weight_hh{sfx}"), None, None

    def _zeros(self, batch_size: int, device, dtype) -> Tensor:
        fk = self._default_factory(device, dtype)
        return torch.zeros(batch_size, self.num_layers * self.num_directions, self.hidden_size, **fk)

    def _cell(
        self, layer: int, direction: int, x_t: Tensor, leaves: tuple[Tensor, ...]
    ) -> tuple[Tensor, tuple[Tensor, ...], dict[str, Tensor]]:
        """One step of one layer and direction: ``x_t [B, n]``, the state fields' slices ``[B, H]``
        -> ``(h_t, new slices, gates)``."""
        raise NotImplementedError

    def trace_step(self, x_t: Tensor, state):
        """The gate-level reference step through every layer (dropout between layers in training
        mode, a fresh mask per step), with each layer's gates ``[B, num_layers, hidden_size]``."""
        if self.bidirectional:
            raise stepless_error(self)
        news, diags = [], []
        inp = x_t
        for layer, leaves in enumerate(zip(*(t.unbind(1) for t in state), strict=True)):
            if layer and self.dropout and self.training:
                inp = F.dropout(inp, self.dropout, True)
            inp, new, diag = self._cell(layer, 0, inp, leaves)
            news.append(new)
            diags.append(diag)
        new_state = type(state)(*(torch.stack(ts, 1) for ts in zip(*news, strict=True)))
        return inp, new_state, {k: torch.stack([d[k] for d in diags], 1) for k in diags[0]}

    def step(self, x_t: Tensor, state):
        """Gate-level reference step: ``x_t [B, input_size]`` -> top ``h_t [B, hidden_size]``.

        In training mode with ``dropout``, each step draws its own mask between layers (same
        distribution as the fused path's, other numbers).  A bidirectional layer raises: its
        backward direction cannot run step by step."""
        y, new, _ = self.trace_step(x_t, state)
        return y, new

    def _loop(self, x: Tensor, state, mask: Tensor | None, *, with_trace: bool, step=None):
        """The reference loop: over ``step`` (``MemoryLayer``'s) when unidirectional, else
        :func:`bidirectional_loop` over the layers' cells (``trace`` and :func:`memrnn.reference_paths`
        run it)."""
        if not self.bidirectional:
            return super()._loop(x, state, mask, with_trace=with_trace, step=step)
        return bidirectional_loop(self, x, state, mask, self._cell, with_trace=with_trace)

    def to_torch_state(self, state) -> Any:
        """``state`` in the wrapped ``nn.LSTM``'s layout ``(h_n, c_n)`` (``nn.GRU``: ``h_n``), each
        ``[num_layers * num_directions, B, hidden_size]`` (contiguous), what ``self.rnn`` takes
        and returns; a ``ValueError`` names a field of another shape."""
        fields = tuple(state)
        for name, t in zip(self.state_template().fields, fields, strict=True):
            if not isinstance(t, Tensor) or t.dim() != 3 or tuple(t.shape[1:]) != self._per_row():
                got = list(t.shape) if isinstance(t, Tensor) else type(t).__name__
                raise ValueError(
                    f"{type(self).__name__}.to_torch_state: field {name!r} has shape {got}, expected "
                    f"[batch, {', '.join(map(str, self._per_row()))}] (memrnn's batch-first layout)"
                )
        out = tuple(t.transpose(0, 1).contiguous() for t in fields)
        return out if len(out) > 1 else out[0]

    def from_torch_state(self, hx: Any):
        """The batch-first state of ``nn.LSTM``'s ``(h_n, c_n)`` (``nn.GRU``: ``h_n``), each
        ``[num_layers * num_directions, B, hidden_size]``; a ``ValueError`` names another shape."""
        fields = tuple(hx) if isinstance(hx, (tuple, list)) else (hx,)
        names = self.state_template().fields
        if len(fields) != len(names):
            raise ValueError(
                f"{type(self).__name__}.from_torch_state takes {len(names)} tensor(s) "
                f"({', '.join(names)}), got {len(fields)}"
            )
        lead, hidden = self._per_row()
        for name, t in zip(names, fields, strict=True):
            if not isinstance(t, Tensor) or t.dim() != 3 or t.shape[0] != lead or t.shape[2] != hidden:
                got = list(t.shape) if isinstance(t, Tensor) else type(t).__name__
                raise ValueError(
                    f"{type(self).__name__}.from_torch_state: {name} has shape {got}, expected torch's "
                    f"[num_layers * num_directions, batch, hidden_size] = [{lead}, batch, {hidden}]"
                )
        return self.state_template().cls(*(t.transpose(0, 1) for t in fields))

    def _per_row(self) -> tuple[int, int]:
        return self.num_layers * self.num_directions, self.hidden_size

    def forward(self, x: Tensor, state=None, mask: Tensor | None = None):
        """``x [B, T, input_size]`` -> ``(outputs [B, T, output_size], final state)``: the top layer's
        ``h_t`` (bidirectional: both directions' ``[forward; backward]``, ``nn.LSTM``'s order).

        This runs torch's fused kernel (packed when ``mask`` has padding, so a backward direction
        starts at each row's own last real token); inside :func:`memrnn.reference_paths`, the
        gate-level reference loop.
        """
        state, mask = self.check_inputs(x, state, mask)
        y, final = _run_fused(self.rnn, x, tuple(state), mask)
        dtype = state[0].dtype  # the layer's: under CUDA autocast cuDNN returns the autocast dtype
        return y, type(state)(*(h.to(dtype) for h in final))

    def outputs(self, x: Tensor, state=None, mask: Tensor | None = None) -> Tensor:
        """``forward(x, state, mask)[0]`` without packing: with right padding the outputs at each
        row's real positions do not depend on the padded steps after them, so one unpacked call
        of the fused kernel over the whole batch gives them (zeroed past each row's end); only
        the final state, which this skips, needs the packed sequences.  Gradients are exact:
        nothing reads the padded steps.  (In training mode with ``dropout``, torch draws the masks
        over the padded batch here and over the packed one in ``forward``: other draws, the same
        distribution.)  A bidirectional layer's backward direction does read the padded steps: it
        runs ``forward``."""
        if self.bidirectional:
            return super().outputs(x, state, mask)
        state, mask = self.check_inputs(x, state, mask)
        y, _ = _run_fused(self.rnn, x, tuple(state), None)
        return masked_outputs(y, mask)[0]


@register_layer("lstm", tiny={"input_size": 3, "hidden_size": 5})
@refuses_removed_arguments
class LSTMLayer(_FusedRecurrent):
    """LSTM layer on ``nn.LSTM`` (``self.rnn``) with a gate-level reference ``step``.

    Args:
        input_size, hidden_size, num_layers, bias: as ``nn.LSTM``.
        forget_bias: added to the forget gate's initial bias (Jozefowicz et al. 2015 use 1.0);
            0 keeps torch's initialisation.
        dropout: as ``nn.LSTM``'s: on the outputs of each layer but the last, in training mode
            only (0 by default; > 0 needs ``num_layers > 1``).
        bidirectional: as ``nn.LSTM``'s: a backward direction per layer, ``output_size = 2 *
            hidden_size``; ``forward``/``outputs`` only (``step`` raises).
        learned_initial_state: the initial state's ``h_0 = tanh(h0_input)``, a learned parameter
            ``h0_input [num_layers * num_directions, hidden_size]`` (0 at first, so the layer
            starts from the zero state), and ``c_0 = 0``: rau's ``LSTM(learned_hidden_state=True)``,
            which FLaRe's LSTM uses (Butoi et al. 2025; ``h_0`` only, never ``c_0``).  Used by
            ``initial_state`` and so by ``forward``'s default state; a given state replaces it.
        extra_bias: ``False``: one bias per gate, as rau's ``LSTM(use_extra_bias=False)`` (FLaRe's
            LSTM): ``nn.LSTM``'s redundant second bias ``bias_hh_l*`` is a constant zero buffer,
            not a parameter (``4 · hidden_size`` parameters fewer per layer and direction, and the
            gates' bias trains as one parameter, not as two copies that Adam moves together).
            ``True`` (default): ``nn.LSTM``'s two biases (DuSell & Chiang's and Hewitt et al.'s
            LSTMs).

    ``trace`` reports ``i``, ``f``, ``o``, ``c_tilde``, ``c``, ``h``, each
    ``[B, T, num_layers * num_directions, hidden_size]``.

    Coming from ``nn.LSTM``: always batch first, and ``y, state = layer(x)`` gives ``state`` as a
    NamedTuple ``LSTMState(h, c)`` of tensors ``[B, num_layers * num_directions, hidden_size]``: the
    batch leads, so the last layer is ``state.h[:, -1]`` (bidirectional: its two directions
    ``state.h[:, -2:]``) and ``state.h[-1]`` is the last batch row.  ``nn.LSTM``'s ``(h_n, c_n)``
    are the same tensors transposed: ``layer.to_torch_state(state)`` gives them (what ``layer.rnn``,
    a plain ``nn.LSTM``, takes), ``layer.from_torch_state(...)`` converts back; a state in
    torch's layout passed to the layer is refused with that hint.  ``dropout`` and
    ``bidirectional`` are ``nn.LSTM``'s, except that dropout > 0 with one layer is an error
    (torch warns).  A bidirectional layer cannot ``step`` (no generation, no StackRNN controller)
    and is not in the registry's interface suite; ``tests/layers/test_torch_habits.py`` checks it
    against ``nn.LSTM`` with ``pack_padded_sequence``.

    ``forward`` runs torch's kernel (``nn.LSTM``: ATen on CPU, cuDNN on CUDA); inside
    :func:`memrnn.reference_paths`, the gate-level reference loop (second derivatives).
    """

    _torch_cls = nn.LSTM

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        bias: bool = True,
        forget_bias: float = 0.0,
        dropout: float = 0.0,
        bidirectional: bool = False,
        learned_initial_state: bool = False,
        extra_bias: bool = True,
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        forget_bias = finite_float("forget_bias", forget_bias)
        if forget_bias and not bias:
            raise ValueError(f"forget_bias={forget_bias} needs bias=True")
        if not check_flag("extra_bias", extra_bias) and not bias:
            raise ValueError("extra_bias=False drops the second of the two biases, so it needs bias=True")
        self.forget_bias = forget_bias
        super().__init__(
            input_size,
            hidden_size,
            num_layers,
            bias,
            dropout,
            bidirectional,
            learned_initial_state,
            device=device,
            dtype=dtype,
        )
        self.extra_bias = extra_bias
        if not extra_bias:
            self._drop_extra_bias()
        self._add_forget_bias()

    def _drop_extra_bias(self) -> None:
        """Each ``bias_hh_l*`` of ``self.rnn`` becomes a constant zero buffer (not saved: it is 0),
        as rau's ``remove_extra_bias_parameters``; the wrapped ``nn.LSTM`` runs on it unchanged."""
        rnn = self.rnn
        for name in [n for n in rnn._flat_weights_names if n.startswith("bias_hh")]:
            zero = torch.zeros_like(getattr(rnn, name).detach())
            delattr(rnn, name)
            rnn.register_buffer(name, zero, persistent=False)
        rnn._init_flat_weights()  # torch's list of the weights it runs on, now with the buffers

    def _add_forget_bias(self) -> None:
        if self.forget_bias:
            h = self.hidden_size
            with torch.no_grad():
                for layer in range(self.num_layers):
                    for direction in range(self.num_directions):
                        self._weights(layer, direction)[2][h : 2 * h] += self.forget_bias

    def reset_parameters(self) -> None:
        """torch's own initialisation, plus ``forget_bias`` on the forget gate's bias."""
        super().reset_parameters()
        self._add_forget_bias()

    def extra_repr(self) -> str:
        parts = [super().extra_repr(), f"forget_bias={self.forget_bias}" if self.forget_bias else ""]
        return ", ".join(p for p in (*parts, "" if self.extra_bias else "extra_bias=False") if p)

    def initial_state(self, batch_size: int, *, device=None, dtype=None) -> LSTMState:
        """``h_0 = c_0 = 0``, each ``[B, num_layers * num_directions, hidden_size]``; with
        ``learned_initial_state``, ``h_0 = tanh(h0_input)`` for every row and ``c_0 = 0`` (rau's
        ``LSTM(learned_hidden_state=True)``)."""
        return LSTMState(self._initial_h(batch_size, device, dtype), self._zeros(batch_size, device, dtype))

    def _cell(self, layer: int, direction: int, x_t: Tensor, leaves: tuple[Tensor, ...]):
        h, c = leaves
        w_ih, w_hh, b_ih, b_hh = self._weights(layer, direction)
        h, c, (i, f, g, o) = lstm_pointwise(F.linear(x_t, w_ih, b_ih) + F.linear(h, w_hh, b_hh), c)
        return h, (h, c), {"i": i, "f": f, "o": o, "c_tilde": g, "c": c, "h": h}


@register_layer("gru", tiny={"input_size": 3, "hidden_size": 5})
@refuses_removed_arguments
class GRULayer(_FusedRecurrent):
    """GRU layer on ``nn.GRU`` (``self.rnn``) with a gate-level reference ``step``.

    Args:
        input_size, hidden_size, num_layers, bias: as ``nn.GRU``.
        dropout: as ``nn.GRU``'s: on the outputs of each layer but the last, in training mode
            only (0 by default; > 0 needs ``num_layers > 1``).
        bidirectional: as ``nn.GRU``'s: a backward direction per layer, ``output_size = 2 *
            hidden_size``; ``forward``/``outputs`` only (``step`` raises).
        learned_initial_state: ``h_0 = tanh(h0_input)``, a learned parameter ``h0_input
            [num_layers * num_directions, hidden_size]`` (0 at first), as :class:`LSTMLayer`'s (rau
            has no GRU; its LSTM's and tanh RNN's rule).

    ``trace`` reports ``r``, ``z``, ``n``, ``h``, each ``[B, T, num_layers * num_directions,
    hidden_size]``.

    Coming from ``nn.GRU``: always batch first, and ``y, state = layer(x)`` gives ``state`` as a
    NamedTuple ``GRUState(h)`` of tensors ``[B, num_layers * num_directions, hidden_size]``: the
    batch leads, so the last layer is ``state.h[:, -1]`` (bidirectional: its two directions
    ``state.h[:, -2:]``) and ``state.h[-1]`` is the last batch row.  ``nn.GRU``'s ``h_n``
    are the same tensors transposed: ``layer.to_torch_state(state)`` gives them (what ``layer.rnn``,
    a plain ``nn.GRU``, takes), ``layer.from_torch_state(...)`` converts back; a state in
    torch's layout passed to the layer is refused with that hint.  ``dropout`` and
    ``bidirectional`` are ``nn.GRU``'s, except that dropout > 0 with one layer is an error
    (torch warns).  A bidirectional layer cannot ``step`` (no generation, no StackRNN controller)
    and is not in the registry's interface suite; ``tests/layers/test_torch_habits.py`` checks it
    against ``nn.GRU`` with ``pack_padded_sequence``.

    ``forward`` runs what :func:`memrnn.ops.gru.gru_implementation` picks: torch's kernel by
    default (``nn.GRU``: ATen on CPU, cuDNN on CUDA; results trained with it reproduce bit for
    bit); inside ``memrnn.ops.dispatch.implementation("bptt")`` on CPU,
    :class:`memrnn.ops.gru.cpu.GRUSequence` per layer and direction (hand-written backpropagation
    through time, first order: 1.4–3.1x faster forward+backward at hidden 16–64,
    ``benchmarks/results/cpu-2core.md``); inside :func:`memrnn.reference_paths`, the gate-level
    reference loop.
    """

    _torch_cls = nn.GRU

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        bias: bool = True,
        dropout: float = 0.0,
        bidirectional: bool = False,
        learned_initial_state: bool = False,
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__(
            input_size,
            hidden_size,
            num_layers,
            bias,
            dropout,
            bidirectional,
            learned_initial_state,
            device=device,
            dtype=dtype,
        )

    def initial_state(self, batch_size: int, *, device=None, dtype=None) -> GRUState:
        """``h_0 = 0`` ``[B, num_layers * num_directions, hidden_size]``; with
        ``learned_initial_state``, ``h_0 = tanh(h0_input)`` for every row."""
        return GRUState(self._initial_h(batch_size, device, dtype))

    def _cell(self, layer: int, direction: int, x_t: Tensor, leaves: tuple[Tensor, ...]):
        (h,) = leaves
        w_ih, w_hh, b_ih, b_hh = self._weights(layer, direction)
        h, (r, z, n) = gru_cell(x_t, h, w_ih, w_hh, b_ih, b_hh)
        return h, (h,), {"r": r, "z": z, "n": n, "h": h}

    def outputs(self, x: Tensor, state=None, mask: Tensor | None = None) -> Tensor:
        """As :meth:`LSTMLayer.outputs`; on another implementation than torch's kernel,
        ``forward``'s own path."""
        if gru_implementation(x) != "cpu":
            return MemoryLayer.outputs(self, x, state, mask)
        return super().outputs(x, state, mask)

    def forward(self, x: Tensor, state=None, mask: Tensor | None = None):
        """``x [B, T, input_size]`` -> ``(outputs [B, T, output_size], final state)``, as
        :meth:`LSTMLayer.forward`.

        :func:`memrnn.ops.gru.gru_implementation` picks: ``"cpu"``, torch's fused kernel (the
        default); ``"bptt"`` or ``"reference"`` (``memrnn.ops.dispatch.implementation(...)``),
        :func:`memrnn.ops.gru.gru_sequence` per layer and direction on ``self.rnn``'s parameters
        (:func:`stacked_sequence`).  Inside :func:`memrnn.reference_paths`, the gate-level
        reference loop over ``step``.  Same numbers, to rounding.
        """
        impl = gru_implementation(x)
        if impl == "cpu":
            return super().forward(x, state, mask)
        state, mask = self.check_inputs(x, state, mask)

        def run(layer: int, direction: int, inp: Tensor, h0: Tensor) -> Tensor:
            w_ih, w_hh, b_ih, b_hh = self._weights(layer, direction)
            return gru_sequence(inp, w_ih, b_ih, w_hh, b_hh, h0, impl=impl)

        y, final = stacked_sequence(
            x,
            state.h,
            None if mask is None else mask.sum(1),
            run,
            num_layers=self.num_layers,
            num_directions=self.num_directions,
            dropout=self.dropout,
            training=self.training,
        )
        y, _ = masked_outputs(y, mask)
        return y, GRUState(final)


register_layer("lstm_2layer", tiny={"input_size": 3, "hidden_size": 4, "num_layers": 2}, cls=LSTMLayer)
register_layer("gru_2layer", tiny={"input_size": 3, "hidden_size": 4, "num_layers": 2}, cls=GRULayer)
