"""Config errors through the real CLI entry (``build_cli``, what ``train.py`` runs): a short
message naming the file, not a traceback through PyYAML."""

import pytest

from memrnn.lit.cli import build_cli
from tests.test_configs import DEFAULTS, ROOT


def cli_error(args, capsys):
    with pytest.raises(SystemExit) as e:
        build_cli(args, default_config_files=[DEFAULTS])
    assert e.value.code == 2
    return capsys.readouterr().err.strip().splitlines()


def test_a_malformed_config_is_named_with_the_line_and_column(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("model:\n  class_path: memrnn.lit.SequenceModule\n  init_args: [a, b\n")
    lines = cli_error(["fit", "--config", str(bad)], capsys)
    assert lines == [
        f"error: config {bad.resolve()} is not valid YAML: line 4, column 1: expected ',' or ']', but got "
        "'<stream end>' (while parsing a flow sequence that starts at line 3, column 14)"
    ]
    assert "<unicode string>" not in "\n".join(lines)


def test_a_malformed_base_is_named_as_the_base_of_the_config(tmp_path, capsys):
    (tmp_path / "_base.yaml").write_text("trainer:\n  max_epochs: 1\n max_steps: 2\n")
    overlay = tmp_path / "run.yaml"
    overlay.write_text("base: _base.yaml\ntrainer:\n  max_epochs: 3\n")
    lines = cli_error(["fit", f"--config={overlay}"], capsys)
    assert lines == [
        f"error: config {(tmp_path / '_base.yaml').resolve()} (the base named by {overlay.resolve()}) is not "
        "valid YAML: line 3, column 2: expected <block end>, but found '<block mapping start>' (while "
        "parsing a block mapping that starts at line 1, column 1)"
    ]


def test_a_config_with_a_tab_or_an_unclosed_quote_is_named(tmp_path, capsys):
    tab = tmp_path / "tab.yaml"
    tab.write_text((ROOT / "configs/dyck/lstm_k2_m3.yaml").read_text() + "\tseed_everything: 1\n")
    (line,) = cli_error(["fit", "--config", str(tab)], capsys)
    assert line.startswith(f"error: config {tab.resolve()} is not valid YAML: line ") and "'\\t'" in line
    quote = tmp_path / "quote.yaml"
    quote.write_text('seed_everything: "1\n')
    (line,) = cli_error(["fit", "--config", str(quote)], capsys)
    assert line.endswith(
        "found unexpected end of stream (while scanning a quoted scalar that starts at line 1, column 18)"
    )
