"""The code blocks of ``README.md`` and of the documentation pages under ``docs/``, as the tests run
them (``tests/docs/test_code_blocks.py``).

A fenced block (at any indentation, e.g. inside a list item) whose language is ``python`` is run
with ``exec``; one whose language is ``bash``, ``sh`` or ``shell`` is run by ``bash -eo pipefail``
in a scratch folder that sees the repository's ``configs``, ``scripts``, ``benchmarks``,
``notebooks`` and ``train.py``, with ``.venv/bin/python`` and ``python`` meaning the interpreter
that runs the tests.  A block whose line before it is ``<!-- docs-test: skip (why) -->`` is not
run: training runs and benchmarks of minutes or more, installs, the test suite itself; the reason
must be given.  Blocks of any other language (``text``, ``yaml``, none) are shown, not run.  The
API pages (``docs/api/``) are generated from the docstrings and list constants' values, not code to
run.  The notebooks' pages are generated from ``notebooks/*.ipynb``, which ``tests/test_notebooks.py``
executes; the benchmark records under ``benchmarks/results/`` hold commands of hours and are not
run."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUN = {"python": "python", "bash": "bash", "sh": "bash", "shell": "bash"}
FENCE = re.compile(r"^([ \t]*)```(\w*)[^\n]*\n(.*?)^\1```[ \t]*$", re.M | re.S)
SKIP = re.compile(r"<!-- docs-test: skip \((.+)\) -->")


@dataclass(frozen=True)
class Block:
    path: str  # relative to the repository
    line: int  # of the opening fence
    language: str  # python, bash or "" for a block that is only shown
    code: str
    skip: str | None  # the reason, for a block marked not to run

    @property
    def id(self) -> str:
        return f"{self.path}:{self.line}"


def pages() -> list[Path]:
    docs = sorted(p for p in (ROOT / "docs").rglob("*.md") if not {"_hooks", "api"} & set(p.parts))
    return [ROOT / "README.md", *docs]


def blocks(path: Path) -> list[Block]:
    text = path.read_text(encoding="utf-8")
    out = []
    for m in FENCE.finditer(text):
        indent, lang, body = m.group(1), m.group(2), m.group(3)
        code = "\n".join(
            line[len(indent) :] if line.startswith(indent) else line for line in body.splitlines()
        )
        before = text[: m.start()].rstrip("\n").rsplit("\n", 1)[-1]
        skip = SKIP.search(before)
        out.append(
            Block(
                path=path.relative_to(ROOT).as_posix(),
                line=text.count("\n", 0, m.start()) + 1,
                language=RUN.get(lang, ""),
                code=code + "\n",
                skip=skip.group(1) if skip else None,
            )
        )
    return out


def all_blocks() -> list[Block]:
    return [b for p in pages() for b in blocks(p)]
