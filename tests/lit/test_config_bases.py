"""``base:`` naming several configs (``base: [_ns.yaml, _dyck.yaml]``): the chain's order, files
shared by two bases read once, and the errors for a missing base, a cycle and a malformed list."""

from pathlib import Path

import pytest

from memrnn.lit.cli import config_chain, expand_config_bases

ROOT = Path(__file__).resolve().parents[2]


def write(folder: Path, **files: str) -> None:
    for name, text in files.items():
        (folder / f"{name}.yaml").write_text(text)


def test_a_list_of_bases_merges_in_order_each_file_once(tmp_path):
    """``top: [model, task]`` with both overlaying ``root``: root, model, task, top; root once."""
    write(
        tmp_path,
        root="seed_everything: 1\ntrainer:\n  max_epochs: 9\n",
        model="base: root.yaml\nmodel:\n  lr: 0.1\n",
        task="base: root.yaml\ntrainer:\n  max_epochs: 2\n",
        top="base: [model.yaml, task.yaml]\nmodel:\n  lr: 0.5\n",
    )
    chain = config_chain(tmp_path / "top.yaml")
    assert [p.name for p, _ in chain] == ["root.yaml", "model.yaml", "task.yaml", "top.yaml"]
    assert [keys for _, keys in chain][1:] == [
        {"model": {"lr": 0.1}},
        {"trainer": {"max_epochs": 2}},
        {"model": {"lr": 0.5}},
    ]
    assert expand_config_bases(["fit", "--config", str(tmp_path / "top.yaml")]) == [
        "fit", "--config", str(tmp_path / "root.yaml"),
        "--config", "model:\n  lr: 0.1\n", "--config", "trainer:\n  max_epochs: 2\n", "--config", "model:\n  lr: 0.5\n",
    ]  # fmt: skip


def test_bases_in_a_list_are_relative_to_the_config_naming_them(tmp_path):
    (tmp_path / "models").mkdir()
    (tmp_path / "exp").mkdir()
    write(tmp_path / "models", lstm="model:\n  lr: 0.1\n")
    write(tmp_path, task="data:\n  seed: 3\n")
    write(tmp_path / "exp", top="base: [../models/lstm.yaml, ../task.yaml]\n")
    chain = config_chain(tmp_path / "exp" / "top.yaml")
    assert [p for p, _ in chain] == [
        tmp_path / "models/lstm.yaml",
        tmp_path / "task.yaml",
        tmp_path / "exp/top.yaml",
    ]


def test_a_missing_base_in_a_list_is_named_with_its_config(tmp_path):
    write(tmp_path, a="x: 1\n", top="base: [a.yaml, nowhere.yaml]\n")
    with pytest.raises(ValueError, match=r"nowhere.yaml \(the base named by .*top.yaml\): no such file"):
        config_chain(tmp_path / "top.yaml")


def test_a_cycle_through_a_list_is_named(tmp_path):
    write(tmp_path, a="x: 1\n", b="base: [a.yaml, top.yaml]\n", top="base: [a.yaml, b.yaml]\n")
    with pytest.raises(ValueError, match=r"config bases form a cycle: .*top.yaml -> .*b.yaml -> .*top.yaml"):
        config_chain(tmp_path / "top.yaml")


@pytest.mark.parametrize(
    ("base", "problem"),
    [
        ("[]", r"base must be a path or a non-empty list of paths, got \[\]"),
        ("[a.yaml, 3]", r"base must be a path or a non-empty list of paths, got \['a.yaml', 3\]"),
        ("[a.yaml, a.yaml]", r"base names a.yaml more than once"),
    ],
)
def test_a_malformed_list_of_bases_is_named(tmp_path, base, problem):
    write(tmp_path, a="x: 1\n", top=f"base: {base}\n")
    with pytest.raises(ValueError, match=r"top.yaml: " + problem):
        config_chain(tmp_path / "top.yaml")


def test_dusell_configs_are_a_model_file_and_a_task_file():
    """``configs/dusell/<model>_<task>.yaml`` names ``_<model>.yaml`` then ``_<task>.yaml``, both
    overlays of the protocol ``_base.yaml``, which comes first and once."""
    folder = ROOT / "configs" / "dusell"
    configs = sorted(p for p in folder.glob("*.yaml") if not p.name.startswith("_"))
    assert len(configs) == 30
    for path in configs:
        model, task = path.stem.split("_", 1)
        names = [p.name for p, _ in config_chain(path)]
        assert names == ["_base.yaml", f"_{model}.yaml", f"_{task}.yaml", path.name], names
