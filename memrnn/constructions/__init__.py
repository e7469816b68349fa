"""Automata -> exact weights, and weights -> automata (extraction)."""

from memrnn.constructions.dfa import EncodedDFA, encode_dfa, extract_dfa
from memrnn.constructions.pda import (
    EncodedPDA,
    IdealRun,
    PDAInitializedNNPDA,
    encode_pda,
    extract_pda,
    ideal_pda_run,
)

__all__ = [
    "EncodedDFA",
    "EncodedPDA",
    "IdealRun",
    "PDAInitializedNNPDA",
    "encode_dfa",
    "encode_pda",
    "extract_dfa",
    "extract_pda",
    "ideal_pda_run",
]
