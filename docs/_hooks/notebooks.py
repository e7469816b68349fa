"""An mkdocs hook: each notebook under ``notebooks/`` becomes a page ``notebooks/<name>.md``.

The notebooks are committed without outputs and are not executed here: ``tests/test_notebooks.py``
executes every one of them on each test run (their cells assert what they show).  A page shows the
Markdown cells and the code; run the notebook to see its figures.  ``$…$`` math becomes ``\\(…\\)``,
the only inline form the site's arithmatex reads (a bare ``$`` elsewhere stays a dollar sign)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[2]
_DISPLAY = re.compile(r"\$\$(.+?)\$\$", re.S)
_INLINE = re.compile(r"(?<![\\$])\$(?!\s)([^$\n]+?)(?<!\s)\$(?!\$)")


def _math(text: str) -> str:
    text = _DISPLAY.sub(lambda m: "\\[" + m.group(1) + "\\]", text)
    return _INLINE.sub(lambda m: "\\(" + m.group(1) + "\\)", text)


def _source(cell: dict) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def notebook_markdown(path: Path) -> str:
    """The Markdown page of one notebook: its Markdown cells, and its code cells as Python blocks."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    rel = path.relative_to(ROOT).as_posix()
    parts = [
        f'!!! note "The notebook `{rel}`, not executed here"\n'
        f"    This page shows the notebook's text and code. Run it (`jupyter lab {rel}`, or "
        "`.venv/bin/python -m pytest tests/test_notebooks.py`, which executes every notebook and checks "
        "that its cells' assertions hold) to see its figures.\n"
    ]
    for cell in nb["cells"]:
        text = _source(cell).rstrip()
        if not text:
            continue
        if cell["cell_type"] == "markdown":
            parts.append(_math(text) + "\n")
        elif cell["cell_type"] == "code":
            parts.append("```python\n" + text + "\n```\n")
    return "\n".join(parts)


def on_files(files: Files, config) -> Files:
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        files.append(File.generated(config, f"notebooks/{path.stem}.md", content=notebook_markdown(path)))
    return files
