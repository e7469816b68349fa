"""memrnn's public names and the API reference pages that document them.

**Public** means: a name listed in the ``__all__`` of ``memrnn`` or of one of its packages (a
folder under ``memrnn/`` with an ``__init__.py``), other than a submodule and a dunder name.
Everything else (names starting with ``_``, names only in a module's own namespace, modules that no
package's ``__all__`` exports) is internal.  Each public object is documented once, on the page of
the shallowest package that exports it (``memrnn.create_layer``, not ``memrnn.core.create_layer``);
a deeper page that exports it too links there.

``python docs/_hooks/api_pages.py`` writes ``docs/api/*.md`` from these rules and the API section of
``mkdocs.yml``'s nav (run it after adding a public name, and commit both); ``tests/docs/test_site.py`` checks that the committed pages
hold an entry for every public object and that the built site has an anchor for each."""

from __future__ import annotations

import importlib
import inspect
import re
import sys
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from griffe_rst import rst_to_markdown

ROOT = Path(__file__).resolve().parents[2]
API = ROOT / "docs" / "api"
ENTRY = re.compile(r"^(?:::: (memrnn[\w.]*)\s*|#+ .*\{ #(memrnn[\w.]*) \}\s*)$", re.M)


def packages() -> list[str]:
    """``memrnn`` and every package under it, shallowest first, then by name."""
    names = [".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "memrnn").rglob("__init__.py")]
    return sorted(names, key=lambda n: (n.count("."), n))


def public_names() -> dict[str, list[str]]:
    """Each package's public names (its ``__all__`` less submodules and dunders), in its order."""
    out: dict[str, list[str]] = {}
    for pkg in packages():
        mod = importlib.import_module(pkg)
        names = [
            n
            for n in getattr(mod, "__all__", [])
            if not (n.startswith("__") and n.endswith("__"))
            and not isinstance(getattr(mod, n), types.ModuleType)
        ]
        if names:
            out[pkg] = names
    return out


def home_of() -> dict[tuple[str, str], str]:
    """(package, name) → the dotted path where that object is documented (its shallowest export)."""
    first: dict[int, str] = {}
    home: dict[tuple[str, str], str] = {}
    for pkg, names in public_names().items():
        mod = importlib.import_module(pkg)
        for n in names:
            key = id(getattr(mod, n))
            first.setdefault(key, f"{pkg}.{n}")
            home[(pkg, n)] = first[key]
    return home


def _is_constant(obj: object) -> bool:
    """A value rather than a class or function: listed with its value (griffe documents code, and
    cannot resolve some of these, such as ``PUSH, POP, MARK = 2, 3, 4``)."""
    return not (inspect.isclass(obj) or inspect.isroutine(obj) or callable(obj))


def _short_repr(obj: object, limit: int = 300) -> str:
    """The value as the page shows it: its repr, a long dict by its keys, no memory addresses."""
    text = re.sub(r" at 0x[0-9a-f]+", "", repr(obj))
    if len(text) > limit and isinstance(obj, dict):
        text = "{" + ", ".join(f"{k!r}: …" for k in obj) + "}"
    return text if len(text) <= limit else text[:limit] + " …"


def page_name(pkg: str) -> str:
    return f"{pkg}.md"


def render() -> dict[str, str]:
    """The pages: ``api/index.md`` and one page per package with public names."""
    names, home = public_names(), home_of()
    pages: dict[str, str] = {}
    index = [
        "# API reference\n",
        "Generated from the docstrings. Public names are those in the `__all__` of `memrnn` and of its "
        "packages; each is documented on the page of the shallowest package that exports it.\n",
        "| package | what it holds |",
        "| --- | --- |",
    ]
    for pkg, pkg_names in sorted(names.items(), key=lambda item: item[0].split(".")):
        mod = importlib.import_module(pkg)
        summary = rst_to_markdown((mod.__doc__ or "").strip().split("\n\n")[0]).replace("\n", " ")
        summary = summary.replace("|", "\\|")
        index.append(f"| [`{pkg}`]({page_name(pkg)}) | {summary} |")
        own = [n for n in pkg_names if home[(pkg, n)] == f"{pkg}.{n}"]
        elsewhere = [n for n in pkg_names if home[(pkg, n)] != f"{pkg}.{n}"]
        lines = [
            f"# `{pkg}`\n",
            f"::: {pkg}",
            "    options:",
            "      members: false",
            "      show_root_heading: false",
            "      show_root_toc_entry: false",
            "",
        ]
        if elsewhere:
            links = ", ".join(
                f"[`{n}`]({page_name(home[(pkg, n)].rsplit('.', 1)[0])}#{home[(pkg, n)]})" for n in elsewhere
            )
            lines += [f"Also exported here, documented where first exported: {links}.\n"]
        lines += [f"::: {pkg}.{n}\n" for n in own if not _is_constant(getattr(mod, n))]
        constants = [n for n in own if _is_constant(getattr(mod, n))]
        if constants:
            lines += ["## Constants\n"]
            for n in constants:
                lines += [f"### `{n}` {{ #{pkg}.{n} }}\n", f"`{n} = {_short_repr(getattr(mod, n))}`\n"]
        pages[page_name(pkg)] = "\n".join(lines)
    pages["index.md"] = "\n".join(index) + "\n"
    return pages


def entries() -> set[str]:
    """The dotted paths the committed pages document (their ``::: path`` lines)."""
    found = {
        m.group(1) or m.group(2)
        for p in API.glob("*.md")
        for m in ENTRY.finditer(p.read_text(encoding="utf-8"))
    }
    return found - set(packages())  # a page's own ``::: package`` directive shows the package's docstring


NAV = "  - API reference:\n"


def write_nav(pages: dict[str, str]) -> None:
    """The API section of ``mkdocs.yml``'s nav (its last section): the index, then each package."""
    config = ROOT / "mkdocs.yml"
    text = config.read_text(encoding="utf-8")
    head = text[: text.index(NAV)]
    modules = sorted((n[: -len(".md")] for n in pages if n != "index.md"), key=lambda m: m.split("."))
    lines = [NAV, "      - api/index.md\n", *(f"      - {m}: api/{m}.md\n" for m in modules)]
    config.write_text(head + "".join(lines), encoding="utf-8")


def main() -> None:
    API.mkdir(exist_ok=True)
    pages = render()
    for old in API.glob("*.md"):
        if old.name not in pages:
            old.unlink()
    for name, text in pages.items():
        (API / name).write_text(text, encoding="utf-8")
    write_nav(pages)
    print(f"wrote {len(pages)} pages, {len(set(home_of().values()))} entries, into {API.relative_to(ROOT)}")


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
