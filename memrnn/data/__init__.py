"""Data modules and collation for formal-language experiments."""

from memrnn.data.chomsky import ChomskyDataModule, collate_chomsky, transduction_batch
from memrnn.data.datamodule import (
    IGNORE_INDEX,
    EpochShuffleSampler,
    FormalLanguageDataModule,
    StringDataset,
    bos_inputs,
    collate_generator,
)
from memrnn.data.members import MemberData
from memrnn.data.presets import PRESETS, SplitPreset, get_preset
from memrnn.data.recognition import RecognizerDataModule, collate_recognizer
from memrnn.data.tasks import (
    AcceptorDataModule,
    CopyTask,
    RepeatCopyTask,
    ReversalTask,
    TransductionDataModule,
    collate_acceptor,
    collate_transduction,
)

__all__ = [
    "IGNORE_INDEX",
    "PRESETS",
    "AcceptorDataModule",
    "ChomskyDataModule",
    "CopyTask",
    "EpochShuffleSampler",
    "FormalLanguageDataModule",
    "MemberData",
    "RecognizerDataModule",
    "RepeatCopyTask",
    "ReversalTask",
    "SplitPreset",
    "StringDataset",
    "TransductionDataModule",
    "bos_inputs",
    "collate_acceptor",
    "collate_chomsky",
    "collate_generator",
    "collate_recognizer",
    "collate_transduction",
    "get_preset",
    "transduction_batch",
]
