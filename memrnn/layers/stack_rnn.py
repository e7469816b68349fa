"""A recurrent controller driving a differentiable memory: the stack RNNs of Joulin & Mikolov
(2015), Grefenstette et al. (2015), DuSell & Chiang (2020) and the Tape-RNN of Delétang et al.
(2023), as one :class:`memrnn.core.MemoryLayer`.

At each step (DuSell & Chiang 2020, section 3, for every memory here)::

    r_{t−1} = memory.read(M_{t−1})                       # [B, width]
    h_t, C_t = controller([x_t ; r_{t−1}], C_{t−1})       # any memrnn recurrent layer
    M_t = memory.step(h_t, M_{t−1})                      # the memory's heads read h_t
    y_t = h_t            (output="hidden")  or  [h_t ; memory.read(M_t)]  (output="hidden+reading")

The state is one flat NamedTuple: the controller's fields, then the memory's (for an LSTM
controller on a superposition stack: ``LSTMSuperpositionState(h, c, stack)``), batch first like
every memrnn state.
"""

from __future__ import annotations

import functools
from typing import Any, Literal, NamedTuple

import torch
from torch import Tensor

from memrnn.core.checks import check_kwargs, positive_int
from memrnn.core.layer import MemoryLayer
from memrnn.core.registry import register_layer
from memrnn.core.serialization import allow_in_checkpoints
from memrnn.core.state import state_where
from memrnn.layers.elman import ElmanRNN
from memrnn.layers.gated import GRULayer, LSTMLayer, lstm_pointwise
from memrnn.layers.memories import MEMORIES, Memory
from memrnn.layers.nnpda import StackOverflowError
from memrnn.ops.buckets import masked_outputs
from memrnn.ops.dispatch import implementation
from memrnn.ops.lstm import sigmoids_first
from memrnn.ops.nondeterministic import NondeterministicRun, run_impl
from memrnn.ops.stack_rnn import fused_kinds, stack_rnn_sequence

#: the memories whose stack runs as one :class:`NondeterministicRun` on CPU
_NONDETERMINISTIC = ("nondeterministic", "vector_nondeterministic")

#: the controllers by name (``StackRNN(controller="…")``); any MemoryLayer instance works too
CONTROLLERS: dict[str, type[MemoryLayer]] = {"lstm": LSTMLayer, "elman": ElmanRNN, "gru": GRULayer}


@functools.cache
def joint_state(controller_state: type, memory_state: type) -> type:
    """The flat NamedTuple of a controller's state fields followed by a memory's, named after both
    (``LSTMState`` + ``SuperpositionState`` -> ``LSTMSuperpositionState``).  One class per pair,
    made once and placed in this module so that states pickle."""
    fields = (*controller_state._fields, *memory_state._fields)
    if len(set(fields)) != len(fields):
        raise ValueError(
            f"the controller's state fields {controller_state._fields} and the memory's "
            f"{memory_state._fields} share a name; rename one"
        )
    name = controller_state.__name__.removesuffix("State") + memory_state.__name__
    cls = NamedTuple(name, [(f, Tensor) for f in fields])
    cls.__module__ = __name__
    cls.__doc__ = (
        f"State of a StackRNN: the controller's {controller_state.__name__} fields "
        f"({', '.join(controller_state._fields)}), then the memory's {memory_state.__name__} "
        f"fields ({', '.join(memory_state._fields)}), each batch first."
    )
    globals()[name] = cls
    allow_in_checkpoints(cls)
    return cls


class StackRNN(MemoryLayer):
    """A controller RNN with a differentiable memory (module docstring).

    Args:
        input_size: features of ``x_t``.
        hidden_size: the controller's output size (its units; for a controller given as a
            layer, its ``output_size``), which the memory's heads read.
        memory: ``"superposition"`` (Joulin & Mikolov 2015), ``"stratification"`` (Grefenstette
            et al. 2015), ``"queue"`` and ``"deque"`` (their neural queue and DeQue; the DeQue reads
            both ends, ``2 · width`` units), ``"tape"`` (Delétang et al. 2023), ``"tape_jump"`` (the
            same with their jumps by each row's input length, set in the state's ``jump``),
            ``"nondeterministic"`` (DuSell & Chiang 2020, 2022), ``"vector_nondeterministic"``
            (their vector RNS-RNN, 2023), or a
            :class:`memrnn.layers.memories.Memory` whose ``hidden_size`` is the controller's.
        controller: ``"lstm"``, ``"elman"``, ``"gru"``, or any :class:`MemoryLayer` whose
            ``input_size`` is ``input_size + width`` and whose ``output_size`` is ``hidden_size``
            (a counter, a second-order RNN, …).
        width: units per memory cell (the reading's size but for the DeQue's two ends); None for
            the memory's default (8, or ``states × symbols`` for the nondeterministic stack and
            ``states × symbols × vector_size`` for the vector one, which fix it).
        depth: cells of the stack, queue or tape (per end for the DeQue); start times kept by the nondeterministic
            stack.  The stacks and the queue are windows of the papers' unbounded structures: exact while nothing is pushed out of the window (always
            when ``depth ≥`` the sequence length); ``trace`` reports what each step drops
            (``overflow``).
        output: ``"hidden"`` (``y_t = h_t``) or ``"hidden+reading"`` (``[h_t ; r_t]``, DuSell
            & Chiang's ``include_reading_in_output``).
        strict: ``forward`` and ``trace`` raise :class:`StackOverflowError`, naming the step and
            the batch row, when a real (unpadded) step drops any content out of the window.
        fused: ``forward`` runs :func:`memrnn.ops.stack_rnn.stack_rnn_sequence` (hand-written
            backpropagation through time) when the controller is a one-layer LSTM or a tanh,
            sigmoid or relu Elman RNN (on CUDA the stack RNN's two Triton kernels); the
            nondeterministic stacks run as one :class:`memrnn.ops.nondeterministic.NondeterministicRun`
            (C++ on CPU, Triton kernels on CUDA; first order) under any controller; otherwise, or
            with ``False``, the loop over ``step``.  With ``False`` every op of that loop is
            torch's own, so second derivatives work.  Same numbers.
        memory_args, controller_args: extra arguments of the memory and controller built by name
            (``push_activation``, ``write_mlp``, ``forget_bias``, ``activation``, …).  A tape's
            ``write_mlp`` (Delétang et al.'s write MLP) runs on the fused CPU paths (Python and
            C++); on CUDA, where the Triton kernels do not cover it, on the Python one.

    ``trace`` reports the memory's actions (``push``, ``pop``, … each ``[B, T]``; the
    nondeterministic stack's log transition weights ``[B, T, QS, …]``), the pushed or written
    ``value [B, T, width]``, the ``reading`` after each step and ``overflow [B, T]``.
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        memory: Literal[
            "superposition",
            "stratification",
            "queue",
            "deque",
            "tape",
            "tape_jump",
            "nondeterministic",
            "vector_nondeterministic",
        ]
        | Memory = "superposition",
        controller: Literal["lstm", "elman", "gru"] | MemoryLayer = "lstm",
        width: int | None = None,
        depth: int = 32,
        output: Literal["hidden", "hidden+reading"] = "hidden",
        strict: bool = False,
        fused: bool = True,
        memory_args: dict[str, Any] | None = None,
        controller_args: dict[str, Any] | None = None,
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.input_size = positive_int("input_size", input_size)
        self.hidden_size = positive_int("hidden_size", hidden_size)
        fk = {"device": device, "dtype": dtype}
        self.memory = self._build_memory(memory, hidden_size, width, depth, memory_args or {}, fk)
        self.width = self.memory.reading_size
        self.controller = self._build_controller(controller, controller_args or {}, fk)
        if output not in ("hidden", "hidden+reading"):
            raise ValueError(f"output must be 'hidden' or 'hidden+reading', got {output!r}")
        self.output = output
        self.output_size = hidden_size + (self.width if output == "hidden+reading" else 0)
        self.strict, self.fused = bool(strict), bool(fused)
        self._controller_state = type(self.controller.initial_state(1))
        self.State = joint_state(self._controller_state, self.memory.State)

    @staticmethod
    def _build_memory(memory, hidden_size, width, depth, args, fk) -> Memory:
        if isinstance(memory, Memory):
            if memory.hidden_size != hidden_size:
                raise ValueError(
                    f"the memory reads hidden_size={memory.hidden_size} but the controller has "
                    f"hidden_size={hidden_size}"
                )
            return memory
        if memory not in MEMORIES:
            raise ValueError(
                f"unknown memory {memory!r}; choose one of {', '.join(MEMORIES)} or pass a Memory"
            )
        size = {} if width is None else {"width": width}
        given = ("hidden_size", "depth", *size, *fk)
        check_kwargs(f"memory_args of the {memory!r} memory", MEMORIES[memory], args, given=given)
        return MEMORIES[memory](hidden_size, depth=depth, **size, **args, **fk)

    def _build_controller(self, controller, args, fk) -> MemoryLayer:
        built = self._new_controller(controller, args, fk)
        if getattr(built, "bidirectional", False):
            raise ValueError(
                "a stack RNN's controller reads the memory it writes step by step; a bidirectional "
                "controller cannot (it reads the whole sequence first): use bidirectional=False"
            )
        return built

    def _new_controller(self, controller, args, fk) -> MemoryLayer:
        n_in = self.input_size + self.width
        if isinstance(controller, MemoryLayer):
            if controller.input_size != n_in or controller.output_size != self.hidden_size:
                raise ValueError(
                    f"the controller must read input_size + width = {self.input_size} + {self.width} "
                    f"= {n_in} features and output hidden_size={self.hidden_size}; it has "
                    f"input_size={controller.input_size}, output_size={controller.output_size}"
                )
            return controller
        if controller not in CONTROLLERS:
            raise ValueError(
                f"unknown controller {controller!r}; choose one of {', '.join(CONTROLLERS)} or pass a MemoryLayer"
            )
        given = ("input_size", "hidden_size", *fk)
        check_kwargs(
            f"controller_args of the {controller!r} controller", CONTROLLERS[controller], args, given=given
        )
        return CONTROLLERS[controller](n_in, self.hidden_size, **args, **fk)

    def extra_repr(self) -> str:
        return f"{self.input_size}, {self.hidden_size}, output={self.output!r}, strict={self.strict}, fused={self.fused}"

    # -- state -------------------------------------------------------------------------------
    def initial_state(self, batch_size: int, *, device=None, dtype=None) -> NamedTuple:
        """The controller's initial state and the empty memory, as one flat NamedTuple."""
        fk = self._default_factory(device, dtype)
        c = self.controller.initial_state(batch_size, **fk)
        m = self.memory.initial_state(batch_size, **fk)
        return self.State(*c, *m)

    def output_at(self, state: NamedTuple) -> Tensor:
        """The output ``[B, output_size]`` at ``state``: the controller's (its ``output_at``), with
        the memory's reading ``[h ; memory.read(M)]`` for ``output="hidden+reading"``, what ``step``
        returned on reaching ``state``.  At ``initial_state``: the controller's initial output
        (``h_0``) and the empty memory's reading, rau's and DuSell & Chiang's ``include_first=True``
        first output (``StackRNNBase.State.output``), which their models read the first prediction
        from.  A controller without ``output_at`` raises, naming its class."""
        cs, ms = self.split(state)
        output_at = getattr(self.controller, "output_at", None)
        if output_at is None:
            raise ValueError(
                f"StackRNN's controller {type(self.controller).__name__} has no output_at(state) (the "
                f"output at a state without a step), so the stack RNN has none; LSTMLayer, GRULayer "
                f"and ElmanRNN have it"
            )
        h = output_at(cs)
        return h if self.output == "hidden" else torch.cat([h, self.memory.read(ms)], -1)

    def split(self, state: NamedTuple) -> tuple[NamedTuple, NamedTuple]:
        """The flat state as (the controller's state, the memory's state)."""
        k = len(self._controller_state._fields)
        return self._controller_state(*state[:k]), self.memory.State(*state[k:])

    def check_inputs(
        self, x: Tensor, state: NamedTuple | None, mask: Tensor | None
    ) -> tuple[NamedTuple, Tensor | None]:
        """:meth:`MemoryLayer.check_inputs`, then the memory's own check of its state (a jump
        tape's input lengths)."""
        state, mask = super().check_inputs(x, state, mask)
        self.memory.check_state(self.split(state)[1])
        return state, mask

    # -- reference ---------------------------------------------------------------------------
    def trace_step(self, x_t: Tensor, state: NamedTuple) -> tuple[Tensor, NamedTuple, dict[str, Tensor]]:
        cs, ms = self.split(state)
        h, cs = self.controller._unchecked_step(torch.cat([x_t, self.memory.read(ms)], -1), cs)
        ms, diag = self.memory.step(h, ms)
        reading = self.memory.read(ms)
        y = h if self.output == "hidden" else torch.cat([h, reading], -1)
        diag["reading"] = reading
        return y, self.State(*cs, *ms), diag

    def step(self, x_t: Tensor, state: NamedTuple) -> tuple[Tensor, NamedTuple]:
        """``x_t [B, input_size]`` -> ``y_t [B, output_size]`` (module docstring)."""
        y, new, _ = self.trace_step(x_t, state)
        return y, new

    def _loop(self, x, state, mask, *, with_trace, step=None):
        """The base loop; under ``strict`` it traces to check every real step's ``overflow``."""
        if not self.strict:
            return super()._loop(x, state, mask, with_trace=with_trace, step=step)
        outputs, final, extra = super()._loop(x, state, mask, with_trace=True, step=step)
        if "overflow" in extra:
            self._check_overflow(extra["overflow"], mask)
        return outputs, final, (extra if with_trace else {})

    def _check_overflow(self, overflow: Tensor, mask: Tensor | None) -> None:
        """Under ``strict``: raise naming the first (step, row) whose ``overflow [B, T]`` is not 0
        (padded positions excluded)."""
        bad = overflow > 0
        if mask is not None:
            bad = bad & mask
        if bool(bad.any()):
            t, row = (int(v) for v in bad.t().nonzero()[0])
            raise StackOverflowError(
                f"{type(self.memory).__name__} of depth {self.memory.depth} dropped "
                f"{float(overflow[row, t].detach()):.3g} of content out of its window at step {t}, batch row {row} "
                f"(strict=True); raise depth"
            )

    # -- fast path ---------------------------------------------------------------------------
    def _fusable(self) -> tuple[str, str] | None:
        """(controller kind, activation) when ``stack_rnn_sequence`` covers this pairing."""
        c = self.controller
        if getattr(c, "num_layers", 1) != 1:  # a stacked controller runs its own steps
            return None
        if isinstance(c, LSTMLayer) and c.rnn.bias:
            kind = ("lstm", "")
        elif (
            isinstance(c, ElmanRNN)
            and getattr(c, "bias", None) is not None
            and c.activation in ("tanh", "sigmoid", "relu")
        ):
            kind = ("elman", c.activation)
        else:
            return None
        return kind if (kind[0], self.memory.kind) in fused_kinds() else None

    def _fused_weights(self, kind: str) -> tuple[Tensor, Tensor, Tensor]:
        """``(w_in [G, input_size + width], b [G], w_rec [G, hidden])`` of the controller, LSTM
        gate blocks reordered to o, i, f, g (the sigmoids first)."""
        c = self.controller
        if kind == "lstm":
            w_ih, w_hh, b_ih, b_hh = c._weights(0)
            return sigmoids_first(w_ih), sigmoids_first(b_ih + b_hh), sigmoids_first(w_hh)
        return c.weight_ih, c.bias, c.weight_hh

    @staticmethod
    def _nondeterministic_run(x: Tensor) -> str | None:
        """How the nondeterministic stack runs as one :class:`NondeterministicRun`: ``"native"``
        (C++: CPU, float32/float64, the C++ ops built), ``"triton"`` (CUDA, float32/float64), or
        None (the torch step: other dtypes, ``torch.compile``/``export``)."""
        impl = run_impl(x)
        return impl if impl in ("native", "triton") else None

    def _nondeterministic_forward(
        self, x: Tensor, state: NamedTuple | None, mask: Tensor | None, *, final: bool = True
    ):
        """:meth:`forward` with a nondeterministic stack: the controller's steps in torch, the
        stack's as one run (:class:`memrnn.ops.nondeterministic.NondeterministicRun`, in C++ on
        CPU and in Triton kernels on CUDA, float32/float64; else
        :meth:`_nondeterministic_torch_forward`): each column of inner weights written once, not
        a ``[depth, depth]`` window copied and masked at every step; start times still log 0
        skipped.  Equal to the reference loop (tests);
        rows past their length run on and are ignored (outputs zero, final state at the length)."""
        state, mask = self.check_inputs(x, state, mask)
        cs, ms = self.split(state)
        memory = self.memory
        B, T = x.shape[:2]
        if T == 0:  # nothing to run: the state as it came
            return x.new_zeros(B, 0, self.output_size), state
        lengths = None if mask is None else mask.sum(1)
        if self.strict:
            taken = ms.steps.detach()[:, None] + torch.arange(T, device=x.device, dtype=ms.steps.dtype)
            self._check_overflow((taken >= memory.depth).to(x.dtype), mask)
        impl = self._nondeterministic_run(x)
        if impl is None:
            return self._nondeterministic_torch_forward(x, cs, ms, mask)
        vector = memory.kind == "vector_nondeterministic"
        zeta = ms.zeta if vector else None
        run = NondeterministicRun(
            ms.gamma, ms.alpha, T, states=memory.states, lengths=lengths, zeta=zeta, impl=impl
        )
        reading = memory.read(ms)
        ys, etas = [], []
        masks = mask.unbind(1) if mask is not None else [None] * T
        step = self._controller_steps(x, cs)
        for t, m_t in enumerate(masks):
            h, new = step(t, reading, cs)
            cs = new if m_t is None else state_where(m_t, new, cs)
            out = run.step(*memory.transitions(h))
            reading = memory.reading(out)
            if vector:  # η is part of the vector stack's state
                etas.append(out[1])
            ys.append(h if self.output == "hidden" else torch.cat([h, reading], -1))
        y = torch.stack(ys, 1) if ys else x.new_zeros(B, 0, self.output_size)
        y, _ = masked_outputs(y, mask)
        if not final:  # outputs(): the [B, depth, depth, QS, QS] window is never built
            return y, None
        stack = run.final()  # (gamma, alpha[, zeta]), each row's after its own last step
        if vector:  # and η after that step
            etas = torch.stack(etas, 1)
            stack += (etas[:, -1] if lengths is None else etas[torch.arange(B), (lengths - 1).clamp(min=0)],)
        if lengths is not None:  # rows that took no step keep their state as it came, bit for bit
            stack = state_where(lengths == 0, ms[1:], stack)
        steps = ms.steps + (T if lengths is None else lengths.to(ms.steps.dtype))
        return y, self.State(*cs, steps, *stack)

    def _nondeterministic_torch_forward(self, x: Tensor, cs: NamedTuple, ms: NamedTuple, mask: Tensor | None):
        """:meth:`_nondeterministic_forward` off the C++ run (CUDA, ``torch.compile``): the
        memory's torch step after the controller's, rows past their length frozen; the
        reference loop's numbers without its per-step diagnostics, and with
        :meth:`_controller_steps`."""
        memory = self.memory
        reading = memory.read(ms)
        ys = []
        step = self._controller_steps(x, cs)
        for t in range(x.shape[1]):
            h, new = step(t, reading, cs)
            new_ms, _ = memory.update(ms, memory.transitions(h))
            if mask is None:
                cs, ms = new, new_ms
            else:
                cs, ms = state_where(mask[:, t], new, cs), state_where(mask[:, t], new_ms, ms)
            reading = memory.read(ms)
            ys.append(h if self.output == "hidden" else torch.cat([h, reading], -1))
        y, _ = masked_outputs(torch.stack(ys, 1), mask)
        return y, self.State(*cs, *ms)

    def _controller_steps(self, x: Tensor, cs: NamedTuple, fused_cell: bool | None = None):
        """``step(t, reading, cs) -> (h_t, new controller state)``, the controller's step on
        ``[x_t ; reading]``.  A one-layer LSTM with biases projects every ``x_t`` at once and
        steps with ``torch.lstm_cell`` on CPU (the reading's product, the recurrent one and the
        cell in one op), elsewhere with two products and the cell's pointwise ops (CUDA's fused
        cell takes only 1-D biases, not the per-row ``gates_x[:, t]``); ``fused_cell`` forces
        either.  Other controllers take their gate-level reference step."""
        c = self.controller
        if not (isinstance(c, LSTMLayer) and c.num_layers == 1 and c.rnn.bias):
            return lambda t, reading, cs: c._unchecked_step(torch.cat([x[:, t], reading], -1), cs)
        w_ih, w_hh, b_ih, b_hh = c._weights(0)
        w_x, w_r = w_ih.split([self.input_size, self.width], 1)
        gates_x = torch.nn.functional.linear(x, w_x, b_ih + b_hh)  # [B, T, 4H]
        if fused_cell is None:
            fused_cell = x.device.type == "cpu"

        def cell_step(t: int, reading: Tensor, cs: NamedTuple):
            h, cc = torch.lstm_cell(reading, (cs.h[:, 0], cs.c[:, 0]), w_r, w_hh, gates_x[:, t], None)
            return h, type(cs)(h[:, None], cc[:, None])

        def gate_step(t: int, reading: Tensor, cs: NamedTuple):
            gates = torch.addmm(torch.addmm(gates_x[:, t], reading, w_r.t()), cs.h[:, 0], w_hh.t())
            h, cc, _ = lstm_pointwise(gates, cs.c[:, 0])
            return h, type(cs)(h[:, None], cc[:, None])

        return cell_step if fused_cell else gate_step

    def outputs(self, x: Tensor, state: NamedTuple | None = None, mask: Tensor | None = None) -> Tensor:
        """``forward(x, state, mask)[0]``; with the nondeterministic stack's C++ run, without
        building the final window (``[B, depth, depth, Q·S, Q·S]``: 400 MB for an evaluation
        batch of 256 at depth 104)."""
        if self.fused and self.memory.kind in _NONDETERMINISTIC:
            return self._nondeterministic_forward(x, state, mask, final=False)[0]
        return super().outputs(x, state, mask)

    def forward(self, x: Tensor, state: NamedTuple | None = None, mask: Tensor | None = None):
        """``x [B, T, input_size]`` -> ``(y [B, T, output_size], final state)``.  The fused path
        (``fused=True`` and a covered controller) or the reference loop over ``step``."""
        if not self.fused:  # the loop over step under autograd end to end (second derivatives)
            with implementation("cpu"):
                return super().forward(x, state, mask)
        if self.memory.kind in _NONDETERMINISTIC:
            return self._nondeterministic_forward(x, state, mask)
        kind = self._fusable()
        if kind is None:
            return super().forward(x, state, mask)
        state, mask = self.check_inputs(x, state, mask)
        w_in, b, w_rec = self._fused_weights(kind[0])
        cs, ms = self.split(state)
        lstm = kind[0] == "lstm"
        lengths = None if mask is None else mask.sum(1)
        hs, rs, h, c, *rest = stack_rnn_sequence(
            x,
            w_in,
            b,
            w_rec,
            self.memory.head.weight,
            self.memory.head.bias,
            cs.h[:, 0] if lstm else cs.h,
            cs.c[:, 0] if lstm else None,
            tuple(ms),
            controller=kind[0],
            activation=kind[1],
            memory=self.memory.kind,
            value_activation=self.memory.value_activation,
            lengths=lengths,
            overflow=self.strict,
            value_mlp=self.memory.value_layers(),
        )
        *memory, overflow = rest
        if self.strict:
            self._check_overflow(overflow, mask)
        y = hs if self.output == "hidden" else torch.cat([hs, rs], -1)
        y, _ = masked_outputs(y, mask)
        controller = (h[:, None], c[:, None]) if lstm else (h,)
        return y, self.State(*controller, *memory)


_TINY = {"input_size": 3, "hidden_size": 5, "width": 2, "depth": 4}
#: tiny nondeterministic stacks: 2 states × 2 symbols (width 4), depth 4 < the suite's 7 steps, so
#: the memory-limited window is exercised too
_TINY_NS = {**_TINY, "width": None, "memory": "nondeterministic", "memory_args": {"states": 2, "symbols": 2}}
#: a jump tape of tiny inputs jumps by 3 cells (the input length a data module would give); the
#: vector stack's elements carry 2 units (width 2·2·2 = 8)
_TINY_MEMORY_ARGS = {
    "tape_jump": {"jump": 3},
    "vector_nondeterministic": {"states": 2, "symbols": 2, "vector_size": 2},
}
for _memory in MEMORIES:
    for _controller in ("lstm", "elman"):
        _tiny = {
            **(_TINY_NS if _memory.endswith("nondeterministic") else _TINY),
            "memory": _memory,
            "controller": _controller,
        }
        if _memory in _TINY_MEMORY_ARGS:
            _tiny["memory_args"] = _TINY_MEMORY_ARGS[_memory]
        register_layer(f"{_memory}_{_controller}", tiny=_tiny, cls=StackRNN)
register_layer(
    "superposition_gru", tiny={**_TINY, "memory": "superposition", "controller": "gru"}, cls=StackRNN
)
register_layer(
    "superposition_lstm_reading",
    tiny={**_TINY, "memory": "superposition", "output": "hidden+reading"},
    cls=StackRNN,
)
register_layer(
    "stratification_lstm_reference", tiny={**_TINY, "memory": "stratification", "fused": False}, cls=StackRNN
)
register_layer(
    "nondeterministic_lstm_ns",  # the NS-RNN of 2020: normalised transitions, reading over symbols
    tiny={
        **_TINY_NS,
        "memory_args": {"states": 2, "symbols": 2, "normalize_transitions": True, "states_in_reading": False},
    },
    cls=StackRNN,
)
del _memory, _controller
