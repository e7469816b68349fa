"""What the reference automaton of a language holds after every prefix: the quantities a trained
layer is compared with (decoded by a linear probe, plotted beside its gates).

For a string ``w_1 .. w_n END`` the model reads ``BOS w_1 .. w_n``; its state at position ``t``
has read ``w_1 .. w_t``.  :func:`reference_features` gives the automaton's configuration after the
same prefix, for ``t = 0 .. n`` (``n + 1`` positions, one per input position).

Features, by what the language provides:

* a DPDA (``language.pda()``, Stogin et al. 2020 appendix B): ``stack_top`` (class: 0 = empty stack,
  ``1 + i`` = stack symbol ``i``), ``depth`` (the stack height, a count: a value) and ``state``;
* a counter machine (``language.machine``, the SKCM of Weiss et al. 2018): ``counter`` (the counter values,
  ``[k]`` per position) and, without a PDA, ``state``;
* a DFA (``language.dfa()``, e.g. Hewitt et al. 2020 appendix B for Dyck-(k,m)) or a PFSA (``language.pfsa``):
  ``state``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from memrnn.languages.base import Language

Kind = Literal["class", "value"]


@dataclass(frozen=True)
class Feature:
    """One reference quantity per position: ``values [T]`` (``kind="class"``: integer labels,
    compared exactly) or ``[T, k]`` (``kind="value"``: integer-valued quantities such as
    counters, decoded by regression and rounded); ``labels`` names the classes when known."""

    kind: Kind
    values: np.ndarray
    labels: tuple[str, ...] | None = None


def _pda(language: Language):
    pda = getattr(language, "pda", None)
    if pda is None:
        return None
    try:
        return pda()
    except ValueError:  # e.g. a^n b^n c^n: not context-free, no PDA
        return None


def available_features(language: Language) -> tuple[str, ...]:
    """The feature names :func:`reference_features` gives for ``language``."""
    names: list[str] = []
    if _pda(language) is not None:
        names += ["stack_top", "depth", "state"]
    if getattr(language, "machine", None) is not None:
        names += ["counter"] + ([] if names else ["state"])
    if not names and (hasattr(language, "dfa") or hasattr(language, "pfsa")):
        names.append("state")
    return tuple(names)


def reference_features(language: Language, ids: Sequence[int]) -> dict[str, Feature]:
    """The reference automata's configurations after each prefix of ``ids`` (a complete string
    of ``language``, ending with ``END``): every feature has ``len(ids)`` positions (``t = 0`` is
    the start configuration, ``t`` the configuration after ``ids[:t]``).  A language with both a
    PDA and a counter machine (``a^n b^n``) gets the PDA's features and ``counter``; ``state``
    is the first automaton's (PDA, then counter machine, then DFA).

    Raises ``ValueError`` if ``ids`` is not in the language (an automaton dies on it) or if the
    language has no reference automaton.
    """
    ids = language.check_ids(ids)
    if not language.is_complete(ids):
        raise ValueError(f"reference features need a complete string ending with END; got {list(ids)[:20]}")
    word = [language.symbols[i] for i in ids[:-1]]
    n = len(word)
    out: dict[str, Feature] = {}
    pda = _pda(language)
    if pda is not None:
        steps = pda.run(word)
        if len(steps) < n:
            raise ValueError(f"{language}'s PDA dies at position {len(steps)} of {word}: not in the language")
        stacks = [(), *(s.stack for s in steps)]
        states = [pda.start, *(s.next_state for s in steps)]
        gamma = {g: i + 1 for i, g in enumerate(pda.stack_alphabet)}
        out["stack_top"] = Feature(
            "class", np.array([gamma[s[-1]] if s else 0 for s in stacks]), ("empty", *pda.stack_alphabet)
        )
        out["depth"] = Feature("value", np.array([len(s) for s in stacks], dtype=np.int64))
        out["state"] = Feature("class", np.array([pda.q_index[q] for q in states]), pda.states)
    machine = getattr(language, "machine", None)
    if machine is not None:
        confs = machine.run(word)
        if any(c is None for c in confs):
            raise ValueError(f"{language}'s counter machine dies on {word}: not in the language")
        out["counter"] = Feature("value", np.array([c[1] for c in confs], dtype=np.int64))
        if "state" not in out:
            q_index = {q: i for i, q in enumerate(machine.states)}
            out["state"] = Feature("class", np.array([q_index[c[0]] for c in confs]), tuple(machine.states))
    if out:
        return out
    dfa = (
        language.dfa() if hasattr(language, "dfa") else getattr(getattr(language, "pfsa", None), "dfa", None)
    )
    if dfa is not None:
        states = dfa.run(word)
        if any(q is None for q in states):
            raise ValueError(f"{language}'s automaton dies on {word}: not in the language")
        index = {q: i for i, q in enumerate(dfa.states)}
        return {"state": Feature("class", np.array([index[q] for q in states]), tuple(dfa.states))}
    raise ValueError(f"{language} has no reference automaton (no pda(), machine, dfa() or pfsa)")
