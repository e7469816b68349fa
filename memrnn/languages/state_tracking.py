"""Word problems of finite groups: the state-tracking tasks of Merrill, Petty & Sabharwal (2024),
"The illusion of state in state-space models", used by Grazzi et al. (2025), "Unlocking
state-tracking in linear RNNs through negative eigenvalues".

The input is a word ``g_1 g_2 … g_n`` of group elements drawn uniformly; the output at every
position ``t`` is the prefix product ``g_1 · g_2 · … · g_t`` (an *aligned* transduction: the model
emits ``y_t`` after reading ``x_t``, no blank inputs).  The groups are permutation groups on
``{0, …, 4}``: ``S5`` (120 elements; its word problem is NC¹-complete, Barrington 1989), ``A5``
(its 60 even permutations, also NC¹-complete), and the solvable ``A4 × Z5`` (the
even permutations of ``{0, …, 3}`` times the rotations of a 5-cycle, 60 elements) and ``Z60``.
An element is named in one-line notation (``"10234"`` swaps 0 and 1); the product applies the left
factor first, ``(a · b)(i) = b(a(i))``, so the prefix product is the permutation that the word's
moves compose to.

Every task is a :class:`memrnn.languages.chomsky.TransductionTask`, so
:class:`memrnn.data.ChomskyDataModule` serves it (``--data.init_args.task=s5``).  Grazzi et al.
train on lengths 3–40 and test on 40–256 and report the scaled accuracy
``(acc − chance) / (1 − chance)`` with ``chance = 1 / |G|``; :class:`memrnn.lit.SequenceModule`
logs it as ``<split>/acc_scaled_mean_over_lengths``.  The parity and modular-arithmetic tasks of
those papers are Delétang et al.'s (:mod:`memrnn.languages.chomsky`).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import ClassVar

import numpy as np

from memrnn.languages.chomsky import CHOMSKY_TASKS, TASK_ALIASES, TransductionTask, canonical_task_name

__all__ = ["STATE_TRACKING_TASKS", "WordProblem", "compose", "permutation_parity", "transduction_task"]


def compose(a: Sequence[int], b: Sequence[int]) -> tuple[int, ...]:
    """``a · b``: the permutation that applies ``a`` first, then ``b`` (``i -> b[a[i]]``)."""
    return tuple(b[i] for i in a)


def permutation_parity(p: Sequence[int]) -> int:
    """0 for an even permutation, 1 for an odd one (by counting inversions)."""
    return sum(p[i] > p[j] for i in range(len(p)) for j in range(i + 1, len(p))) % 2


def _product_group(n: int, k: int) -> list[tuple[int, ...]]:
    """``A_n × Z_k`` as permutations of ``n + k`` points: an even permutation of the first ``n``
    and a rotation of the last ``k``."""
    evens = [p for p in itertools.permutations(range(n)) if permutation_parity(p) == 0]
    rotations = [tuple(n + (i + r) % k for i in range(k)) for r in range(k)]
    return [a + r for a in evens for r in rotations]


class WordProblem(TransductionTask):
    """The word problem of a finite permutation group (module docstring): input and output ids
    are the group's elements in ``elements`` order, the identity first."""

    level: ClassVar[str] = "state"
    #: the output is read at the input positions
    aligned: ClassVar[bool] = True

    def __init__(self, name: str, elements: Sequence[tuple[int, ...]]) -> None:
        identity = tuple(range(len(elements[0])))
        elements = sorted(set(elements), key=lambda p: (p != identity, p))
        index = {p: i for i, p in enumerate(elements)}
        for a, b in itertools.product(elements, repeat=2):
            if compose(a, b) not in index:
                raise ValueError(f"{name}: the elements are not closed under composition ({a} · {b})")
        self.name = name
        self.elements = tuple(elements)
        self.input_symbols = self.output_symbols = tuple("".join(map(str, p)) for p in elements)
        # the Cayley table: table[i, j] = id of elements[i] · elements[j]
        self.table = np.array([[index[compose(a, b)] for b in elements] for a in elements], dtype=np.int64)

    def output_length(self, n: int) -> int:
        return n

    def _draw(self, rng, n):
        return [int(g) for g in rng.integers(0, len(self.elements), size=n)]

    def transduce(self, x):
        state, out = 0, []
        for g in self.check_input(x):
            state = int(self.table[state, g])
            out.append(state)
        return out

    def __repr__(self) -> str:
        return f"WordProblem({self.name!r}, {len(self.elements)} elements)"


def _cyclic(k: int) -> list[tuple[int, ...]]:
    return [tuple((i + r) % k for i in range(k)) for r in range(k)]


#: name -> a constructor (the groups' tables are built on first use, about 15,000 compositions each)
STATE_TRACKING_TASKS = {
    "s5": lambda: WordProblem("s5", list(itertools.permutations(range(5)))),
    "a5": lambda: WordProblem(
        "a5", [p for p in itertools.permutations(range(5)) if permutation_parity(p) == 0]
    ),
    "a4_z5": lambda: WordProblem("a4_z5", _product_group(4, 5)),
    "z60": lambda: WordProblem("z60", _cyclic(60)),
}


def transduction_task(name: str) -> TransductionTask:
    """Delétang et al.'s task (by memrnn's name or their public code's registry name, e.g.
    ``missing_duplicate_string``) or the word problem called ``name`` (a ``ValueError`` listing the
    names otherwise)."""
    canonical = canonical_task_name(name)
    if isinstance(canonical, str) and canonical in CHOMSKY_TASKS:
        return CHOMSKY_TASKS[canonical]()
    if isinstance(name, str) and name in STATE_TRACKING_TASKS:
        return STATE_TRACKING_TASKS[name]()
    raise ValueError(
        f"unknown transduction task {name!r}; Delétang et al.'s are {list(CHOMSKY_TASKS)} "
        f"(aliases: {TASK_ALIASES}), the word problems {list(STATE_TRACKING_TASKS)}"
    )
