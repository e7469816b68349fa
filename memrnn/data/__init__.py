"""Data modules and collation for formal-language experiments."""

from memrnn.data.datamodule import (
    IGNORE_INDEX,
    EpochShuffleSampler,
    FormalLanguageDataModule,
    StringDataset,
    collate_generator,
)

__all__ = [
    "IGNORE_INDEX",
    "EpochShuffleSampler",
    "FormalLanguageDataModule",
    "StringDataset",
    "collate_generator",
]
