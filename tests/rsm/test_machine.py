"""The reservoir stack machine (Paaßen et al. 2021, Algorithms 2 and 4).

* Driven by oracle classifiers (the LR(1) automaton's own rule choices), the batched machine
  reproduces Algorithm 1's stack after every step and its output, on every string up to length 6
  over each Table 1 alphabet (4 for JSON) and on 1,000 sampled words and non-words up to
  length 100.
* The batched machine equals the literal algorithms (stack state re-run from the bottom after
  every pop; one sequence at a time), for learned classifiers too.
* A machine trained on short words generalises to longer ones; bad input gets clear errors.
"""

import itertools

import numpy as np
import pytest
import torch

from memrnn.data.tasks import CopyTask, RepeatCopyTask
from memrnn.languages import AnBn, DyckN, JsonLite, Latch, Palindrome
from memrnn.languages.lr import END_MARK, table1_automaton
from memrnn.layers.reservoir import Reservoir
from memrnn.rsm.machine import InnerLoopLimitError, ReservoirStackMachine, StackDepthError
from memrnn.rsm.oracle import LROracle
from memrnn.rsm.readouts import LogisticClassifier, RidgeClassifier, RidgeReadout
from memrnn.rsm.teacher import copy_actions, lr_batch, transduction_batch

LANGUAGES = {
    "dyck1": (DyckN(1), 6),
    "dyck2": (DyckN(2), 6),
    "dyck3": (DyckN(3), 6),
    "anbn": (AnBn(), 6),
    "palindrome": (Palindrome(), 6),
    "json": (JsonLite(), 4),
    "latch": (Latch(), 6),
}


def oracle_machine(automaton, units=4, **kw):
    n, K = len(automaton.terminals), len(automaton.nonterminals)
    return ReservoirStackMachine(
        Reservoir(n + K, units, "crj", dtype=torch.float64),
        n,
        K,
        max_pop=max(r.pop for r in automaton.rules),
        pop=LROracle(automaton, "pop"),
        push=LROracle(automaton, "push"),
        shift=LROracle(automaton, "shift"),
        out=LROracle(automaton, "out"),
        **kw,
    )


def check_against_parser(automaton, words):
    rsm = oracle_machine(automaton)
    batch = lr_batch(automaton, words)
    res = rsm.run(batch["ids"], batch["lengths"], record=True)
    names = [*automaton.terminals, *automaton.nonterminals, END_MARK]
    outputs, stacks, actions = res.outputs[..., 0].long().tolist(), res.stacks.tolist(), res.actions.tolist()
    for b, w in enumerate(words):
        trace = automaton.parse(w)
        T1 = len(w) + 1
        assert outputs[b][:T1] == trace.output.tolist(), w
        assert outputs[b][len(w)] == int(trace.accepted), w  # y_{T+1} = A(w)
        for t in range(T1):
            stack = tuple(names[s] for s in stacks[b][t] if s >= 0)
            assert stack == trace.stacks[t][-1], (w, t, stack, trace.stacks[t][-1])
        assert actions[b][:T1] == (trace.num_actions - 1).tolist(), w
    assert res.inner_limit_hits == 0 and res.underflows == 0


def symbols(language, ids):
    """A sampled id string as symbols, ``END`` dropped."""
    return [language.symbols[i] for i in ids if i != language.end_id]


def words_of(language, rng, n, lengths):
    """``n`` words of ``language`` sampled in the window ``lengths`` (``END`` counted)."""
    return [symbols(language, language.sample(rng, lengths)) for _ in range(n)]


@pytest.mark.parametrize("name", list(LANGUAGES))
def test_oracle_machine_equals_the_lr_parser_on_every_short_string(name):
    automaton = table1_automaton(name)
    _, max_len = LANGUAGES[name]
    words = [list(w) for k in range(max_len + 1) for w in itertools.product(automaton.terminals, repeat=k)]
    check_against_parser(automaton, words)


@pytest.mark.parametrize("name", list(LANGUAGES))
def test_oracle_machine_equals_the_lr_parser_on_sampled_words_and_non_words(name):
    language, _ = LANGUAGES[name]
    automaton = table1_automaton(name)
    rng = np.random.default_rng(7)

    pos = [symbols(language, language.sample(rng, (1, 101))) for _ in range(1000)]
    neg = [symbols(language, language.sample_negative(rng, (1, 101))) for _ in range(1000)]
    assert sum(map(automaton.accepts, neg)) == 0
    assert max(map(len, pos + neg)) > 60
    check_against_parser(automaton, pos + neg)


def trained_machine(name="dyck2", kind="crj", n_train=60, seed=0, dtype=torch.float64):
    language, _ = LANGUAGES[name]
    automaton = table1_automaton(name)
    rng = np.random.default_rng(seed)
    words = words_of(language, rng, n_train, (3, 31))
    n, K = len(automaton.terminals), len(automaton.nonterminals)
    res = Reservoir(n + K, 64, kind, seed=seed, dtype=dtype)
    clf = lambda s: RidgeClassifier(1e-3, features=256, seed=s, standardize=True)  # noqa: E731
    J = max(r.pop for r in automaton.rules)
    rsm = ReservoirStackMachine(
        res, n, K, max_pop=J, pop=clf(1), push=clf(2), out=clf(3), on_inner_limit="stop"
    )
    batch = lr_batch(automaton, words)
    rsm.fit(batch["ids"], batch["lengths"], batch["pops"], batch["pushes"], batch["outputs"], batch["shift"])
    return rsm, automaton, language


def test_batched_machine_equals_the_literal_algorithms():
    rsm, automaton, language = trained_machine("dyck2")
    rng = np.random.default_rng(3)
    words = words_of(language, rng, 12, (3, 41))
    words += [list("(]"), list("(([")]
    batch = lr_batch(automaton, words)
    res = rsm.run(batch["ids"], batch["lengths"], record=True)
    data = rsm.collect(batch["ids"], batch["lengths"], batch["pops"], batch["pushes"], batch["shift"])
    for b, w in enumerate(words):
        T1 = len(w) + 1
        ids = batch["ids"][b, : len(w)]
        out, stacks = rsm.run_reference(ids)
        torch.testing.assert_close(res.outputs[b, :T1], out, atol=0, rtol=0)
        assert [tuple(s for s in res.stacks[b, t].tolist() if s >= 0) for t in range(T1)] == stacks
        ref = rsm.collect_reference(
            ids, batch["pops"][b, :T1], batch["pushes"][b, :T1], batch["shift"][b, :T1]
        )
        rows = data["step_index"][:, 0] == b
        torch.testing.assert_close(data["step_x"][rows], ref["step_x"], atol=1e-12, rtol=0)
        assert torch.equal(data["shift_y"][rows], ref["shift_y"])
        acts = data["action_index"][:, 0] == b
        order = torch.argsort(data["action_index"][acts, 1] * 1000 + data["action_index"][acts, 2])
        torch.testing.assert_close(data["action_x"][acts][order], ref["action_x"], atol=1e-12, rtol=0)
        assert torch.equal(data["pop_y"][acts][order], ref["pop_y"])
        assert torch.equal(data["push_y"][acts][order], ref["push_y"])
        assert torch.equal(data["action_index"][acts][order][:, 1:], ref["action_index"][:, 1:])
    n_actions = int((batch["pops"] + batch["pushes"] > 0).sum()) + int(sum(len(w) + 1 for w in words))
    assert len(data["action_x"]) == n_actions


def test_trained_machine_generalises_to_longer_words():
    for name in ("dyck1", "json"):
        rsm, automaton, language = trained_machine(name, n_train=80)
        rng = np.random.default_rng(11)
        words = words_of(language, rng, 40, (40, 81))
        batch = lr_batch(automaton, words)
        out = rsm.predict(batch["ids"], batch["lengths"])[..., 0]
        real = torch.arange(out.shape[1])[None] <= batch["lengths"][:, None]
        assert torch.equal(out[real].long(), batch["outputs"][real]), name


def test_float32_machine_and_state_dict_round_trip():
    rsm, automaton, language = trained_machine("dyck1", dtype=torch.float32)
    rng = np.random.default_rng(5)
    words = words_of(language, rng, 20, (3, 41))
    batch = lr_batch(automaton, words)
    out = rsm.predict(batch["ids"], batch["lengths"])
    assert out.dtype == torch.float32
    fresh = ReservoirStackMachine(
        Reservoir(3, 64, "crj", dtype=torch.float32),
        2,
        1,
        max_pop=3,
        pop=RidgeClassifier(1e-3, features=256, seed=1, standardize=True),
        push=RidgeClassifier(1e-3, features=256, seed=2, standardize=True),
        out=RidgeClassifier(1e-3, features=256, seed=3, standardize=True),
    )
    fresh.load_state_dict(rsm.state_dict())
    assert torch.equal(fresh.predict(batch["ids"], batch["lengths"]), out)


def test_copy_heuristic_actions():
    task = CopyTask(bits=2, max_length=3, min_length=3)
    s = task.sample(np.random.default_rng(0), "train")
    acts = copy_actions(s["input"], fill=20)
    assert len(acts) == len(s["input"]) + 1
    assert acts[3] == [(0, 1)] * 17 + [(0, 0)]  # EOS after 3 inputs: fill the stack to 20
    assert all(a == [(0, 0)] for k, a in enumerate(acts) if k != 3)
    rep = RepeatCopyTask(bits=2, max_length=3, max_repeats=2, test_max_repeats=2)
    rng = np.random.default_rng(1)
    s = next(
        x for x in (rep.sample(rng, "train") for _ in range(50)) if x["input"][:, -1].tolist().count(1.0) == 2
    )
    n = int((s["input"][:, -1] < 0).sum())
    acts = copy_actions(s["input"], fill=20)
    eos = [t for t in range(len(s["input"])) if s["input"][t, -1] > 0]
    assert acts[eos[0]] == [(0, 1)] * (20 - n) + [(0, 0)]
    assert acts[eos[1]] == [(1, 0)] * (n + 1) + [(0, 0)]  # pop the copy phase and the first EOS


def test_ldn_machine_learns_copy():
    rng = np.random.default_rng(0)
    task = CopyTask(bits=4, max_length=8)
    train = transduction_batch([task.sample(rng, "train") for _ in range(60)], fill=10)
    test = transduction_batch([task.sample(rng, "test") for _ in range(30)], fill=10)
    res = Reservoir(6, kind="ldn", order=24, theta=13.0, dtype=torch.float64)
    rsm = ReservoirStackMachine(
        res,
        5,
        1,
        max_pop=1,
        output_size=4,
        out_mode="regress",
        pop=LogisticClassifier(1e-4),
        push=LogisticClassifier(1e-4),
        out=RidgeReadout(1e-8),
    )
    rsm.fit(train["x"], train["lengths"], train["pops"], train["pushes"], train["outputs"], train["shift"])
    out = rsm.predict(test["x"], test["lengths"])
    err = (out - test["outputs"]).abs()[test["loss_mask"]]
    assert err.mean() < 0.01, float(err.mean())


def always(value):
    class Const:
        def fit(self, x, y):
            return self

        def predict(self, x, context=None):
            return torch.full((x.shape[0],), value, dtype=torch.long)

    return Const()


def test_clear_errors():
    A = table1_automaton("dyck1")
    rsm = oracle_machine(A)
    with pytest.raises(ValueError, match="unknown token id 5 at row 0, step 1"):
        rsm.run(torch.tensor([[0, 5]]))
    with pytest.raises(ValueError, match="input_size=4 but the machine needs"):
        ReservoirStackMachine(Reservoir(4, 3, "crj"), 2, 1, max_pop=3)
    with pytest.raises(StackDepthError, match="exceeds max_depth=3"):
        oracle_machine(A, max_depth=3).run(torch.zeros(1, 6, dtype=torch.long))
    looping = ReservoirStackMachine(
        Reservoir(3, 4, "crj"),
        2,
        1,
        max_pop=3,
        pop=always(0),
        push=always(1),
        shift=always(1),
        out=always(0),
        max_inner=5,
    )
    with pytest.raises(InnerLoopLimitError, match="max_inner=5"):
        looping.run(torch.zeros(1, 2, dtype=torch.long))
    looping.on_inner_limit = "stop"
    res = looping.run(torch.zeros(2, 2, dtype=torch.long))
    assert res.inner_limit_hits == 2 * 3 and res.depth[0].tolist() == [6, 12, 18]
    bad = ReservoirStackMachine(
        Reservoir(3, 4, "crj"), 2, 1, max_pop=3, pop=always(7), push=always(0), shift=always(1), out=always(0)
    )
    with pytest.raises(ValueError, match=r"c_pop returned 7; it must be in 0\.\.3"):
        bad.run(torch.zeros(1, 2, dtype=torch.long))
    with pytest.raises(ValueError, match="teacher pops 2 from a stack of 0"):
        rsm.collect(
            torch.zeros(1, 1, dtype=torch.long),
            None,
            torch.tensor([[[2], [0]]]),
            torch.zeros(1, 2, 1, dtype=torch.long),
        )
    with pytest.raises(ValueError, match="inputs have 5 channels but num_inputs=2"):
        rsm.run(torch.zeros(2, 3, 5))
    with pytest.raises(ValueError, match="inputs must be token ids"):
        rsm.run(torch.zeros(2, 3))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_matches_cpu():
    rsm, automaton, language = trained_machine("dyck2")
    rng = np.random.default_rng(2)
    words = words_of(language, rng, 30, (3, 61))
    batch = lr_batch(automaton, words)
    cpu = rsm.predict(batch["ids"], batch["lengths"])
    gpu = rsm.to("cuda").predict(batch["ids"].cuda(), batch["lengths"])
    assert torch.equal(gpu.cpu(), cpu)
