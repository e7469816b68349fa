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
from collections.abc import Callable
from typing import Any, Literal, NamedTuple, get_args

import torch
from torch import Tensor

from memrnn.core.checks import check_kwargs, positive_int, refuses_removed_arguments
from memrnn.core.layer import MemoryLayer
from memrnn.core.registry import layer_class, register_layer
from memrnn.core.serialization import allow_in_checkpoints
from memrnn.layers.elman import ElmanRNN
from memrnn.layers.gated import LSTMLayer, lstm_pointwise
from memrnn.layers.memories import MEMORIES, Memory
from memrnn.layers.nnpda import StackOverflowError
from memrnn.ops.buckets import masked_outputs
from memrnn.ops.lstm import sigmoids_first
from memrnn.ops.nondeterministic.sequence import nondeterministic_sequence
from memrnn.ops.stack_rnn import fused_kinds, stack_rnn_sequence

#: the memories whose sequences run :func:`nondeterministic_sequence`
_NONDETERMINISTIC = ("nondeterministic", "vector_nondeterministic")

#: ``memory(hidden_size) -> Memory``: a memory class with its other arguments bound (what
#: LightningCLI gives for ``class_path``/``init_args``), called with the controller's output size
MemoryFactory = Callable[[int], Memory]
#: ``controller(input_size, hidden_size) -> MemoryLayer``: a layer class with its other arguments
#: bound, called with ``StackRNN``'s ``input_size + width`` and ``hidden_size``
ControllerFactory = Callable[[int, int], MemoryLayer]
#: the memories' names (shortcuts of :data:`memrnn.layers.memories.MEMORIES`)
MemoryName = Literal[
    "superposition",
    "stratification",
    "queue",
    "deque",
    "tape",
    "tape_jump",
    "nondeterministic",
    "vector_nondeterministic",
]
#: the controllers' names: shortcuts of the registry's layers (:func:`memrnn.core.layer_class`)
ControllerName = Literal["lstm", "elman", "gru"]
CONTROLLER_NAMES: tuple[str, ...] = get_args(ControllerName)


def _refuse_bidirectional(controller: MemoryLayer) -> None:
    if getattr(controller, "bidirectional", False):
        raise ValueError(
            "a stack RNN's controller reads the memory it writes step by step; a bidirectional "
            "controller cannot (it reads the whole sequence first): use bidirectional=False"
        )


def _call(factory: Any, what: str, *sizes: int, device=None, dtype=None) -> Any:
    """``factory(*sizes)``, with the layer's ``device`` and ``dtype`` where they are given (as the
    named shortcuts take them), or a ValueError naming ``what`` when it is not callable."""
    if not callable(factory):
        raise ValueError(
            f"{what} must be a name, a module or a class or callable of the sizes the layer gives, "
            f"got {factory!r}"
        )
    fk = {k: v for k, v in (("device", device), ("dtype", dtype)) if v is not None}
    return factory(*sizes, **fk)


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


@refuses_removed_arguments
class StackRNN(MemoryLayer):
    """A controller RNN with a differentiable memory (module docstring).

    Args:
        input_size: features of ``x_t``.
        hidden_size: the controller's output size (its units), which the memory's heads read.
        memory: the memory, as a callable of the controller's ``hidden_size`` returning a
            :class:`memrnn.layers.memories.Memory` (:data:`MemoryFactory`: a memory class with its
            other arguments bound; in YAML ``class_path: memrnn.layers.SuperpositionStack`` and
            ``init_args`` without ``hidden_size``), or a built :class:`Memory` whose ``hidden_size``
            is the controller's.  Or a name, a shortcut built with ``width``, ``depth`` and
            ``memory_args`` from the one table of memories
            (:data:`memrnn.layers.memories.MEMORIES`): ``"superposition"`` (Joulin & Mikolov
            2015), ``"stratification"`` (Grefenstette et al. 2015), ``"queue"`` and ``"deque"``
            (their neural queue and DeQue; the DeQue reads both ends, ``2 · width`` units),
            ``"tape"`` (Delétang et al. 2023), ``"tape_jump"`` (the same with their jumps by each
            row's input length: ``initial_state(B, input_lengths=…)``), ``"nondeterministic"``
            (DuSell & Chiang 2020, 2022), ``"vector_nondeterministic"`` (their vector RNS-RNN, 2023).
        controller: the controller, as a callable of ``(input_size + width, hidden_size)``
            returning a :class:`MemoryLayer` (:data:`ControllerFactory`: a layer class with its
            other arguments bound; in YAML ``class_path: memrnn.layers.LSTMLayer`` and ``init_args``
            without the two sizes; both callables also get ``device`` and ``dtype`` when the layer
            is given them), or a built :class:`MemoryLayer` whose ``input_size`` is
            ``input_size + width`` and ``output_size`` is ``hidden_size`` (a counter, a
            second-order RNN, …).  Or a name, a shortcut built with ``controller_args``:
            ``"lstm"``, ``"elman"``, ``"gru"`` (the registry's :class:`LSTMLayer`,
            :class:`ElmanRNN`, :class:`GRULayer`, :func:`memrnn.core.layer_class`).
        width: units per memory cell of a memory given by name (the reading's size but for the
            DeQue's two ends); None for the memory's default (8, or ``states × symbols`` for the
            nondeterministic stack and ``states × symbols × vector_size`` for the vector one,
            which fix it).
        depth: cells of the stack, queue or tape of a memory given by name (per end for the
            DeQue); start times kept by the nondeterministic stack.  The stacks and the queue
            are windows of the papers' unbounded structures: exact while nothing is pushed out of
            the window (always when ``depth ≥`` the sequence length); ``trace`` reports what each
            step drops (``overflow``).  The nondeterministic stacks also take their window as
            DuSell & Chiang name it, ``memory_args={"window_size": D}`` (their ``--window-size
            D``), which is ``depth = D − 1`` (:class:`memrnn.layers.NondeterministicStack`): it
            takes the place of ``depth``, which is then left at its default (or given as ``D − 1``).
        output: ``"hidden"`` (``y_t = h_t``) or ``"hidden+reading"`` (``[h_t ; r_t]``, DuSell
            & Chiang's ``include_reading_in_output``).
        strict: ``forward`` and ``trace`` raise :class:`StackOverflowError`, naming the step and
            the batch row, when a real (unpadded) step drops any content out of the window.
        memory_args, controller_args: the other arguments of a memory or controller given by
            name (``push_activation``, ``write_mlp``, ``forget_bias``, ``activation``, …).

    ``forward`` runs :func:`memrnn.ops.stack_rnn.stack_rnn_sequence` (hand-written
    backpropagation through time; on CUDA the stack RNN's two Triton kernels) when the controller
    is a one-layer LSTM or a tanh, sigmoid or relu Elman RNN with biases; the nondeterministic
    stacks run :func:`memrnn.ops.nondeterministic.sequence.nondeterministic_sequence` (C++ on CPU,
    Triton kernels on CUDA; first order) under any controller; otherwise the loop over ``step``.
    Inside :func:`memrnn.reference_paths` it is always the loop over ``step``, every op of it
    torch's own, so second derivatives work; same numbers.  A tape's ``write_mlp`` (Delétang et
    al.'s write MLP) runs on the fused CPU paths (Python and C++); on CUDA, where the Triton
    kernels do not cover it, on the Python one.

    ``trace`` reports the memory's actions (``push``, ``pop``, … each ``[B, T]``; the
    nondeterministic stack's log transition weights ``[B, T, QS, …]``), the pushed or written
    ``value [B, T, width]``, the ``reading`` after each step and ``overflow [B, T]``.
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        memory: MemoryName | MemoryFactory | Memory = "superposition",
        controller: ControllerName | ControllerFactory | MemoryLayer = "lstm",
        width: int | None = None,
        depth: int = 32,
        output: Literal["hidden", "hidden+reading"] = "hidden",
        strict: bool = False,
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
        self.memory = self._build_memory(memory, width, depth, memory_args, fk)
        self.width = self.memory.reading_size
        self.controller = self._build_controller(controller, controller_args, fk)
        if output not in ("hidden", "hidden+reading"):
            raise ValueError(f"output must be 'hidden' or 'hidden+reading', got {output!r}")
        self.output = output
        self.output_size = hidden_size + (self.width if output == "hidden+reading" else 0)
        self.strict = bool(strict)
        self._controller_state = type(self.controller.initial_state(1))
        self.State = joint_state(self._controller_state, self.memory.State)

    def _build_memory(self, memory, width, depth, args, fk) -> Memory:
        if isinstance(memory, str):
            if memory not in MEMORIES:
                raise ValueError(
                    f"unknown memory {memory!r}; choose one of {', '.join(MEMORIES)}, or pass a memory "
                    f"class or callable of hidden_size"
                )
            size = {} if width is None else {"width": width}
            given = ("hidden_size", "depth", *size, *fk)
            check_kwargs(f"memory_args of the {memory!r} memory", MEMORIES[memory], args or {}, given=given)
            if depth != 32 or "window_size" not in (args or {}):  # else the window_size alone
                size["depth"] = depth
            return MEMORIES[memory](self.hidden_size, **size, **(args or {}), **fk)
        given = [f"{k}={v!r}" for k, v in (("width", width), ("memory_args", args)) if v is not None]
        given += [f"depth={depth!r}"] if depth != 32 else []
        if given:
            raise ValueError(
                f"{', '.join(given)} apply to a memory given by name; a memory given as a class, callable "
                f"or module takes its own (init_args in YAML)"
            )
        built = memory if isinstance(memory, Memory) else _call(memory, "memory", self.hidden_size, **fk)
        if not isinstance(built, Memory):
            raise ValueError(
                f"memory must be a memory name, a memrnn Memory or a callable of hidden_size returning one; "
                f"{memory!r} gave {type(built).__name__}"
            )
        if built.hidden_size != self.hidden_size:
            raise ValueError(
                f"the memory reads hidden_size={built.hidden_size} but the controller has "
                f"hidden_size={self.hidden_size}"
            )
        return built

    def _build_controller(self, controller, args, fk) -> MemoryLayer:
        n_in = self.input_size + self.width
        if isinstance(controller, str):
            if controller not in CONTROLLER_NAMES:
                raise ValueError(
                    f"unknown controller {controller!r}; choose one of {', '.join(CONTROLLER_NAMES)}, or "
                    f"pass a layer class or callable of (input_size, hidden_size)"
                )
            cls = layer_class(controller)
            given = ("input_size", "hidden_size", *fk)
            check_kwargs(f"controller_args of the {controller!r} controller", cls, args or {}, given=given)
            built = cls(n_in, self.hidden_size, **(args or {}), **fk)
            _refuse_bidirectional(built)
        else:
            if args is not None:
                raise ValueError(
                    f"controller_args={args!r} apply to a controller given by name; a controller given "
                    f"as a class, callable or module takes its own (init_args in YAML)"
                )
            built = (
                controller
                if isinstance(controller, MemoryLayer)
                else _call(controller, "controller", n_in, self.hidden_size, **fk)
            )
            if not isinstance(built, MemoryLayer):
                raise ValueError(
                    f"controller must be a controller name, a memrnn MemoryLayer or a callable of "
                    f"(input_size, hidden_size) returning one; {controller!r} gave {type(built).__name__}"
                )
            _refuse_bidirectional(built)
            if built.input_size != n_in or built.output_size != self.hidden_size:
                raise ValueError(
                    f"the controller must read input_size + width = {self.input_size} + {self.width} "
                    f"= {n_in} features and output hidden_size={self.hidden_size}; it has "
                    f"input_size={built.input_size}, output_size={built.output_size}"
                )
        return built

    def extra_repr(self) -> str:
        return f"{self.input_size}, {self.hidden_size}, output={self.output!r}, strict={self.strict}"

    # -- state -------------------------------------------------------------------------------
    def initial_state(
        self, batch_size: int, *, device=None, dtype=None, input_lengths: Tensor | None = None
    ) -> NamedTuple:
        """The controller's initial state and the empty memory, as one flat NamedTuple.
        ``input_lengths [B]``: each row's input length (a transduction's input, before its
        blanks), which a memory that reads it keeps (:attr:`reads_input_lengths`: the jump tape
        jumps by it); other memories ignore it."""
        fk = self._default_factory(device, dtype)
        c = self.controller.initial_state(batch_size, **fk)
        m = self.memory.initial_state(batch_size, **fk)
        if input_lengths is not None:
            m = self.memory.with_input_lengths(m, input_lengths)
        return self.State(*c, *m)

    @property
    def reads_input_lengths(self) -> bool:
        """Whether the state holds each row's input length (``initial_state(B, input_lengths=…)``:
        the jump tape), which :class:`memrnn.lit.SequenceModule` then gives it."""
        return self.memory.reads_input_lengths

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

    def _nondeterministic_forward(
        self, x: Tensor, state: NamedTuple | None, mask: Tensor | None, *, final: bool = True
    ):
        """:meth:`forward` with a nondeterministic stack:
        :func:`memrnn.ops.nondeterministic.sequence.nondeterministic_sequence` with the
        controller's steps (:meth:`_controller_steps`).  Equal to the reference loop (tests)."""
        state, mask = self.check_inputs(x, state, mask)
        cs, ms = self.split(state)
        B, T = x.shape[:2]
        if T == 0:  # nothing to run: the state as it came
            return x.new_zeros(B, 0, self.output_size), state
        if self.strict:
            taken = ms.steps.detach()[:, None] + torch.arange(T, device=x.device, dtype=ms.steps.dtype)
            self._check_overflow((taken >= self.memory.depth).to(x.dtype), mask)
        hidden = self.output == "hidden"
        h, r, cs, ms = nondeterministic_sequence(
            x, self._controller_steps(x, cs), cs, self.memory, ms, mask, readings=not hidden, final=final
        )
        y = h if hidden else torch.cat([h, r], -1)
        return y, (None if ms is None else self.State(*cs, *ms))

    def _controller_steps(self, x: Tensor, cs: NamedTuple, fused_cell: bool | None = None):
        """``step(t, reading, cs) -> (h_t, new controller state)``, the controller's step on
        ``[x_t ; reading]``.  A one-layer LSTM with biases projects every ``x_t`` at once and
        steps with ``torch.lstm_cell`` on CPU (the reading's product, the recurrent one and the
        cell in one op), elsewhere with two products and the cell's pointwise ops (CUDA's fused
        cell takes only 1-D biases, not the per-row ``gates_x[t]``); ``fused_cell`` forces
        either.  Other controllers take their gate-level reference step."""
        c = self.controller
        if not (isinstance(c, LSTMLayer) and c.num_layers == 1 and c.rnn.bias):
            steps = x.unbind(1)  # one view per step at once (as gates_x below)
            return lambda t, reading, cs: c._unchecked_step(torch.cat([steps[t], reading], -1), cs)
        w_ih, w_hh, b_ih, b_hh = c._weights(0)
        w_x, w_r = w_ih.split([self.input_size, self.width], 1)
        # [B, 4H] per step, one view each at once (indexing step t of the whole [B, T, 4H] would
        # make its backward write a zero-filled [B, T, 4H] gradient at every step)
        gates_x = torch.nn.functional.linear(x, w_x, b_ih + b_hh).unbind(1)
        if fused_cell is None:
            fused_cell = x.device.type == "cpu"

        def cell_step(t: int, reading: Tensor, cs: NamedTuple):
            h, cc = torch.lstm_cell(reading, (cs.h[:, 0], cs.c[:, 0]), w_r, w_hh, gates_x[t], None)
            return h, type(cs)(h[:, None], cc[:, None])

        def gate_step(t: int, reading: Tensor, cs: NamedTuple):
            gates = torch.addmm(torch.addmm(gates_x[t], reading, w_r.t()), cs.h[:, 0], w_hh.t())
            h, cc, _ = lstm_pointwise(gates, cs.c[:, 0])
            return h, type(cs)(h[:, None], cc[:, None])

        return cell_step if fused_cell else gate_step

    def outputs(self, x: Tensor, state: NamedTuple | None = None, mask: Tensor | None = None) -> Tensor:
        """``forward(x, state, mask)[0]``, without the final state: a nondeterministic stack's run
        without building the final window (``[B, depth, depth, Q·S, Q·S]``: 400 MB for an
        evaluation batch of 256 at depth 104); the fused paths with ``finals=False``
        (:func:`memrnn.ops.stack_rnn.stack_rnn_sequence`), where the superposition stack trims its
        window to the cells that can still be read before the end (same outputs and gradients)."""
        if self.memory.kind in _NONDETERMINISTIC:
            return self._nondeterministic_forward(x, state, mask, final=False)[0]
        kind = self._fusable()
        if kind is None:
            return super().outputs(x, state, mask)
        return self._fused_forward(kind, x, state, mask, finals=False)[0]

    def forward(self, x: Tensor, state: NamedTuple | None = None, mask: Tensor | None = None):
        """``x [B, T, input_size]`` -> ``(y [B, T, output_size], final state)``: the fast path for
        the memory and controller (class docstring), else the reference loop over ``step``."""
        if self.memory.kind in _NONDETERMINISTIC:
            return self._nondeterministic_forward(x, state, mask)
        kind = self._fusable()
        if kind is None:
            return super().forward(x, state, mask)
        return self._fused_forward(kind, x, state, mask)

    def _fused_forward(
        self,
        kind: tuple[str, str],
        x: Tensor,
        state: NamedTuple | None,
        mask: Tensor | None,
        *,
        finals: bool = True,
    ) -> tuple[Tensor, NamedTuple | None]:
        """:meth:`forward` on :func:`memrnn.ops.stack_rnn.stack_rnn_sequence`; the final state None
        without ``finals``."""
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
            finals=finals,
        )
        *memory, overflow = rest
        if self.strict:
            self._check_overflow(overflow, mask)
        y = hs if self.output == "hidden" else torch.cat([hs, rs], -1)
        y, _ = masked_outputs(y, mask)
        if not finals:
            return y, None
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
    "nondeterministic_lstm_ns",  # the NS-RNN of 2020: normalised transitions, reading over symbols
    tiny={
        **_TINY_NS,
        "memory_args": {"states": 2, "symbols": 2, "normalize_transitions": True, "states_in_reading": False},
    },
    cls=StackRNN,
)
del _memory, _controller
