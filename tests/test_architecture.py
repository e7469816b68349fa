"""The house's rules, checked from the source: papers are cited by authors and year."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _text_files() -> list[Path]:
    files = [
        ROOT / "README.md",
        *sorted((ROOT / "memrnn").rglob("*.py")),
        *sorted((ROOT / "configs").rglob("*.yaml")),
    ]
    for sub in ("benchmarks", "scripts", "notebooks", "tests"):
        files += [p for p in sorted((ROOT / sub).rglob("*")) if p.suffix in {".py", ".ipynb", ".sh", ".md"}]
    return files


def test_papers_are_cited_by_name_not_by_file_number() -> None:
    """The seed papers' file numbers mean nothing to users: cite "Hewitt et al. 2020" instead."""
    pattern = re.compile("seed" + r" 00\d", re.IGNORECASE)
    hits = [
        f"{p.relative_to(ROOT)}:{i}"
        for p in _text_files()
        for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
        if pattern.search(line)
    ]
    assert not hits, f"cite papers by authors and year, not by seed file number: {hits}"
