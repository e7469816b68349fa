"""Named splits of the papers memrnn reproduces, usable from YAML (``preset: suzgun``).

All windows count ``END`` (a paper's "lengths 2–50" are ``(3, 51)``).  A preset fills every
data-module argument the user left at ``None``; explicit arguments win.

| preset  | source | train | val | test | lengths (symbols) | length sampling |
| ------- | ------ | ----- | --- | ---- | ----------------- | --------------- |
| hewitt  | Hewitt et al. 2020 Table 2 | 2,000 | 500 | 500 | 1–8m(m−2)+59 / 8m(m−2)+60–2·(8m(m−2)+60)−1 | natural (authors' truncation) |
| suzgun  | Suzgun et al. 2019 | 5,000 | 500 | 1,000 | 2–50 / 52–100 | natural |
| rsm     | Paaßen et al. 2021 section 4 | 100 | 100 | 100 | 1–50 / 50–100 | natural |
| dusell  | DuSell & Chiang | 10,000 | 1,000 | 100 per length | 40–80 / 40–100 | uniform, one length per batch |
| weiss   | Weiss et al. 2018 | 2,000 | 500 | 1,000 | n ≤ 100 (a^n b^n), ≤ 50 (a^n b^n c^n) / near misses n ≤ 200, 150 | uniform |

``dusell`` draws its training batches as DuSell & Chiang's ``generate_batches`` does
(``batch_lengths="per_batch"`` of :class:`memrnn.data.FormalLanguageDataModule`: one length per
batch, the batches drawn once and reshuffled every epoch); the other presets leave every string
its own length.

Hewitt et al. count their data in tokens (2e3 … 2e7 train, 20k dev, 300k test, ``END``
counted): ``configs/hewitt`` sets ``train_tokens``/``val_tokens``/``test_tokens``, which override
the string counts here.  Where each preset stands against the authors' code: ``docs/parity.md``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from memrnn.languages.base import Language, Lengths


@dataclass(frozen=True)
class SplitPreset:
    """Sizes, windows (``END`` counted; None = the language's default), sampling mode and how
    training batches draw their lengths (``batch_lengths``: ``"per_sequence"`` or
    ``"per_batch"``, :class:`memrnn.data.FormalLanguageDataModule`)."""

    name: str
    train_size: int
    val_size: int
    test_size: int
    train_lengths: Lengths | None
    test_lengths: Lengths | None
    length_sampling: Literal["natural", "uniform"] = "natural"
    test_per_length: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    batch_lengths: Literal["per_sequence", "per_batch"] = "per_sequence"

    def windows(self, language: Language) -> tuple[Lengths, Lengths]:
        return (
            self.train_lengths or language.default_lengths("train"),
            self.test_lengths or language.default_lengths("test"),
        )


PRESETS: dict[str, SplitPreset] = {
    p.name: p
    for p in (
        SplitPreset("hewitt", 2000, 500, 500, None, None),
        SplitPreset("suzgun", 5000, 500, 1000, (3, 51), (53, 101)),
        SplitPreset("rsm", 100, 100, 100, (2, 51), (51, 101)),
        SplitPreset("dusell", 10000, 1000, 0, (41, 81), (41, 101), "uniform", 100, batch_lengths="per_batch"),
        SplitPreset("weiss", 2000, 500, 1000, None, None, "uniform", extra={"test_set": "near_miss"}),
    )
}


def get_preset(name: str) -> SplitPreset:
    """The preset called ``name``; ``ValueError`` lists the known ones."""
    if name not in PRESETS:
        raise ValueError(f"unknown split preset {name!r}; known presets: {', '.join(PRESETS)}")
    return PRESETS[name]
