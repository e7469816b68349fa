"""The README's Python examples run as written."""

import re
from pathlib import Path

import pytest

BLOCKS = re.findall(
    r"```python\n(.*?)```", (Path(__file__).resolve().parents[1] / "README.md").read_text(), re.S
)


def test_readme_has_examples():
    assert len(BLOCKS) >= 3


@pytest.mark.parametrize("i", range(len(BLOCKS)))
def test_readme_example_runs(i):
    exec(compile(BLOCKS[i], f"README.md[python block {i}]", "exec"), {})


def test_no_file_points_outside_the_repository():
    """A clone has nothing beside it: the docs the code cites live in ``docs/``."""
    import subprocess

    root = Path(__file__).resolve().parents[1]
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


def _table_rows(readme: str, header: str) -> set[str]:
    """The first column of the Markdown table that starts with ``header``."""
    start = readme.index(header)
    table = readme[start : readme.index("\n\n", start)].splitlines()[2:]
    return {line.split("|")[1].strip() for line in table}


def test_benchmark_tables_name_every_layer_they_claim():
    """The README's tables printed by the benchmarks cover what the commands print: the Speed
    table every layer of ``python -m benchmarks`` (its ``DEFAULT_LAYERS``), the compile and export
    table every registered layer (``python -m benchmarks.compile_check``).  A layer added to either
    without rerunning the command (the stack RNNs were missing from both for days) fails here."""
    from benchmarks.run import DEFAULT_LAYERS
    from memrnn.core import list_layers

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    speed = _table_rows(readme, "| layer | S | batch | T | fwd tok/s |")
    assert speed == set(DEFAULT_LAYERS), sorted(set(DEFAULT_LAYERS) ^ speed)
    compiled = _table_rows(readme, "| layer | graphs | graph breaks | first break |")
    assert compiled == set(list_layers()), sorted(set(list_layers()) ^ compiled)
