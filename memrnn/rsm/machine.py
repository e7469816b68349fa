"""The reservoir stack machine (Paaßen, Schulz & Hammer 2021, Algorithms 2 and 4).

A reservoir ``(U, W, σ)`` reads the input into ``h_t`` and, separately, the stack (bottom to top)
into ``g_t``.  Classifiers on ``(h_t, g_t)`` decide, until both say "nothing", how many symbols to
pop (``c_pop``) and which nonterminal to push (``c_push``); then ``c_out`` gives the output
``y_t`` and ``c_shift`` decides whether ``x_t`` is pushed.  After the input comes one more step with
``x_{T+1} = 0`` (the end symbol ``#``), so there are ``T + 1`` outputs.

Symbols: ``n`` input channels (terminals; token ids are one-hot encoded) and ``K`` nonterminals,
pushed as ``e_{n+k}``; the reservoir therefore has ``n + K`` inputs.  Symbol ids in the
:class:`RSMContext` are ``0..n−1`` for terminals (``−1`` for real-valued inputs), ``n + k`` for
nonterminal ``k`` and ``n + K`` for the end symbol.

Memrnn's implementation choices (documented, tested):

* ``g`` is kept for every stack prefix, so popping ``j`` symbols reads the stored state instead of
  re-running the reservoir over the stack (Algorithm 2 lines 11–14).  The result is the same
  computation; :meth:`ReservoirStackMachine.run_reference` is the literal algorithm and the tests
  prove the two agree.
* ``c_pop`` and ``c_push`` read the same ``(h_t, g_t)`` (the state before the pop), then ``j``
  symbols are popped and ``A`` pushed.  Algorithm 2 as printed evaluates ``c_push`` after the pop
  (line 16), but Algorithm 4 trains both on the state before it, and Theorem 3's construction
  uses one state for both; evaluating ``c_push`` on a state it was never trained on breaks
  reductions such as ``(S) → S``.  So prediction follows Algorithm 4 and Theorem 3.
* At most ``max_inner`` pop/push actions per step: ``on_inner_limit="raise"`` raises
  :class:`InnerLoopLimitError`; ``"stop"`` ends the loop there (counted in the output's
  ``inner_limit_hits``).  Popping more than the stack holds pops it empty (``underflows``).
  A stack deeper than ``max_depth`` raises :class:`StackDepthError`.
* Batched: every sequence of a batch runs its own inner loop; the rows that are still acting are
  gathered, classified together and updated by index, so one classifier call serves the batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from memrnn.core.checks import nonnegative_int, positive_int
from memrnn.layers.reservoir import Reservoir
from memrnn.rsm.readouts import RidgeClassifier, RidgeReadout


class StackDepthError(ValueError):
    """The stack grew beyond the machine's ``max_depth``."""


class InnerLoopLimitError(RuntimeError):
    """``c_pop``/``c_push`` kept acting for more than ``max_inner`` actions in one step."""


class Readout(Protocol):
    def fit(self, x: Tensor, y: Tensor) -> Any: ...
    def predict(self, x: Tensor, context: RSMContext | None = None) -> Tensor: ...


@dataclass
class RSMContext:
    """What the machine knows symbolically where a classifier is called (for oracles).

    Attributes:
        rows: ``[N]`` batch rows being classified.
        stack: ``[N, D]`` symbol ids bottom first (``-1`` above each row's depth).
        depth: ``[N]`` stack lengths.
        symbol: ``[N]`` id of the current input symbol ``x_t``.
        t: the step (0-based; ``t = length`` is the end step).
        num_inputs, num_nonterminals: ``n`` and ``K``.
    """

    rows: Tensor
    stack: Tensor
    depth: Tensor
    symbol: Tensor
    t: int
    num_inputs: int
    num_nonterminals: int

    def stacks(self) -> list[tuple[int, ...]]:
        """Each row's stack as a tuple of symbol ids, bottom first (one conversion of the whole
        ``[N, D]`` tensor, not one per row)."""
        return [tuple(s[:d]) for s, d in zip(self.stack.tolist(), self.depth.tolist(), strict=True)]


@dataclass
class RSMOutput:
    """Result of :meth:`ReservoirStackMachine.run` on ``B`` sequences of up to ``T`` steps.

    Attributes:
        outputs: ``[B, T+1, L]`` (``c_out``; class labels as floats for a classifier); zero after
            each row's end step.
        depth: ``[B, T+1]`` stack depth after each step (after the shift).
        actions: ``[B, T+1]`` pop/push actions taken in each step.
        stacks: with ``record=True``, ``[B, T+1, D]`` stack symbol ids after each step
            (``-1`` above the depth).
        inner_limit_hits, underflows: counts over the batch.
    """

    outputs: Tensor
    depth: Tensor
    actions: Tensor
    stacks: Tensor | None = None
    inner_limit_hits: int = 0
    underflows: int = 0
    features: Tensor | None = field(default=None, repr=False)


class _BatchStack:
    """Per-row stacks for a batch: symbol ids ``S [B, D]`` and the reservoir state of every stack
    prefix ``G [B, D+1, m]`` (``G[b, d]``: state after the bottom ``d`` symbols); storage doubles
    as needed, up to ``max_depth``."""

    def __init__(self, res: Reservoir, like: Tensor, batch: int, max_depth: int | None) -> None:
        self.res, self.max_depth, self.cap = res, max_depth, 16
        self.G = like.new_zeros(batch, self.cap + 1, res.units)
        self.S = torch.full((batch, self.cap), -1, dtype=torch.long, device=like.device)
        self.ptr = torch.zeros(batch, dtype=torch.long, device=like.device)

    def top_state(self, rows: Tensor) -> Tensor:
        return self.G[rows, self.ptr[rows]]

    def pop(self, rows: Tensor, j: Tensor) -> None:
        self.ptr[rows] -= j

    def push(self, rows: Tensor, drive: Tensor, ids: Tensor, t: int) -> None:
        """Push onto ``rows`` the symbols with projected inputs ``drive [N, m]`` and ids ``[N]``."""
        need = int(self.ptr[rows].max()) + 1
        if self.max_depth is not None and need > self.max_depth:
            b = int(rows[self.ptr[rows].argmax()])
            raise StackDepthError(
                f"stack depth {need} exceeds max_depth={self.max_depth} (row {b}, step {t})"
            )
        if need > self.cap:
            grow = max(self.cap, need - self.cap)
            B = self.G.shape[0]
            self.G = torch.cat([self.G, self.G.new_zeros(B, grow, self.G.shape[2])], 1)
            self.S = torch.cat([self.S, self.S.new_full((B, grow), -1)], 1)
            self.cap += grow
        new = self.res.cell(drive, self.G[rows, self.ptr[rows]])
        self.S[rows, self.ptr[rows]] = ids
        self.ptr[rows] += 1
        self.G[rows, self.ptr[rows]] = new

    def snapshot(self) -> Tensor:
        """``[B, D]`` symbol ids with ``-1`` above each row's depth."""
        keep = torch.arange(self.cap, device=self.S.device)[None] < self.ptr[:, None]
        return torch.where(keep, self.S, -1)


class _TeacherPairs:
    """The classifiers' training pairs gathered by teacher forcing (Paaßen et al. 2021 Algorithm 4)."""

    def __init__(self) -> None:
        self.ax: list[Tensor] = []
        self.ap: list[Tensor] = []
        self.au: list[Tensor] = []
        self.ai: list[Tensor] = []
        self.sx: list[Tensor] = []
        self.si: list[Tensor] = []
        self.ss: list[Tensor] = []

    def action(self, features: Tensor, rows: Tensor, t: int, tau: int, pop: Tensor, push: Tensor) -> None:
        self.ax.append(features)
        self.ai.append(torch.stack([rows, torch.full_like(rows, t), torch.full_like(rows, tau)], 1))
        self.ap.append(pop)
        self.au.append(push)

    def step(self, features: Tensor, rows: Tensor, t: int, shift: Tensor) -> None:
        self.sx.append(features)
        self.si.append(torch.stack([rows, torch.full_like(rows, t)], 1))
        self.ss.append(shift)

    def tensors(self, empty_x: Tensor) -> dict[str, Tensor]:
        """``empty_x [0, 2m]``: what an empty ``action_x``/``step_x`` is (dtype, device)."""

        def cat(xs: list[Tensor], empty: Tensor) -> Tensor:
            return torch.cat(xs) if xs else empty

        long = torch.long
        return {
            "action_x": cat(self.ax, empty_x),
            "pop_y": cat(self.ap, torch.zeros(0, dtype=long)),
            "push_y": cat(self.au, torch.zeros(0, dtype=long)),
            "action_index": cat(self.ai, torch.zeros(0, 3, dtype=long)),
            "step_x": cat(self.sx, empty_x),
            "step_index": cat(self.si, torch.zeros(0, 2, dtype=long)),
            "shift_y": cat(self.ss, torch.zeros(0, dtype=long)),
        }


class ReservoirStackMachine(nn.Module):
    """Paaßen et al.'s (2021) RSM (module docstring).

    Args:
        reservoir: a :class:`Reservoir` with ``input_size = num_inputs + num_nonterminals``.
        num_inputs: ``n``, input channels (the alphabet size for token ids).
        num_nonterminals: ``K``.
        max_pop: ``J``, the most symbols one action may pop.
        output_size: ``L``.
        pop, push, shift, out: the classifiers ``c_pop`` (labels ``0..J``), ``c_push`` (``0`` =
            none, ``k + 1`` = nonterminal ``k``), ``c_shift`` (``0``/``1``), ``c_out``; anything
            with ``fit(x, y)`` and ``predict(x, context)``.  Defaults: ridge classifiers on 1024
            random Fourier features of the RBF kernel, and for ``c_out`` a ridge classifier
            (``out_mode="classify"``) or linear ridge regression (``"regress"``).
        out_mode: ``"classify"`` (``c_out`` labels, ``L = 1``) or ``"regress"``.
        max_inner: bound on pop/push actions per step.  on_inner_limit: ``"raise"`` or ``"stop"``.
        max_depth: bound on the stack depth (``None``: unbounded, storage grows as needed).
    """

    def __init__(
        self,
        reservoir: Reservoir,
        num_inputs: int,
        num_nonterminals: int,
        *,
        max_pop: int,
        output_size: int = 1,
        pop: Readout | None = None,
        push: Readout | None = None,
        shift: Readout | None = None,
        out: Readout | None = None,
        out_mode: Literal["classify", "regress"] = "classify",
        max_inner: int = 100,
        on_inner_limit: Literal["raise", "stop"] = "raise",
        max_depth: int | None = None,
    ) -> None:
        super().__init__()
        positive_int("num_inputs", num_inputs)
        nonnegative_int("num_nonterminals", num_nonterminals)
        if reservoir.input_size != num_inputs + num_nonterminals:
            raise ValueError(
                f"the reservoir has input_size={reservoir.input_size} but the machine needs "
                f"num_inputs + num_nonterminals = {num_inputs} + {num_nonterminals}"
            )
        nonnegative_int("max_pop", max_pop)
        positive_int("max_inner", max_inner)
        if out_mode not in ("classify", "regress"):
            raise ValueError(f"out_mode must be 'classify' or 'regress', got {out_mode!r}")
        if out_mode == "classify" and output_size != 1:
            raise ValueError(f"out_mode='classify' gives one label per step; output_size={output_size}")
        if on_inner_limit not in ("raise", "stop"):
            raise ValueError(f"on_inner_limit must be 'raise' or 'stop', got {on_inner_limit!r}")
        if max_depth is not None:
            positive_int("max_depth", max_depth)
        self.reservoir = reservoir
        self.num_inputs, self.num_nonterminals, self.max_pop = num_inputs, num_nonterminals, max_pop
        self.output_size, self.out_mode = output_size, out_mode
        self.max_inner, self.on_inner_limit, self.max_depth = max_inner, on_inner_limit, max_depth
        self.pop = pop if pop is not None else RidgeClassifier(1e-3, features=1024, seed=1)
        self.push = push if push is not None else RidgeClassifier(1e-3, features=1024, seed=2)
        self.shift = shift if shift is not None else RidgeClassifier(1e-3)
        if out is None:
            out = (
                RidgeClassifier(1e-3, features=1024, seed=3) if out_mode == "classify" else RidgeReadout(1e-6)
            )
        self.out = out

    @property
    def end_id(self) -> int:
        return self.num_inputs + self.num_nonterminals

    def extra_repr(self) -> str:
        return (
            f"num_inputs={self.num_inputs}, num_nonterminals={self.num_nonterminals}, max_pop={self.max_pop}, "
            f"out_mode={self.out_mode!r}, max_inner={self.max_inner}"
        )

    # -- inputs --------------------------------------------------------------------------------
    def _prepare(self, x: Tensor, lengths: Tensor | Sequence[int] | None) -> tuple[Tensor, Tensor, Tensor]:
        """``x`` (ids ``[B, T]`` or values ``[B, T, n]``) -> ``(x_ext [B, T+1, n+K], lengths [B],
        symbol ids [B, T+1])`` with the zero end vector at each row's ``t = length``."""
        dtype = self.reservoir.input_weight.dtype
        device = self.reservoir.input_weight.device
        if x.dim() == 2 and not x.is_floating_point():
            bad = (x < 0) | (x >= self.num_inputs)
            if lengths is not None:
                lens = torch.as_tensor(lengths, device=x.device)
                bad &= torch.arange(x.shape[1], device=x.device)[None] < lens[:, None]
            if bool(bad.any()):
                b, t = (int(v) for v in bad.nonzero()[0])
                raise ValueError(
                    f"unknown token id {int(x[b, t])} at row {b}, step {t}; ids must be in 0..{self.num_inputs - 1}"
                )
            ids = x.to(device)
            vec = F.one_hot(ids.clamp(0, self.num_inputs - 1), self.num_inputs).to(dtype)
        elif x.dim() == 3 and x.is_floating_point():
            if x.shape[-1] != self.num_inputs:
                raise ValueError(f"inputs have {x.shape[-1]} channels but num_inputs={self.num_inputs}")
            vec, ids = x.to(device=device, dtype=dtype), None
        else:
            raise ValueError(
                f"inputs must be token ids [batch, time] (int) or values [batch, time, {self.num_inputs}] "
                f"(float), got {x.dtype} {tuple(x.shape)}"
            )
        B, T = vec.shape[:2]
        lens = (
            torch.full((B,), T, dtype=torch.long)
            if lengths is None
            else torch.as_tensor(lengths).long().cpu()
        )
        if lens.shape != (B,) or bool((lens < 0).any()) or bool((lens > T).any()):
            raise ValueError(f"lengths must be [batch] in 0..{T}, got {lens.tolist()}")
        lens = lens.to(device)
        real = torch.arange(T + 1, device=device)[None] < lens[:, None]  # [B, T+1]
        x_ext = torch.zeros(B, T + 1, self.end_id, dtype=dtype, device=device)
        x_ext[:, :T, : self.num_inputs] = vec
        x_ext = x_ext * real[..., None]
        sym = torch.full((B, T + 1), -1, dtype=torch.long, device=device)
        if ids is not None:
            sym[:, :T] = ids
        sym = torch.where(real, sym, torch.full_like(sym, self.end_id))
        return x_ext, lens, sym

    def _context(self, rows: Tensor, stack: Tensor, ptr: Tensor, sym: Tensor, t: int) -> RSMContext:
        d = int(ptr[rows].max()) if rows.numel() else 0
        return RSMContext(
            rows, stack[rows, :d], ptr[rows], sym[rows], t, self.num_inputs, self.num_nonterminals
        )

    def _labels(self, clf: Readout, feats: Tensor, ctx: RSMContext, hi: int, what: str) -> Tensor:
        lab = clf.predict(feats, ctx)
        lab = lab.reshape(-1).round().long() if lab.is_floating_point() else lab.reshape(-1).long()
        if lab.numel() and (int(lab.min()) < 0 or int(lab.max()) > hi):
            bad = int(lab[(lab < 0) | (lab > hi)][0])
            raise ValueError(f"{what} returned {bad}; it must be in 0..{hi}")
        return lab

    # -- Algorithm 2, batched --------------------------------------------------------------------
    @torch.no_grad()
    def run(
        self, x: Tensor, lengths: Tensor | Sequence[int] | None = None, *, record: bool = False
    ) -> RSMOutput:
        """Algorithm 2 on a batch: ``x`` token ids ``[B, T]`` or values ``[B, T, n]``;
        ``lengths [B]`` (right padding; default all ``T``).  See :class:`RSMOutput`."""
        x_ext, lens, sym = self._prepare(x, lengths)
        B, T1, _ = x_ext.shape
        res = self.reservoir
        steps_mask = torch.arange(T1, device=x_ext.device)[None] <= lens[:, None]
        H, _ = res(x_ext, mask=steps_mask)
        ux = res.project(x_ext)
        u_nt = res.input_weight.T[self.num_inputs :].to(H.dtype)  # [K, m]
        st = _BatchStack(res, H, B, self.max_depth)
        L = self.output_size
        outs = H.new_zeros(B, T1, L)
        depth = torch.zeros(B, T1, dtype=torch.long)
        actions = torch.zeros(B, T1, dtype=torch.long)
        snaps: list[Tensor] = []
        limit_hits = underflows = 0
        for t in range(T1):
            act = steps_mask[:, t]
            h = H[:, t]
            busy = act.clone()
            for it in range(self.max_inner + 1):
                rows = busy.nonzero()[:, 0]
                if rows.numel() == 0:
                    break
                feats = torch.cat([h[rows], st.top_state(rows)], 1)
                ctx = self._context(rows, st.S, st.ptr, sym[:, t], t)
                j = self._labels(self.pop, feats, ctx, self.max_pop, "c_pop")
                a = self._labels(self.push, feats, ctx, self.num_nonterminals, "c_push")
                stop = (j == 0) & (a == 0)
                busy[rows[stop]] = False
                go, j, a = rows[~stop], j[~stop], a[~stop]
                if go.numel() == 0:
                    continue
                if it == self.max_inner:
                    if self.on_inner_limit == "raise":
                        raise InnerLoopLimitError(
                            f"c_pop/c_push still act after max_inner={self.max_inner} actions "
                            f"(row {int(go[0])}, step {t})"
                        )
                    limit_hits += go.numel()
                    break
                actions[go.cpu(), t] += 1
                underflows += int((j > st.ptr[go]).sum())
                st.pop(go, torch.minimum(j, st.ptr[go]))
                pushing = a > 0
                if bool(pushing.any()):
                    st.push(go[pushing], u_nt[a[pushing] - 1], self.num_inputs + a[pushing] - 1, t)
            rows = act.nonzero()[:, 0]
            if rows.numel():
                feats = torch.cat([h[rows], st.top_state(rows)], 1)
                ctx = self._context(rows, st.S, st.ptr, sym[:, t], t)
                if self.out_mode == "classify":
                    outs[rows, t, 0] = self._labels(self.out, feats, ctx, 2**62, "c_out").to(outs.dtype)
                else:
                    outs[rows, t] = self.out.predict(feats, ctx).reshape(len(rows), L).to(outs.dtype)
                sh = self._labels(self.shift, feats, ctx, 1, "c_shift") > 0
                if bool(sh.any()):
                    st.push(rows[sh], ux[rows[sh], t], sym[rows[sh], t], t)
            depth[:, t] = st.ptr.cpu()
            if record:
                snaps.append(st.snapshot().cpu())
        stacks = None
        if record:
            D = max((s.shape[1] for s in snaps), default=0)
            stacks = torch.full((B, T1, D), -1, dtype=torch.long)
            for t, s in enumerate(snaps):
                stacks[:, t, : s.shape[1]] = s
        return RSMOutput(outs, depth, actions, stacks, limit_hits, underflows)

    def predict(self, x: Tensor, lengths: Tensor | Sequence[int] | None = None) -> Tensor:
        """``run(x, lengths).outputs``: ``[B, T+1, L]``."""
        return self.run(x, lengths).outputs

    # -- Algorithm 4, batched --------------------------------------------------------------------
    @torch.no_grad()
    def collect(
        self,
        x: Tensor,
        lengths: Tensor | Sequence[int] | None,
        pops: Tensor,
        pushes: Tensor,
        shift: Tensor | None = None,
    ) -> dict[str, Tensor]:
        """Teacher forcing (Algorithm 4): replay the desired actions and gather the classifiers'
        training pairs.

        Args:
            x, lengths: as for :meth:`run`.
            pops: ``J [B, T+1, M]`` symbols popped by the τ-th action of step t.
            pushes: ``A [B, T+1, M]``: ``0`` none, ``k + 1`` nonterminal ``k``.  A step's actions
                end at its first ``(0, 0)`` (or after ``M``).
            shift: ``ρ [B, T+1]`` (default all 1).

        Returns ``action_x [N, 2m]`` with ``pop_y``, ``push_y [N]`` and ``action_index [N, 3]``
        (row, t, τ); ``step_x [N', 2m]`` with
        ``step_index [N', 2]`` (row, t) and ``shift_y [N']``.
        """
        x_ext, lens, _ = self._prepare(x, lengths)
        B, T1, _ = x_ext.shape
        if pops.shape[:2] != (B, T1) or pushes.shape != pops.shape:
            raise ValueError(
                f"pops and pushes must be [batch, T+1, M] = [{B}, {T1}, M], got {tuple(pops.shape)}, {tuple(pushes.shape)}"
            )
        pops, pushes = pops.to(x_ext.device).long(), pushes.to(x_ext.device).long()
        shift = torch.ones(B, T1, dtype=torch.long) if shift is None else shift
        shift = shift.to(x_ext.device).long()
        res = self.reservoir
        steps_mask = torch.arange(T1, device=x_ext.device)[None] <= lens[:, None]
        H, _ = res(x_ext, mask=steps_mask)
        ux = res.project(x_ext)
        st = _BatchStack(res, H, B, None)
        pairs = _TeacherPairs()
        u_nt = res.input_weight.T[self.num_inputs :].to(H.dtype)  # the nonterminals' input columns [K, m]
        for t in range(T1):
            self._replay_actions(
                t, H[:, t], u_nt, st, steps_mask[:, t].clone(), pops[:, t], pushes[:, t], pairs
            )
            rows = steps_mask[:, t].nonzero()[:, 0]
            if rows.numel():
                rho = shift[rows, t]
                pairs.step(torch.cat([H[rows, t], st.top_state(rows)], 1), rows, t, rho)
                pr = rows[rho > 0]
                if pr.numel():
                    st.push(pr, ux[pr, t], torch.full_like(pr, -1), t)
        return pairs.tensors(H.new_zeros(0, 2 * res.units))

    def _replay_actions(
        self,
        t: int,
        h: Tensor,
        u_nt: Tensor,
        st: _BatchStack,
        busy: Tensor,
        pops: Tensor,
        pushes: Tensor,
        pairs: _TeacherPairs,
    ) -> None:
        """Step ``t``'s teacher actions (``pops``/``pushes [B, M]``) on the rows still ``busy``
        ``[B]``: record each action's classifier input, then pop and push as told."""
        for tau in range(pops.shape[1]):
            rows = busy.nonzero()[:, 0]
            if rows.numel() == 0:
                break
            j, a = pops[rows, tau], pushes[rows, tau]
            if bool(((j < 0) | (j > self.max_pop)).any()) or bool(
                ((a < 0) | (a > self.num_nonterminals)).any()
            ):
                raise ValueError(
                    f"teacher actions out of range at step {t}: pops must be in 0..{self.max_pop}, "
                    f"pushes in 0..{self.num_nonterminals}"
                )
            if bool((j > st.ptr[rows]).any()):
                b = int(rows[j > st.ptr[rows]][0])
                raise ValueError(
                    f"teacher pops {int(pops[b, tau])} from a stack of {int(st.ptr[b])} (row {b}, step {t})"
                )
            pairs.action(torch.cat([h[rows], st.top_state(rows)], 1), rows, t, tau, j, a)
            stop = (j == 0) & (a == 0)
            busy[rows[stop]] = False
            go, j, a = rows[~stop], j[~stop], a[~stop]
            st.pop(go, j)
            pushing = a > 0
            if bool(pushing.any()):
                st.push(go[pushing], u_nt[a[pushing] - 1], self.num_inputs + a[pushing] - 1, t)

    def fit(
        self,
        x: Tensor,
        lengths: Tensor | Sequence[int] | None,
        pops: Tensor,
        pushes: Tensor,
        outputs: Tensor,
        shift: Tensor | None = None,
    ) -> ReservoirStackMachine:
        """Algorithm 4, then fit the four classifiers.  ``outputs``: ``Y [B, T+1]`` labels
        (``classify``) or ``[B, T+1, L]`` values (``regress``)."""
        data = self.collect(x, lengths, pops, pushes, shift)
        self.fit_collected(data, outputs)
        return self

    def fit_collected(self, data: dict[str, Tensor], outputs: Tensor) -> None:
        """Fit the classifiers on :meth:`collect`'s pairs and the desired ``outputs``."""
        idx = data["step_index"].to(outputs.device)
        y = outputs[idx[:, 0], idx[:, 1]]
        if self.out_mode == "classify":
            y = y.reshape(-1).round().long()
        else:
            y = y.reshape(len(idx), self.output_size).to(torch.float64)
        self.pop.fit(data["action_x"], data["pop_y"])
        self.push.fit(data["action_x"], data["push_y"])
        self.shift.fit(data["step_x"], data["shift_y"])
        self.out.fit(data["step_x"], y.to(data["step_x"].device))

    # -- the literal algorithms, one sequence at a time (references for the tests) ---------------
    @torch.no_grad()
    def _g_of(self, stack_vectors: list[Tensor], like: Tensor) -> Tensor:
        """Algorithm 2 lines 11–14: run the reservoir over the stack, bottom to top."""
        g = like.new_zeros(1, self.reservoir.units)
        for s in stack_vectors:
            g = self.reservoir.cell(self.reservoir.project(s[None]), g)
        return g

    def _vector(self, sid: int, x_t: Tensor) -> Tensor:
        if self.num_inputs <= sid < self.end_id:
            v = x_t.new_zeros(self.end_id)
            v[sid] = 1
            return v
        return x_t

    @torch.no_grad()
    def run_reference(self, x: Tensor) -> tuple[Tensor, list[tuple[int, ...]]]:
        """Algorithm 2 exactly as printed (with ``c_push`` on the pre-pop state, see the module
        docstring) on one sequence: ids ``[T]`` or values ``[T, n]``.  Returns the outputs
        ``[T+1, L]`` and the stack (symbol ids) after each step."""
        x_ext, _, sym = self._prepare(x[None], None)
        x_ext, sym = x_ext[0], sym[0]
        res = self.reservoir
        h = x_ext.new_zeros(1, res.units)
        stack: list[tuple[int, Tensor]] = []
        g = x_ext.new_zeros(1, res.units)
        outs, snaps = [], []

        def ctx(t: int) -> RSMContext:
            ids = torch.tensor([[s for s, _ in stack]], dtype=torch.long).reshape(1, len(stack))
            return RSMContext(
                torch.zeros(1, dtype=torch.long),
                ids,
                torch.tensor([len(stack)]),
                sym[t : t + 1],
                t,
                self.num_inputs,
                self.num_nonterminals,
            )

        for t in range(x_ext.shape[0]):
            h = res.cell(res.project(x_ext[t][None]), h)
            for it in range(self.max_inner + 1):
                feats = torch.cat([h, g], 1)
                j = int(self._labels(self.pop, feats, ctx(t), self.max_pop, "c_pop")[0])
                a = int(self._labels(self.push, feats, ctx(t), self.num_nonterminals, "c_push")[0])
                if j == 0 and a == 0:
                    break
                if it == self.max_inner:
                    if self.on_inner_limit == "raise":
                        raise InnerLoopLimitError(
                            f"c_pop/c_push still act after max_inner={self.max_inner} actions (step {t})"
                        )
                    break
                if j > 0:
                    del stack[max(len(stack) - j, 0) :]
                    g = self._g_of([v for _, v in stack], h)
                if a > 0:
                    sid = self.num_inputs + a - 1
                    stack.append((sid, self._vector(sid, x_ext[t])))
                    g = res.cell(res.project(stack[-1][1][None]), g)
            feats = torch.cat([h, g], 1)
            if self.out_mode == "classify":
                outs.append(self._labels(self.out, feats, ctx(t), 2**62, "c_out").to(h.dtype).reshape(1))
            else:
                outs.append(self.out.predict(feats, ctx(t)).reshape(self.output_size).to(h.dtype))
            if int(self._labels(self.shift, feats, ctx(t), 1, "c_shift")[0]) > 0:
                stack.append((int(sym[t]), x_ext[t]))
                g = res.cell(res.project(x_ext[t][None]), g)
            snaps.append(tuple(s for s, _ in stack))
        return torch.stack(outs), snaps

    @torch.no_grad()
    def collect_reference(
        self, x: Tensor, pops: Tensor, pushes: Tensor, shift: Tensor | None = None
    ) -> dict[str, Tensor]:
        """Algorithm 4 exactly as printed on one sequence (the stack state recomputed from the
        bottom after every action); same keys as :meth:`collect` (``step_index`` row 0)."""
        x_ext, _, _ = self._prepare(x[None], None)
        x_ext = x_ext[0]
        T1 = x_ext.shape[0]
        shift = torch.ones(T1, dtype=torch.long) if shift is None else shift
        res = self.reservoir
        h = x_ext.new_zeros(1, res.units)
        g = x_ext.new_zeros(1, res.units)
        stack: list[Tensor] = []
        ax, ap, au, ai, sx, si, ss = [], [], [], [], [], [], []
        for t in range(T1):
            h = res.cell(res.project(x_ext[t][None]), h)
            for tau in range(pops.shape[1]):
                j, a = int(pops[t, tau]), int(pushes[t, tau])
                ax.append(torch.cat([h, g], 1))
                ai.append((0, t, tau))
                ap.append(j)
                au.append(a)
                del stack[len(stack) - j :]
                if a > 0:
                    stack.append(self._vector(self.num_inputs + a - 1, x_ext[t]))
                g = self._g_of(stack, h)
                if j == 0 and a == 0:
                    break
            sx.append(torch.cat([h, g], 1))
            si.append((0, t))
            ss.append(int(shift[t]))
            if int(shift[t]) > 0:
                stack.append(x_ext[t])
                g = res.cell(res.project(x_ext[t][None]), g)
        return {
            "action_x": torch.cat(ax),
            "pop_y": torch.tensor(ap),
            "push_y": torch.tensor(au),
            "action_index": torch.tensor(ai),
            "step_x": torch.cat(sx),
            "step_index": torch.tensor(si),
            "shift_y": torch.tensor(ss),
        }
