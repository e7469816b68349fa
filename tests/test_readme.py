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
