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

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from memrnn.core.checks import finite_float, positive_int
from memrnn.core.layer import MemoryLayer
from memrnn.core.registry import register_layer
from memrnn.ops.buckets import final_by_length, masked_outputs
from memrnn.ops.gru.cpu import GRUSequence


class LSTMState(NamedTuple):
    """State of ``LSTMLayer``: ``h``, ``c`` each ``[B, num_layers, hidden_size]``.

    Batch first like every memrnn state; ``nn.LSTM`` keeps ``(h, c)`` as
    ``[num_layers, B, hidden_size]``: :meth:`to_torch` and :meth:`from_torch` convert."""

    h: Tensor
    c: Tensor

    def to_torch(self) -> tuple[Tensor, Tensor]:
        """``nn.LSTM``'s ``(h, c)``, each ``[num_layers, B, hidden_size]`` (contiguous)."""
        return self.h.transpose(0, 1).contiguous(), self.c.transpose(0, 1).contiguous()

    @classmethod
    def from_torch(cls, hx: tuple[Tensor, Tensor]) -> LSTMState:
        """From ``nn.LSTM``'s ``(h, c)``, each ``[num_layers, B, hidden_size]``."""
        h, c = hx
        return cls(h.transpose(0, 1), c.transpose(0, 1))


class GRUState(NamedTuple):
    """State of ``GRULayer``: ``h [B, num_layers, hidden_size]`` (``nn.GRU``'s is
    ``[num_layers, B, hidden_size]``: :meth:`to_torch` and :meth:`from_torch` convert)."""

    h: Tensor

    def to_torch(self) -> Tensor:
        """``nn.GRU``'s ``h`` ``[num_layers, B, hidden_size]`` (contiguous)."""
        return self.h.transpose(0, 1).contiguous()

    @classmethod
    def from_torch(cls, h: Tensor) -> GRUState:
        """From ``nn.GRU``'s ``h`` ``[num_layers, B, hidden_size]``."""
        return cls(h.transpose(0, 1))


# torch's fused CPU kernels slow down per step once a sequence's workspace outgrows the caches
# (nn.LSTM, S 64, batch 64 on the 2-core CPU: 2.9x the time for 2x the steps from T 512 to 1024);
# running them on chunks of this many steps, the state carried over, keeps time linear in T
# (benchmarks/results/cpu-2core.md) and changes no number (tests/layers/test_gated.py).  CPU only:
# on CUDA one cuDNN call per sequence is faster (chunks of 256 ran T 1024 at 0.43-0.52x plain
# cuDNN on an H100).
FUSED_CHUNK = 256


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
    :data:`FUSED_CHUNK` steps.

    ``hx`` holds batch-first states ``[B, L, H]``; returns ``(y [B, T, H], final states)``,
    with zero outputs past each row's length and each row's state after its last real token
    (rows of length 0 keep their initial state).
    """
    if x.shape[1] <= FUSED_CHUNK or x.device.type != "cpu":
        return _run_fused_chunk(rnn, x, hx, mask)
    ys = []
    masks = mask.split(FUSED_CHUNK, 1) if mask is not None else [None] * -(-x.shape[1] // FUSED_CHUNK)
    for x_c, m_c in zip(x.split(FUSED_CHUNK, 1), masks, strict=True):
        y, hx = _run_fused_chunk(rnn, x_c, hx, m_c)
        ys.append(y)
    return torch.cat(ys, 1), hx


def _run_fused_chunk(rnn: nn.RNNBase, x: Tensor, hx: tuple[Tensor, ...], mask: Tensor | None):
    """One call of the fused kernel (packed when ``mask`` has padding); as :func:`_run_fused`."""
    batch, steps = x.shape[:2]
    if steps == 0:
        return x.new_zeros(batch, 0, rnn.hidden_size), hx
    h_tm = tuple(h.transpose(0, 1).contiguous() for h in hx)  # torch wants [L, B, H]
    arg = h_tm if len(h_tm) > 1 else h_tm[0]
    if mask is None:
        y, out = rnn(x, arg)
        out = out if isinstance(out, tuple) else (out,)
        return y, tuple(h.transpose(0, 1) for h in out)
    lengths = mask.sum(1)
    rows = (lengths > 0).nonzero().squeeze(1)
    if rows.numel() == 0:
        return x.new_zeros(batch, steps, rnn.hidden_size), hx
    sub = tuple(h.index_select(1, rows) for h in h_tm)
    packed = pack_padded_sequence(
        x.index_select(0, rows), lengths.index_select(0, rows).cpu(), batch_first=True, enforce_sorted=False
    )
    y_p, out = rnn(packed, sub if len(sub) > 1 else sub[0])
    out = out if isinstance(out, tuple) else (out,)
    y_sub, _ = pad_packed_sequence(y_p, batch_first=True, total_length=steps)
    if rows.numel() == batch:
        return y_sub, tuple(h.transpose(0, 1) for h in out)
    y = x.new_zeros(batch, steps, rnn.hidden_size).index_copy(0, rows, y_sub)
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
        fused: bool = True,
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        positive_int("input_size", input_size)
        positive_int("hidden_size", hidden_size)
        positive_int("num_layers", num_layers)
        self.input_size, self.hidden_size, self.num_layers = input_size, hidden_size, num_layers
        self.output_size = hidden_size
        self.fused = bool(fused)
        self.rnn = self._torch_cls(
            input_size, hidden_size, num_layers, bias=bias, batch_first=True, device=device, dtype=dtype
        )

    def reset_parameters(self) -> None:
        """torch's own initialisation of the wrapped module."""
        self.rnn.reset_parameters()

    def extra_repr(self) -> str:
        return f"fused={self.fused}"

    def native_autocast(self, x: Tensor) -> bool:
        """On CUDA the fused path runs under autocast as ``nn.LSTM``/``nn.GRU`` do (cuDNN in the
        autocast dtype); the final state is cast back to the layer's dtype."""
        return self.fused and x.is_cuda

    def _weights(self, layer: int) -> tuple[Tensor, Tensor, Tensor | None, Tensor | None]:
        r = self.rnn
        if r.bias:
            return (
                getattr(r, f"weight_ih_l{layer}"),
                getattr(r, f"weight_hh_l{layer}"),
                getattr(r, f"bias_ih_l{layer}"),
                getattr(r, f"bias_hh_l{layer}"),
            )
        return getattr(r, f"weight_ih_l{layer}"), getattr(r, f"weight_hh_l{layer}"), None, None

    def _zeros(self, batch_size: int, device, dtype) -> Tensor:
        fk = self._default_factory(device, dtype)
        return torch.zeros(batch_size, self.num_layers, self.hidden_size, **fk)

    def forward(self, x: Tensor, state=None, mask: Tensor | None = None):
        """``x [B, T, input_size]`` -> ``(h_t of the top layer [B, T, hidden_size], final state)``.

        With ``fused=True`` (default) this runs torch's fused kernel (packed when ``mask`` has
        padding); with ``fused=False``, the gate-level reference loop over ``step``.
        """
        if not self.fused:
            return super().forward(x, state, mask)
        state, mask = self.check_inputs(x, state, mask)
        y, final = _run_fused(self.rnn, x, tuple(state), mask)
        dtype = state[0].dtype  # the layer's: under CUDA autocast cuDNN returns the autocast dtype
        return y, type(state)(*(h.to(dtype) for h in final))

    def outputs(self, x: Tensor, state=None, mask: Tensor | None = None) -> Tensor:
        """``forward(x, state, mask)[0]`` without packing: with right padding the outputs at each
        row's real positions do not depend on the padded steps after them, so one unpacked call
        of the fused kernel over the whole batch gives them (zeroed past each row's end); only
        the final state, which this skips, needs the packed sequences.  Gradients are exact:
        nothing reads the padded steps."""
        if not self.fused:
            return super().outputs(x, state, mask)
        state, mask = self.check_inputs(x, state, mask)
        y, _ = _run_fused(self.rnn, x, tuple(state), None)
        return masked_outputs(y, mask)[0]


@register_layer("lstm", tiny={"input_size": 3, "hidden_size": 5})
class LSTMLayer(_FusedRecurrent):
    """LSTM layer on ``nn.LSTM`` (``self.rnn``) with a gate-level reference ``step``.

    Args:
        input_size, hidden_size, num_layers, bias: as ``nn.LSTM``.
        fused: use the fused kernel in ``forward`` (the reference loop otherwise).
        forget_bias: added to the forget gate's initial bias (Jozefowicz et al. 2015 use 1.0);
            0 keeps torch's initialisation.

    ``trace`` reports ``i``, ``f``, ``o``, ``c_tilde``, ``c``, ``h``, each
    ``[B, T, num_layers, hidden_size]``.
    """

    _torch_cls = nn.LSTM

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        bias: bool = True,
        fused: bool = True,
        forget_bias: float = 0.0,
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        forget_bias = finite_float("forget_bias", forget_bias)
        if forget_bias and not bias:
            raise ValueError(f"forget_bias={forget_bias} needs bias=True")
        self.forget_bias = forget_bias
        super().__init__(input_size, hidden_size, num_layers, bias, fused, device=device, dtype=dtype)
        self._add_forget_bias()

    def _add_forget_bias(self) -> None:
        if self.forget_bias:
            h = self.hidden_size
            with torch.no_grad():
                for layer in range(self.num_layers):
                    getattr(self.rnn, f"bias_ih_l{layer}")[h : 2 * h] += self.forget_bias

    def reset_parameters(self) -> None:
        """torch's own initialisation, plus ``forget_bias`` on the forget gate's bias."""
        super().reset_parameters()
        self._add_forget_bias()

    def extra_repr(self) -> str:
        return super().extra_repr() + (f", forget_bias={self.forget_bias}" if self.forget_bias else "")

    def initial_state(self, batch_size: int, *, device=None, dtype=None) -> LSTMState:
        """``h_0 = c_0 = 0``, each ``[B, num_layers, hidden_size]``."""
        return LSTMState(self._zeros(batch_size, device, dtype), self._zeros(batch_size, device, dtype))

    def trace_step(self, x_t: Tensor, state: LSTMState) -> tuple[Tensor, LSTMState, dict[str, Tensor]]:
        hs, cs, diag = [], [], {k: [] for k in ("i", "f", "o", "c_tilde")}
        inp = x_t
        for layer, (h, c) in enumerate(zip(state.h.unbind(1), state.c.unbind(1), strict=True)):
            w_ih, w_hh, b_ih, b_hh = self._weights(layer)
            h, c, (i, f, g, o) = lstm_pointwise(F.linear(inp, w_ih, b_ih) + F.linear(h, w_hh, b_hh), c)
            hs.append(h)
            cs.append(c)
            for k, v in (("i", i), ("f", f), ("o", o), ("c_tilde", g)):
                diag[k].append(v)
            inp = h
        new = LSTMState(torch.stack(hs, 1), torch.stack(cs, 1))
        out = {k: torch.stack(v, 1) for k, v in diag.items()}
        out.update(c=new.c, h=new.h)
        return inp, new, out

    def step(self, x_t: Tensor, state: LSTMState) -> tuple[Tensor, LSTMState]:
        """Gate-level reference step: ``x_t [B, input_size]`` -> top ``h_t [B, hidden_size]``."""
        y, new, _ = self.trace_step(x_t, state)
        return y, new


@register_layer("gru", tiny={"input_size": 3, "hidden_size": 5})
class GRULayer(_FusedRecurrent):
    """GRU layer on ``nn.GRU`` (``self.rnn``) with a gate-level reference ``step``.

    Args:
        input_size, hidden_size, num_layers, bias: as ``nn.GRU``.
        fused: use a fused path in ``forward`` (the reference loop otherwise).
        bptt: on CPU, run :class:`memrnn.ops.gru.cpu.GRUSequence` (hand-written backpropagation
            through time, first order) instead of torch's CPU GRU kernel: forward+backward
            1.9–3.1x faster at hidden 16–64 and batch 1, 1.4–2.3x at batch 64, about equal at
            hidden 256 (``benchmarks/results/cpu-2core.md``).  Off by default so that results
            trained with torch's kernel reproduce bit for bit; CUDA always uses cuDNN.

    ``trace`` reports ``r``, ``z``, ``n``, ``h``, each ``[B, T, num_layers, hidden_size]``.
    """

    _torch_cls = nn.GRU

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        bias: bool = True,
        fused: bool = True,
        bptt: bool = False,
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        self.bptt = bool(bptt)
        super().__init__(input_size, hidden_size, num_layers, bias, fused, device=device, dtype=dtype)

    def extra_repr(self) -> str:
        return super().extra_repr() + (", bptt=True" if self.bptt else "")

    def initial_state(self, batch_size: int, *, device=None, dtype=None) -> GRUState:
        """``h_0 = 0`` ``[B, num_layers, hidden_size]``."""
        return GRUState(self._zeros(batch_size, device, dtype))

    def trace_step(self, x_t: Tensor, state: GRUState) -> tuple[Tensor, GRUState, dict[str, Tensor]]:
        hs, diag = [], {k: [] for k in ("r", "z", "n")}
        inp = x_t
        for layer, h in enumerate(state.h.unbind(1)):
            w_ih, w_hh, b_ih, b_hh = self._weights(layer)
            gi = F.linear(inp, w_ih, b_ih).chunk(3, dim=-1)
            gh = F.linear(h, w_hh, b_hh).chunk(3, dim=-1)
            r = torch.sigmoid(gi[0] + gh[0])
            z = torch.sigmoid(gi[1] + gh[1])
            n = torch.tanh(gi[2] + r * gh[2])
            h = (1 - z) * n + z * h
            hs.append(h)
            for k, v in (("r", r), ("z", z), ("n", n)):
                diag[k].append(v)
            inp = h
        new = GRUState(torch.stack(hs, 1))
        out = {k: torch.stack(v, 1) for k, v in diag.items()}
        out["h"] = new.h
        return inp, new, out

    def step(self, x_t: Tensor, state: GRUState) -> tuple[Tensor, GRUState]:
        """Gate-level reference step: ``x_t [B, input_size]`` -> top ``h_t [B, hidden_size]``."""
        y, new, _ = self.trace_step(x_t, state)
        return y, new

    def outputs(self, x: Tensor, state=None, mask: Tensor | None = None) -> Tensor:
        """As :meth:`LSTMLayer.outputs`; with ``bptt=True`` on CPU, ``forward``'s own path."""
        if self.fused and self.bptt and x.device.type == "cpu":
            return MemoryLayer.outputs(self, x, state, mask)
        return super().outputs(x, state, mask)

    def forward(self, x: Tensor, state=None, mask: Tensor | None = None):
        """``x [B, T, input_size]`` -> ``(h_t of the top layer [B, T, hidden_size], final state)``.

        ``fused=True``: torch's fused kernel, or with ``bptt=True`` on CPU
        :class:`memrnn.ops.gru.cpu.GRUSequence` per layer on ``self.rnn``'s parameters;
        ``fused=False``: the gate-level reference loop.  Same numbers, to rounding.
        """
        if not (self.fused and self.bptt) or x.device.type != "cpu":
            return super().forward(x, state, mask)
        state, mask = self.check_inputs(x, state, mask)
        lengths = None if mask is None else mask.sum(1)
        inp, finals = x, []
        for layer, h0 in enumerate(state.h.unbind(1)):
            w_ih, w_hh, b_ih, b_hh = self._weights(layer)
            if b_ih is None or b_hh is None:
                b_ih = b_hh = w_ih.new_zeros(w_ih.shape[0])
            hs = GRUSequence.apply(inp, w_ih, b_ih, w_hh, b_hh, h0)
            finals.append(final_by_length(hs, lengths))
            inp = hs[:, 1:]
        y, _ = masked_outputs(inp, mask)
        return y, GRUState(torch.stack(finals, 1))


register_layer("lstm_reference", tiny={"input_size": 3, "hidden_size": 5, "fused": False}, cls=LSTMLayer)
register_layer("lstm_2layer", tiny={"input_size": 3, "hidden_size": 4, "num_layers": 2}, cls=LSTMLayer)
register_layer("gru_reference", tiny={"input_size": 3, "hidden_size": 5, "fused": False}, cls=GRULayer)
register_layer("gru_2layer", tiny={"input_size": 3, "hidden_size": 4, "num_layers": 2}, cls=GRULayer)
register_layer("gru_bptt", tiny={"input_size": 3, "hidden_size": 5, "bptt": True}, cls=GRULayer)
register_layer(
    "gru_bptt_2layer", tiny={"input_size": 3, "hidden_size": 4, "num_layers": 2, "bptt": True}, cls=GRULayer
)
