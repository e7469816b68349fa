"""A controller RNN driving a differentiable memory, whole sequence at once with hand-written
backpropagation through time: :class:`StackRNNSequence` (the method of :mod:`memrnn.ops.bptt`).

Everything runs transposed, on ``[features, batch]`` columns (as :class:`memrnn.ops.lstm.cpu.LSTMSequence`):

* ``z [T+1, N+m, B]`` holds ``[h_t ; r_t]``, the controller's output and the memory's reading
  after step ``t`` (``t = 0``: the initial state), which is the recurrent input of step ``t+1``:
  one ``addmm`` of ``w_z = [w_rec  w_r]`` gives the step's gates;
* ``heads [T, K, B]``: the memory's actions (softmax or sigmoid) and value after each step;
* with a value MLP (the Tape-RNN's write head, Delétang et al. 2023), its hidden layers'
  activations ``[T, H_l, B]``: the head then gives the actions only, and the value is
  ``W_L relu(… relu(W_1 h + b_1) …) + b_L`` (and the value activation);
* the memory's own buffers (its kernel class, :class:`memrnn.ops.memory.MemoryKernel`, in its own
  folder: ``memrnn/ops/<memory>/cpu.py``, named by its spec, :mod:`memrnn.ops.stack_rnn.specs`).

The forward loop records no graph; the backward loop runs, per step, the memory's backward, the
heads' (one ``addmm`` into ``∂h``; a value MLP's layers one ``mm`` each, their pre-activations'
gradients kept for the weights'), then the controller's (one ``mm``), with the local derivatives
that do not depend on the incoming gradient computed for :data:`memrnn.ops.bptt.BLOCK` steps at a
time.  Each row's final state is gathered at its own length, and its gradient enters the backward
loop at that step, so masks cost nothing.  Every subgradient (``clamp_min`` at 0, ``minimum`` at a
tie) is autograd's, so the gradients equal the reference loop's to rounding.

On CPU tensors of float32 and float64 the two loops run in C++ (``native.cpp`` beside this file and each memory's ``native.h``,
:mod:`memrnn.ops.native`; ``spec``'s last field), on the same buffers, for every memory
here; the Python loops are their fallback and their check.
"""

from __future__ import annotations

import torch
from torch import Tensor

from memrnn.ops import scratch
from memrnn.ops.autograd import first_order
from memrnn.ops.bptt import blocks, input_grads_block
from memrnn.ops.buckets import final_by_length
from memrnn.ops.native import load
from memrnn.ops.stack_rnn.specs import CODES, KERNELS


def _value_derivative(name: str, v: Tensor) -> Tensor | None:
    """``act'`` from the activation's output ``v`` (None for the identity)."""
    if name == "sigmoid":
        return v - v * v
    if name == "tanh":
        return 1 - v * v
    return None


def _cols(t: Tensor, M: int) -> Tensor:
    """Columns of ``M`` members ``[R, M·B]`` (member-major) as the view ``[M, R, B]``, for a
    product per member (``bmm``); ``[..., R, M·B]`` -> ``[..., M, R, B]``."""
    return t.unflatten(-1, (M, -1)).transpose(-3, -2)


def _products(M: int):
    """``(addmm_(out, w, z), addmm(bias, w, z, out), mm(w, z, out))`` on columns: ``out += w z``,
    ``out = bias + w z`` and ``out = w z`` with ``w [R, Q]``, ``z [Q, B]`` (torch's ``addmm``/``mm``),
    or, with ``M`` members (``M > 0``), ``w [M, R, Q]`` on each member's columns of ``z [Q, M·B]``
    (``baddbmm``/``bmm`` on :func:`_cols` views, written in place)."""
    if not M:
        return (
            lambda out, w, z: out.addmm_(w, z),
            lambda bias, w, z, out: torch.addmm(bias, w, z, out=out),
            lambda w, z, out: torch.mm(w, z, out=out),
        )
    return (
        lambda out, w, z: _cols(out, M).baddbmm_(w, _cols(z, M)),
        lambda bias, w, z, out: torch.baddbmm(bias, w, _cols(z, M), out=_cols(out, M)),
        lambda w, z, out: torch.bmm(w, _cols(z, M), out=_cols(out, M)),
    )


def _forward_loop(
    spec, mem, N, mr, acts, z, w_z, w_head, b_head, heads, A, cs, xs, overflow, mlp, M=0, ring=None
) -> None:
    """The forward loop of :class:`StackRNNSequence` in Python (every device and dtype); ``mlp =
    (weights, biases, hidden buffers [T, H_l, B])`` of the value MLP, each empty without one;
    ``M`` members (0: none) as :func:`_products`.  ``ring`` (a :class:`_Ring`, None: keep every
    step): the forward without history, its buffers' time slots reused (:class:`_Ring`)."""
    controller, activation, _, value_act, want_overflow = spec[:5]
    addmm_, addmm, _ = _products(M)
    T, k = (acts.shape[0] if ring is None else ring.T), A.shape[1]
    lstm = controller == "lstm"
    a_, zr_, h_, hd_ = acts.unbind(0), z[:, : N + mr].unbind(0), z[:, :N].unbind(0), heads.unbind(0)
    ha_, hv_, A_ = heads[:, :k].unbind(0), heads[:, k:].unbind(0), A.unbind(0)
    rows_ = list(zip(*(A[:, j].unbind(0) for j in range(k)), strict=True))
    if lstm:
        sig_, g_ = acts[:, : 3 * N].unbind(0), acts[:, 3 * N :].unbind(0)
        o_, i_, f_ = (acts[:, j * N : (j + 1) * N].unbind(0) for j in range(3))
        c_, x_ = cs.unbind(0), xs.unbind(0)
    else:
        act = {"tanh": torch.tanh, "sigmoid": torch.sigmoid, "relu": torch.relu}[activation]
    vfn = {"sigmoid": Tensor.sigmoid_, "tanh": Tensor.tanh_, "identity": None}[value_act]
    afn = torch.softmax if mem.softmax else None
    mlp_w, mlp_b, mlp_h = mlp
    head_ = ha_ if mlp_w else hd_  # with a value MLP the head gives the actions only
    # the value MLP's layers: (weight, bias column, per-step outputs), the last into the value rows
    outs = [*(h.unbind(0) for h in mlp_h), hv_] if mlp_w else []
    layers = [(w, bb.unsqueeze(-1), o) for w, bb, o in zip(mlp_w, mlp_b, outs, strict=True)]
    # a trimming memory's live ranges by step, read at its ring slot p (s − p steps behind)
    shifted = None
    if ring is not None and getattr(mem, "_C", None) is not None:
        mem._C = shifted = _Shifted(mem._C, 0)
    for s in range(T):
        # p: the time slot of z, cs and the memory's buffers that step s reads (it writes p + 1);
        # a: its slot of acts; j: of the per-step buffers (heads, A, xs, the MLP's)
        p = a = j = s
        if ring is not None:
            p, a, j = s % ring.steps, s % _PROJECT, 0
            if s and p == 0:
                ring.rewind()
            if a == 0:
                ring.project(s)
        addmm_(a_[a], w_z, zr_[p])
        if lstm:
            sig_[a].sigmoid_()
            g_[a].tanh_()
            torch.mul(f_[a], c_[p], out=c_[p + 1])
            c_[p + 1].addcmul_(i_[a], g_[a])
            torch.tanh(c_[p + 1], out=x_[j])
            torch.mul(o_[a], x_[j], out=h_[p + 1])
        else:
            h_[p + 1].copy_(act(a_[a]))
        addmm(b_head.unsqueeze(-1), w_head, h_[p + 1], head_[j])
        inp = h_[p + 1]
        for n, (w, bb, o) in enumerate(layers, 1):
            addmm(bb, w, inp, o[j])
            if n < len(layers):
                o[j].relu_()  # a hidden layer's activation, kept for the backward
            inp = o[j]
        if afn is not None:
            torch.softmax(ha_[j], 0, out=A_[j])
        else:
            torch.sigmoid(ha_[j], out=A_[j])
        if vfn is not None:
            vfn(hv_[j])
        if shifted is not None:
            shifted.off = s - p
        lost = mem.forward(p, rows_[j], hv_[j])
        if lost is not None and want_overflow:
            overflow[s] = lost
        if ring is not None:
            ring.keep(s, p + 1)


#: without history, the steps between two rewinds of z, cs and the memory's buffers to their first
#: slot (:class:`_Ring`): they hold ``RING + 1`` steps.  At 1 to 16 the time of a superposition LSTM
#: forward (B 64, N 64, m 8, depth = T = 1024) did not differ beyond this CPU's noise; memory grows
#: with it by a state per step
RING = 2
#: the steps whose input projection the Python loop's no-history forward computes at once
_PROJECT = 32
#: the steps between the checkpoints of a recomputed memory (``native.cpp``'s "Recomputed memory":
#: the training forward keeps the memory every this many steps and the backward reruns the steps
#: between, instead of storing every step's window; 0: never).  The forward's ring and the
#: backward's rerun hold this many windows plus one: at 8 they stay in cache where 32 did not
#: (superposition, LSTM, B 64, N 64, m 8, one thread, forward+backward, in-process alternation:
#: T 256 57.9 -> 55.2 ms best, T 1024 393 -> 325-350 ms; peak memory at T 1024 +26 MiB of 178)
RECOMPUTE = 8


class _Shifted:
    """``seq`` read ``off`` later: ``_Shifted(seq, off)[i] == seq[i + off]`` (a trimming memory's live
    ranges, indexed by the ring's slot ``p`` at step ``s = p + off``)."""

    __slots__ = ("off", "seq")

    def __init__(self, seq, off: int) -> None:
        self.seq, self.off = seq, off

    def __getitem__(self, i: int):
        return self.seq[i + self.off]


class NoHistory:
    """The ``ctx`` of a :class:`StackRNNSequence` forward that nothing will differentiate
    (:func:`memrnn.ops.stack_rnn.opaque.hand_written` calls ``StackRNNSequence.forward`` with it
    when no gradient is needed): it saves nothing, and the forward keeps no history (:class:`_Ring`)."""

    no_history = True

    def set_materialize_grads(self, value: bool) -> None:
        pass

    def save_for_backward(self, *tensors: Tensor | None) -> None:
        pass

    def mark_non_differentiable(self, *tensors: Tensor) -> None:
        pass


class _Ring:
    """The forward without history: O(batch × state) memory instead of O(T × batch × state).

    z, cs and the memory's buffers hold ``Tm + 1`` steps (``Tm = min(T, RING)``; the memory's
    kernel is built for ``Tm`` steps, ``memrnn/ops/<memory>/cpu.py``, unchanged): step ``s`` runs
    as the kernel's step ``s mod Tm``, and before each step with ``s mod Tm = 0`` (``s > 0``) the
    state of the last slot moves to the first (:meth:`rewind`): z's and cs's slot, and the sliding
    buffers' windows (``P``, newest first, its window at step ``t`` ``P[Tm−t : Tm−t+D]``; the
    DeQue's ``P2``, oldest first, ``P2[t : t+D]``; the strengths ``S [Tm+1, ·, B]``: the layout of
    :meth:`memrnn.ops.memory.MemoryKernel.native_buffers`).  The per-step buffers (heads, the
    actions, the LSTM's ``tanh c``, the value MLP's) hold one step, the inputs' projection one
    block of :data:`_PROJECT` steps (two in C++, whose next block is projected on another thread).
    After each step, ``[h ; r]`` is copied to the outputs (``zout [T, N + mr, B]``) and each row
    whose length is the step's keeps its state (:meth:`keep`) in a kernel built for 0 steps
    (``fin``, which starts at the initial state: rows of length 0), whose ``finals`` are the final
    state.  The arithmetic is the training forward's, op for op: outputs, final states and
    overflow equal its own bit for bit."""

    def __init__(self, T, mr, mem, z, cs, acts, x, w_in, b, M, h0, c0, mem0, lengths, cls) -> None:
        self.T, self.steps, self.mr, self.mem, self.z, self.cs = T, z.shape[0] - 1, mr, mem, z, cs
        self.acts, self.x, self.w_in, self.b, self.M = acts, x, w_in, b, M
        N, B = h0.shape[-1], z.shape[-1]
        self.N = N
        self.zout = scratch.empty(z, T, N + mr, B)  # the outputs: reused once the caller lets them go
        zf = z.new_empty(1, *z.shape[1:])  # the final [h ; memory rows], kept row by row
        zf[0, :N] = h0.t()
        self.fin = cls(mem0, 0, zf[:, N:], False)
        self.zfin = zf[0]
        self.cfin = None if cs is None else c0.t().contiguous()
        self.lengths = lengths
        if lengths is None:
            self.ends = {T: slice(None)}
            return
        present = sorted(set(lengths.tolist()))
        if present[0] < 0 or present[-1] > T:  # a row that would never end: its final state unset
            bad = present[0] if present[0] < 0 else present[-1]
            raise ValueError(f"lengths must lie in [0, T] = [0, {T}] (x's steps); got a length of {bad}")
        self.ends = {int(t): (lengths == t).nonzero().flatten() for t in present if t > 0}

    def project(self, lo: int) -> None:
        """acts[:n] = the inputs' projection of steps ``lo .. lo+n−1`` (the training forward's product,
        on a block of its steps)."""
        x, w_in, b, M, acts = self.x, self.w_in, self.b, self.M, self.acts
        hi = min(self.T, lo + _PROJECT)
        n, nx = hi - lo, x.shape[-1]
        if M:
            proj = torch.matmul(w_in[:, None, :, :nx], x.permute(0, 2, 3, 1)[:, lo:hi]).add_(
                b[:, None, :, None]
            )
            acts[:n].view(n, acts.shape[1], M, -1).copy_(proj.permute(1, 2, 0, 3))
        else:
            torch.bmm(w_in[:, :nx].expand(n, -1, nx), x[:, lo:hi].permute(1, 2, 0), out=acts[:n]).add_(
                b[:, None]
            )

    def rewind(self) -> None:
        """Move the state in the last time slot (``Tm``) to the first."""
        Tm, D = self.steps, self.mem.D
        self.z[0] = self.z[Tm]
        if self.cs is not None:
            self.cs[0] = self.cs[Tm]
        P, S, P2 = self.mem.native_buffers()
        if S is not None:
            S[0] = S[Tm]
        if P is not None:
            P[Tm : Tm + D] = P[:D].clone()
        if P2 is not None:
            P2[:D] = P2[Tm : Tm + D].clone()

    def keep(self, s: int, slot: int) -> None:
        """After step ``s`` (its state in time slot ``slot``): its outputs, and the final state of
        the rows whose length is ``s + 1``."""
        N, mr, z = self.N, self.mr, self.z
        self.zout[s] = z[slot, : N + mr]
        rows = self.ends.get(s + 1)
        if rows is None:
            return
        self.zfin[:, rows] = z[slot][:, rows]
        if self.cs is not None:
            self.cfin[:, rows] = self.cs[slot][:, rows]
        (P, S, P2), (Pf, Sf, P2f) = self.mem.native_buffers(), self.fin.native_buffers()
        Tm, D = self.steps, self.mem.D
        if S is not None:
            Sf[0][:, rows] = S[slot][:, rows]
        if P is not None:
            Pf[:, :, rows] = P[Tm - slot : Tm - slot + D][:, :, rows]
        if P2 is not None:
            P2f[:, :, rows] = P2[slot : slot + D][:, :, rows]

    def native_args(self) -> dict:
        """The C++ loop's arguments for the same (``native.cpp``'s ``ring``, ``lens``, ``keep``)."""
        empty = self.z.new_empty(0)
        lens = None if self.lengths is None else self.lengths.to(torch.long).contiguous()
        keep = [self.zout, self.zfin, self.cfin, *self.fin.native_buffers()]
        return {"ring": self.steps, "lens": lens, "keep": [empty if t is None else t for t in keep]}

    def results(self, overflow: Tensor) -> tuple[Tensor | None, ...]:
        """The forward's results (:class:`StackRNNSequence`'s, rows first)."""
        N = self.N
        return (
            self.zout[:, :N].permute(2, 0, 1),
            self.zout[:, N:].permute(2, 0, 1),
            self.zfin[:N].t(),
            None if self.cfin is None else self.cfin.t(),
            *self.fin.finals(None),
            overflow.t(),
        )


class StackRNNSequence(torch.autograd.Function):
    """A one-layer LSTM (gate blocks **o, i, f, g**) or Elman controller reading ``[x_t ; r_{t−1}]``
    and driving a memory through a linear head (module docstring).

    ``x [B, T, n]``, ``w_in [G, n + m]`` (the controller's input weights over ``[x ; r]``),
    ``b [G]``, ``w_rec [G, N]``, ``w_head [K, N]``, ``b_head [K]`` (the layer's action order, then
    the value; the actions only, ``[k, N]`` and ``[k]``, with a value MLP), ``h0 [B, N]``, ``c0
    [B, N]`` (None for Elman), ``lengths [B]`` (None: all ``T``), ``spec = (controller,
    activation, memory, value_activation, want_overflow, native, L, finals)``, then the value MLP's ``L``
    layers as ``w_1, b_1, …, w_L, b_L`` (``w_l [H_l, H_{l−1}]``, ``H_0 = N``, ``H_L`` the value's
    units; ReLU between layers; none when ``L = 0``), then the memory's initial state fields ->
    ``h [B, T, N]`` (steps 1..T), ``r [B, T, m]``, final ``h``, ``c`` (None for Elman), the
    memory's final fields, ``overflow [B, T]`` (not differentiable; zeros unless asked).  With
    ``finals`` False the final ``h``, ``c`` and memory fields are None (not computed: a memory may
    then trim its window to the cells that can still be read, the superposition stack's
    :meth:`~memrnn.ops.superposition.cpu.SuperpositionKernel._live`).

    Members (M runs as one model, ``docs/design.md``): ``w_rec [M, G, N]`` and every weight with
    the member dimension first, ``x [M, B, T, n]``, ``h0``, ``c0`` ``[M, B, N]``, ``lengths [M,
    B]``, the memory's fields ``[M, B, ...]`` -> every result ``[M, B, ...]``, member ``m``
    the call on its ``[m]`` slices.  The memory has no weights: it runs once on the members' rows as
    one batch of ``M·B`` columns (member-major), the controller's, head's and value MLP's products
    are one ``bmm`` per step over the members (:func:`_products`), and the weight gradients one
    product per member (in C++ as in Python: ``native.cpp``'s ``members``).
    """

    @staticmethod
    def forward(ctx, x, w_in, b, w_rec, w_head, b_head, h0, c0, lengths, spec, *rest):  # type: ignore[override]
        controller, _, kind, _, want_overflow, native, n_mlp, finals = spec
        mlp_w, mlp_b, mem0 = list(rest[: 2 * n_mlp : 2]), list(rest[1 : 2 * n_mlp : 2]), rest[2 * n_mlp :]
        ctx.set_materialize_grads(False)
        M = w_rec.shape[0] if w_rec.dim() == 3 else 0  # members (0: none)
        if M:  # the members' rows as one batch of M·B columns
            rows = x.shape[1]
            h0, c0 = h0.flatten(0, 1), None if c0 is None else c0.flatten(0, 1)
            mem0 = tuple(f.flatten(0, 1) for f in mem0)
            lengths = None if lengths is None else lengths.flatten()
        B, T, nx = (M * rows, *x.shape[2:]) if M else x.shape
        N = w_rec.shape[-1]
        cls = KERNELS[kind]
        k = cls.n_actions
        D, m = cls.dims(mem0)
        mr = cls.reads * m  # the reading's units
        Kh = w_head.shape[-2]  # the head's rows
        perm = torch.tensor([*cls.order, *range(k, Kh)], device=w_head.device)
        if M:
            w_head, b_head = w_head[:, perm], b_head[:, perm]
        else:
            w_head, b_head = w_head[perm], b_head[perm]  # the kernel's action order
        G = w_in.shape[-2]
        # without history (nothing will differentiate this call: :class:`NoHistory`) z, cs and the
        # memory's buffers hold RING + 1 steps, the per-step buffers one (_Ring)
        ring = getattr(ctx, "no_history", False)
        Tm, Ts = (min(T, RING), 1) if ring else (T, T)
        # a recomputed memory (native.cpp's "Recomputed memory"; the C++ loop, a memory that can
        # rerun its steps): z is a ring of RECOMPUTE + 1 slots, the controller's rows of every step
        # in zh, the memory every RECOMPUTE steps in ck (and each row's final memory in zf)
        rc = 0
        if RECOMPUTE > 0 and native and not ring and getattr(cls, "recomputes", False):
            rc = Tm = min(T, RECOMPUTE)
        z = scratch.empty(x, Tm + 1, N + cls.rows(D, m), B)
        z[0, :N] = h0.t()
        # a memory that trims its window (superposition: SuperpositionKernel._live) learns whether the
        # final state and the initial state's gradient are wanted; without history it runs whole
        # (its live ranges are per step, the ring's slots are not)
        trim = {}
        if getattr(cls, "trims", False) and not ring:
            trim = {"finals": finals, "grad0": any(ctx.needs_input_grad[10 + 2 * n_mlp :])}
            if rc:  # its live ranges count the sequence's steps (as the ring's, below)
                trim["live_steps"] = T
        elif getattr(cls, "trims", False):  # without history the kernel's slots are not its steps:
            # the live ranges count the sequence's (live_steps), and each step reads them shifted by
            # its slot (_Shifted, native.cpp's live + s − p); only without finals, which the ring
            # keeps from its slots, whole
            ok = getattr(cls, "ring_trims", False) and not finals
            trim = {"finals": False, "grad0": False, "live_steps": T} if ok else {"trim": False}
        mem = cls(mem0, Tm, z[:, N:], want_overflow, **trim)
        w_z = torch.cat([w_rec, w_in[..., nx:]], -1)  # [G, N + mr]: reads [h ; r], the first N + mr rows of z
        if native:  # the C++ loop projects the inputs itself, a block of steps ahead
            acts = scratch.empty(x, 1 if ring else T, G, B)  # without history: one step's
        elif ring:  # the loop projects a block of steps at a time (_Ring.project)
            acts = x.new_empty(_PROJECT, G, B)
        elif M:  # each member's projection [M, T, G, B'], as columns [T, G, M·B']
            proj = torch.matmul(w_in[:, None, :, :nx], x.permute(0, 2, 3, 1)).add_(b[:, None, :, None])
            acts = proj.permute(1, 2, 0, 3).reshape(T, G, B)
        else:
            acts = torch.bmm(w_in[:, :nx].expand(T, -1, nx), x.permute(1, 2, 0)).add_(b[:, None])  # [T, G, B]
        K = k + mlp_w[-1].shape[-2] if mlp_w else Kh  # the actions' and the value's rows
        heads = scratch.empty(x, Ts, K, B)  # pre-activations; the value rows activated in place
        mlp_h = [x.new_empty(Ts, w.shape[-2], B) for w in mlp_w[:-1]]  # the MLP's hidden activations
        A = scratch.empty(x, Ts, k, B)  # the actions
        overflow = x.new_zeros(T, B)
        lstm = controller == "lstm"
        cs = xs = None
        if lstm:
            cs = scratch.empty(x, (Tm if ring else T) + 1, N, B)  # (a recomputed memory rings z only)
            cs[0] = c0.t()
            xs = scratch.empty(x, Ts, N, B)
        hist = _Ring(T, mr, mem, z, cs, acts, x, w_in, b, M, h0, c0, mem0, lengths, cls) if ring else None
        saved, fin = [], None  # a recomputed memory's zh and ck (and zf)
        if rc:
            saved = [scratch.empty(x, T + 1, N + mr, B), scratch.empty(x, -(-T // rc), z.shape[1], B)]
            if finals:  # each row's final memory rows, from the initial state (rows of length 0)
                zf = x.new_zeros(1, z.shape[1], B)
                fin = cls(mem0, 0, zf[:, N:], False, trim=False)
                saved.append(zf)
        if hist is not None and T == 0:
            pass  # no step: every row's final state is its initial one (hist.fin's)
        elif native:
            _native_ops().stack_rnn_forward(
                *_native_codes(spec), bool(want_overflow), D, m, mem.shift, x.flatten(0, 1) if M else x,
                w_in[..., :nx].contiguous(), b, acts, z, w_z, w_head, b_head, heads, A, cs, xs, overflow,
                *mem.native_buffers(), mlp_w, [bb.contiguous() for bb in mlp_b], mlp_h, members=M,
                live=getattr(mem, "live", None), recompute=rc, saved=saved,
                **({"lens": lengths.to(torch.long).contiguous()} if rc and lengths is not None else {}),
                **({"keep": []} if hist is None else hist.native_args()),
            )  # fmt: skip
        else:
            mlp = (mlp_w, mlp_b, mlp_h)
            _forward_loop(
                spec, mem, N, mr, acts, z, w_z, w_head, b_head, heads, A, cs, xs, overflow, mlp, M, hist
            )
        if hist is not None:
            out = hist.results(overflow)
            return tuple(None if t is None else t.unflatten(0, (M, rows)) for t in out) if M else out
        ctx.spec, ctx.mem, ctx.N, ctx.lengths, ctx.perm, ctx.members = spec, mem, N, lengths, perm, M
        ctx.recompute = rc
        # the stratification kernel's own buffers are saved too, so that memory accounting
        # (saved-tensor hooks, benchmarks/run.py) sees them; the backward reads them through ctx.mem
        # (a recomputed memory's ring is not saved: the backward reruns into a ring of its own, so
        # that no saved tensor is ever written)
        z_saved = z.new_empty(0) if rc else z
        ctx.save_for_backward(
            x, w_in, w_z, w_head, acts, z_saved, heads, A, cs, xs, *mlp_w, *mlp_h, *mem.buffers, *saved[:2]
        )
        ctx.mark_non_differentiable(overflow)
        zc = saved[0] if rc else z  # every step's [h ; r]
        if finals:
            finals_h = final_by_length(zc[:, :N].permute(2, 0, 1), lengths)
            finals_c = final_by_length(cs.permute(2, 0, 1), lengths) if lstm else None
            last = (finals_h, finals_c, *(mem.finals(lengths) if fin is None else fin.finals(None)))
        else:  # not computed (a trimmed window may not hold them)
            last = (None,) * (2 + len(mem0))
        out = (zc[1:, :N].permute(2, 0, 1), zc[1:, N : N + mr].permute(2, 0, 1), *last, overflow.t())
        if rc:  # the forward's ring is freed here, not kept beside the backward's own
            mem.release_steps()
        if M:  # each member's rows: [M·B, ...] -> [M, B, ...]
            out = tuple(None if t is None else t.unflatten(0, (M, rows)) for t in out)
        return out

    @staticmethod
    @first_order
    def backward(ctx, gy_h, gy_r, g_hT, g_cT, *rest):  # type: ignore[override]
        saved = ctx.saved_tensors
        x, w_in, w_z, w_head, acts, z, heads, A, cs, xs = saved[:10]
        controller, activation, _, value_act, _, native, n_mlp, _ = ctx.spec
        mlp_w, mlp_h = list(saved[10 : 10 + n_mlp]), list(saved[10 + n_mlp : 9 + 2 * n_mlp])
        mem, N, lengths, M = ctx.mem, ctx.N, ctx.lengths, ctx.members
        saved_rc = list(saved[-2:]) if ctx.recompute else []  # a recomputed memory's zh and ck
        if ctx.recompute:  # the ring its steps are rerun into: z's layout, the zero cell zeroed
            z = scratch.empty(saved_rc[1], ctx.recompute + 1, *saved_rc[1].shape[1:])
            z[:, N + mem.D * mem.m :].zero_()
        g_mem = rest[:-1]
        if M:  # the members' rows as one batch of M·B columns, as the forward ran them
            flat = lambda g: None if g is None else g.flatten(0, 1)  # noqa: E731
            gy_h, gy_r, g_hT, g_cT = flat(gy_h), flat(gy_r), flat(g_hT), flat(g_cT)
            g_mem = tuple(flat(g) for g in g_mem)
            rows = x.shape[1]
        B, T, nx = (M * rows, *x.shape[2:]) if M else x.shape
        G, K, Ka, k = w_z.shape[-2], heads.shape[1], w_head.shape[-2], mem.n_actions  # Ka: the head's rows
        m = w_z.shape[-1] - N  # the reading's units
        addmm_, _, mm = _products(M)
        lstm = controller == "lstm"
        tm = lambda g: None if g is None else g.permute(1, 2, 0).contiguous().unbind(0)  # noqa: E731
        gyh, gyr = (None, None) if native else (tm(gy_h), tm(gy_r))
        ends = _ends(lengths, T, x, B)
        gz = x.new_zeros(N + m, B)  # ∂L/∂[h ; r] of the step being undone (r: m units)
        gzh, gzr = gz[:N], gz[N:]
        g_c = x.new_zeros(N, B)
        mem.start_backward()
        ga = acts.new_empty(1 if native else T, G, B)  # the C++ loop: one step's (native.cpp)
        ghd = scratch.empty(heads, T, K, B)
        gA = scratch.empty(A, T, k, B)
        # ∂L/∂ the value MLP's hidden pre-activations, every step's (fresh for each backward)
        g_mlp = [x.new_empty(T, w.shape[-2], B) for w in mlp_w[:-1]]
        mlp_wt = [w.transpose(-1, -2) for w in mlp_w]
        if not native:  # the Python loop's per-step views
            ga_, ghd_, gA_, A_ = ga.unbind(0), ghd.unbind(0), gA.unbind(0), A.unbind(0)
            gha_, ghv_, hv_ = ghd[:, :k].unbind(0), ghd[:, k:].unbind(0), heads[:, k:].unbind(0)
            rows_ = list(zip(*(A[:, j].unbind(0) for j in range(k)), strict=True))
            ghead_ = gha_ if mlp_w else ghd_  # the head's rows
            g_mlp_ = [g.unbind(0) for g in g_mlp]
            if lstm:
                gah_, gac_ = ga[:, :N].unbind(0), ga[:, N:].view(T, 3, N, B).unbind(0)
        w_z_t, w_head_t = w_z.transpose(-1, -2), w_head.transpose(-1, -2)
        g_h_cols = x.new_empty(N, B) if M else None  # the members' ∂L/∂h of the step, as columns
        need_x, need_w, need_b = ctx.needs_input_grad[:3]
        lead = (M,) if M else ()
        grad_w_x = w_in.new_zeros(*lead, G, nx) if need_w else None
        grad_b = w_in.new_zeros(*lead, G) if need_b else None
        grad_xt = x.new_empty(T, nx, B) if need_x and not native else None

        def add_final(t, g_c):
            rows = ends.get(t)
            if rows is None:
                return g_c
            if g_hT is not None:
                gzh.add_(g_hT.t() * rows)
            if g_cT is not None:
                g_c = g_c + g_cT.t() * rows
            extra = mem.add_final_grads(t, g_mem, rows)
            if extra is not None:
                gzr.add_(extra)
            return g_c

        if native:
            grad_w_z = w_z.new_zeros(w_z.shape)
            grad_x = x.new_empty(B, T, nx) if need_x else None
            grad_w_head_k, grad_b_head_k = _native_backward(
                ctx.spec, mem, acts, z, w_z, w_head, heads, A, cs, xs, lengths, gy_h, gy_r, g_hT, g_cT,
                g_mem, ga, ghd, gA, gz, g_c, grad_b, x.flatten(0, 1) if M else x, w_in[..., :nx].contiguous(),
                grad_w_z, grad_w_x, grad_x, mlp_w, mlp_h, g_mlp, M, ctx.recompute, saved_rc,
            )  # fmt: skip
        for lo, hi in [] if native else blocks(T):
            n = hi - lo
            if lstm:
                o, i, f, g = acts[lo:hi].view(n, 4, N, B).unbind(1)
                xb = xs[lo:hi]
                kk = acts.new_empty(n, 4, N, B)
                torch.addcmul(o, o, o, value=-1, out=kk[:, 0]).mul_(xb)
                torch.addcmul(i, i, i, value=-1, out=kk[:, 1]).mul_(g)
                torch.addcmul(f, f, f, value=-1, out=kk[:, 2]).mul_(cs[lo:hi])
                torch.addcmul(i, i * g, g, value=-1, out=kk[:, 3])
                dhdc_ = torch.addcmul(o, o * xb, xb, value=-1).unbind(0)
                kh_, kc_, f_ = kk[:, 0].unbind(0), kk[:, 1:].unbind(0), f.unbind(0)
            else:
                hb = z[lo + 1 : hi + 1, :N]
                if activation == "tanh":
                    dact = 1 - hb * hb
                elif activation == "sigmoid":
                    dact = hb - hb * hb
                else:
                    dact = (hb > 0).to(hb.dtype)
                dact_ = dact.unbind(0)
            mem.local(lo, hi, A)
            dval = _value_derivative(value_act, heads[lo:hi, k:])
            dval_ = None if dval is None else dval.unbind(0)
            dsig_ = None if mem.softmax else (A[lo:hi] - A[lo:hi] ** 2).unbind(0)
            relu_ = [(h[lo:hi] > 0).to(h.dtype).unbind(0) for h in mlp_h]  # relu' (0 at 0, as autograd)
            for s in range(hi - 1, lo - 1, -1):
                j = s - lo
                if gyh is not None:
                    gzh.add_(gyh[s])
                if gyr is not None:
                    gzr.add_(gyr[s])
                if s + 1 in ends:
                    g_c = add_final(s + 1, g_c)
                mem.backward(s, gzr, rows_[s], hv_[s], gA_[s], ghv_[s])
                if mem.softmax:
                    t = A_[s] * gA_[s]
                    torch.addcmul(t, A_[s], t.sum(0), value=-1, out=gha_[s])
                else:
                    torch.mul(gA_[s], dsig_[j], out=gha_[s])
                if dval_ is not None:
                    ghv_[s].mul_(dval_[j])
                if M:
                    g_h = g_h_cols
                    torch.baddbmm(_cols(gzh, M), w_head_t, _cols(ghead_[s], M), out=_cols(g_h, M))
                else:
                    g_h = torch.addmm(gzh, w_head_t, ghead_[s])
                if mlp_w:  # down the value MLP: ∂L/∂ each hidden pre-activation, then into ∂L/∂h
                    gl = ghv_[s]
                    for l in range(len(mlp_w) - 1, 0, -1):
                        mm(mlp_wt[l], gl, g_mlp_[l - 1][s])
                        gl = g_mlp_[l - 1][s].mul_(relu_[l - 1][j])
                    addmm_(g_h, mlp_wt[0], gl)
                if lstm:
                    g_c = torch.addcmul(g_c, g_h, dhdc_[j])
                    torch.mul(kh_[j], g_h, out=gah_[s])
                    torch.mul(kc_[j], g_c, out=gac_[s])
                    g_c = g_c * f_[j]
                else:
                    torch.mul(g_h, dact_[j], out=ga_[s])
                mm(w_z_t, ga_[s], gz)
            gb = ga[lo:hi]
            if M:
                _member_input_grads_block(gb, x, w_in[..., :nx], lo, hi, grad_w_x, grad_b, grad_xt)
            else:
                input_grads_block(gb, x, w_in[:, :nx], lo, hi, grad_w_x, grad_b, grad_xt)
        g_c = add_final(0, g_c)
        # the weight gradients: one product each over all steps (one per member)
        if M and not native:
            grad_w_z = _member_outer(ga, z[:T, : N + m], M)
            grad_w_head_k = _member_outer(ghd[:, :Ka], z[1:, :N], M)
            grad_b_head_k = ghd[:, :Ka].unflatten(-1, (M, rows)).sum((0, 3)).t()
        elif not native:
            zt = z[:T, : N + m]
            grad_w_z = torch.bmm(ga, zt.transpose(1, 2)).sum(0)
            grad_w_head_k = torch.bmm(ghd[:, :Ka], z[1:, :N].transpose(1, 2)).sum(0)
            grad_b_head_k = ghd[:, :Ka].sum((0, 2))
        grad_mlp = []  # the value MLP's layers: ∂L/∂ each output [T, H_l, B] times its input
        if mlp_w:
            zc = saved_rc[0] if ctx.recompute else z  # every step's [h ; r]
            for g_out, inp in zip([*g_mlp, ghd[:, k:]], [zc[1:, :N], *mlp_h], strict=True):
                if M:
                    grad_mlp += [_member_outer(g_out, inp, M), g_out.unflatten(-1, (M, rows)).sum((0, 3)).t()]
                else:
                    grad_mlp += [torch.bmm(g_out, inp.transpose(1, 2)).sum(0), g_out.sum((0, 2))]
        perm = ctx.perm
        grad_w_head = torch.empty_like(grad_w_head_k).index_copy_(-2, perm, grad_w_head_k)
        grad_b_head = torch.empty_like(grad_b_head_k).index_copy_(-1, perm, grad_b_head_k)
        grad_w_in = torch.cat([grad_w_x, grad_w_z[..., N:]], -1) if need_w else None
        if not native:
            grad_x = None if grad_xt is None else grad_xt.permute(2, 0, 1)
        g_mem0 = mem.initial_grads(gzr.clone())
        grads = [grad_x, gzh.t().clone(), g_c.t() if lstm else None, *g_mem0]
        if M:  # each member's rows: [M·B, ...] -> [M, B, ...]
            grads = [None if g is None else g.unflatten(0, (M, rows)) for g in grads]
        grad_x, g_h0, g_c0, *g_mem0 = grads
        return (
            grad_x,
            grad_w_in,
            grad_b,
            grad_w_z[..., :N],
            grad_w_head,
            grad_b_head,
            g_h0,
            g_c0,
            None,
            None,
            *grad_mlp,
            *g_mem0,
        )


def _member_outer(g: Tensor, inp: Tensor, M: int) -> Tensor:
    """``Σ_t g_t inp_tᵀ`` per member: ``g [T, P, M·B]``, ``inp [T, Q, M·B]`` (columns
    member-major) -> ``[M, P, Q]``, one product per member over all steps and rows."""
    P, Q = g.shape[1], inp.shape[1]
    gm = g.unflatten(-1, (M, -1)).permute(2, 1, 0, 3).reshape(M, P, -1)  # [M, P, T·B]
    im = inp.unflatten(-1, (M, -1)).permute(2, 0, 3, 1).reshape(M, -1, Q)  # [M, T·B, Q]
    return torch.bmm(gm, im)


def _member_input_grads_block(gb, x, w_x, lo, hi, grad_w_x, grad_b, grad_xt) -> None:
    """:func:`memrnn.ops.bptt.input_grads_block` with ``M`` members: ``gb [hi−lo, G, M·B]``
    (columns member-major), ``x [M, B, T, n]``, ``w_x [M, G, n]``; accumulates into ``grad_w_x
    [M, G, n]``, ``grad_b [M, G]`` and writes ``grad_xt[lo:hi]`` ``[hi−lo, n, M·B]``."""
    M = x.shape[0]
    gm = gb.unflatten(-1, (M, -1))  # [n, G, M, B]
    if grad_w_x is not None:
        xb = x[:, :, lo:hi].transpose(1, 2).reshape(M, -1, x.shape[-1])  # [M, n·B, nx], (t, b) rows
        grad_w_x += torch.bmm(gm.permute(2, 1, 0, 3).reshape(M, gb.shape[1], -1), xb)
    if grad_b is not None:
        grad_b += gm.sum((0, 3)).t()
    if grad_xt is not None:
        got = torch.matmul(w_x.transpose(1, 2)[:, None], gm.permute(2, 0, 1, 3))  # [M, n, nx, B]
        grad_xt[lo:hi].unflatten(-1, (M, -1)).copy_(got.permute(1, 2, 0, 3))


#: the codes of native.cpp's enums (the memories': their specs', ``memory_kinds.h``)
_NATIVE_CODES = {
    "controller": {"lstm": 0, "elman": 1},
    "activation": {"tanh": 0, "sigmoid": 1, "relu": 2, "identity": 3},
    "memory": CODES,
}


def _native_codes(spec: tuple) -> tuple[int, int, int, int]:
    controller, activation, kind, value_act = spec[:4]
    act = _NATIVE_CODES["activation"]
    return (
        _NATIVE_CODES["controller"][controller],
        act[activation] if controller == "elman" else 0,
        _NATIVE_CODES["memory"][kind],
        act[value_act],
    )


def _native_ops():
    ops = load()
    if ops is None:  # the dispatch checked; the build can only have been turned off since
        raise RuntimeError("memrnn's C++ loops are not available (MEMRNN_NATIVE=0 or a failed build)")
    return ops


def _native_backward(spec, mem, acts, z, w_z, w_head, heads, A, cs, xs, lengths, gy_h, gy_r, g_hT,
                     g_cT, g_mem, ga, ghd, gA, gz, g_c, grad_b, x, w_x, grad_w_z, grad_w_x, grad_x,
                     mlp_w, mlp_h, g_mlp, M=0, recompute=0, saved=()):  # fmt: skip
    """The backward loop of :class:`StackRNNSequence` in C++ (``native.cpp``): fills ``ghd``,
    ``gA`` (and ``ga [1, G, B]``, one step's ∂L/∂ the gates: its scratch), leaves
    ``∂L/∂[h_0 ; r_0]`` in ``gz``, ``∂L/∂c_0`` in ``g_c`` and the memory's gradient state where
    its kernel's ``add_final_grads``/``initial_grads`` read it; accumulates ``grad_b``,
    ``grad_w_z``, ``grad_w_x`` and writes ``grad_x [B, T, n]`` (each None when not needed) and
    ``g_mlp`` (``∂L/∂`` the value MLP's hidden pre-activations, ``[T, H_l, B]``); returns the
    gradients of the head's weight and bias (the kernel's action order).  ``M`` members (0: none)
    as :class:`StackRNNSequence`'s: the weights and their gradients ``[M, ...]``, the rows
    ``M·B``.  ``recompute`` and ``saved``: a recomputed memory's (``native.cpp``'s), z then its
    ring."""
    T, B = acts.shape[0], acts.shape[-1]
    N, K = w_head.shape[-1], w_head.shape[-2]
    cont = lambda g: None if g is None else g.contiguous()  # noqa: E731
    lens = torch.full((B,), T, dtype=torch.long) if lengths is None else lengths.to(torch.long).contiguous()
    P, S, P2 = mem.native_buffers()
    lead = (M,) if M else ()
    gw_head, gb_head = w_head.new_zeros(*lead, K, N), w_head.new_zeros(*lead, K)
    g_fin = mem.native_final_grads(g_mem, lens)
    _native_ops().stack_rnn_backward(
        *_native_codes(spec), mem.D, mem.m, mem.shift, acts, z, w_z, w_head, heads, A, cs, xs, P, S,
        lens, gy_h, gy_r, cont(g_hT), cont(g_cT), [cont(g) for g in g_fin], ga, ghd, gA, gz,
        g_c, mem.native_grads(), grad_b, gw_head, gb_head, x, w_x, grad_w_z, grad_w_x, grad_x, P2,
        mlp_w, mlp_h, g_mlp, members=M, live=getattr(mem, "live", None), recompute=recompute, saved=list(saved),
    )  # fmt: skip
    mem.after_native(T)
    return gw_head, gb_head


def _ends(lengths: Tensor | None, T: int, like: Tensor, batch: int) -> dict[int, Tensor]:
    """``{t: rows [batch] (1.0 where the row's length is t)}`` for every length present."""
    if lengths is None:
        return {T: like.new_ones(batch)}
    out = {}
    for t in sorted(set(lengths.tolist())):
        out[int(t)] = (lengths == t).to(like.dtype)
    return out
