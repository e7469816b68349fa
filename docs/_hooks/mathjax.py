"""An mkdocs hook: serve MathJax from the site itself, so that the pages render their math with no
network (CI and many clusters have none).  The script comes from the ``mathjax`` package that
``django-static-mathjax`` installs (the docs extra): MathJax 3's ``tex-svg.js``, one file with its
fonts inside."""

from __future__ import annotations

from pathlib import Path

from mkdocs.structure.files import File, Files


def _tex_svg() -> bytes:
    try:
        import mathjax  # django-static-mathjax's static files
    except ImportError as e:  # pragma: no cover - the docs extra installs it
        raise RuntimeError("the docs need MathJax: pip install -e '.[docs]' (django-static-mathjax)") from e
    path = Path(mathjax.__file__).parent / "static" / "mathjax" / "es5" / "tex-svg.js"
    return path.read_bytes()


def on_files(files: Files, config) -> Files:
    files.append(File.generated(config, "javascripts/mathjax/tex-svg.js", content=_tex_svg()))
    return files
