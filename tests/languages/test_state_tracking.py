"""The word problems of Merrill et al. (2024): groups checked as groups, prefix products against
an independent permutation walk, sampling, errors, and the data module's aligned sequences."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from memrnn.data import ChomskyDataModule
from memrnn.languages.chomsky import CHOMSKY_TASKS
from memrnn.languages.state_tracking import (
    STATE_TRACKING_TASKS,
    compose,
    permutation_parity,
    transduction_task,
)

SIZES = {"s5": 120, "a5": 60, "a4_z5": 60, "z60": 60}


@pytest.fixture(scope="module", params=list(STATE_TRACKING_TASKS))
def task(request):
    return STATE_TRACKING_TASKS[request.param]()


def test_compose_applies_the_left_factor_first():
    swap01, cycle = (1, 0, 2), (1, 2, 0)  # 0<->1; 0->1->2->0
    assert compose(swap01, cycle) == (2, 1, 0)  # 0 -> 1 -> 2, 1 -> 0 -> 1, 2 -> 2 -> 0
    assert compose(cycle, swap01) == (0, 2, 1)
    assert permutation_parity((1, 0, 2)) == 1 and permutation_parity((1, 2, 0)) == 0


def test_each_task_is_a_group_of_the_stated_size(task):
    n = len(task.elements)
    assert n == SIZES[task.name]
    assert task.elements[0] == tuple(range(len(task.elements[0])))  # the identity is id 0
    table = task.table
    assert (table[0] == np.arange(n)).all() and (table[:, 0] == np.arange(n)).all()
    # a Latin square (every row and column a permutation: inverses exist, cancellation holds)
    assert all(sorted(row) == list(range(n)) for row in table)
    assert all(sorted(col) == list(range(n)) for col in table.T)
    # associativity on a sample of triples
    rng = np.random.default_rng(0)
    for a, b, c in rng.integers(0, n, size=(500, 3)):
        assert table[table[a, b], c] == table[a, table[b, c]]
    abelian = (table == table.T).all()
    assert abelian == (task.name == "z60")


def test_a5_is_the_even_half_of_s5_and_perfect():
    s5, a5 = STATE_TRACKING_TASKS["s5"](), STATE_TRACKING_TASKS["a5"]()
    assert set(a5.elements) == {p for p in s5.elements if permutation_parity(p) == 0}
    # A5 is perfect (its commutators generate it): why its word problem is NC1-complete
    inv = {p: tuple(np.argsort(p)) for p in a5.elements}
    comms = {
        compose(compose(a, b), compose(inv[a], inv[b])) for a, b in itertools.product(a5.elements, repeat=2)
    }
    closure = set(comms)
    while True:
        more = {compose(a, b) for a, b in itertools.product(closure, repeat=2)} | closure
        if more == closure:
            break
        closure = more
    assert closure == set(a5.elements)


def test_prefix_products_equal_a_walk_of_the_points(task):
    rng = np.random.default_rng(1)
    for n in (1, 2, 7, 40):
        x, y = task.sample(rng, n)
        assert len(x) == len(y) == n and task.output_length(n) == n
        points = list(range(len(task.elements[0])))
        for t, g in enumerate(x):
            points = [task.elements[g][p] for p in points]
            assert task.elements[y[t]] == tuple(points)
        assert task.transduce(x) == y


def test_hand_worked_s5_word():
    s5 = STATE_TRACKING_TASKS["s5"]()
    ids = {name: i for i, name in enumerate(s5.input_symbols)}
    x = [ids["41023"], ids["30412"]]
    assert s5.decode(s5.transduce(x), output=True) == "41023 20341"  # 0->4->2, 1->1->0, ...
    assert s5.transduce([ids["10234"], ids["10234"]]) == [ids["10234"], 0]  # a swap twice: identity


def test_sampling_is_uniform_over_the_group():
    a5 = STATE_TRACKING_TASKS["a5"]()
    x, _ = a5.sample(np.random.default_rng(2), 60_000)
    counts = np.bincount(x, minlength=60)
    assert counts.min() > 850 and counts.max() < 1150  # 1000 expected, sd about 31


def test_bad_inputs_are_named():
    s5 = STATE_TRACKING_TASKS["s5"]()
    with pytest.raises(ValueError, match="unknown input token 120 at position 1"):
        s5.transduce([0, 120])
    with pytest.raises(ValueError, match="unknown transduction task 's6'"):
        transduction_task("s6")
    assert set(STATE_TRACKING_TASKS).isdisjoint(CHOMSKY_TASKS)


def test_the_data_module_serves_aligned_sequences():
    dm = ChomskyDataModule(task="a5", train_size=8, val_size=4, test_per_length=2, train_lengths=(3, 6),
                           test_lengths=(7, 8), batch_size=4)  # fmt: skip
    dm.setup("fit")
    dm.setup("test")
    assert (dm.vocab_size, dm.num_symbols) == (61, 60)
    batch = next(iter(dm.train_dataloader()))
    for b in range(4):
        n = int(batch["input_lengths"][b])
        assert 3 <= n <= 6 and int(batch["lengths"][b]) == n  # no blank inputs
        x = batch["input"][b, :n].tolist()
        assert batch["target"][b, :n].tolist() == dm.task.transduce(x)
        assert batch["loss_mask"][b, :n].all() and not batch["loss_mask"][b, n:].any()
    test = next(iter(dm.test_dataloader()))
    assert sorted(test["input_lengths"].tolist()) == [7, 7, 8, 8]
    assert torch.equal(test["ref_logprob"], torch.zeros_like(test["ref_logprob"]))
