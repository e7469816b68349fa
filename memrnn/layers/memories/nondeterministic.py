"""DuSell & Chiang's nondeterministic stacks (NS-RNN 2020, RNS-RNN 2022, vector RNS-RNN 2023) as
memories of a :class:`memrnn.layers.StackRNN` (:mod:`memrnn.layers.memories`)."""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from memrnn.core.checks import positive_int
from memrnn.layers.memories.base import Memory
from memrnn.ops.nondeterministic import (
    LOG_ZERO,
    check_bottom_symbol,
    nondeterministic_initial,
    nondeterministic_step,
    vector_nondeterministic_initial,
    vector_nondeterministic_step,
    window_depth,
)


class NondeterministicState(NamedTuple):
    """``steps [B]``, the steps taken (a float, as every state field, for masking and gradients
    alike), the window of log inner weights ``gamma [B, depth, depth, QS, QS]`` and the log
    forward weights ``alpha [B, depth + 1, QS]`` (:mod:`memrnn.ops.nondeterministic`)."""

    steps: Tensor
    gamma: Tensor
    alpha: Tensor


class NondeterministicStack(Memory):
    """The nondeterministic stack of DuSell & Chiang: a weighted PDA with ``states`` states and
    ``symbols`` stack symbols whose transition weights the controller emits at each step, simulated
    exactly over all its runs by the dynamic programme of inner and forward weights
    (:mod:`memrnn.ops.nondeterministic`, in log space).

    Heads (DuSell & Chiang's ``operation_layer``): one linear map from ``h`` to the log weights of
    every push ``q, x → r, xy``, replace ``q, x → r, y`` and pop ``q, x → r``
    (``QS · (2·QS + Q)`` outputs).  Two switches select the published variants:

    * ``normalize_transitions``: log-softmax over each ``(q, x)``'s transitions (a probabilistic
      PDA, the NS-RNN of 2020), or raw ``exp`` weights (the RNS-RNN of 2022, the default);
    * ``states_in_reading``: the reading is the normalised ``α[t][r, y]`` over every ``(r, y)``
      (``width = Q·S``, RNS-RNN, the default) or over the top symbol ``y`` alone (``width = S``,
      NS-RNN).

    ``bottom_symbol``: ``"fixed"`` (the default: DuSell & Chiang's 2023 code, whose stack puts the
    bottom symbol on with a fake push from step −1, so that a pop can uncover it) or
    ``"original"`` (the code that produced the published NS-RNN, CoNLL 2020, and RNS-RNN, ICLR
    2022, numbers: ``nsrnn/models/nondeterministic_stack.py`` at tags ``conll2020`` and
    ``iclr2022``, ``OldNondeterministicStack`` / ``original_bottom_symbol_behavior=True`` in the
    2023 code): no start time −1 (no ``α[−1]``, no ``γ[−1 → j]``), so that once a symbol is pushed
    the bottom symbol is never on top again.  It is the initial state alone
    (:func:`memrnn.ops.nondeterministic.nondeterministic_initial`): every step and run is the same.

    ``depth``: the window of start times kept (the memory-limited RNS-RNN, DuSell & Chiang 2022,
    section 5).  With ``depth ≥ T`` the stack is the unlimited one; from step ``depth + 1`` on, runs
    whose top element was pushed more than ``depth`` steps earlier are dropped, and ``overflow``
    is 1 at each such step (0 before).  Each step costs ``O(depth² · Q³ · S²)`` per row with the
    torch step; ``StackRNN``'s run (C++ on CPU, Triton kernels on CUDA) computes only start times
    that can be alive, ``O(min(s, depth)² · Q³ · S²)`` at step ``s`` from the fresh stack.

    ``window_size``: the same window as DuSell & Chiang's code and scripts name it
    (``--window-size``, ``D`` in the 2022 paper): the ``D`` start times ``i = j−D..j−1`` whose
    runs step ``j`` keeps, one more than ``depth`` counts, so ``window_size = D`` is
    ``depth = D − 1`` (:func:`memrnn.ops.nondeterministic.window_depth`): their ``D = 2`` keeps the
    runs whose top was pushed at the step or pushed the step before and replaced, no pop; ``D = 3`` first lets a pop uncover an element pushed two
    steps earlier.  Give ``depth`` or ``window_size`` (both only if they agree; a ``ValueError``
    names the two otherwise); neither: ``depth = 32``.  ``D ≥ 2`` (their ``D = 1`` keeps only the
    pushes).  The module keeps ``depth``; :attr:`window_size` is ``depth + 1``.
    """

    kind = "nondeterministic"
    State = NondeterministicState
    actions = ("push", "repl", "pop")

    def __init__(
        self,
        hidden_size: int,
        width: int | None = None,
        depth: int | None = None,
        states: int = 2,
        symbols: int = 3,
        normalize_transitions: bool = False,
        states_in_reading: bool = True,
        bottom_symbol: str = "fixed",
        window_size: int | None = None,
        **factory,
    ) -> None:
        self.states = positive_int("states", states)
        self.symbols = positive_int("symbols", symbols)
        self.bottom_symbol = check_bottom_symbol(bottom_symbol)
        self.normalize_transitions = bool(normalize_transitions)
        self.states_in_reading = bool(states_in_reading)
        reading, what = self._reading_units()
        if width is not None and width != reading:
            raise ValueError(
                f"the {self._name}'s reading has {reading} units ({what}), got width={width}; leave width out"
            )
        super().__init__(hidden_size, reading, window_depth(depth, window_size), "identity", **factory)

    _name = "nondeterministic stack"

    @property
    def window_size(self) -> int:
        """The window as DuSell & Chiang's code names it: the start times kept, ``depth + 1``."""
        return self.depth + 1

    def _reading_units(self) -> tuple[int, str]:
        """Units of the reading and what they count."""
        if self.states_in_reading:
            return self.states * self.symbols, "states × symbols"
        return self.symbols, "symbols"

    def _head_size(self) -> int:
        qs = self.states * self.symbols
        return qs * (2 * qs + self.states)

    def extra_repr(self) -> str:
        return (
            f"states={self.states}, symbols={self.symbols}, depth={self.depth} (window_size={self.window_size}), "
            f"normalize_transitions={self.normalize_transitions}, "
            f"states_in_reading={self.states_in_reading}, bottom_symbol={self.bottom_symbol!r}"
        )

    def transitions(self, h: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """``h [B, hidden_size]`` -> log weights ``push, repl [B, QS, QS]``, ``pop [B, QS, Q]``."""
        return self.from_head(self.head(h))

    def from_head(self, out: Tensor) -> tuple[Tensor, ...]:
        """:meth:`transitions` from the head's outputs ``out = head(h) [B, head outputs]`` (what
        members, each with its own head, compute at once: :mod:`memrnn.members.paths.nondeterministic`)."""
        return self._pda(out)

    def _pda(self, out: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """The head's first ``QS · (2·QS + Q)`` outputs ``[B, …]`` as ``push, repl, pop``."""
        qs, Q = self.states * self.symbols, self.states
        logits = out[:, : qs * (2 * qs + Q)].reshape(out.shape[0], qs, 2 * qs + Q)
        if self.normalize_transitions:
            logits = torch.log_softmax(logits, -1)
        push, repl, pop = logits.split([qs, qs, Q], -1)
        return push, repl, pop

    def initial_state(self, batch_size: int, *, device, dtype) -> NondeterministicState:
        gamma, alpha = nondeterministic_initial(
            batch_size, self.states, self.symbols, self.depth, device=device, dtype=dtype,
            bottom_symbol=self.bottom_symbol,
        )  # fmt: skip
        return NondeterministicState(alpha.new_zeros(batch_size), gamma, alpha)

    def read(self, state: NondeterministicState) -> Tensor:
        return self.reading(state.alpha[:, -1])

    def reading(self, top: Tensor) -> Tensor:
        """The reading ``[B, width]`` from what a :class:`NondeterministicRun` step returns: the
        log forward weights ``top = log α[t] [B, QS]``."""
        if not self.states_in_reading:
            top = torch.logsumexp(top.view(-1, self.states, self.symbols), 1)
        return torch.softmax(top, -1)

    def update(
        self,
        state: NondeterministicState,
        actions: tuple[Tensor, Tensor, Tensor],
        value: Tensor | None = None,
    ) -> tuple[NondeterministicState, Tensor]:
        """One step on the log weights ``actions = (push, repl, pop)`` (:meth:`transitions`; no
        pushed vector); ``overflow [B]`` is 1 where the window drops runs."""
        gamma, alpha = nondeterministic_step(state.gamma, state.alpha, *actions)
        overflow = (state.steps.detach() >= self.depth).to(alpha.dtype)
        return NondeterministicState(state.steps + 1, gamma, alpha), overflow

    def step(
        self, h: Tensor, state: NondeterministicState
    ) -> tuple[NondeterministicState, dict[str, Tensor]]:
        """Act on ``h [B, hidden_size]``; diagnostics: the log weights ``push [B, QS, QS]``,
        ``repl [B, QS, QS]``, ``pop [B, QS, Q]`` and ``overflow [B]``."""
        actions = self.transitions(h)
        new, overflow = self.update(state, actions)
        return new, dict(zip(self.actions, actions, strict=True), overflow=overflow)


class VectorNondeterministicState(NamedTuple):
    """:class:`NondeterministicState`'s fields, then the window of log ``ζ``
    ``zeta [B, depth, depth, QS, QS, m]`` and the reading's log ``eta [B, QS, m]``
    (:func:`memrnn.ops.nondeterministic.vector_nondeterministic_step`)."""

    steps: Tensor
    gamma: Tensor
    alpha: Tensor
    zeta: Tensor
    eta: Tensor


class VectorNondeterministicStack(NondeterministicStack):
    """The vector RNS-RNN's stack (DuSell & Chiang 2023, "The Surprising Computational Power of
    Nondeterministic Stack RNNs"): the renormalizing nondeterministic stack whose elements also
    carry a vector in ``(0, 1)^m``.  A push pushes ``σ(W h + b)`` with its symbol, a replace keeps
    the vector, a pop uncovers the one below; the bottom element holds ``σ(bottom)``.  The reading
    is the expected top vector for each ``(state, top symbol)`` under the PDA's runs (``width =
    Q·S·m``, flattened ``[Q, S, m]``), which lets a PDA of few symbols carry real-valued content
    (the recurrences: :mod:`memrnn.ops.nondeterministic.reference`).

    ``depth`` or ``window_size`` (DuSell & Chiang's ``LimitedVectorNondeterministicStack``'s,
    ``depth + 1``) as :class:`NondeterministicStack`'s.
    Args beyond :class:`NondeterministicStack`'s: ``vector_size`` (``m``), ``bottom``:
    ``"learned"`` (a parameter ``bottom`` of ``m`` logits, 0 at first: the vector 0.5; None means
    it), ``"one"`` or ``"zero"``.  With ``bottom_symbol="original"`` (DuSell & Chiang's
    ``OldVectorNondeterministicStack``, ``original_bottom_symbol_behavior=True``) there is no
    bottom element to carry a vector: ``bottom`` must be left out (None; their code requires
    ``bottom_vector=None``), the first reading is zeros and every later one an expectation of
    pushed vectors alone.  A learnt
    bottom vector is part of :meth:`initial_state`, which therefore carries its gradient: make a
    fresh initial state for each batch (``StackRNN`` does when no state is given).  The reading
    always ranges over states and symbols.  ``StackRNN`` runs it as
    the plain stack's run with ``1 + m`` channels (γ, then ζ per vector unit; C++ on CPU, Triton
    kernels on CUDA); the torch step elsewhere, ``O(depth² · Q³ · S² · m)`` per row and step.
    """

    kind = "vector_nondeterministic"
    State = VectorNondeterministicState
    actions = ("push", "repl", "pop", "vector")
    _name = "vector nondeterministic stack"
    BOTTOMS = ("learned", "one", "zero")

    def __init__(
        self,
        hidden_size: int,
        width: int | None = None,
        depth: int | None = None,
        states: int = 2,
        symbols: int = 3,
        vector_size: int = 4,
        bottom: str | None = None,
        normalize_transitions: bool = False,
        bottom_symbol: str = "fixed",
        window_size: int | None = None,
        **factory,
    ) -> None:
        self.vector_size = positive_int("vector_size", vector_size)
        if check_bottom_symbol(bottom_symbol) == "original":
            if bottom is not None:
                raise ValueError(
                    f"bottom_symbol='original' has no bottom vector (DuSell & Chiang's "
                    f"OldVectorNondeterministicStack), got bottom={bottom!r}; leave bottom out"
                )
        elif bottom is None:
            bottom = "learned"
        if bottom_symbol == "fixed" and bottom not in self.BOTTOMS:
            raise ValueError(f"bottom must be one of {', '.join(self.BOTTOMS)}, got {bottom!r}")
        self.bottom_kind = bottom
        super().__init__(
            hidden_size,
            width,
            depth,
            states,
            symbols,
            normalize_transitions,
            states_in_reading=True,
            bottom_symbol=bottom_symbol,
            window_size=window_size,
            **factory,
        )
        if bottom == "learned":
            self.bottom = nn.Parameter(torch.zeros(self.vector_size, **factory))

    def _reading_units(self) -> tuple[int, str]:
        return self.states * self.symbols * self.vector_size, "states × symbols × vector_size"

    def reset_parameters(self) -> None:
        super().reset_parameters()
        if self.bottom_kind == "learned":
            nn.init.zeros_(self.bottom)

    def _head_size(self) -> int:
        return super()._head_size() + self.vector_size

    def extra_repr(self) -> str:
        return (
            f"states={self.states}, symbols={self.symbols}, vector_size={self.vector_size}, "
            f"depth={self.depth} (window_size={self.window_size}), "
            f"bottom={self.bottom_kind!r}, normalize_transitions={self.normalize_transitions}, "
            f"bottom_symbol={self.bottom_symbol!r}"
        )

    def transitions(self, h: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """``h [B, hidden_size]`` -> log weights ``push, repl [B, QS, QS]``, ``pop [B, QS, Q]``
        and the log pushed vector ``[B, m]``."""
        return self.from_head(self.head(h))

    def from_head(self, out: Tensor) -> tuple[Tensor, ...]:
        return (*self._pda(out), F.logsigmoid(out[:, -self.vector_size :]))

    def log_bottom(self, *, device=None, dtype=None) -> Tensor | None:
        """The bottom vector's logarithm ``[m]`` (``LOG_ZERO`` for the zero vector; None with
        ``bottom_symbol="original"``, which has none)."""
        if self.bottom_kind is None:
            return None
        if self.bottom_kind == "learned":
            return F.logsigmoid(self.bottom.to(device=device, dtype=dtype))
        value = 0.0 if self.bottom_kind == "one" else LOG_ZERO
        return torch.full((self.vector_size,), value, device=device, dtype=dtype)

    def initial_state(self, batch_size: int, *, device, dtype) -> VectorNondeterministicState:
        steps, gamma, alpha = super().initial_state(batch_size, device=device, dtype=dtype)
        zeta, eta = vector_nondeterministic_initial(
            batch_size,
            self.states,
            self.symbols,
            self.vector_size,
            self.depth,
            self.log_bottom(device=device, dtype=dtype or torch.get_default_dtype()),
            bottom_symbol=self.bottom_symbol,
            device=device,
            dtype=dtype,
        )
        return VectorNondeterministicState(steps, gamma, alpha, zeta, eta)

    def read(self, state: VectorNondeterministicState) -> Tensor:
        return self.reading((state.alpha[:, -1], state.eta))

    def reading(self, out: tuple[Tensor, Tensor]) -> Tensor:
        """The reading ``[B, Q·S·m]`` from what a vector :class:`NondeterministicRun` step
        returns: ``(log α [B, QS], eta [B, QS, m])``, the expected top vectors being ``exp(eta)``."""
        return out[1].exp().flatten(1)

    def update(
        self,
        state: VectorNondeterministicState,
        actions: tuple[Tensor, Tensor, Tensor, Tensor],
        value: Tensor | None = None,
    ) -> tuple[VectorNondeterministicState, Tensor]:
        """One step on ``actions = (push, repl, pop, vector)`` (:meth:`transitions`);
        ``overflow [B]`` is 1 where the window drops runs."""
        gamma, alpha, zeta, eta = vector_nondeterministic_step(state.gamma, state.alpha, state.zeta, *actions)
        overflow = (state.steps.detach() >= self.depth).to(alpha.dtype)
        return VectorNondeterministicState(state.steps + 1, gamma, alpha, zeta, eta), overflow

    def step(
        self, h: Tensor, state: VectorNondeterministicState
    ) -> tuple[VectorNondeterministicState, dict[str, Tensor]]:
        """Act on ``h [B, hidden_size]``; diagnostics: the log weights ``push``, ``repl``,
        ``pop`` (as :class:`NondeterministicStack`), the pushed ``vector [B, m]`` in ``(0, 1)``
        and ``overflow [B]``."""
        actions = self.transitions(h)
        new, overflow = self.update(state, actions)
        diag = dict(zip(self.actions[:3], actions[:3], strict=True))
        return new, {**diag, "vector": actions[3].exp(), "overflow": overflow}


#: the memories by name, the one table of ``StackRNN(memory="…")``'s shortcuts (each ``kind``)
