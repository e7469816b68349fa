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
