"""Formal languages: automata, samplers, membership, next-token oracles, exact probabilities."""

from memrnn.languages.automata import DFA, DPDA, PFSA, CounterMachine, dyck1_pda
from memrnn.languages.base import Language, Lengths, LengthSampling
from memrnn.languages.counting import AnBn, AnBnCn, CountingLanguage
from memrnn.languages.dyck import ACCEPT, REJECT, DyckKM
from memrnn.languages.grammar import (
    DuSellDyck,
    DyckN,
    GrammarLanguage,
    HardestCFL,
    JsonLite,
    MarkedReversal,
    PaddedReversal,
    Palindrome,
    UnmarkedReversal,
)
from memrnn.languages.lr import LRAutomaton, LRTrace, latch_automaton, table1_automaton
from memrnn.languages.pcfg import PCFG, Earley
from memrnn.languages.regular import Latch, PFSALanguage

__all__ = [
    "ACCEPT",
    "DFA",
    "DPDA",
    "PCFG",
    "PFSA",
    "REJECT",
    "AnBn",
    "AnBnCn",
    "CounterMachine",
    "CountingLanguage",
    "DuSellDyck",
    "DyckKM",
    "DyckN",
    "Earley",
    "GrammarLanguage",
    "HardestCFL",
    "JsonLite",
    "LRAutomaton",
    "LRTrace",
    "Language",
    "Latch",
    "LengthSampling",
    "Lengths",
    "MarkedReversal",
    "PFSALanguage",
    "PaddedReversal",
    "Palindrome",
    "UnmarkedReversal",
    "dyck1_pda",
    "latch_automaton",
    "table1_automaton",
]
