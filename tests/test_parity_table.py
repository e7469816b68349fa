"""docs/parity.md lists every choice where memrnn says it runs a paper's protocol (paper says /
authors' code does / memrnn default / option / test): every row names the test that holds its
default, and every test it names exists."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TABLE_ROW = re.compile(r"^\|(?!\s*-{3})(.*)\|\s*$")


def _rows() -> list[tuple[str, str, str]]:
    """(section, item, test column) of every body row of every table in docs/parity.md."""
    rows, section, header_seen = [], "", False
    for line in (ROOT / "docs" / "parity.md").read_text().splitlines():
        if line.startswith("## "):
            section, header_seen = line[3:].strip(), False
            continue
        m = TABLE_ROW.match(line)
        if not m:
            header_seen = False if not line.startswith("|") else header_seen
            continue
        cells = [c.strip() for c in m.group(1).split("|")]
        if not header_seen:  # the header row; the separator row does not match
            header_seen = True
            assert cells[-1] == "test", f"{section}: the last column must be 'test', got {cells[-1]!r}"
            continue
        rows.append((section, cells[0], cells[-1]))
    return rows


def _defined_tests() -> set[str]:
    names = set()
    for path in (ROOT / "tests").rglob("test_*.py"):
        names |= set(re.findall(r"^(?:async )?def (test_\w+)", path.read_text(), re.M))
    return names


def test_every_benchmark_has_its_table():
    sections = {s for s, _, _ in _rows()}
    for paper in ("Delétang", "FLaRe", "DuSell", "Hewitt", "Weiss"):
        assert any(paper in s for s in sections), f"docs/parity.md has no table for {paper}"
    assert len(_rows()) >= 50


def test_every_row_names_tests_that_exist():
    defined = _defined_tests()
    for section, item, tests in _rows():
        named = re.findall(r"`(test_\w+)", tests)
        assert named, f"docs/parity.md, {section}, row {item!r}: no test named ({tests!r})"
        missing = [n for n in named if n not in defined]
        assert not missing, f"docs/parity.md, {section}, row {item!r}: no such test {missing}"
