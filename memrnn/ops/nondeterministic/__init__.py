"""The nondeterministic stack of DuSell & Chiang (NS-RNN 2020; RNS-RNN and its memory-limited
variant 2022) as one batched step in log space, vectorised over the window of inner weights and
over PDA configurations: no Python loop over steps, states or stack symbols
(:mod:`memrnn.ops.nondeterministic.reference` is the literal version it is tested against, and
its docstring states the recurrences).

Layout.  Configurations ``(q, x)`` are flattened to ``qx = q·S + x`` (``QS = Q·S`` of them).
After step ``t`` with window ``depth`` (``W = depth + 1`` start times ``i`` per column)::

    gamma [B, depth, depth, QS, QS]   gamma[a, c] = log γ[t−depth+a → t−depth+1+c]
    alpha [B, depth + 1, QS]          alpha[p]    = log α[t−depth+p]

Entries for ``i ≥ j`` or before the start are "log 0", stored as the finite :data:`LOG_ZERO`
so that no gradient is ever ``nan``; every new weight below ``LOG_ZERO / 2`` is set to it exactly.  Each step divides its
transition weights by the total forward weight ``Σ α[t]``: the readings (``α[t]`` normalised)
are exactly the papers', the stored weights are theirs up to one factor per step, and ``alpha``
stays normalised (log-sum 0) however long the sequence.  The bottom symbol's two behaviours
(DuSell & Chiang's 2023 fix, the default, and the 2020/2022 code's, ``bottom_symbol="original"``)
differ only in the starting window (:func:`nondeterministic_initial`): every step and run below
takes either.  Each step costs ``O(depth² · Q³ · S²)`` per row and memory ``O(depth² · Q²S²)``:
with ``depth ≥ T`` the stack is DuSell & Chiang's unlimited one (cubic time in T); a smaller
``depth`` is their memory-limited variant (linear in T).

The window against DuSell & Chiang's.  ``depth`` counts how many steps old the top element of a
kept run may be: step ``j`` keeps the inner weights ``γ[i → j]`` of the ``depth + 1`` start times
``i = j−depth−1..j−1``.  DuSell & Chiang's ``window_size`` ``D`` (the memory-limited RNS-RNN,
2022; ``--window-size`` of their scripts, ``D=35`` in their Penn Treebank runs) counts
those start times, ``j − D ≤ i ≤ j − 1`` (``LimitedNondeterministicStack.update`` in
``nsrnn/models/limited_nondeterministic_stack.py`` at tag ``iclr2022`` and in the 2023 code's
``stack_rnn_models/limited_nondeterministic_stack.py``; the vector stack's likewise): their
``window_size = D`` is memrnn's ``depth = D − 1`` (:func:`window_depth`).  Their ``D = 1`` keeps
only each step's push; memrnn's smallest window, ``depth = 1``, is their ``D = 2``.

On CPU tensors of float32 and float64 the stack runs in C++ (``native_step.cpp``) as a
:class:`NondeterministicRun`: a whole sequence's columns written once into one store (the window
above is copied at every step, ``O(depth²)`` bytes), the log-sum-exps formed term by term, batch
last so that each loop over the batch vectorises, and start times that are still log 0 never
computed, so that from the fresh stack step ``s`` costs ``O(min(s, depth)² · Q³S²)``.  A run
nothing will differentiate (``torch.no_grad``, ``torch.inference_mode``; in the sequence driver
also nothing requiring a gradient) keeps no history: its store is a ring of the last ``depth`` columns, so that the
memory-limited stacks' forward takes their window's memory whatever the length (the unlimited
stack's window is its whole sequence: :class:`NondeterministicRun`).
``StackRNN`` runs its sequences this way (:mod:`memrnn.ops.nondeterministic.sequence`: the
controller's steps around one run); :func:`nondeterministic_step` on CPU is a run of one step.  On
CUDA tensors of float32 and float64 the same run goes through Triton kernels
(:mod:`memrnn.ops.nondeterministic.triton`: the store batch first, three launches per step
forward and six backward, where the torch step launches about a hundred).  :func:`run_impl` says
which runs.  Both runs' backward is first order; ``impl="cpu"`` (or
:func:`memrnn.reference_paths`) keeps the torch step, whose gradients differentiate again.
"""

from __future__ import annotations

import torch
from torch import Tensor

from memrnn.core.checks import positive_int
from memrnn.ops.autograd import first_order
from memrnn.ops.dispatch import choose
from memrnn.ops.native import load
from memrnn.ops.nondeterministic.reference import (
    nondeterministic_reference,
    vector_nondeterministic_reference,
)

#: the finite stand-in for log 0: ``exp(LOG_ZERO)`` is 0 in float32 and float64, and a state
#: holding it stays safe to square, sum and differentiate
LOG_ZERO = -1.0e4


class _LogMatmul(torch.autograd.Function):
    """``out[..., i, j] = log Σ_k exp(a[..., i, k] + b[..., k, j])``, exact (the sum is formed
    inside one log-sum-exp, never as a product of separately shifted exponentials), keeping only
    ``a``, ``b`` and ``out`` for the backward pass, which recomputes the ``[..., I, K, J]`` terms."""

    @staticmethod
    def forward(ctx, a: Tensor, b: Tensor) -> Tensor:
        out = torch.logsumexp(a.unsqueeze(-1) + b.unsqueeze(-3), -2)
        ctx.save_for_backward(a, b, out)
        return out

    @staticmethod
    def backward(ctx, g: Tensor) -> tuple[Tensor, Tensor]:
        a, b, out = ctx.saved_tensors
        # out of place: under create_graph the exponentials are kept for the second derivative
        p = torch.exp(a.unsqueeze(-1) + b.unsqueeze(-3) - out.unsqueeze(-2)) * g.unsqueeze(-2)
        ga, gb = p.sum(-1), p.sum(-3)
        return ga.sum_to_size(a.shape), gb.sum_to_size(b.shape)  # undo the broadcasting


def _snap(x: Tensor) -> Tensor:
    """Normalised log weights below ``LOG_ZERO / 2`` are log 0: exactly :data:`LOG_ZERO` (no
    gradient), so that the weights of runs that cannot exist never drift above it."""
    return x.masked_fill(x <= LOG_ZERO / 2, LOG_ZERO)


def log_matmul(a: Tensor, b: Tensor) -> Tensor:
    """The log-semiring matrix product of ``a [..., I, K]`` and ``b [..., K, J]`` (leading
    dimensions broadcast): ``[..., I, J]``."""
    return _LogMatmul.apply(a, b)


#: the dtypes of the Triton run (log weights in half precision would not stay exact)
TRITON_DTYPES = (torch.float32, torch.float64)


def run_impl(x: Tensor, impl: str | None = None) -> str:
    """Where a stack on tensors like ``x`` runs: ``"native"`` (a :class:`NondeterministicRun` in
    C++: CPU, float32/float64), ``"triton"`` (a run in Triton kernels: CUDA, float32/float64; CPU
    tensors under Triton's interpreter when forced), or ``"cpu"`` (the torch step, any device and
    dtype, differentiable twice; also under ``torch.compile``/``export``, where the runs' ops have
    no fake kernels).  ``impl`` forces one, as do :func:`memrnn.ops.dispatch.implementation` and
    :func:`memrnn.reference_paths` (:func:`memrnn.ops.dispatch.choose`).  CUDA takes the Triton run
    unforced: on an H200 (Triton 3.6) its outputs, final states and every gradient were within
    torch's own float32 error of the float64 reference (``python -m benchmarks.kernel_precision``;
    ``benchmarks/results/stack-rnn-h200.md``), and the torch step is about 2.5× slower there."""
    if torch.compiler.is_compiling() and impl is None:
        return "cpu"
    return choose(x, impl, triton_ok=x.dtype in TRITON_DTYPES, native_ok=True, triton_dtypes=TRITON_DTYPES)


#: the bottom-symbol behaviours (:func:`nondeterministic_initial`)
BOTTOM_SYMBOLS = ("fixed", "original")


def check_bottom_symbol(bottom_symbol: str) -> str:
    """``bottom_symbol`` if it is one of :data:`BOTTOM_SYMBOLS`, else a ValueError naming it."""
    if not isinstance(bottom_symbol, str) or bottom_symbol not in BOTTOM_SYMBOLS:
        raise ValueError(f"bottom_symbol must be one of {', '.join(BOTTOM_SYMBOLS)}, got {bottom_symbol!r}")
    return bottom_symbol


#: the window of start times a nondeterministic stack keeps when neither ``depth`` nor
#: ``window_size`` is given (``depth``; DuSell & Chiang's ``window_size`` 33)
DEFAULT_DEPTH = 32


def window_depth(depth: int | None = None, window_size: int | None = None) -> int:
    """memrnn's ``depth`` from either it or DuSell & Chiang's ``window_size`` (module docstring:
    ``depth = window_size − 1``; :data:`DEFAULT_DEPTH` when both are None).

    Raises ``ValueError`` for a ``window_size`` below 2 (their ``window_size = 1`` keeps only each
    step's push, no replace or pop: memrnn's smallest window is ``window_size = 2``, ``depth = 1``),
    for a ``depth`` below 1, and when both are given and disagree."""
    if window_size is None:
        return DEFAULT_DEPTH if depth is None else positive_int("depth", depth)
    window_size = positive_int("window_size", window_size)
    if window_size < 2:
        raise ValueError(
            "window_size=1 (DuSell & Chiang's D = 1) keeps only each step's push, no replace or pop: a "
            "window memrnn does not build; its smallest is window_size=2 (depth=1)"
        )
    if depth is not None and positive_int("depth", depth) != window_size - 1:
        raise ValueError(
            f"depth={depth!r} and window_size={window_size!r} disagree: DuSell & Chiang's window_size counts "
            f"the start times kept per step, memrnn's depth is one less (depth={depth} is window_size="
            f"{depth + 1}, window_size={window_size} is depth={window_size - 1}); give one of them"
        )
    return window_size - 1


def nondeterministic_initial(
    batch_size: int,
    states: int,
    symbols: int,
    depth: int,
    *,
    device=None,
    dtype=None,
    bottom_symbol: str = "fixed",
) -> tuple[Tensor, Tensor]:
    """The stack before step 1: ``(gamma [B, depth, depth, QS, QS], alpha [B, depth + 1, QS])``.

    ``bottom_symbol="fixed"`` (DuSell & Chiang's 2023 code, ``NondeterministicStack``): ``γ[−1 →
    0] = α[−1] = α[0] = 1`` at state 0 and the bottom symbol 0, so that a pop can uncover the
    bottom.  ``"original"`` (the code of the published NS-RNN, CoNLL 2020, and RNS-RNN, ICLR 2022,
    numbers: ``nsrnn/models/nondeterministic_stack.py``, ``OldNondeterministicStack`` with
    ``original_bottom_symbol_behavior=True`` in the 2023 code): ``α[0] = 1`` alone, no start time
    −1, so that once a symbol is pushed the bottom is never on top again.  Every step (the torch
    step, the C++ and Triton runs) takes either state as it comes; the reference's
    ``bottom_symbol`` is the same switch (:mod:`memrnn.ops.nondeterministic.reference`)."""
    original = check_bottom_symbol(bottom_symbol) == "original"
    dtype = dtype or torch.get_default_dtype()
    qs = states * symbols
    lz = LOG_ZERO
    gamma = torch.full((batch_size, depth, depth, qs, qs), lz, device=device, dtype=dtype)
    alpha = torch.full((batch_size, depth + 1, qs), lz, device=device, dtype=dtype)
    alpha[:, depth, 0] = 0.0  # α[0]
    if not original:
        gamma[:, depth - 1, depth - 1, 0, 0] = 0.0  # γ[−1 → 0]
        alpha[:, depth - 1, 0] = 0.0  # α[−1]
    return gamma, alpha


class NondeterministicRun:
    """The stack over a sequence of up to ``steps`` steps on CPU (float32/float64), in C++
    (``native_step.cpp``): each column of inner weights is written once into one store for the
    whole run, where :func:`nondeterministic_step` copies the ``[depth, depth]`` window at every
    step, and start times still log 0 are never computed (from the fresh stack, step ``s`` costs
    ``O(min(s, depth)² · Q³S²)``, not ``O(depth² · Q³S²)``).

    Usage: ``run = NondeterministicRun(gamma, alpha, T, states=Q, lengths=...)``, then
    ``top = run.step(push, repl, pop)`` for each step (``log α [B, QS]`` after it, normalised),
    then ``gamma, alpha = run.final()``: each row's window after its own ``lengths[b]`` steps
    (all ``T`` when ``lengths`` is None), in :func:`nondeterministic_step`'s layout.  Gradients
    flow to the starting window, every step's transition weights and back from the final window
    (first order).  The final window equals :func:`nondeterministic_step`'s but below its
    diagonal (log 0 here; the torch step slides along whatever the starting window held there).

    Without history (``history=False``; by default a run made where gradients are off, under
    ``torch.no_grad`` or ``torch.inference_mode``) nothing can go back through the run: it keeps
    one step's arrays, and in C++ its store and forward weights are rings of the last ``depth``
    columns (``native_step.cpp``'s header, "Without history"), so that its memory is its window's,
    ``O(B · depth² · QS²)`` (``· m`` for a vector run), whatever the number of steps: the
    memory-limited stacks (DuSell & Chiang 2022's RNS-RNN with its window, 2023's vector RNS-RNN)
    evaluate long sequences in the memory of their state.  With ``depth ≥ steps`` (the unlimited
    NS-RNN, 2020) every column is kept all the same: that stack's state is itself ``O(T)``
    columns of ``O(T)`` start times.  Its readings and final windows equal a run's with history
    bit for bit (the same arithmetic; ``tests/ops/test_nondeterministic_inference.py``); each row's
    final window is copied out when the run has taken ``lengths[b]`` steps (later steps overwrite
    it), so :meth:`final` comes after the longest row's.  The Triton run without history keeps one
    step's arrays but every column (its kernels walk the store's diagonals by fixed strides).

    The nodes of a backward pass write into one gradient store, a fresh one for every pass (a
    second pass through the same graph, ``retain_graph=True``, gives the first one's gradients
    exactly): each step's node hands the next (earlier) one a zero-size token, so autograd runs
    them strictly from the last step back.  The nodes hold the run's arrays (:class:`_RunArrays`),
    never the run itself, which holds the token: a run → token → node → run cycle would keep
    every run's store alive until Python's cycle collector found it (gigabytes over an epoch).
    """

    def __init__(
        self,
        gamma: Tensor,
        alpha: Tensor,
        steps: int,
        *,
        states: int,
        lengths: Tensor | None = None,
        zeta: Tensor | None = None,
        impl: str | None = None,
        history: bool | None = None,
    ) -> None:
        impl = run_impl(gamma, impl)
        if impl not in ("native", "triton"):
            raise ValueError(
                f"NondeterministicRun runs in C++ (CPU, float32/float64) or in Triton (CUDA, float32/float64), "
                f"not on {gamma.device.type} {gamma.dtype} here: use nondeterministic_step"
            )
        self.impl = impl
        self.vector_size = 0 if zeta is None else zeta.shape[-1]
        history = torch.is_grad_enabled() if history is None else bool(history)
        self.arrays = _RunArrays(gamma, steps, states, lengths, impl, self.vector_size, history)
        self.steps, self.taken = self.arrays.steps, 0
        self.token = _Start.apply(self.arrays, gamma, alpha, zeta)
        if self.arrays.ring:
            # each row's final window, copied out of the rings at its length (_capture); the rows
            # of the full length at final()
            a = self.arrays
            self._ends = {n for n in a.lengths.tolist() if n < a.steps}
            self._longest = int(a.lengths.max()) if a.batch else 0
            self._window: tuple[Tensor, Tensor, Tensor] | None = None
            if 0 in self._ends:
                self._capture()

    def step(
        self, push: Tensor, repl: Tensor, pop: Tensor, vector: Tensor | None = None
    ) -> Tensor | tuple[Tensor, Tensor]:
        """One step on the log weights ``push, repl [B, QS, QS]``, ``pop [B, QS, Q]``; returns
        ``log α [B, QS]`` after it.  A vector run (made with ``zeta``) takes the log pushed
        vector ``vector [B, m]`` too and returns ``(log α, eta [B, QS, m])``, ``eta`` as
        :func:`vector_nondeterministic_step`'s."""
        if self.taken >= self.steps:
            raise RuntimeError(f"this run was made for {self.steps} steps")
        if (vector is None) != (self.vector_size == 0):
            raise ValueError(
                "a vector run (made with zeta) takes a pushed vector at every step, a plain run none"
            )
        if vector is None:
            vector = push.new_zeros(push.shape[0], 0)
        if not self.arrays.keep and torch.is_grad_enabled():
            wanted = [t for t in (push, repl, pop, vector) if t.requires_grad]
            if wanted:
                raise RuntimeError(
                    f"NondeterministicRun: made without history (history=False, or under torch.no_grad), "
                    f"but step {self.taken}'s weights require a gradient: make the run with history=True"
                )
        top, eta, self.token = _Step.apply(self.arrays, self.taken, self.token, push, repl, pop, vector)
        self.taken += 1
        if self.arrays.ring and self.taken in self._ends:
            self._capture()
        return top if self.vector_size == 0 else (top, eta)

    def final(self) -> tuple[Tensor, ...]:
        """Each row's window after its ``lengths[b]`` steps: ``(gamma [B, depth, depth, QS, QS],
        alpha [B, depth + 1, QS])``, and ``zeta [B, depth, depth, QS, QS, m]`` for a vector run.
        Without history (in C++) the run must have taken the longest row's steps, and every call
        returns the same tensors."""
        if self.arrays.ring:
            if self.taken < self._longest:
                raise RuntimeError(
                    f"NondeterministicRun: a run without history gives its final windows once it has taken "
                    f"its longest row's {self._longest} steps, not after {self.taken}"
                )
            gamma, alpha, zeta = self._capture()
        else:
            gamma, alpha, zeta = _Final.apply(self.arrays, self.token)
        return (gamma, alpha) if self.vector_size == 0 else (gamma, alpha, zeta)

    def _capture(self) -> tuple[Tensor, Tensor, Tensor]:
        """Without history: the windows of the rows whose length is the steps taken, copied out of
        the rings into the run's final windows (made log 0 at the first copy)."""
        a = self.arrays
        if self._window is None:
            B, D, QS, m = a.batch, a.depth, a.qs, self.vector_size
            full = lambda *shape: a.store.new_full(shape, LOG_ZERO)  # noqa: E731
            self._window = (full(B, D, D, QS, QS), full(B, D + 1, QS), full(B, D, D, QS, QS, m))
        a.ops.ns_run_window_into(a.store, a.alphas, a.geo, a.lengths, self.taken, *self._window)
        return self._window

    def nbytes(self) -> int:
        """The bytes this run keeps for its backward (the store, the forward weights and every
        step's arrays; the gradient store, made in the backward, is as large as the first two);
        without history, those it holds for its next steps (the store's and the forward weights'
        rings in C++, one step's arrays)."""
        a = self.arrays
        arrays = (a.store, a.alphas, *(t for t in a.buffers if isinstance(t, Tensor)))  # not the caller's
        return sum(t.numel() * t.element_size() for t in arrays)


class _RunArrays:
    """What a :class:`NondeterministicRun`'s autograd nodes share: the store, the forward weights,
    every step's arrays (``native_step.cpp``) and the gradient store."""

    def __init__(
        self,
        gamma: Tensor,
        steps: int,
        states: int,
        lengths: Tensor | None,
        impl: str,
        vector_size: int,
        history: bool,
    ) -> None:
        if impl == "triton":
            from memrnn.ops.nondeterministic.triton import TRITON_RUN_OPS

            self.ops, device = TRITON_RUN_OPS, gamma.device  # the run's lengths stay on its device
        else:
            self.ops, device = load(), torch.device("cpu")
            if self.ops is None:
                raise RuntimeError("NondeterministicRun needs memrnn's C++ ops (memrnn.ops.native)")
        self.impl, self.vector_size, self.qs = impl, int(vector_size), int(gamma.shape[-1])
        self.batch, self.states, self.steps = int(gamma.shape[0]), int(states), int(steps)
        self.depth = int(gamma.shape[1])
        if lengths is None:
            lengths = torch.full((self.batch,), self.steps, dtype=torch.long)
        self.lengths = lengths.to(device, torch.long).contiguous()
        if impl == "native" and self.batch:
            low, high = int(self.lengths.min()), int(self.lengths.max())
            if low < 0 or high > self.steps:
                raise ValueError(
                    f"NondeterministicRun: lengths must lie in 0..{self.steps} (the run's steps), got a length "
                    f"of {low if low < 0 else high}"
                )
        self.keep = bool(history)  # keep every step's arrays for the backward
        self.ring = not self.keep and impl == "native"  # the C++ store's rings (no history)
        self._grads: tuple[Tensor, Tensor] | None = None
        self._pass = -1

    def grads(self) -> tuple[Tensor, Tensor]:
        """The gradient store of the backward pass now running: zeros at its first node, the same
        tensors at its later ones.  A pass is told apart by autograd's own id of it (the graph
        task, as ``torch.utils.checkpoint`` tells its passes apart), not by where it starts: a
        pass that stops early (``torch.autograd.grad`` for a later step's weights only) leaves
        gradients in the store for the earlier steps, which the next pass must not read, even
        when it starts below where that one stopped; and the nodes of one pass (two final
        windows' included) share one store."""
        current = torch._C._current_graph_task_id()
        if self._grads is None or current != self._pass:
            self._grads = (torch.zeros_like(self.store), torch.zeros_like(self.alphas))
            self._pass = current
        return self._grads

    def release(self) -> None:
        """Drop the gradient store (the start's node, the last of every pass that reaches it,
        is done with it)."""
        self._grads, self._pass = None, -1


class _Start(torch.autograd.Function):
    @staticmethod
    def forward(ctx, run, gamma, alpha, zeta):  # type: ignore[override]
        z = None if zeta is None else zeta.contiguous()
        window = (gamma.contiguous(), alpha.contiguous(), z, run.steps)
        if run.impl == "native":  # without history its store and forward weights are rings
            run.store, run.alphas, run.geo = run.ops.ns_run_start(*window, run.keep)
        else:
            run.store, run.alphas, run.geo = run.ops.ns_run_start(*window)
        run.buffers = run.ops.ns_run_buffers(
            run.store, run.geo, run.states, max(run.steps, 1) if run.keep else 1
        )
        ctx.run, ctx.vector = run, zeta is not None
        ctx.save_for_backward(gamma, *([] if zeta is None else [zeta]))
        return gamma.new_zeros(0)

    @staticmethod
    @first_order
    def backward(ctx, _token):  # type: ignore[override]
        run = ctx.run
        gamma, *zeta = ctx.saved_tensors
        gs, ga = run.grads()
        g_gamma, g_alpha, g_zeta = run.ops.ns_run_window(
            gs, ga, run.geo, torch.zeros_like(run.lengths), run.batch, 0.0
        )  # copies: the store can go
        run.release()
        g_zeta = g_zeta.masked_fill(zeta[0] <= LOG_ZERO / 2, 0.0) if ctx.vector else None
        return None, g_gamma.masked_fill(gamma <= LOG_ZERO / 2, 0.0), g_alpha, g_zeta  # log 0 read as log 0


class _Step(torch.autograd.Function):
    @staticmethod
    def forward(ctx, run, s, token, push, repl, pop, vector):  # type: ignore[override]
        weights = _layout(run, push, repl, pop, vector)
        top, eta = run.ops.ns_run_step(
            run.store, run.alphas, run.buffers, run.geo, s if run.keep else 0, s, *weights
        )
        ctx.run, ctx.s = run, s
        ctx.set_materialize_grads(False)  # an output nobody reads (the vector stack's α) costs nothing
        return top, eta.transpose(1, 2), token.new_zeros(0)  # eta [B, QS, m]

    @staticmethod
    @first_order
    def backward(ctx, g_top, g_eta, token):  # type: ignore[override]
        run, s = ctx.run, ctx.s
        if not run.keep:
            raise RuntimeError("NondeterministicRun: made without gradients (torch.no_grad), cannot go back")
        gs, ga = run.grads()
        if g_eta is not None:
            g_eta = g_eta.transpose(1, 2)  # [B, m, QS]
        if run.impl != "triton":  # the C++ run reads every gradient
            g_top = gs.new_zeros(run.batch, run.qs) if g_top is None else g_top
            g_eta = gs.new_zeros(run.batch, run.vector_size, run.qs) if g_eta is None else g_eta
        grads = run.ops.ns_run_step_backward(
            run.store, run.alphas, run.buffers, run.geo, s, s, gs, ga, *_layout(run, g_top, g_eta), run.states
        )
        return None, None, token if token is not None else gs.new_zeros(0), *grads


def _layout(run: _RunArrays, *tensors: Tensor | None) -> tuple[Tensor | None, ...]:
    """Tensors as a run's ops read them: contiguous for the C++ run, in place (any strides; None
    for a gradient nobody sent) for the Triton run."""
    return tensors if run.impl == "triton" else tuple(t.contiguous() for t in tensors)


class _Final(torch.autograd.Function):
    @staticmethod
    def forward(ctx, run, token):  # type: ignore[override]
        ctx.run = run
        gamma, alpha, zeta = run.ops.ns_run_window(
            run.store, run.alphas, run.geo, run.lengths, run.batch, LOG_ZERO
        )
        return gamma, alpha, zeta

    @staticmethod
    @first_order
    def backward(ctx, g_gamma, g_alpha, g_zeta):  # type: ignore[override]
        run = ctx.run
        gs, ga = run.grads()
        run.ops.ns_run_window_backward(
            gs, ga, run.geo, run.lengths, g_gamma.contiguous(), g_alpha.contiguous(), g_zeta.contiguous()
        )
        return None, g_gamma.new_zeros(0)


def nondeterministic_step(
    gamma: Tensor, alpha: Tensor, push: Tensor, repl: Tensor, pop: Tensor, *, impl: str | None = None
) -> tuple[Tensor, Tensor]:
    """One step of DuSell & Chiang's recurrences for the whole batch (module docstring).

    Args:
        gamma: ``[B, depth, depth, QS, QS]``, alpha ``[B, depth + 1, QS]``: the stack after
            step ``t`` (log weights).
        push, repl: ``[B, QS, QS]`` log weights of ``q, x → r, xy`` and ``q, x → r, y``;
            pop ``[B, QS, Q]`` of ``q, x → r, ε``.
        impl: ``"native"`` (C++, CPU tensors of float32/float64: ``native_step.cpp``, first-order
            gradients) or ``"cpu"`` (torch operations, any device, differentiable twice); None
            picks by device and dtype (:func:`memrnn.ops.dispatch.choose`).

    Returns:
        The stack after step ``t + 1``; ``alpha[:, -1] [B, QS]`` is ``log α[t + 1]``.
    """
    impl = run_impl(gamma, impl)
    if impl in ("native", "triton"):
        run = NondeterministicRun(gamma, alpha, 1, states=pop.shape[-1], impl=impl)
        run.step(push, repl, pop)
        return run.final()
    gamma, col, _ = _torch_column(gamma, alpha, push, repl, pop)
    new_alpha, z = _forward_weights(alpha, col)
    return _slide(gamma, _normalised(col, z)), torch.cat([alpha[:, 1:], new_alpha[:, None]], 1)


def _torch_column(
    gamma: Tensor, alpha: Tensor, push: Tensor, repl: Tensor, pop: Tensor
) -> tuple[Tensor, Tensor, Tensor | None]:
    """The torch step's new column before normalisation: ``(gamma`` read with log 0 exact,
    ``col [B, D + 1, QS, QS]`` = log γ[i → t+1] for ``i = t−D..t``, ``rhs`` the popped runs'
    weights ``[B, S, (D−1)·Q, Q]`` (None at depth 1) that the vector stack's column reuses)."""
    B, D, _, QS, _ = gamma.shape
    Q = pop.shape[-1]
    S = QS // Q
    gamma = _read_window(gamma)
    last = gamma[:, :, D - 1]  # γ[i → t] for the D start times i = t−D..t−1: [B, D, QS, QS]
    # replace: every run still open at t takes one replace transition
    col = log_matmul(last, repl[:, None])  # [B, D, QS, QS]
    rhs = None
    if D >= 2:
        # pop: a run from i reaches k with y on top, the element pushed at k+1 is popped at t+1
        # γ'[k] = Σ_{s,z} γ[k → t][t', y → s, z] pop[s, z → r]  for k = t−D+1..t−1
        gp = log_matmul(last[:, 1:], pop[:, None])  # [B, D−1, QS(t'y), Q(r)]
        E = D - 1
        # γ[i → k][qx, t'y] for i = t−D..t−2 (rows 0..D−2), k = t−D+1..t−1 (columns 0..D−2)
        inner = gamma[:, :E, :E].reshape(B, E, E, QS, Q, S)
        lhs = inner.permute(0, 5, 1, 3, 2, 4).reshape(B, S, E * QS, E * Q)  # [B, y, (i, qx), (k, t')]
        rhs = gp.reshape(B, E, Q, S, Q).permute(0, 3, 1, 2, 4).reshape(B, S, E * Q, Q)  # [B, y, (k, t'), r]
        popped = log_matmul(lhs, rhs).reshape(B, S, E, QS, Q).permute(0, 2, 3, 4, 1)  # [B, i, qx, r, y]
        col = torch.cat([_logaddexp(col[:, :E], popped.reshape(B, E, QS, QS)), col[:, E:]], 1)
    return gamma, torch.cat([col, push[:, None]], 1), rhs  # i = t−D..t


def _logaddexp(a: Tensor, b: Tensor) -> Tensor:
    """``log(exp(a) + exp(b))`` through ``logsumexp``, whose backward ``exp(x − out)`` stays finite
    when differentiated again; ``torch.logaddexp``'s ``1 / (1 + exp(b − a))`` overflows for a log 0
    beside a live weight, and its second derivative is then ``inf / inf``."""
    return torch.logsumexp(torch.stack([a, b]), 0)


def _read_window(window: Tensor) -> Tensor:
    """A window ``[B, D, D, …]`` with log 0 read as exactly log 0, as the C++ run reads it: below
    the diagonal (an end before its start) and below ``LOG_ZERO / 2``."""
    D = window.shape[1]
    below = torch.ones(D, D, dtype=torch.bool, device=window.device).tril(-1)
    return _snap(window).masked_fill(below.view(D, D, *[1] * (window.dim() - 3)), LOG_ZERO)


def _normalised(x: Tensor, z: Tensor) -> Tensor:
    """Log weights ``x [B, …]`` of step t+1 divided by ``Σ α[t+1] = exp(z [B])``, log 0 exact."""
    return _snap(x - z.view(-1, *[1] * (x.dim() - 1)))


def _forward_weights(alpha: Tensor, col: Tensor) -> tuple[Tensor, Tensor]:
    """``(log α[t+1] [B, QS]`` normalised, ``z [B]`` = log Σ α[t+1] before it) from the window
    ``alpha [B, D + 1, QS]`` and the new column ``col [B, D + 1, QS, QS]``.  Step t+1's
    transitions are scaled by ``1 / Σ α[t+1]``: the readings do not change, and α stays
    normalised however long the sequence."""
    B, QS = alpha.shape[0], alpha.shape[-1]
    new_alpha = log_matmul(alpha.reshape(B, 1, -1), col.reshape(B, -1, QS))[:, 0]
    z = torch.logsumexp(new_alpha, -1)
    return _normalised(new_alpha, z), z


def _slide(window: Tensor, col: Tensor) -> Tensor:
    """The window ``[B, D, D, …]`` after the new column ``col [B, D + 1, …]`` (start times
    ``t−D..t``): start time ``t−D`` and step ``t−D+1``'s column drop out, the newest start time
    ``t`` has no earlier column (log 0), the new column holds ``i = t−D+1..t``."""
    B, D = window.shape[:2]
    older = torch.cat([window[:, 1:, 1:], window.new_full((B, 1, D - 1, *window.shape[3:]), LOG_ZERO)], 1)
    return torch.cat([older, col[:, 1:, None]], 2)


def vector_nondeterministic_initial(
    batch_size: int,
    states: int,
    symbols: int,
    vector_size: int,
    depth: int,
    bottom: Tensor | None,
    *,
    bottom_symbol: str = "fixed",
    device=None,
    dtype=None,
) -> tuple[Tensor, Tensor]:
    """The vector stack's part of the state before step 1 (:func:`nondeterministic_initial`
    holds the rest): ``(zeta [B, depth, depth, QS, QS, m], eta [B, QS, m])`` holding
    ``ζ[−1 → 0][0, 0 → 0, 0] = η[0][0, 0] = v_0`` from the log bottom vector ``bottom [m]``
    (differentiable: a learnt bottom vector takes its gradient through the state).

    ``bottom_symbol="original"`` (DuSell & Chiang's ``OldVectorNondeterministicStack``, 2023
    code): no start time −1, hence no bottom vector (``bottom`` must be None; ``device`` and
    ``dtype`` then place the state): ``ζ`` and ``η`` all log 0, the first reading zeros as
    theirs."""
    qs, m, B = states * symbols, vector_size, batch_size
    if check_bottom_symbol(bottom_symbol) == "original":
        if bottom is not None:
            raise ValueError(
                "bottom_symbol='original' has no bottom vector "
                "(DuSell & Chiang's OldVectorNondeterministicStack): pass bottom=None"
            )
        dtype = dtype or torch.get_default_dtype()
        zeta = torch.full((B, depth, depth, qs, qs, m), LOG_ZERO, device=device, dtype=dtype)
        return zeta, torch.full((B, qs, m), LOG_ZERO, device=device, dtype=dtype)
    if bottom is None:
        raise ValueError("bottom_symbol='fixed' needs the log bottom vector bottom [m], got None")
    if bottom.shape != (m,):
        raise ValueError(f"the bottom vector has shape {tuple(bottom.shape)}, expected ({m},)")
    bottom = _snap(bottom)
    zeta = bottom.new_full((B, depth, depth, qs, qs, m), LOG_ZERO)
    corner = torch.zeros(depth, depth, qs, qs, 1, dtype=torch.bool, device=bottom.device)
    corner[depth - 1, depth - 1, 0, 0] = True
    zeta = torch.where(corner, bottom, zeta)
    eta = torch.where(
        torch.arange(qs, device=bottom.device)[:, None] == 0, bottom, bottom.new_full((qs, m), LOG_ZERO)
    )
    return zeta, eta.expand(B, qs, m).clone()


def vector_nondeterministic_step(
    gamma: Tensor,
    alpha: Tensor,
    zeta: Tensor,
    push: Tensor,
    repl: Tensor,
    pop: Tensor,
    vector: Tensor,
    *,
    impl: str | None = None,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """One step of the vector RNS-RNN's stack (DuSell & Chiang 2023; the recurrences of
    :mod:`memrnn.ops.nondeterministic.reference`) for the whole batch: in C++ on CPU (a run of one
    step), else in torch operations on any device (differentiable twice):
    :func:`nondeterministic_step`'s columns of ``γ``, and the same products with the vector
    dimension carried along for ``ζ``.

    Args:
        gamma, alpha: as :func:`nondeterministic_step`; zeta ``[B, depth, depth, QS, QS, m]``,
            the window of log ``ζ`` in ``gamma``'s layout.
        push, repl ``[B, QS, QS]``, pop ``[B, QS, Q]``: log transition weights; vector
            ``[B, m]``: the log pushed vector.
        impl: ``"native"`` (a :class:`NondeterministicRun` of one step: C++, CPU tensors of
            float32/float64, first-order gradients) or ``"cpu"`` (the torch operations here);
            None picks by device and dtype.

    Returns:
        ``(gamma, alpha, zeta, eta)`` after the step; ``eta [B, QS, m]`` is log ``η[t+1]``
        divided by ``Σ α[t+1]``, so ``eta.exp()`` is the reading (the expected top vector per
        ``(r, y)``).
    """
    impl = run_impl(gamma, impl)
    if impl in ("native", "triton"):
        run = NondeterministicRun(gamma, alpha, 1, states=pop.shape[-1], zeta=zeta, impl=impl)
        _, eta = run.step(push, repl, pop, vector)
        return (*run.final(), eta)
    B, D, _, QS, _, m = zeta.shape
    Q = pop.shape[-1]
    S = QS // Q
    gamma, col, rhs = _torch_column(gamma, alpha, push, repl, pop)
    zeta = _read_window(zeta)
    # replace keeps the vector: [B, D, qx, m, sz] ⊗ [sz, ry]
    zcol = log_matmul(zeta[:, :, D - 1].transpose(-1, -2), repl[:, None, None]).transpose(-1, -2)
    if rhs is not None:
        # pop uncovers the vector below: ζ[i → k][qx, t'y] with the popped runs' weights
        E = D - 1
        inner = zeta[:, :E, :E].reshape(B, E, E, QS, Q, S, m)
        lhs = inner.permute(0, 5, 1, 3, 6, 2, 4).reshape(
            B, S, E * QS * m, E * Q
        )  # [B, y, (i, qx, m), (k, t')]
        popped = (
            log_matmul(lhs, rhs).reshape(B, S, E, QS, m, Q).permute(0, 2, 3, 5, 1, 4)
        )  # [B, i, qx, r, y, m]
        zcol = torch.cat([_logaddexp(zcol[:, :E], popped.reshape(B, E, QS, QS, m)), zcol[:, E:]], 1)
    zcol = torch.cat([zcol, (push[:, :, :, None] + vector[:, None, None, :])[:, None]], 1)  # i = t−D..t
    new_alpha, z = _forward_weights(alpha, col)
    eta = log_matmul(alpha.reshape(B, 1, -1), zcol.reshape(B, (D + 1) * QS, QS * m))[:, 0]
    eta = _normalised(eta.reshape(B, QS, m), z)
    gamma = _slide(gamma, _normalised(col, z))
    zeta = _slide(zeta, _normalised(zcol, z))
    return gamma, torch.cat([alpha[:, 1:], new_alpha[:, None]], 1), zeta, eta


__all__ = [
    "BOTTOM_SYMBOLS",
    "DEFAULT_DEPTH",
    "LOG_ZERO",
    "NondeterministicRun",
    "check_bottom_symbol",
    "log_matmul",
    "nondeterministic_initial",
    "nondeterministic_reference",
    "nondeterministic_step",
    "run_impl",
    "vector_nondeterministic_initial",
    "vector_nondeterministic_reference",
    "vector_nondeterministic_step",
    "window_depth",
]
