"""output_position_accuracy (accuracy by output position) and transduction_batch (a test batch of
one input length), against hand-worked batches and the tasks' own transductions."""

import math

import pytest
import torch

from memrnn.analysis import output_position_accuracy
from memrnn.data import IGNORE_INDEX, transduction_batch
from memrnn.languages.chomsky import chomsky_task

X = IGNORE_INDEX


def test_a_hand_worked_batch():
    # row 0: input of 2 steps, outputs at steps 2..4; row 1: aligned, outputs from step 0, its
    # step 1 unscored and its step 4 padding
    target = torch.tensor([[X, X, 1, 0, 1], [0, X, 1, 1, X]])
    pred = torch.tensor([[0, 0, 1, 1, 1], [0, 1, 0, 1, 0]])
    acc, count = output_position_accuracy(pred, target, torch.tensor([2, 0]))
    # position 0: row 0 right (1 = 1), row 1 right (0 = 0) -> 2/2
    # position 1: row 0 wrong (1 vs 0), row 1 unscored -> 0/1
    # position 2: row 0 right (1 = 1), row 1 wrong (0 vs 1) -> 1/2
    # position 3: row 1 right (1 = 1) -> 1/1; position 4: row 1 padding -> no count
    assert count.tolist() == [2, 1, 2, 1, 0]
    assert acc[:4].tolist() == [1.0, 0.0, 0.5, 1.0]
    assert math.isnan(acc[4])


def test_bad_shapes_and_starts_are_named():
    t = torch.zeros(2, 3, dtype=torch.long)
    with pytest.raises(ValueError, match=r"\[B, T\]"):
        output_position_accuracy(t[0], t[0], torch.zeros(2))
    with pytest.raises(ValueError, match=r"output_start must be \[B\] = \[2\]"):
        output_position_accuracy(t, t, torch.zeros(3))
    with pytest.raises(ValueError, match="output_start 4 lies outside the 3 steps"):
        output_position_accuracy(t, t, torch.tensor([0, 4]))


def test_a_reversal_batch_holds_the_reversed_inputs_and_is_its_seeds():
    task = chomsky_task("reverse_string")
    b = transduction_batch("reverse_string", 5, 16, seed=3)
    assert b["input"].shape == (16, 10) and b["input_lengths"].tolist() == [5] * 16
    for row in range(16):
        x = b["input"][row, :5].tolist()
        assert b["target"][row, :5].tolist() == [X] * 5
        assert b["target"][row, 5:].tolist() == task.transduce(x) == x[::-1]
    assert torch.equal(transduction_batch(task, 5, 16, seed=3)["input"], b["input"])
    assert not torch.equal(transduction_batch(task, 5, 16, seed=4)["input"], b["input"])
    with pytest.raises(ValueError, match="length must be a positive int, got 0"):
        transduction_batch(task, 0, 4)
    with pytest.raises(ValueError, match="count must be a positive int, got -1"):
        transduction_batch(task, 3, -1)


def test_a_model_that_reverses_only_its_last_d_inputs_is_right_exactly_there():
    # the bounded stack's signature: outputs 0..D-1 right, the rest a constant guess
    n, D = 12, 4
    b = transduction_batch("reverse_string", n, 64, seed=0)
    pred = b["target"].clone()
    pred[:, n + D :] = 0
    acc, count = output_position_accuracy(pred, b["target"], b["input_lengths"])
    assert count.tolist() == [64] * n
    assert acc[:D].tolist() == [1.0] * D
    zeros = (b["target"][:, n + D :] == 0).double().mean(0)
    torch.testing.assert_close(acc[D:].double(), zeros)
