"""Deterministic PDA ↔ nnPDA weights (Stogin et al. 2020 Definitions 3.6 and B.9, appendix E).

* :func:`encode_pda`: the tensors ``W_Q, W_{p±}, W_C`` of Definition B.9 set into an
  :class:`~memrnn.layers.NNPDA`; Theorem 3.7 says the network then stays within ε of the PDA
  for every string once ``H`` is large enough.
* :func:`ideal_pda_run`: the vectorized PDA of Definition B.9 itself (``Q̄, K̄``), exact.
* :func:`extract_pda`: the rules read back from the weights, quantized at 1/2, into a
  :class:`~memrnn.languages.DPDA`; for trained weights too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch
from torch import Tensor

from memrnn.constructions._common import accepting, check_vocabulary, state_graph
from memrnn.constructions.result import AcceptingState, Construction
from memrnn.core.serialization import allow_in_checkpoints
from memrnn.core.state import state_where
from memrnn.languages.automata import DPDA, EMPTY, NOOP, POP, push
from memrnn.languages.base import Language
from memrnn.layers.nnpda import NNPDA
from memrnn.ops.stack import action_codes, h_sigmoid, ideal_stack_op, stack_overflow, stack_reading
from memrnn.ops.tensor import third_order

#: the languages whose ``pda()`` gives their deterministic PDA (``AnBn``: two blocks only)
_WITH_PDA = "DyckN, DuSellDyck, DyckKM, AnBn, MarkedReversal, Palindrome, JsonLite"


def check_dpda(pda: Any, what: str = "encode_pda") -> DPDA:
    """``pda`` if it is a :class:`~memrnn.languages.DPDA`, else a ``ValueError`` that says so and,
    for a language, how to get its PDA (``DyckN(2).pda()``)."""
    if isinstance(pda, DPDA):
        return pda
    if callable(getattr(pda, "pda", None)):
        hint = (
            f"; a language gives its PDA by .pda(): {what}({pda!r}.pda()) reads its symbols, END "
            f"included (add vocabulary=[*language.symbols, 'BOS'], ignore=['BOS'] for memrnn's data)"
        )
    elif isinstance(pda, Language):
        hint = f"; {type(pda).__name__} has no pda() (these languages do: {_WITH_PDA})"
    else:
        hint = f" (languages with one give it by .pda(): {_WITH_PDA})"
    raise ValueError(
        f"{what} takes a deterministic PDA (memrnn.languages.DPDA), got {type(pda).__name__} {pda!r}{hint}"
    )


def _check_nnpda(layer: Any, what: str) -> NNPDA:
    """``layer`` if it is an :class:`~memrnn.layers.NNPDA`, or the layer of a construction that
    holds one (what :func:`encode_pda` returns); else a ``ValueError`` naming it."""
    inner = getattr(layer, "layer", None) if isinstance(layer, Construction) else layer
    if isinstance(inner, NNPDA):
        return inner
    raise ValueError(
        f"{what} reads an nnPDA (memrnn.layers.NNPDA, or the Construction encode_pda returns), "
        f"got {type(layer).__name__}"
        + (f" holding a {type(inner).__name__}" if isinstance(layer, Construction) else "")
    )


def encode_pda(
    pda: DPDA,
    *,
    sensitivity: float = 10.0,
    depth: int = 32,
    vocabulary: Sequence[str] | None = None,
    ignore: Iterable[str] = (),
    action: Literal["identity", "sigmoid", "clamp"] = "identity",
    strict: bool = False,
    dtype: torch.dtype = torch.float64,
    device: torch.device | str | None = None,
) -> Construction:
    """The nnPDA whose weights are ``pda``'s rules (Definition B.9; appendix E for Dyck-1), as an
    acceptor :class:`~memrnn.constructions.Construction` (``source`` the DPDA; ``units`` its
    states then the stack reading ``top=<symbol>``, ``top=empty``; acceptance by final state:
    :class:`~memrnn.constructions.result.AcceptingState`; ``final_state(words).q`` is ``Q``).

    Args:
        pda: a deterministic PDA.  Missing transitions get zero weights: the dead state is
            ``Q = 0``.
        sensitivity: ``H``.
        depth: stack window (the strings run must never need more; ``strict=True`` checks).
        vocabulary: input symbols in input-id order (default ``pda.alphabet``); e.g. a
            language's ``symbols`` plus ``"BOS"`` to match memrnn's data modules.
        ignore: vocabulary symbols outside ``pda.alphabet`` that leave state and stack
            unchanged (``BOS``).
        action: the layer's ``action`` (``identity`` is Definition 3.6).

    A language is not a PDA: ``encode_pda(DyckN(2).pda())`` encodes Dyck-2's.
    """
    pda = check_dpda(pda)
    vocab = check_vocabulary(pda.alphabet, vocabulary, ignore)
    t = pda.tensors()
    n, m2, L = len(pda.states), len(pda.stack_alphabet), len(pda.stack_alphabet) + 1
    cols = [pda.a_index.get(a) for a in vocab]
    w_q = np.zeros((n, n, len(vocab), L))
    w_push, w_pop = np.zeros((n, len(vocab), L)), np.zeros((n, len(vocab), L))
    w_c = np.zeros((m2, n, len(vocab), L))
    for k, col in enumerate(cols):
        if col is None:  # an ignored symbol: identity on the state, no stack action
            w_q[np.arange(n), np.arange(n), k, :] = 1.0
            continue
        w_q[:, :, k], w_push[:, k], w_pop[:, k], w_c[:, :, k] = (
            t["W_Q"][:, :, col],
            t["W_push"][:, col],
            t["W_pop"][:, col],
            t["W_C"][:, :, col],
        )
    layer = NNPDA(
        len(vocab),
        n,
        m2,
        depth=depth,
        sensitivity=sensitivity,
        action=action,
        one_hot_input=True,
        strict=strict,
        dtype=dtype,
        device=device,
    )
    with torch.no_grad():
        for p, v in (
            (layer.weight_q, w_q),
            (layer.weight_push, w_push),
            (layer.weight_pop, w_pop),
            (layer.weight_c, w_c),
        ):
            p.copy_(torch.as_tensor(v))
        layer.start.zero_()
        layer.start[pda.q_index[pda.start]] = 1.0
    accept = torch.tensor([1.0 if q in pda.accept else 0.0 for q in pda.states], dtype=dtype, device=device)
    units = [*pda.states, *(f"top={z}" for z in pda.stack_alphabet), "top=empty"]
    return Construction(
        layer, AcceptingState(accept), vocabulary=vocab, source=pda, units=units, task="acceptor", bos=None
    )


@dataclass
class IdealRun:
    """The vectorized PDA of Definition B.9 run on a batch: ``q [B, T+1, n]`` (``Q̄^0`` first),
    ``stack [B, T+1, D, m2]``, ``push``, ``pop`` ``[B, T]``, ``overflow`` ``[B]`` bool."""

    q: Tensor
    stack: Tensor
    push: Tensor
    pop: Tensor
    overflow: Tensor


def ideal_step(
    weight: Tensor, num_states: int, q: Tensor, stack: Tensor, ids_t: Tensor
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """One step of the vectorized PDA of Definition B.9 (equations 4–5, no ``h_H``):
    ``Q̄' = W_Q(R̄, I) Q̄`` and ``K̄' = π̄(p̄+, p̄−, C̄) K̄`` with the contractions of ``weight``
    (:meth:`~memrnn.layers.NNPDA.weight`'s layout).

    Args:
        q: ``Q̄ [B, n]``; stack: ``K̄ [B, D, m2]``; ids_t: input ids ``[B]``.

    Returns:
        ``(Q̄', K̄', p̄+ [B], p̄− [B], overflow [B])``, ``overflow`` where the push meets a full window.
    """
    z = third_order(weight, q, stack_reading(stack[:, 0]), tokens=ids_t)
    n = num_states
    p_push, p_pop = z[:, n], z[:, n + 1]
    overflow = stack_overflow(stack, p_push)
    return z[:, :n], ideal_stack_op(stack, p_push, p_pop, z[:, n + 2 :]), p_push, p_pop, overflow


def ideal_pda_run(
    layer: NNPDA | Construction, ids: Tensor, mask: Tensor | None = None, keep: bool = True
) -> IdealRun:
    """Definition B.9 with the layer's weights, exactly (:func:`ideal_step` at every step).

    Args:
        layer: an nnPDA with ideal (0/1) weights, e.g. from :func:`encode_pda` (the
            construction itself or its ``layer``).
        ids: input ids ``[B, T]``; mask: ``[B, T]`` right padding (padded steps freeze).
        keep: store every step (else only the last, in ``q[:, -1]``, ``stack[:, -1]``).
    """
    layer = _check_nnpda(layer, "ideal_pda_run")
    if not isinstance(ids, Tensor) or ids.dim() != 2 or ids.is_floating_point() or ids.dtype == torch.bool:
        got = f"{ids.dtype} {tuple(ids.shape)}" if isinstance(ids, Tensor) else type(ids).__name__
        raise ValueError(
            f"ideal_pda_run: ids must be an integer tensor [batch, time] (Construction.ids), got {got}"
        )
    if mask is not None and (not isinstance(mask, Tensor) or tuple(mask.shape) != tuple(ids.shape)):
        got = tuple(mask.shape) if isinstance(mask, Tensor) else type(mask).__name__
        raise ValueError(
            f"ideal_pda_run: mask must be a tensor [batch, time] = {tuple(ids.shape)}, got {got}"
        )
    b, steps = ids.shape
    w = layer.weight().detach()
    q = layer.start.detach().expand(b, -1).clone()
    stack = torch.zeros(b, layer.depth, layer.stack_symbols, dtype=w.dtype, device=w.device)
    qs, stacks, pushes, pops = [q], [stack], [], []
    overflow = torch.zeros(b, dtype=torch.bool, device=w.device)
    for t in range(steps):
        new_q, new_stack, p_push, p_pop, over = ideal_step(w, layer.num_states, q, stack, ids[:, t])
        live = mask[:, t] if mask is not None else torch.ones(b, dtype=torch.bool, device=w.device)
        overflow |= over & live
        q, stack = state_where(live, (new_q, new_stack), (q, stack))
        pushes.append(torch.where(live, p_push, 0))
        pops.append(torch.where(live, p_pop, 0))
        if keep:
            qs.append(q)
            stacks.append(stack)
    if not keep:
        qs, stacks = [qs[0], q], [stacks[0], stack]
    return IdealRun(
        torch.stack(qs, 1),
        torch.stack(stacks, 1),
        torch.stack(pushes, 1) if pushes else torch.zeros(b, 0),
        torch.stack(pops, 1) if pops else torch.zeros(b, 0),
        overflow,
    )


def _quantized_rules(layer: NNPDA, q_codes: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The layer's step at idealized points: every state code ``[S, n]`` × input id × ideal
    reading ``e_l``.  Returns ``next q [S, m1, L, n]``, ``p+``, ``p−`` ``[S, m1, L]``,
    ``C [S, m1, L, m2]`` (after the layer's activations)."""
    w = layer.weight().detach()
    n, m1, L = layer.num_states, layer.input_size, layer.stack_symbols + 1
    s_count = q_codes.shape[0]
    j, k, l = torch.meshgrid(torch.arange(s_count), torch.arange(m1), torch.arange(L), indexing="ij")
    j, k, l = j.flatten(), k.flatten(), l.flatten()
    reading = torch.eye(L, dtype=w.dtype, device=w.device)[l]
    with torch.no_grad():
        z = third_order(w, q_codes[j].to(w), reading, tokens=k.to(w.device))
        q = h_sigmoid(z[:, :n] - 0.5, layer.sensitivity)
        act = layer._act
        out = (q, act(z[:, n]), act(z[:, n + 1]), act(z[:, n + 2 :]))
    shape = (s_count, m1, L)
    return tuple(o.reshape(*shape, *o.shape[1:]).cpu() for o in out)  # type: ignore[return-value]


def _op(p_push: Tensor, p_pop: Tensor, c: Tensor, stack_alphabet: Sequence[str], threshold: float):
    code = int(action_codes(p_push, p_pop, threshold))
    return push(stack_alphabet[int(c.argmax())]) if code == 1 else POP if code == -1 else NOOP


def extract_pda(
    layer: NNPDA | Construction,
    *,
    alphabet: Sequence[str],
    stack_alphabet: Sequence[str],
    states: Sequence[str] | None = None,
    start: str | None = None,
    accept: Iterable[str] | Callable[[Tensor], bool] = (),
    ignore: Iterable[str] = (),
    method: Literal["basis", "reachable"] = "basis",
    threshold: float = 0.5,
) -> DPDA:
    """Read a DPDA back from an nnPDA's weights.

    The layer's own step is evaluated at idealized points (one-hot state, input and stack
    reading) and quantized: the next state is the largest unit of ``Q`` if it exceeds
    ``threshold`` (else the transition is missing: dead); the operation is push(argmax ``C``)
    if ``p+ > threshold`` (and ``p+ ≥ p−``), pop if ``p− > threshold``, else no-op.

    Args:
        layer: the nnPDA (encoded or trained).
        alphabet: the input symbol of each input id.  ``ignore``: ids to leave out (``BOS``).
        stack_alphabet: names of the ``m2`` stack symbols.
        states: names of the ``n`` state units (``method="basis"``; default ``q0, q1, ...``).
        start: the start state's name (default: the unit on in ``layer.start``).
        accept: accepting state names, or (for ``"reachable"``) a predicate on a state code.
        method: ``"basis"`` reads every one-hot state (exact inverse of :func:`encode_pda`);
            ``"reachable"`` explores from ``layer.start``, state codes being ``Q`` rounded at
            ``threshold`` (for trained networks whose states need not be one-hot); states are
            named ``s0, s1, ...`` in breadth-first order.
    """
    layer = _check_nnpda(layer, "extract_pda")
    if len(alphabet) != layer.input_size:
        raise ValueError(
            f"alphabet has {len(alphabet)} symbols but the layer has input_size={layer.input_size}"
        )
    if len(stack_alphabet) != layer.stack_symbols:
        raise ValueError(
            f"stack_alphabet has {len(stack_alphabet)} symbols but the layer has stack_symbols={layer.stack_symbols}"
        )
    ignore = set(ignore)
    keep = [k for k, a in enumerate(alphabet) if a not in ignore]
    tops = [*stack_alphabet, EMPTY]

    def successors(codes: Tensor) -> Tensor:  # moves: (kept input, stack reading) pairs
        nxt = _quantized_rules(layer, codes)[0][:, keep]
        return nxt.reshape(codes.shape[0], len(keep) * len(tops), -1)

    names, codes, edges = state_graph(
        successors, layer.start, method=method, threshold=threshold, names=states
    )
    _, pp, pm, cc = _quantized_rules(layer, codes)
    rules = []
    for j, move, dst in edges:
        k, l = keep[move // len(tops)], move % len(tops)
        op = _op(pp[j, k, l], pm[j, k, l], cc[j, k, l], stack_alphabet, threshold)
        rules.append((names[j], alphabet[k], tops[l], names[dst], op))
    if method == "basis":
        start_name = start if start is not None else names[int(layer.start.argmax())]
    else:
        start_name = names[0]
    return DPDA(
        names, [alphabet[k] for k in keep], stack_alphabet, rules, start_name, accepting(names, codes, accept)
    )


class PDAInitializedNNPDA(NNPDA):
    """An :class:`~memrnn.layers.NNPDA` initialized with a language's PDA, optionally
    perturbed, for training from prior knowledge (Stogin et al. 2020 section 5: programmed weights plus
    small random values) from a config.

    The input vocabulary is memrnn's: the language's ``symbols`` then ``BOS`` (identity
    transitions), one-hot (``SequenceModule(embedding="one_hot")``), so ``input_size`` must be
    ``language.input_vocab_size``.

    Args:
        input_size: linked from the module (the one-hot vocabulary size).
        language: a language with a ``pda()`` (Dyck-n, a^n b^n, palindromes, JSON-lite, ...).
        noise: add ``uniform(−noise, noise)`` to every weight (seeded by ``seed``).
        extra_states: state units beyond the PDA's (zero weights before the noise).
        Others: as :class:`~memrnn.layers.NNPDA` (``action`` defaults to ``"sigmoid"``, which
            keeps ``p±`` and ``C`` in ``[0, 1]`` during training).
    """

    def __init__(
        self,
        input_size: int,
        language: Language,
        noise: float = 0.0,
        seed: int = 0,
        extra_states: int = 0,
        depth: int = 64,
        sensitivity: float = 10.0,
        learn_sensitivity: bool = False,
        action: Literal["identity", "sigmoid", "clamp"] = "sigmoid",
        strict: bool = False,
        output: Literal["state_and_reading", "state"] = "state_and_reading",
    ) -> None:
        if not isinstance(language, Language) or not callable(getattr(language, "pda", None)):
            raise ValueError(
                f"PDAInitializedNNPDA needs a language with a pda() ({_WITH_PDA}), "
                f"got {type(language).__name__} {language!r}"
            )
        pda = language.pda()
        vocab = [*language.symbols, "BOS"]
        if input_size != len(vocab):
            raise ValueError(
                f"PDAInitializedNNPDA reads one-hot tokens: input_size must be {len(vocab)} "
                f"({language} symbols + BOS), got {input_size}; use SequenceModule(embedding='one_hot')"
            )
        if noise < 0 or extra_states < 0:
            raise ValueError(f"noise and extra_states must be >= 0, got {noise} and {extra_states}")
        n = len(pda.states) + extra_states
        super().__init__(
            input_size,
            n,
            len(pda.stack_alphabet),
            depth=depth,
            sensitivity=sensitivity,
            learn_sensitivity=learn_sensitivity,
            action=action,
            one_hot_input=True,
            strict=strict,
            output=output,
        )
        enc = encode_pda(pda, vocabulary=vocab, ignore=["BOS"], depth=depth, dtype=torch.float64)
        k = len(pda.states)
        gen = torch.Generator().manual_seed(seed)
        weights = (self.weight_q, self.weight_push, self.weight_pop, self.weight_c)
        with torch.no_grad():
            for p in weights:
                p.zero_()
            # the PDA's k states are the first k units; the extra units start at zero
            self.weight_q[:k, :k] = enc.layer.weight_q
            self.weight_push[:k] = enc.layer.weight_push
            self.weight_pop[:k] = enc.layer.weight_pop
            self.weight_c[:, :k] = enc.layer.weight_c
            for p in weights:
                p.add_(noise * (2 * torch.rand(p.shape, generator=gen, dtype=torch.float64) - 1).to(p))
            self.start.zero_()
            self.start[pda.q_index[pda.start]] = 1.0
        self.pda, self.vocabulary = pda, tuple(vocab)


allow_in_checkpoints(PDAInitializedNNPDA)
