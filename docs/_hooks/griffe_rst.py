"""A griffe extension: memrnn's docstrings are written in reStructuredText habits (``:class:`X```
roles, ``Title::`` literal blocks); the API reference renders Markdown.  This turns the roles into
code spans and each literal block into a fenced ``text`` block before mkdocstrings parses the
docstring (its Google-style sections, ``Args:`` and ``Returns:``, are left as they are)."""

from __future__ import annotations

import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:py:)?(?:class|func|meth|mod|attr|data|obj|exc|const|ref):`~?([^`]+)`")


def _roles(text: str) -> str:
    return _ROLE.sub(lambda m: f"`{m.group(1)}`", text)


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _literal_blocks(text: str) -> str:
    """``Intro::`` + an indented block → ``Intro:`` + a fenced block (the reST literal block)."""
    lines = text.splitlines()
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.rstrip().endswith("::") and not line.lstrip().startswith(("```", ">>>")):
            base = _indent(line)
            j = i + 1
            while j < len(lines) and not lines[j].strip():
                j += 1
            if j < len(lines) and _indent(lines[j]) > base:
                head = line.rstrip()[:-2].rstrip()
                if head.strip():
                    out.append(head + ":")
                out.append("")
                block: list[str] = []
                k = j
                while k < len(lines) and (not lines[k].strip() or _indent(lines[k]) > base):
                    block.append(lines[k])
                    k += 1
                while block and not block[-1].strip():
                    block.pop()
                cut = min(_indent(b) for b in block if b.strip())
                pad = " " * base
                out.append(pad + "```text")
                out.extend(pad + b[cut:] if b.strip() else "" for b in block)
                out.append(pad + "```")
                out.append("")
                i = k
                continue
        out.append(line)
        i += 1
    return "\n".join(out)


def rst_to_markdown(text: str) -> str:
    return _literal_blocks(_roles(text))


class RstToMarkdown(griffe.Extension):
    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = rst_to_markdown(obj.docstring.value)
