"""Greibach's hardest context-free language, as DuSell & Chiang sample it."""

from __future__ import annotations

from memrnn.languages.grammar import GrammarLanguage, Root
from memrnn.languages.pcfg import PCFG, cont


class HardestCFL(GrammarLanguage):
    """Greibach's hardest context-free language as DuSell & Chiang sample it: terminals
    ``( ) [ ] , ; $``; ambiguous by design, so the oracle is Earley's.

    The grammar (``docs/references.md``; rule weights normalised per left-hand side, with
    ``cont(μ) = 1 − 1/(μ+1)``, the continue-probability of a geometric count of mean ``μ``)::

        S′ → R $ Q S L ;      L → L′ , U      L′ → , V L′ (c) | ε     R → U , R′
        R′ → R′ V , (c) | ε   U → W U (u) | ε  V → W V (v) | W        W → ( | ) | [ | ] | $
        Q → L ; R (p) | ε     S → S Q T (s) | T
        T → ( Q S Q ) (t/2) | ( Q ) ((1−t)/2) | [ Q S Q ] (t/2) | [ Q ] ((1−t)/2)

    with ``c = cont(mean_num_commas)``, ``u = cont(mean_short_filler_length)``,
    ``v = cont(mean_long_filler_length − 1)`` (a long filler ``V`` holds at least one ``W``, so
    its mean length is ``1 + μ``), ``p = semicolon_probability``,
    ``s = cont(mean_bracket_splits)``, ``t = cont(mean_nesting_depth)``.  Before this was
    fixed, ``v`` was ``cont(mean_long_filler_length)``: long fillers of mean length 3, not 2.
    """

    train_lengths = (41, 81)
    test_lengths = (41, 101)

    def __init__(
        self,
        mean_num_commas: float = 0.5,
        mean_short_filler_length: float = 0.5,
        mean_long_filler_length: float = 2.0,
        semicolon_probability: float = 0.25,
        mean_bracket_splits: float = 1.5,
        mean_nesting_depth: float = 3.0,
        root: Root = "paper",
    ) -> None:
        self.params = dict(
            mean_num_commas=mean_num_commas,
            mean_short_filler_length=mean_short_filler_length,
            mean_long_filler_length=mean_long_filler_length,
            semicolon_probability=semicolon_probability,
            mean_bracket_splits=mean_bracket_splits,
            mean_nesting_depth=mean_nesting_depth,
        )
        if not mean_long_filler_length >= 1:
            raise ValueError(
                f"mean_long_filler_length must be >= 1 (V holds at least one W), got {mean_long_filler_length}"
            )
        self.root = root
        c, u = cont(mean_num_commas), cont(mean_short_filler_length)
        v = cont(mean_long_filler_length - 1)
        s, t, sc = cont(mean_bracket_splits), cont(mean_nesting_depth), semicolon_probability
        rules = [
            ("S'", ("R", "$", "Q", "S", "L", ";"), 1.0),
            ("L", ("L'", ",", "U"), 1.0),
            ("L'", (",", "V", "L'"), c),
            ("L'", (), 1 - c),
            ("R", ("U", ",", "R'"), 1.0),
            ("R'", ("R'", "V", ","), c),
            ("R'", (), 1 - c),
            ("U", ("W", "U"), u),
            ("U", (), 1 - u),
            ("V", ("W", "V"), v),
            ("V", ("W",), 1 - v),
            *[("W", (x,), 0.2) for x in ("(", ")", "[", "]", "$")],
            ("Q", ("L", ";", "R"), sc),
            ("Q", (), 1 - sc),
            ("S", ("S", "Q", "T"), s),
            ("S", ("T",), 1 - s),
            ("T", ("(", "Q", "S", "Q", ")"), t / 2),
            ("T", ("(", "Q", ")"), (1 - t) / 2),
            ("T", ("[", "Q", "S", "Q", "]"), t / 2),
            ("T", ("[", "Q", "]"), (1 - t) / 2),
        ]
        super().__init__(PCFG(rules, "S'", ["(", ")", "[", "]", ",", ";", "$"], root=root))

    def __repr__(self) -> str:
        return f"HardestCFL(root={self.root!r})"

    __str__ = __repr__
