"""Suite keys that run the authors' protocols: a parameter budget's ``budget_key`` (one override,
several set alike: FLaRe's models embed their tokens in vectors of the hidden size; or none: a size
the authors' own budget formula gave, kept as the config has it), and ``test_checkpoint`` (the
final weights, for a protocol without a validation set: Delétang et al.'s).  Fast: one bisection
over a tiny model, one cell of two training steps."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from memrnn.suite import Suite
from memrnn.suite.runner import _parameters, fit_budget, off_suite, run_cell, suite_args

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "configs"
HIDDEN, EMBED = "model.init_args.layer.init_args.hidden_size", "model.init_args.embedding_dim"


def write(folder: Path, architectures: dict) -> Suite:
    spec = {
        "name": "sized",
        "defaults": str(CONFIGS / "defaults.yaml"),
        "architectures": architectures,
        "tasks": {"first": {"data.init_args.language": "first"}},
        "seeds": [0],
        "args": {"data.init_args.train_size": 8, "data.init_args.val_size": 4},
        "metric": "test/accept_end",
        "budget": {"parameters": 3000, "max": 64},
        "out": str(folder / "runs"),
    }
    (folder / "suite.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    return Suite.load(folder / "suite.yaml")


def test_a_list_of_keys_sizes_them_alike_and_null_keeps_the_configs_size(tmp_path):
    flare = str(CONFIGS / "flare/superposition_lstm.yaml")
    suite = write(tmp_path, {
        "both": {"config": flare, "budget_key": [HIDDEN, EMBED]},
        "kept": {"config": str(CONFIGS / "flare/lstm.yaml"), "budget_key": None},
    })  # fmt: skip
    both, kept = suite.architectures["both"], suite.architectures["kept"]
    assert both.sized(7) == [f"--{HIDDEN}=7", f"--{EMBED}=7"] and kept.sized(7) == []
    cell = suite.cell(arch="both", task="first", seed=0)
    size = fit_budget(suite, cell, [suite.defaults])
    at = _parameters([*suite.cli_args(cell), *both.sized(size)], [suite.defaults])
    above = _parameters([*suite.cli_args(cell), *both.sized(size + 1)], [suite.defaults])
    assert at <= 3000 < above
    saved = json.loads((suite.out / "budget" / "both__first.json").read_text())
    assert saved["key"] == [HIDDEN, EMBED] and saved["value"] == size
    # an unsized architecture's result is on the suite without a budget of its own
    kept_cell = suite.cell(arch="kept", task="first", seed=0)
    result = {"overrides": [], "suite_args": suite_args(suite, kept_cell), "budget": None}
    assert off_suite(suite, kept_cell, result) == []
    sized_result = {"overrides": [], "suite_args": suite_args(suite, cell), "budget": None}
    assert off_suite(suite, cell, sized_result) == [
        "budget None (the suite now: {'max': 64, 'parameters': 3000})"
    ]


@pytest.mark.parametrize("bad", ["", 3, [HIDDEN, ""], {"k": 1}])
def test_a_bad_budget_key_is_named(tmp_path, bad):
    with pytest.raises(ValueError, match="budget_key must be an override key, a list of them or null"):
        write(tmp_path, {"x": {"config": str(CONFIGS / "flare/lstm.yaml"), "budget_key": bad}})


def test_the_flare_suite_keeps_the_public_codes_model_sizes():
    """get_architecture_args.py sizes the public code's RNN and LSTM (5 layers, 79 and 40 units) by
    its own formula; the suite keeps them and sizes memrnn's stack RNNs, embedding with controller."""
    suite = Suite.load(CONFIGS / "suites" / "flare.yaml")
    for arch in ("rnn", "lstm", "lstm_lm_ns"):
        assert suite.architectures[arch].budget_key == ()
    for arch in ("superposition_lstm", "stratification_lstm", "rns_lstm"):
        assert suite.architectures[arch].budget_key == (HIDDEN, EMBED)


def test_test_checkpoint_last_tests_the_final_weights(tmp_path):
    """``test_checkpoint: last``: the cell tests the weights training ended with, and records the
    last validation as the one that goes with them; a bad value is named."""
    spec = {
        "name": "final",
        "defaults": str(CONFIGS / "defaults.yaml"),
        "architectures": {"lstm": str(CONFIGS / "chomsky/lstm.yaml")},
        "tasks": {"parity_check": {"data.init_args.task": "parity_check"}},
        "seeds": [0],
        "args": {
            "model.init_args.layer.init_args.hidden_size": 4, "data.init_args.train_size": 32,
            "data.init_args.val_size": 8, "data.init_args.test_per_length": 2,
            "data.init_args.train_lengths": [1, 3], "data.init_args.test_lengths": [4, 5],
            "data.init_args.batch_size": 16, "trainer.max_epochs": 3, "trainer.max_steps": -1,
        },
        "metric": "test/acc_mean_over_lengths",
        "test_checkpoint": "last",
        "out": str(tmp_path / "runs"),
    }  # fmt: skip
    (tmp_path / "suite.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    suite = Suite.load(tmp_path / "suite.yaml")
    result = run_cell(suite, suite.cells()[0])
    assert result["checkpoint"] == "final weights"
    assert result["val_epoch"] == result["epochs"] - 1  # the last validation's
    spec["test_checkpoint"] = "final"
    (tmp_path / "suite.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    with pytest.raises(ValueError, match="'test_checkpoint' must be 'best' or 'last', got 'final'"):
        Suite.load(tmp_path / "suite.yaml")
