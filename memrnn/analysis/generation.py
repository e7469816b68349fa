"""Does a language model generate a language?  Definition 5 of Hewitt et al. 2020, checked.

A model generates ``L`` when some ``ε > 0`` makes its locally ε-truncated support equal ``L``;
for a model that tracks ``L``'s automaton this holds iff at every prefix of every string of
``L`` the tokens with probability ``≥ ε`` are exactly the allowed ones (the proof of
Theorems 2–3, appendix F.2).  :func:`exhaustive_generation_check` visits every prefix up to a
length (breadth first, one batched model step per prefix); :func:`sampled_generation_check`
scores teacher-forced logits of sampled strings.  Both return a :class:`GenerationReport`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from memrnn.core.state import state_map
from memrnn.languages.base import Language

#: ``step(ids [N, 1], state or None) -> (logits [N, 1, V], state)`` with batch-first state leaves
StepFn = Callable[[Tensor, Any], tuple[Tensor, Any]]


@dataclass
class GenerationReport:
    """``prefixes`` checked, ``mismatches`` (prefixes whose ε-set differs from the allowed set),
    the smallest probability of an allowed token (``min_allowed``) and the largest of a
    disallowed one (``max_disallowed``) over all checked prefixes, the total mass on
    disallowed tokens at the worst prefix (``max_disallowed_mass``) and up to 10 ``examples`` of
    mismatches ``(prefix ids, allowed, predicted)``."""

    epsilon: float
    prefixes: int = 0
    mismatches: int = 0
    min_allowed: float = 1.0
    max_disallowed: float = 0.0
    max_disallowed_mass: float = 0.0
    examples: list[tuple[list[int], list[int], list[int]]] = field(default_factory=list)

    @property
    def exact(self) -> bool:
        """Whether every checked prefix has exactly the allowed tokens above ``ε``."""
        return self.prefixes > 0 and self.mismatches == 0

    def update(self, probs: Tensor, allowed: Tensor, prefixes: Sequence[list[int]] | None = None) -> None:
        """Add ``N`` prefixes: next-token ``probs [N, V]`` and the oracle's ``allowed [N, V]``
        (bool); ``prefixes`` (their ids) for the examples."""
        self.update_log_probs(probs.double().log(), allowed, prefixes)

    def update_logits(
        self, logits: Tensor, allowed: Tensor, prefixes: Sequence[list[int]] | None = None
    ) -> None:
        """As :meth:`update`, from ``logits [N, V]`` (normalised in float64)."""
        self.update_log_probs(logits.double().log_softmax(-1), allowed, prefixes)

    def update_log_probs(
        self, log_probs: Tensor, allowed: Tensor, prefixes: Sequence[list[int]] | None = None
    ) -> None:
        """As :meth:`update`, from ``log p [N, V]``; a few passes, no boolean gathers (cheap for
        ``V = 2·10⁵``)."""
        if log_probs.shape[0] == 0:
            return
        log_eps = math.log(self.epsilon)
        lo = log_probs.masked_fill(~allowed, math.inf).amin(-1)  # least likely allowed
        hi = log_probs.masked_fill(allowed, -math.inf)  # disallowed only
        hi_max = hi.amax(-1)
        bad = (lo < log_eps) | (hi_max >= log_eps) | ~allowed.any(-1) & (hi_max > -math.inf)
        self.prefixes += log_probs.shape[0]
        self.mismatches += int(bad.sum())
        self.min_allowed = min(self.min_allowed, math.exp(float(lo.min())))
        self.max_disallowed = max(self.max_disallowed, math.exp(float(hi_max.max())))
        self.max_disallowed_mass = max(self.max_disallowed_mass, math.exp(float(hi.logsumexp(-1).max())))
        if prefixes is not None and bool(bad.any()):
            pred = log_probs >= log_eps
            for i in bad.nonzero().flatten().tolist()[: 10 - len(self.examples)]:
                self.examples.append(
                    (
                        prefixes[i],
                        allowed[i].nonzero().flatten().tolist(),
                        pred[i].nonzero().flatten().tolist(),
                    )
                )


def allowed_mask(language: Language, prefixes: Sequence[Sequence[int]]) -> Tensor:
    """``[N, num_symbols]`` bool: the oracle's allowed next tokens after each prefix."""
    out = torch.zeros(len(prefixes), language.num_symbols, dtype=torch.bool)
    for i, p in enumerate(prefixes):
        out[i, sorted(language.allowed_next(p))] = True
    return out


def _is_dyck_km(language: Language) -> bool:
    return (
        hasattr(language, "transition")
        and hasattr(language, "k")
        and hasattr(language, "m")
        and (language.bracket_types == language.k)
    )


def _dyck_row(out: Tensor, i: int, stack: Sequence[int], k: int, m: int, end: int) -> None:
    """Dyck-(k,m)'s allowed set after a prefix with ``stack`` (appendix B), O(1)."""
    if len(stack) < m:
        out[i, :k] = True
    out[i, k + stack[-1] if stack else end] = True


def exhaustive_generation_check(
    step: StepFn,
    language: Language,
    max_length: int,
    epsilon: float,
    *,
    batch_size: int = 65536,
    visit: Callable[[list[list[int]], Any], None] | None = None,
) -> GenerationReport:
    """Check Definition 5 at every prefix of ``language`` with at most ``max_length`` tokens.

    ``step`` runs the model one token on a batch (the first call gets ``BOS`` and ``None``
    state).  Prefixes are expanded breadth first by the oracle's allowed brackets (never
    ``END``, after which nothing follows); ``visit(prefixes, state)`` sees each batch after its
    step (e.g. to compare hidden states with a reference).  Raises if the language has no
    ``bos_id``.
    """
    report = GenerationReport(epsilon)
    bos = language.bos_id
    dyck = _is_dyck_km(language)
    stacks: dict[tuple[int, ...], tuple[int, ...]] = {(): ()}  # Dyck: prefix -> its stack

    def p_key(p: list[int]) -> tuple[int, ...]:
        return tuple(p)

    prefixes: list[list[int]] = [[]]
    state = None
    ids = torch.tensor([[bos]])
    for length in range(max_length + 1):
        if not prefixes:
            break
        new_prefixes: list[list[int]] = []
        new_states, new_ids = [], []
        for lo in range(0, len(prefixes), batch_size):
            chunk = prefixes[lo : lo + batch_size]
            hi = lo + len(chunk)
            sub = None if state is None else state_map(lambda t, lo=lo, hi=hi: t[lo:hi], state)
            with torch.no_grad():
                logits, nxt = step(ids[lo : lo + len(chunk)], sub)
            if dyck:
                allowed = torch.zeros(len(chunk), language.num_symbols, dtype=torch.bool)
                for i, p in enumerate(chunk):
                    _dyck_row(allowed, i, stacks[p_key(p)], language.k, language.m, language.end_id)
            else:
                allowed = allowed_mask(language, chunk)
            report.update_logits(logits[:, -1], allowed, chunk)
            if visit is not None:
                visit(chunk, nxt)
            if length == max_length:
                continue
            rows, toks = allowed[:, : language.end_id].nonzero(as_tuple=True)
            if rows.numel():
                new_states.append(state_map(lambda t, rows=rows: t[rows], nxt))
                new_ids.append(toks)
                for r, t in zip(rows.tolist(), toks.tolist(), strict=True):
                    new = chunk[r] + [t]
                    new_prefixes.append(new)
                    if dyck:
                        st = stacks[p_key(chunk[r])]
                        stacks[p_key(new)] = (*st, t) if t < language.k else st[:-1]
        if not new_prefixes:
            break
        if dyck:
            stacks = {p_key(p): stacks[p_key(p)] for p in new_prefixes}
        prefixes = new_prefixes
        state = _cat_states(new_states)
        ids = torch.cat(new_ids)[:, None]
    return report


def _cat_states(states: list[Any]) -> Any:
    first = states[0]
    if isinstance(first, Tensor):
        return torch.cat(states)
    parts = [_cat_states([s[i] for s in states]) for i in range(len(first))]
    return type(first)(*parts) if hasattr(first, "_fields") else type(first)(parts)


def sampled_generation_check(
    logits: Tensor, strings: Sequence[Sequence[int]], language: Language, epsilon: float
) -> GenerationReport:
    """Definition 5 on teacher-forced ``logits [B, T, V]`` of ``strings`` (each read as
    ``BOS w_1 … w_{n−1}``, so ``logits[b, t]`` predicts ``w_{t+1}``), at every real position."""
    report = GenerationReport(epsilon)
    for b, s in enumerate(strings):
        n = len(s)
        report.update_logits(logits[b, :n], allowed_along(language, s))
    return report


def dyck_next_structure(language: Language, s: Sequence[int]) -> tuple[Tensor, Tensor]:
    """For Dyck-(k,m) and a string ``s``: after each proper prefix ``s[:t]``, whether opens are
    allowed (``[len(s)]`` bool, depth ``< m``) and the one other allowed id (``[len(s)]`` long:
    the close of the top, or ``END`` on the empty stack).  Raises at the first token that
    leaves the language."""
    if not _is_dyck_km(language):
        raise ValueError(f"{language} is not a Dyck-(k,m) language")
    k, m = language.k, language.m
    n = len(s)
    can_open = torch.zeros(n, dtype=torch.bool)
    other = torch.zeros(n, dtype=torch.long)
    stack: list[int] = []
    for t in range(n):
        can_open[t] = len(stack) < m
        other[t] = k + stack[-1] if stack else language.end_id
        tok = int(s[t])
        if tok < k and len(stack) < m:
            stack.append(tok)
        elif k <= tok < 2 * k and stack and stack[-1] == tok - k:
            stack.pop()
        elif not (tok == language.end_id and not stack and t == n - 1):
            raise ValueError(f"{language.decode(s[: t + 1])!r} is not a prefix of a string of {language}")
    return can_open, other


def dyck_update(report: GenerationReport, logits: Tensor, can_open: Tensor, other: Tensor, k: int) -> None:
    """:meth:`GenerationReport.update_logits` for Dyck-(k,m) without an ``[N, V]`` mask: the
    allowed set is "all opens or none" plus ``other`` (:func:`dyck_next_structure`), so four
    passes over ``logits [N, 2k+1]`` in their own dtype suffice (``V = 2·10⁵`` at ``k = 10⁵``).
    Rows within ``10⁻⁴`` (in log space) of ``log ε`` are re-checked in float64."""
    if logits.shape[0] == 0:
        return
    n = logits.shape[0]
    lse = logits.logsumexp(-1)
    opens = logits[:, :k]
    rows = torch.arange(n, device=logits.device)
    rest = logits[:, k:].clone()  # closes and END
    other_logit = rest[rows, other - k].clone()
    rest[rows, other - k] = -math.inf
    rest_max = rest.amax(-1)
    o_min, o_max = opens.amin(-1), opens.amax(-1)
    lo = torch.where(can_open, torch.minimum(o_min, other_logit), other_logit) - lse  # least allowed
    hi = torch.where(can_open, rest_max, torch.maximum(rest_max, o_max)) - lse  # most likely disallowed
    p_allowed = other_logit.double().sub(lse.double()).exp() + torch.where(
        can_open, opens.logsumexp(-1).double().sub(lse.double()).exp(), torch.zeros((), dtype=torch.float64)
    )
    log_eps = math.log(report.epsilon)
    near = ((lo - log_eps).abs() < 1e-4) | ((hi - log_eps).abs() < 1e-4)
    if bool(near.any()):  # re-check the borderline rows exactly
        idx = near.nonzero().flatten()
        sub = dyck_mask(can_open[idx], other[idx], k, logits.shape[1])
        report.update_logits(logits[idx], sub)
        keep = ~near
        lo, hi, p_allowed = lo[keep], hi[keep], p_allowed[keep]
        n = int(keep.sum())
        if n == 0:
            return
    bad = (lo < log_eps) | (hi >= log_eps)
    report.prefixes += n
    report.mismatches += int(bad.sum())
    report.min_allowed = min(report.min_allowed, math.exp(float(lo.min())))
    report.max_disallowed = max(report.max_disallowed, math.exp(float(hi.max())))
    report.max_disallowed_mass = max(report.max_disallowed_mass, float((1 - p_allowed).clamp_min(0).max()))


def allowed_along(language: Language, s: Sequence[int], start: int = 0, stop: int | None = None) -> Tensor:
    """``[stop − start, V]`` bool: the allowed next tokens after each proper prefix ``s[:t]``,
    ``start ≤ t < stop`` (default all of ``s``); O(1) per position for Dyck-(k,m)
    (:func:`dyck_next_structure`), else ``allowed_next`` per prefix."""
    stop = len(s) if stop is None else stop
    if not _is_dyck_km(language):
        return allowed_mask(language, [s[:t] for t in range(start, stop)])
    can_open, other = dyck_next_structure(language, s)
    return dyck_mask(can_open[start:stop], other[start:stop], language.k, language.num_symbols)


def dyck_mask(can_open: Tensor, other: Tensor, k: int, num_symbols: int) -> Tensor:
    """The allowed-set rows ``[N, V]`` of :func:`dyck_next_structure`'s output."""
    out = torch.zeros(len(other), num_symbols, dtype=torch.bool)
    out[:, :k] = can_open[:, None]
    out[torch.arange(len(other)), other] = True
    return out
