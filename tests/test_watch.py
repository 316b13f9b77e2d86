"""The over-optimisation watch's pure functions (training/watch.py), on numbers worked out by hand."""

import math
import random

import pytest
import torch

from training.watch import Watch, best_of_n_kl, combine, fell, pair_level, pearson, split_members, t_quantile


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


def test_t_quantiles_against_the_tables():
    for p, df, table in (
        (0.95, 3, 2.353),
        (0.975, 10, 2.228),
        (0.99, 31, 2.453),
        (0.999, 31, 3.375),
        (0.975, 1, 12.706),
    ):
        assert t_quantile(p, df) == pytest.approx(table, abs=1e-3)
    assert pair_level(0.05, 1) == 0.05 and pair_level(0.05, 5) == pytest.approx(0.005)  # 10 pairs of 5


def test_a_fall_beyond_noise_by_hand():
    # differences now - peak: -0.5, -0.5, -0.5, -0.1: mean -0.4, sd 0.2, se 0.1; t(0.95, 3 df) = 2.353
    down, mean, upper = fell([1, 2, 3, 4], [0.5, 1.5, 2.5, 3.9], level=0.05)
    assert down and mean == pytest.approx(-0.4) and upper == pytest.approx(-0.4 + 0.2353, abs=1e-3)
    assert not fell([1, 2, 3, 4], [0.5, 1.5, 2.5, 3.9], level=0.05, tolerance=0.2)[0]  # not by more than 0.2
    # the same mean fall with more spread: -1.0, 0.2, -0.6, 0.2 (sd 0.589): within noise
    assert not fell([1, 2, 3, 4], [0.0, 2.2, 2.4, 4.2], level=0.05)[0]
    with pytest.raises(ValueError, match="same two or more prompts"):
        fell([1, 2], [1], level=0.05)


def test_the_alarm_fires_on_an_evaluation_that_fell_while_the_optimised_score_rose():
    w = Watch(alpha=0.05, evaluations=2)  # one pair: level 0.05
    assert w.evaluated(4, optimised=[0, 0, 0, 0], heldout=[1, 2, 3, 4]) is None  # the best so far
    reason = w.evaluated(8, optimised=[1, 1, 1, 1], heldout=[0.5, 1.5, 2.5, 3.9])
    assert reason == (
        "the held-out judge's score fell from 2.500 (step 4) to 2.100 (step 8; -0.400, upper bound -0.165 over 4 "
        "prompts) while the optimised score rose from 0.000 to 1.000"
    )
    assert w.reason == reason and w.evaluated(12, [2] * 4, [0, 0, 0, 0]) is None  # fired once, stays fired


def test_no_alarm_when_both_fall_the_fall_is_noise_or_the_judge_recovers():
    both = Watch(evaluations=2)
    both.evaluated(4, [1, 1, 1, 1], [1, 2, 3, 4])
    assert both.evaluated(8, [0, 0, 0, 0], [0.5, 1.5, 2.5, 3.9]) is None  # the optimised score fell too
    noise = Watch(evaluations=2)
    noise.evaluated(4, [0] * 4, [1, 2, 3, 4])
    assert noise.evaluated(8, [1] * 4, [0.0, 2.2, 2.4, 4.2]) is None
    many = Watch(evaluations=10)  # 45 pairs: each at 0.05 / 45, t(0.9989, 3 df) = 9.85: -0.4 + 0.985 > 0 is noise
    many.evaluated(4, [0] * 4, [1, 2, 3, 4])
    assert many.evaluated(8, [1] * 4, [0.5, 1.5, 2.5, 3.9]) is None
    recovers = Watch(evaluations=2)
    recovers.evaluated(4, [0] * 4, [1, 2, 3, 4])
    assert recovers.evaluated(8, [1] * 4, [2, 3, 4, 5]) is None and recovers.best[0] == 8  # a new best


def test_the_rule_false_alarms_at_most_alpha_and_catches_a_real_fall():
    """Simulated runs: each prompt has its own level, each evaluation adds noise (sd 0.5, a prompt's level sd 1).
    A judge that never moves fires in under 5% of runs; one that falls by 0.2 a checkpoint after the middle of
    the run fires in nearly all (32 prompts)."""
    rng = random.Random(0)

    def fires(evaluations: int, prompts: int, fall: float) -> bool:
        w = Watch(alpha=0.05, evaluations=evaluations)
        level = [rng.gauss(0, 1) for _ in range(prompts)]
        for e in range(evaluations):
            drop = fall * max(0, e - evaluations // 2 + 1)
            if w.evaluated(e, [float(e)] * prompts, [x - drop + rng.gauss(0, 0.5) for x in level]):
                return True
        return False

    def above_alpha(alarms: int, runs: int, alpha: float = 0.05) -> float:
        """P(at least `alarms` of `runs` | a false-alarm rate of exactly alpha): small means the rate is above."""
        log = lambda x: (  # noqa: E731  log of the binomial probability of x, in floats without overflow
            math.lgamma(runs + 1)
            - math.lgamma(x + 1)
            - math.lgamma(runs - x + 1)
            + x * math.log(alpha)
            + (runs - x) * math.log(1 - alpha)
        )
        return sum(math.exp(log(x)) for x in range(alarms, runs + 1))

    # at 3000 runs the test refuses 179 alarms (6.0%) or more: a rule at 5% (the claim) passes with probability
    # 0.99, one at 6.5% fails with probability 0.89
    assert above_alpha(178, 3000) > 0.01 >= above_alpha(179, 3000)
    for evaluations, prompts in ((3, 32), (6, 32), (6, 8), (12, 32)):
        alarms = sum(fires(evaluations, prompts, 0.0) for _ in range(3000))
        assert above_alpha(alarms, 3000) > 0.01, (evaluations, prompts, alarms / 3000)
    assert sum(fires(6, 32, 0.2) for _ in range(200)) / 200 > 0.95


def test_the_per_step_scores_are_smoothed_for_the_plots_only():
    w = Watch(alpha_ema=0.5)
    w.update(1, 0.0, 0.0, 0.0)
    w.update(2, 2.0, 2.0, 0.0)
    assert w.update(3, 3.0, -5.0, 0.0) is None  # a collapse in one step's 8 replies is no alarm
    assert w.history == [(1, 0.0, 0.0), (2, 1.0, 1.0), (3, 2.0, -2.0)] and w.reason is None


def test_a_kl_budget_fires_without_a_judge():
    w = Watch(kl_budget=2.0)
    assert w.update(1, 0.0, None, 1.9) is None
    assert w.update(2, 0.0, None, 2.5) == "KL 2.50 nats passed the budget of 2 at step 2"
