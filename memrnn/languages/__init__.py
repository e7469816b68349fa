"""Formal languages: automata, samplers, membership, next-token oracles, exact probabilities."""

from memrnn.languages.base import Language, Lengths
from memrnn.languages.dyck import ACCEPT, REJECT, DyckKM

__all__ = ["ACCEPT", "REJECT", "DyckKM", "Language", "Lengths"]
