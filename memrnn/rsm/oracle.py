"""An oracle readout for the reservoir stack machine: it answers from the symbolic stack as the
LR(1) automaton of Paaßen et al. 2021 (Algorithm 1) would, so tests and ablations can replace any
learned classifier with the exact one.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

from memrnn.languages.lr import END_MARK, LRAutomaton
from memrnn.rsm.machine import RSMContext


class LROracle:
    """A classifier that reads the symbolic context and answers as the LR(1) automaton would:
    ``role="pop"`` (j of the first matching rule), ``"push"`` (its nonterminal + 1), ``"out"``
    (1 iff the stack is one accepting nonterminal), ``"shift"`` (always 1).

    Symbol ids map to ``automaton.terminals`` (``0..n−1``), ``automaton.nonterminals``
    (``n..n+K−1``) and ``#`` (``n+K``).  ``fit`` does nothing.
    """

    def __init__(self, automaton: LRAutomaton, role: Literal["pop", "push", "out", "shift"]) -> None:
        if role not in ("pop", "push", "out", "shift"):
            raise ValueError(f"role must be pop, push, out or shift, got {role!r}")
        self.automaton, self.role = automaton, role
        self.names = [*automaton.terminals, *automaton.nonterminals, END_MARK]
        self._nt = {a: k for k, a in enumerate(automaton.nonterminals)}
        self._cache: dict[tuple[tuple[int, ...], int], int] = {}

    def fit(self, x: Tensor, y: Tensor) -> LROracle:
        return self

    def predict(self, x: Tensor, context: RSMContext | None = None) -> Tensor:
        if context is None:
            raise ValueError("LROracle needs the machine's context")
        out = []
        for stack, y in zip(context.stacks(), context.symbol.tolist(), strict=True):
            key = (stack, y)
            if key not in self._cache:
                self._cache[key] = self._answer(stack, y)
            out.append(self._cache[key])
        return torch.tensor(out, dtype=torch.long, device=x.device)

    def _answer(self, stack: tuple[int, ...], y: int) -> int:
        names = [self.names[s] for s in stack]
        if self.role == "shift":
            return 1
        if self.role == "out":
            return int(len(names) == 1 and names[0] in self.automaton.accepting)
        r = self.automaton.match(names, self.names[y])
        if r is None:
            return 0
        return r.pop if self.role == "pop" else self._nt[r.push] + 1
