"""Counter machines compiled into ReLU RNNs and LSTMs (Weiss et al. 2018): exact acceptance, exhaustively
on short strings and on near misses of length up to 3·10^5, against independent predicates."""

import itertools

import numpy as np
import pytest
import torch

from memrnn.constructions.counters import (
    READY_MADE,
    counter_program,
    counter_values,
    encode_counter_machine,
)
from memrnn.constructions.result import Construction
from memrnn.languages.automata import CounterMachine, anbn_counter_machine

KINDS = ["relu", "lstm", "counter_lstm"]


# -- independent membership predicates, vectorised over rows of symbol ids ([N, L], per prefix) --
def _sorted_prefix(ids: np.ndarray) -> np.ndarray:
    """[N, L+1]: the prefix of length t is non-decreasing (blocks in order)."""
    ok = np.ones((ids.shape[0], ids.shape[1] + 1), dtype=bool)
    if ids.shape[1] > 1:
        ok[:, 2:] = np.cumprod(np.diff(ids, axis=1) >= 0, axis=1).astype(bool)
    return ok


def _counts(ids: np.ndarray, symbols: int) -> np.ndarray:
    """[N, L+1, symbols]: symbol counts of every prefix."""
    one = np.eye(symbols, dtype=np.int64)[ids]
    return np.concatenate([np.zeros((ids.shape[0], 1, symbols), np.int64), one.cumsum(1)], 1)


def members(name: str, ids: np.ndarray) -> np.ndarray:
    """[N, L+1]: is each prefix of each row in the language (n, m >= 0)?"""
    if name == "dyck1":
        depth = np.concatenate(
            [np.zeros((ids.shape[0], 1), np.int64), np.where(ids == 0, 1, -1).cumsum(1)], 1
        )
        return (np.minimum.accumulate(depth, axis=1) >= 0) & (depth == 0)
    c = _counts(ids, 3 if name != "anbn" else 2)
    s = _sorted_prefix(ids)
    if name == "anbn":
        return s & (c[..., 0] == c[..., 1])
    if name == "anbncn":
        return s & (c[..., 0] == c[..., 1]) & (c[..., 1] == c[..., 2])
    if name == "anbmcnm":
        return s & (c[..., 2] == c[..., 0] + c[..., 1])
    raise AssertionError(name)


def scores(cc: Construction, ids: torch.Tensor) -> torch.Tensor:
    """The accept scores ``[B, T]`` (position t decides the prefix read up to t)."""
    with torch.no_grad():
        return cc(ids)[0]


def prefix_verdicts(cc, ids: torch.Tensor) -> np.ndarray:
    """[N, L+1]: the network's verdict on every prefix of each row (BOS first)."""
    full = torch.cat([torch.full((ids.shape[0], 1), cc.bos_id), ids], 1)
    return (scores(cc, full) > 0).cpu().numpy()


TERNARY = ("anbncn", "anbmcnm")
EXHAUSTIVE = [
    pytest.param(name, kind, length, marks=[pytest.mark.slow] if length > 11 and name in TERNARY else [])
    for name in sorted(READY_MADE)
    for kind in KINDS
    for length in ((11, 14) if name in TERNARY else (14,))
]


@pytest.mark.parametrize(("name", "kind", "length"), EXHAUSTIVE)
def test_exhaustive_up_to_length_14(name, kind, length):
    """Every string up to ``length`` (14; 11 for the ternary alphabets in the default run, 14 in
    the slow one): the verdict on each prefix of every string of that length (all shorter
    strings are such prefixes), float32, in chunks of one first-symbols block."""
    cc = encode_counter_machine(name, kind, dtype=torch.float32)
    sigma, L = len(cc.source.alphabet), length
    head = 4 if sigma == 3 else 0
    tail = torch.tensor(list(itertools.product(range(sigma), repeat=L - head)), dtype=torch.long)
    checked = 0
    for first in itertools.product(range(sigma), repeat=head):
        ids = torch.cat([torch.tensor(first, dtype=torch.long).expand(len(tail), head), tail], 1)
        got = prefix_verdicts(cc, ids)
        want = members(name, ids.numpy())
        bad = np.argwhere(got != want)
        assert len(bad) == 0, f"{name}/{kind}: first mismatch on {ids[bad[0][0], : bad[0][1]].tolist()}"
        checked += got.size
    assert checked >= sigma**L * (L + 1)


def test_independent_predicates_agree_with_the_counter_machines():
    for name, make in READY_MADE.items():
        m = make()
        words = [w for n in range(9) for w in itertools.product(range(len(m.alphabet)), repeat=n)]
        for w in words:
            want = members(name, np.array([w], dtype=np.int64).reshape(1, -1))[0, -1]
            assert m.accepts([m.alphabet[i] for i in w]) == want, (name, w)


def _near_misses(blocks: int, n: int) -> list[tuple[int, ...]]:
    return [
        tuple(n + d for d in ds) for ds in itertools.product(range(-2, 3), repeat=blocks) if min(ds) + n >= 0
    ]


LONG = [
    pytest.param(name, kind, n_max, marks=[pytest.mark.slow] if slow else [])
    for name in ("anbn", "anbncn")
    for kind in KINDS
    for n_max, slow in (
        (100_000, True),
        (100_000 if (name, kind) in (("anbn", "relu"), ("anbn", "lstm")) else 5_000, False),
    )
]


@pytest.mark.parametrize(("name", "kind", "n_max"), LONG)
def test_long_near_misses_float32(name, kind, n_max):
    """a^{n+i} b^{n+j} (c^{n+k}), i, j, k ∈ [−2, 2], n ∈ {0, 1, 2, 1000, n_max}, float32
    (n_max = 10^5 in the slow run for every machine and kind)."""
    cc = encode_counter_machine(name, kind, dtype=torch.float32)
    blocks = 2 if name == "anbn" else 3
    ns = [0, 1, 2, 1000, n_max]
    counts = [c for n in ns for c in _near_misses(blocks, n)]
    # group by n so rows of one batch have similar lengths
    for n in ns:
        batch = [c for c in counts if abs(c[0] - n) <= 2]
        words = [[a for b, c_b in enumerate(c) for a in [cc.source.alphabet[b]] * c_b] for c in batch]
        got = cc.accepts(words)
        want = [len(set(c)) == 1 for c in batch]
        assert got == want, [(c, g) for c, g, w in zip(batch, got, want, strict=True) if g != w]


@pytest.mark.parametrize("kind", KINDS)
def test_long_dyck1_and_anbmcnm(kind):
    n = 20_000 if kind != "counter_lstm" else 5_000
    dy = encode_counter_machine("dyck1", kind)
    words = [list("(" * n + ")" * n), list("(" * n + ")" * (n + 1)), list("(" * (n + 1) + ")" * n),
             list("()" * n), list("(" * n + ")" * (n - 1) + "(" + ")" * 2)]  # fmt: skip
    assert dy.accepts(words) == [True, False, False, True, True]
    abc = encode_counter_machine("anbmcnm", kind)
    words = [list("a" * n + "b" * 7 + "c" * (n + 7)), list("a" * n + "b" * 7 + "c" * (n + 6)),
             list("b" * n + "c" * n), list("a" * n + "c" * n + "b")]  # fmt: skip
    assert abc.accepts(words) == [True, False, True, False]


def random_machine(rng: np.random.Generator, k: int, nq: int) -> CounterMachine:
    """A random real-time k-counter machine over {a, b}; counters may go negative."""
    states = [f"q{i}" for i in range(nq)]
    t = []
    for q, a in itertools.product(states, ("a", "b")):
        for z in itertools.product((True, False), repeat=k):
            if rng.random() < 0.8:
                ops = tuple(int(x) for x in rng.integers(-1, 2, size=k))
                t.append((q, a, z, states[int(rng.integers(nq))], ops))
    acc = [(q, z) for q in states for z in itertools.product((True, False), repeat=k) if rng.random() < 0.4]
    return CounterMachine(k, states, ("a", "b"), t, "q0", acc)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_random_machines_with_negative_counters(kind, dtype):
    rng = np.random.default_rng(7)
    words = [w for n in range(9) for w in itertools.product("ab", repeat=n)]
    for _ in range(8):
        m = random_machine(rng, int(rng.integers(1, 3)), int(rng.integers(1, 4)))
        cc = encode_counter_machine(m, kind, dtype=dtype)
        assert cc.accepts(words) == [m.accepts(w) for w in words]


def test_program_sizes_and_signs():
    prog = counter_program(anbn_counter_machine(1))
    assert [q for q, _ in prog.states] == ["A", "B"]
    assert len(prog.guards) == 5  # (A,a) merged; (A,b) and (B,b) need "non-zero": 2 each
    cc = encode_counter_machine(anbn_counter_machine(1), "relu")
    assert len(cc.units) == 5 + 1 + 2 and cc.layer.hidden_size == 8
    # a counter that goes negative doubles the control: (q, +) and (q, −)
    m = CounterMachine(1, ["S"], ["a", "b"], [("S", "a", (None,), "S", (1,)), ("S", "b", (None,), "S", (-1,))],
                       "S", [("S", (True,))])  # fmt: skip
    prog = counter_program(m)
    assert sorted(prog.states) == [("S", (-1,)), ("S", (1,))]
    cc = encode_counter_machine(m, "relu")
    assert cc.accepts([list("ab"), list("ba"), list("bba"), list("bbaa"), list("abba")]) == [
        True,
        True,
        False,
        True,
        True,
    ]


@pytest.mark.parametrize("kind", KINDS)
def test_counter_values_decode_the_configuration(kind):
    m = CounterMachine(2, ["S", "T"], ["a", "b", "c"],
                       [("S", "a", (None, None), "S", (1, -1)), ("S", "b", (None, None), "T", (-1, 0)),
                        ("T", "c", (None, None), "S", (0, 1)), ("T", "a", (None, False), "T", (1, 1))],
                       "S", [("S", (True, None))])  # fmt: skip
    cc = encode_counter_machine(m, kind, dtype=torch.float64)
    rng = np.random.default_rng(0)
    for _ in range(20):
        w = [str(x) for x in rng.choice(list("abc"), size=12)]
        ids, _ = cc.ids([w])
        state, counters = (v[0] for v in counter_values(cc, ids))
        for t, conf in enumerate(m.run(w)):  # position t (BOS = 0) holds the configuration after t symbols
            if conf is None:
                assert int(state[t]) == -1
                break
            q, c = conf
            assert counter_program(m).states[int(state[t])][0] == q
            assert counters[t].tolist() == pytest.approx(list(c), abs=1e-6)


@pytest.mark.parametrize("kind", KINDS)
def test_long_counts_decode_past_tanh_saturation(kind):
    cc = encode_counter_machine("anbn", kind, dtype=torch.float64)
    ids, _ = cc.ids([["a"] * 300 + ["b"] * 120])
    _, counters = counter_values(cc, ids)
    want = [min(t, 300) - max(0, t - 300) for t in range(421)]
    assert counters[0, :, 0].tolist() == pytest.approx(want, abs=1e-6)


@pytest.mark.parametrize("kind", KINDS)
def test_bos_resets_control_and_counters(kind):
    cc = encode_counter_machine("anbn", kind)
    a, b, bos = 0, 1, cc.bos_id
    ids = torch.tensor([[bos, a, a, a, bos, a, b, bos, b]])
    verdict = (scores(cc, ids) > 0)[0].tolist()
    # after each BOS the empty word (n = 0) is accepted; "ab" after the second BOS; "b" is not
    assert verdict == [True, False, False, False, True, False, True, True, False]


@pytest.mark.parametrize("kind", ["relu", "lstm"])
def test_plain_torch_modules_give_the_same_logits(kind):
    cc = encode_counter_machine("anbncn", kind, dtype=torch.float64)
    plain = cc.to_torch()
    assert isinstance(plain.rnn, torch.nn.RNN if kind == "relu" else torch.nn.LSTM)
    ids, mask = cc.ids([list("aabbcc"), list("abcc")])
    with torch.no_grad():
        got = plain(ids)
    torch.testing.assert_close(got[mask], scores(cc, ids)[mask], atol=1e-12, rtol=0)
    with pytest.raises(ValueError, match="plain torch has no counterpart of CounterLSTM"):
        encode_counter_machine("anbn", "counter_lstm").to_torch()


def test_bad_arguments_raise_clear_errors():
    with pytest.raises(ValueError, match="unknown ready-made counter machine 'anbncndn'"):
        encode_counter_machine("anbncndn")
    with pytest.raises(ValueError, match="kind must be"):
        encode_counter_machine("anbn", "gru")
    cc = encode_counter_machine("anbn")
    with pytest.raises(ValueError, match="unknown symbol 'c' in string 0 at position 2"):
        cc.accepts([list("abc")])
    with pytest.raises(ValueError, match="unknown token id 7"):
        cc(torch.tensor([[0, 7]]))


@pytest.mark.parametrize("kind", KINDS)
def test_state_dict_round_trip(kind, tmp_path):
    cc = encode_counter_machine("anbncn", kind)
    path = tmp_path / "cc.pt"
    torch.save(cc.state_dict(), path)
    fresh = encode_counter_machine("anbncn", kind)
    with torch.no_grad():
        for p in fresh.parameters():
            p.zero_()
    fresh.load_state_dict(torch.load(path))
    ids, _ = cc.ids([list("aaabbbccc"), list("aabbc")])
    torch.testing.assert_close(scores(fresh, ids), scores(cc, ids))
