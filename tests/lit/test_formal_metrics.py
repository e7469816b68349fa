"""Hewitt's bracket-closing metric, next-set accuracy and acceptor accuracy on hand-worked cases."""

from __future__ import annotations

import math

import pytest
import torch

from memrnn.languages import DyckKM, DyckN, bracket_annotations
from memrnn.lit.metrics import AcceptorAccuracy, BracketClosingAccuracy, NextSetAccuracy


def logits_of(rows):
    return torch.tensor([[math.log(p) for p in row] for row in rows], dtype=torch.float64)


def annotate(lang, text):
    ids = lang.encode(text)
    ann = bracket_annotations(lang, ids)
    return torch.tensor(ids), *(torch.as_tensor(ann[k]) for k in ("distance", "depth", "full"))


def test_bracket_annotations_hand_worked():
    d = DyckKM(2, 2)
    _, dist, depth, full = annotate(d, "(0 (1 1) (0 0) 0) END")
    assert dist.tolist() == [0, 0, 1, 0, 1, 5, 0]
    assert depth.tolist() == [0, 1, 2, 1, 2, 1, 0]
    assert full.tolist() == [False, False, True, False, True, False, False]
    with pytest.raises(ValueError, match="close bracket id 3 at position 1"):
        bracket_annotations(d, d.encode("(0 1) END"))
    with pytest.raises(ValueError, match="not a bracket language"):
        from memrnn.languages import AnBn

        bracket_annotations(AnBn(), [0, 1, 2])


def _two_strings():
    """A padded batch of ``(0 (1 1) 0) END`` and ``(1 1) END`` under DyckKM(2, 3), with logits."""
    d = DyckKM(2, 3)  # ids: (0 (1 0) 1) END = 0 1 2 3 4
    ids, dist, depth, full = annotate(d, "(0 (1 1) 0) END")  # closes at t=2 (ℓ=1) and t=3 (ℓ=3)
    first = logits_of([
        [0.3, 0.3, 0.1, 0.1, 0.2],  # t=0, empty stack: close mass 0.2 (not < 0.2)
        [0.2, 0.2, 0.1, 0.4, 0.1],  # "(0" on top: 0.1 / 0.5 = 0.2, not confident
        [0.1, 0.1, 0.1, 0.6, 0.1],  # close 1: 0.6 / 0.7 = 0.857 > 0.8, confident
        [0.1, 0.1, 0.5, 0.2, 0.1],  # close 0: 0.5 / 0.7 = 0.714, not confident
        [0.4, 0.4, 0.05, 0.05, 0.1],  # t=4, empty stack: close mass 0.1 < 0.2
    ])  # fmt: skip
    ids2, dist2, depth2, full2 = annotate(d, "(1 1) END")  # one close at ℓ=1
    second = logits_of([[0.25, 0.25, 0.1, 0.1, 0.3], [0.1, 0.1, 0.3, 0.4, 0.1], [0.3, 0.3, 0.1, 0.1, 0.2]])
    # pad the second sequence to T=5 and batch
    pad = lambda x, v: torch.cat([x, torch.full((5 - len(x), *x.shape[1:]), v, dtype=x.dtype)])  # noqa: E731
    return (torch.stack([first, pad(second, 0.0)]), torch.stack([ids, pad(ids2, -100)]),
            torch.stack([dist, pad(dist2, 0)]), torch.stack([depth, pad(depth2, -1)]),
            torch.stack([full, pad(full2, False)]))  # fmt: skip


def test_bracket_closing_mean_over_distance_buckets_at_observed_closes():
    metric = BracketClosingAccuracy(2, positions="paper")
    metric.update(*_two_strings())
    out = metric.compute()
    # ℓ=1: 1 of 2 confident (0.4/0.7 = 0.571 in the second string); ℓ=3: 0 of 1  ->  mean 0.25
    assert out["closing"].item() == pytest.approx(0.25)
    assert out["closing_error"].item() == pytest.approx(0.75)
    # empty-stack positions: first t=0 (0.2, fails), t=4 (0.1, ok); second t=0 (0.2, fails), t=2 (0.2, fails)
    assert out["close_on_empty_ok"].item() == pytest.approx(1 / 4)
    # END on a non-empty stack: masses 0.1, 0.1, 0.1 (first), 0.1 (second): all below 0.2
    assert out["end_on_nonempty_ok"].item() == pytest.approx(1.0)


def test_bracket_closing_mean_over_distance_buckets_at_every_open_stack_position():
    """Hewitt et al.'s reporter.py (the default): every position with a non-empty stack, scored
    against the top, at the distance from the top open's input position (BOS is input 0)."""
    metric = BracketClosingAccuracy(2)
    logits, target, distance, depth, full = _two_strings()
    metric.update(logits, target, torch.zeros_like(distance), depth, full)  # distance is not read
    out = metric.compute()
    # first string: t=1 "(0" on top, ℓ=0, 0.2 no; t=2 "(1" on top, ℓ=0, 0.857 yes; t=3 "(0" on top
    # (input 1), ℓ=2, 0.714 no.  second: t=1 "(1" on top, ℓ=0, 0.571 no.  ℓ=0: 1 of 3, ℓ=2: 0 of 1
    assert out["closing"].item() == pytest.approx(1 / 6)
    assert metric.closes[:3].tolist() == [3, 0, 1] and metric.confident[:3].tolist() == [1, 0, 0]
    # the side constraints are the paper's positions' (the same positions in both)
    paper = BracketClosingAccuracy(2, positions="paper")
    paper.update(logits, target, distance, depth, full)
    for key in ("close_on_empty_ok", "open_on_full_ok", "end_on_nonempty_ok"):
        assert out[key].item() == paper.compute()[key].item()


def test_bracket_closing_positions_are_checked():
    with pytest.raises(ValueError, match=r"positions must be 'code'.*got 'observed'"):
        BracketClosingAccuracy(2, positions="observed")
    logits, target, distance, depth, full = _two_strings()
    metric = BracketClosingAccuracy(2)
    # close positions alone (as a caller that selects them would pass): no Dyck string to rebuild
    at = distance > 0
    with pytest.raises(ValueError, match=r"target id 3 at row 0, position 0 .*use positions='paper'"):
        metric.update(logits[at][None], target[at][None], distance[at][None], depth[at][None], full[at][None])
    crossed = target.clone()
    crossed[0, 2], crossed[0, 3] = 2, 3  # "(0 (1 0) 1)": the close at t=2 does not close the top
    with pytest.raises(ValueError, match="target id 2 at row 0, position 2 does not continue"):
        metric.update(logits, crossed, distance, depth, full)
    alien = target.clone()
    alien[1, 1] = 7  # no id of Dyck with k=2
    with pytest.raises(ValueError, match="target id 7 at row 1, position 1"):
        metric.update(logits, alien, distance, depth, full)
    assert not metric.closes.any()  # nothing counted from a rejected batch


@pytest.mark.parametrize("positions", ["code", "paper"])
def test_bracket_closing_is_perfect_under_the_exact_distribution(positions):
    d = DyckKM(2, 3)
    rng = __import__("numpy").random.default_rng(0)
    metric = BracketClosingAccuracy(2, positions=positions)
    for _ in range(20):
        w = d.sample(rng, (1, 40))
        logits = torch.stack([torch.as_tensor(d.next_log_probs(w[:t])) for t in range(len(w))])
        ann = bracket_annotations(d, w)
        metric.update(
            logits[None],
            torch.tensor(w)[None],
            *(torch.as_tensor(ann[k])[None] for k in ("distance", "depth", "full")),
        )
    out = metric.compute()
    assert out["closing"].item() == 1.0
    assert (
        out["close_on_empty_ok"].item()
        == out["open_on_full_ok"].item()
        == out["end_on_nonempty_ok"].item()
        == 1.0
    )


def test_next_set_accuracy_hand_worked():
    lang = DyckN(1)  # ids ( ) END
    w = lang.encode("( ) END")
    sets = lang.allowed_next_all(w)  # [{(, END}, {(, )}, {(, END}]
    target = torch.zeros(1, 3, 3, dtype=torch.bool)
    for t, s in enumerate(sets):
        target[0, t, list(s)] = True
    good = torch.where(target, 5.0, -5.0).float()
    bad = good.clone()
    bad[0, 1, 2] = 5.0  # claims END is allowed after "("
    m = NextSetAccuracy()
    m.update(good, target, torch.ones(1, 3, dtype=torch.bool))
    m.update(bad, target, torch.ones(1, 3, dtype=torch.bool))
    out = m.compute()
    assert out["token"].item() == pytest.approx(5 / 6) and out["sequence"].item() == pytest.approx(1 / 2)


def test_acceptor_accuracy_reads_each_sequence_at_its_own_end():
    logits = torch.tensor([[1.0, -1.0, 2.0, -3.0], [-1.0, 4.0, 0.0, 0.0]])  # second has length 2
    lengths = torch.tensor([4, 2])
    mask = torch.arange(4)[None] < lengths[:, None]
    label = torch.tensor([0.0, 1.0])  # first ends at -3 (reject, correct); second at 4 (accept, correct)
    prefix = torch.tensor([[1.0, 0.0, 1.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    m = AcceptorAccuracy()
    m.update(logits, prefix, label, mask, lengths)
    out = m.compute()
    assert out["end"].item() == 1.0
    assert out["prefix"].item() == pytest.approx(5 / 6)  # only (1, 1): logit 4 vs label 0 is wrong
    # reading the padded end instead (as if both had length 4) gets the second row wrong
    padded = AcceptorAccuracy()
    padded.update(logits, prefix, label, torch.ones_like(mask), torch.tensor([4, 4]))
    assert padded.compute()["end"].item() == 0.5
