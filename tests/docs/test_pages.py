"""What the documentation pages claim holds: the tables that benchmark commands print name what
those commands cover, and no file of the repository points outside it.  (The README's and the
pages' code blocks run in ``tests/docs/test_code_blocks.py``.)"""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_no_file_points_outside_the_repository():
    """A clone has nothing beside it: the docs the code cites live in ``docs/``."""
    import subprocess

    root = ROOT
    files = subprocess.run(
        ["git", "ls-files"], cwd=root, capture_output=True, text=True, check=True
    ).stdout.split()
    outside = "../" + "shared"
    hits = [
        f
        for f in files
        if f.endswith((".py", ".md", ".yaml", ".ipynb", ".sh", ".toml")) and outside in (root / f).read_text()
    ]
    assert not hits, hits
    for cited in ("docs/references.md", "docs/design.md", "docs/ecosystem.md"):
        assert (root / cited).exists()


def _table_rows(page: str, header: str) -> set[str]:
    """The first column of the Markdown table that starts with ``header``."""
    start = page.index(header)
    table = page[start : page.index("\n\n", start)].splitlines()[2:]
    return {line.split("|")[1].strip() for line in table}


def test_benchmark_tables_name_every_layer_they_claim():
    """The tables the benchmarks print, on the docs' Speed and Compile-and-export pages, cover what
    the commands print: the Speed table every layer of ``python -m benchmarks`` (its ``DEFAULT_LAYERS``), the compile and export
    table every registered layer (``python -m benchmarks.compile_check``).  A layer added to either
    without rerunning the command (the stack RNNs were missing from both for days) fails here."""
    from benchmarks.run import DEFAULT_LAYERS
    from memrnn.core import list_layers

    speed = _table_rows((ROOT / "docs/guide/speed.md").read_text(), "| layer | S | batch | T | fwd tok/s |")
    assert speed == set(DEFAULT_LAYERS), sorted(set(DEFAULT_LAYERS) ^ speed)
    compiled = _table_rows(
        (ROOT / "docs/guide/compile-export.md").read_text(), "| layer | graphs | graph breaks | first break |"
    )
    assert compiled == set(list_layers()), sorted(set(list_layers()) ^ compiled)
