"""scripts/chomsky_positions.py: reads the task from a Chomsky-task checkpoint, and its table's
cells are the model's own accuracies by output position."""

import functools
import importlib.util
from pathlib import Path

import lightning as L
import pytest
import torch

from memrnn.data import ChomskyDataModule, transduction_batch
from memrnn.layers import StackRNN
from memrnn.lit import SequenceModule

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("chomsky_positions", ROOT / "scripts" / "chomsky_positions.py")
script = importlib.util.module_from_spec(spec)
spec.loader.exec_module(script)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("positions")
    torch.manual_seed(0)
    dm = ChomskyDataModule("reverse_string", train_size=32, val_size=8, test_per_length=1,
                           train_lengths=(1, 6), test_lengths=(7, 8), batch_size=8)  # fmt: skip
    layer = functools.partial(
        StackRNN, hidden_size=8, memory="superposition", controller="elman", width=2, depth=4
    )
    model = SequenceModule(layer, dm.vocab_size, dm.num_symbols, embedding="one_hot")
    trainer = L.Trainer(max_steps=3, logger=False, enable_progress_bar=False, enable_model_summary=False,
                        enable_checkpointing=False, default_root_dir=tmp, limit_val_batches=0)  # fmt: skip
    trainer.fit(model, datamodule=dm)
    path = tmp / "model.ckpt"
    trainer.save_checkpoint(path)
    return path


def test_the_table_is_the_models_accuracy_by_output_position(checkpoint, capsys):
    text = script.main([str(checkpoint), "--lengths", "3", "7", "--count", "32", "--bin", "2", "--seed", "5"])
    assert "reverse_string, 32 inputs per length (seed 5)" in capsys.readouterr().out
    rows = [line.split(" | ") for line in text.splitlines()[2:]]
    assert [r[0] for r in rows] == ["| 1–2", "| 3–4", "| 5–6", "| 7–7", "| all"]
    module = SequenceModule.load_from_checkpoint(checkpoint, map_location="cpu").eval()
    for col, n in enumerate((3, 7), start=1):
        b = transduction_batch("reverse_string", n, 32, seed=5)
        with torch.no_grad():
            pred = module(b["input"], b["mask"]).argmax(-1)
        right = (pred == b["target"])[:, n : 2 * n].double().mean(0)  # [n], every row scores every position
        for r, lo in zip(rows, range(0, 7, 2), strict=False):
            cell = r[col].strip(" |")
            assert cell == ("" if lo >= n else f"{right[lo : lo + 2].mean():.3f}")
        assert rows[-1][col].strip(" |") == f"{right.mean():.3f}"  # the token accuracy at length n


def test_a_checkpoint_without_a_task_needs_task(tmp_path, checkpoint):
    saved = torch.load(checkpoint, map_location="cpu", weights_only=False)
    saved.pop("datamodule_hyper_parameters", None)
    bare = tmp_path / "bare.ckpt"
    torch.save(saved, bare)
    with pytest.raises(SystemExit):
        script.main([str(bare)])
    text = script.main([str(bare), "--task", "reverse_string", "--lengths", "2", "--count", "4"])
    assert text.splitlines()[-1].startswith("| all | ")
    with pytest.raises(SystemExit):
        script.main([str(tmp_path / "missing.ckpt")])
