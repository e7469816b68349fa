"""An mkdocs hook: the benchmark records under ``benchmarks/results/`` (Markdown, with the images
they show) become pages ``records/<name>.md`` of the site, linked from the results pages.  They stay
where they are, beside the result files they describe; nothing is copied into ``docs/``."""

from __future__ import annotations

from pathlib import Path

from mkdocs.structure.files import File, Files, InclusionLevel

ROOT = Path(__file__).resolve().parents[2]
RECORDS = ROOT / "benchmarks" / "results"


def on_files(files: Files, config) -> Files:
    for path in sorted(RECORDS.glob("*.md")):
        files.append(
            File.generated(
                config,
                f"records/{path.name}",
                content=path.read_text(encoding="utf-8"),
                inclusion=InclusionLevel.NOT_IN_NAV,  # listed on results/index.md
            )
        )
    for path in sorted(RECORDS.glob("*.png")):
        files.append(File.generated(config, f"records/{path.name}", content=path.read_bytes()))
    return files
