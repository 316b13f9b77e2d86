"""The over-optimisation watch's pure functions (training/watch.py), on numbers worked out by hand."""

import math

import pytest
import torch

from training.watch import Watch, best_of_n_kl, combine, pearson, split_members


def test_members_split_into_optimised_and_held_out():
    assert split_members(2, 1) == ([0], [1])
    assert split_members(3, 1) == ([0, 1], [2])
    assert split_members(3, 0) == ([0, 1, 2], [])
    for n, k in ((2, 2), (1, 1), (3, -1)):
        with pytest.raises(ValueError):
            split_members(n, k)


def test_each_combination_rule_by_hand():
    # member 0 scores the two responses 1 and 4, member 1 scores them 3 and 0
    s = torch.tensor([[1.0, 4.0], [3.0, 0.0]])
    assert combine(s, "first").tolist() == [1.0, 4.0]
    assert combine(s, "mean").tolist() == [2.0, 2.0]
    assert combine(s, "min").tolist() == [1.0, 0.0]
    # population std across members: |1 - 3| / 2 = 1 and |4 - 0| / 2 = 2
    assert combine(s, "mean-minus-std").tolist() == [1.0, 0.0]
    assert combine(s, "mean-minus-std", coef=0.5).tolist() == [1.5, 1.0]
    # three members: 0, 3, 6 -> mean 3, std sqrt((9 + 0 + 9) / 3) = sqrt(6); members that agree -> std 0
    three = torch.tensor([[0.0, 1.0], [3.0, 1.0], [6.0, 1.0]])
    assert combine(three, "mean-minus-std").tolist() == pytest.approx([3 - math.sqrt(6), 1.0])
    assert combine(three, "min").tolist() == [0.0, 1.0]
    with pytest.raises(ValueError, match="unknown reward combination 'max'"):
        combine(s, "max")


def test_length_score_correlation_by_hand():
    assert pearson(torch.tensor([1.0, 2, 3]), torch.tensor([2.0, 4, 6])) == pytest.approx(1.0)
    assert pearson(torch.tensor([1.0, 2, 3]), torch.tensor([3.0, 2, 1])) == pytest.approx(-1.0)
    # deviations (-1.5, -0.5, 0.5, 1.5) and (-1.5, 0.5, -0.5, 1.5): 4 / sqrt(5 * 5)
    assert pearson(torch.tensor([1.0, 2, 3, 4]), torch.tensor([1.0, 3, 2, 4])) == pytest.approx(0.8)
    assert pearson(torch.tensor([5.0, 5, 5]), torch.tensor([1.0, 2, 3])) == 0.0


def test_best_of_n_kl():
    assert best_of_n_kl(1) == 0.0
    assert best_of_n_kl(2) == pytest.approx(math.log(2) - 0.5)  # 0.1931
    assert best_of_n_kl(16) == pytest.approx(2.772589 - 0.9375, abs=1e-6)
    with pytest.raises(ValueError):
        best_of_n_kl(0)


def test_the_alarm_fires_when_the_held_out_judge_falls_while_the_optimised_score_rises():
    w = Watch(patience=2, alpha=1.0)
    assert w.update(1, optimised=1.0, heldout=1.0, kl=0.1) is None  # the peak
    assert w.update(2, optimised=2.0, heldout=0.9, kl=0.2) is None  # one step past it: not yet
    reason = w.update(3, optimised=3.0, heldout=0.8, kl=0.3)
    assert reason == (
        "the held-out judge's score fell from 1.000 (step 1) to 0.800 while the optimised score rose from 1.000 "
        "to 3.000 (step 3)"
    )
    assert w.reason == reason and w.update(4, 4.0, 0.1, 0.4) is None  # fired once, stays fired


def test_no_alarm_when_both_fall_or_the_judge_recovers():
    both = Watch(patience=2, alpha=1.0)
    assert [both.update(s, o, h, 0.0) for s, o, h in ((1, 1, 1), (2, 0.5, 0.9), (3, 0.4, 0.8))] == [None] * 3
    recovers = Watch(patience=2, alpha=1.0)
    steps = ((1, 1, 1), (2, 2, 0.9), (3, 3, 1.1), (4, 4, 1.0))  # a new peak at step 3 restarts the count
    assert [recovers.update(s, o, h, 0.0) for s, o, h in steps] == [None] * 4
    assert recovers.peak_step == 3


def test_the_alarm_smooths_each_score():
    w = Watch(patience=2, alpha=0.5)
    w.update(1, 0.0, 0.0, 0.0)
    w.update(2, 2.0, 2.0, 0.0)  # averages 1, 1: the peak, with the optimised score 1 there
    assert w.update(3, 3.0, -1.0, 0.0) is None  # 2, 0: one step past the peak
    assert w.update(4, 4.0, 0.0, 0.0) is not None  # 3, 0: two steps past, below the peak, optimised above 1
    assert w.history == [(1, 0.0, 0.0), (2, 1.0, 1.0), (3, 2.0, 0.0), (4, 3.0, 0.0)]


def test_a_kl_budget_fires_without_a_judge():
    w = Watch(kl_budget=2.0)
    assert w.update(1, 0.0, None, 1.9) is None
    assert w.update(2, 0.0, None, 2.5) == "KL 2.50 nats passed the budget of 2 at step 2"
