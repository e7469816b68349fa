"""The documentation site builds strictly, and its API reference documents every public name.

"Public" is defined in ``docs/_hooks/api_pages.py``: a name in the ``__all__`` of ``memrnn`` or of
one of its packages, other than a submodule or a dunder.  The build is ``mkdocs build --strict``
into a temporary folder: a broken link or anchor, a page missing from the navigation, an API entry
that does not resolve, a docstring griffe cannot parse, a plot whose results file is missing, all
fail it.  Both tests share one build (one xdist worker)."""

from __future__ import annotations

import html
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.xdist_group("docs_site")


def _api_pages():
    spec = importlib.util.spec_from_file_location("api_pages", ROOT / "docs" / "_hooks" / "api_pages.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    run = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "--site-dir", str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert run.returncode == 0, f"mkdocs build --strict failed:\n{run.stdout[-3000:]}\n{run.stderr[-6000:]}"
    return out


def test_the_site_builds_strictly_with_its_pages_plots_and_notebooks(site: Path) -> None:
    for page in (
        "index.html",
        "guide/layers.html",
        "results/dusell.html",
        "bibliography.html",
        "api/index.html",
    ):
        assert (site / page).is_file(), page
    for plot in ("dusell-by-length", "speed-ratios", "speed-scaling", "hewitt-fig3"):
        png = site / "results" / "plots" / f"{plot}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", plot
    notebooks = sorted(p.stem for p in (ROOT / "notebooks").glob("*.ipynb"))
    assert notebooks and all((site / "notebooks" / f"{n}.html").is_file() for n in notebooks)
    assert (site / "javascripts" / "mathjax" / "tex-svg.js").stat().st_size > 1_000_000  # served, not fetched
    index = (site / "index.html").read_text(encoding="utf-8")
    assert "cdn.jsdelivr" not in index and "unpkg.com" not in index


def test_every_public_name_has_an_api_entry(site: Path) -> None:
    api = _api_pages()
    expected = set(api.home_of().values())
    documented = api.entries()
    missing, stale = sorted(expected - documented), sorted(documented - expected)
    assert not missing and not stale, (
        f"public names without an API entry: {missing}; entries of no public name: {stale} "
        "(run `python docs/_hooks/api_pages.py` and commit docs/api/)"
    )
    assert (ROOT / "docs" / "api").glob("*.md")
    # each entry became an anchor of its package's page, and every package page is in the nav
    anchors: set[str] = set()
    for page in (site / "api").glob("*.html"):
        anchors |= {
            html.unescape(a) for a in re.findall(r'id="(memrnn[\w.]*)"', page.read_text(encoding="utf-8"))
        }
    assert not sorted(expected - anchors), sorted(expected - anchors)
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    pages = {p.name for p in (ROOT / "docs" / "api").glob("memrnn*.md")}
    assert all(f"api/{p}" in nav for p in pages), sorted(p for p in pages if f"api/{p}" not in nav)


def test_the_readme_links_to_files_that_exist() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    targets = [t.split("#")[0] for t in re.findall(r"\]\(([^)\s]+)\)", readme) if "://" not in t]
    assert targets
    assert all((ROOT / t).exists() for t in targets), [t for t in targets if not (ROOT / t).exists()]
    assert len(readme.splitlines()) <= 300


def test_the_committed_api_pages_are_what_the_generator_writes() -> None:
    """``docs/api/`` and the nav's API section are ``python docs/_hooks/api_pages.py``'s output, so a
    public name added, removed or moved to another package shows up in the reference."""
    api = _api_pages()
    pages = api.render()
    committed = {p.name: p.read_text(encoding="utf-8") for p in (ROOT / "docs" / "api").glob("*.md")}
    stale = sorted(n for n in pages.keys() | committed.keys() if pages.get(n) != committed.get(n))
    assert not stale, f"run `python docs/_hooks/api_pages.py` and commit docs/api/ and mkdocs.yml: {stale}"
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    assert all(f"      - {n[:-3]}: api/{n}\n" in nav for n in pages if n != "index.md")
