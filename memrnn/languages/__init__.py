"""Formal languages: automata, samplers, membership, next-token oracles, exact probabilities."""

from memrnn.languages.automata import (
    DFA,
    DPDA,
    PFSA,
    CounterMachine,
    anbmcnm_counter_machine,
    anbn_counter_machine,
    anbncn_counter_machine,
    dyck1_counter_machine,
    dyck1_pda,
)
from memrnn.languages.base import Language, Lengths, LengthSampling, bracket_annotations, length_floor
from memrnn.languages.counting import AnBn, AnBnCn, CountingLanguage
from memrnn.languages.dyck import ACCEPT, REJECT, DyckKM
from memrnn.languages.dyck_n import DuSellDyck, DyckN
from memrnn.languages.grammar import GrammarLanguage
from memrnn.languages.hardest import HardestCFL
from memrnn.languages.json_lite import JsonLite
from memrnn.languages.lr import LRAutomaton, LRTrace, latch_automaton, table1_automaton
from memrnn.languages.pcfg import PCFG, Earley
from memrnn.languages.recognizers import FLARE_LANGUAGES, RecognitionLanguage, flare_language
from memrnn.languages.regular import Latch, PFSALanguage
from memrnn.languages.reversal import MarkedReversal, PaddedReversal, Palindrome, UnmarkedReversal

__all__ = [
    "ACCEPT",
    "DFA",
    "DPDA",
    "FLARE_LANGUAGES",
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
    "RecognitionLanguage",
    "UnmarkedReversal",
    "anbmcnm_counter_machine",
    "anbn_counter_machine",
    "anbncn_counter_machine",
    "bracket_annotations",
    "dyck1_counter_machine",
    "dyck1_pda",
    "flare_language",
    "latch_automaton",
    "length_floor",
    "table1_automaton",
]
