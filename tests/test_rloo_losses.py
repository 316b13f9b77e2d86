"""training/rloo/losses.py by hand: the sequence reward, the leave-one-out baseline, REINFORCE."""

import math

import pytest
import torch

from training.rloo.losses import leave_one_out_advantages, reinforce_loss, sequence_rewards, token_advantages


def test_the_sequence_reward_is_the_clipped_score_less_the_masked_kl_sum():
    scores = torch.tensor([1.0, 7.0])
    kl = torch.tensor([[0.1, 0.2, 9.0], [0.5, -0.1, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    # 1 - 0.5 * (0.1 + 0.2) = 0.85 (the 9 is masked); clip(7, 5) - 0.5 * (0.5 - 0.1) = 4.8
    assert sequence_rewards(scores, kl, mask, kl_ctl=0.5).tolist() == pytest.approx([0.85, 4.8])


@pytest.mark.parametrize(
    "rewards, k, expected",
    [
        ([1.0, 3.0], 2, [-2.0, 2.0]),  # 1 - 3, 3 - 1
        ([1.0, 2.0, 6.0], 3, [-3.0, -1.5, 4.5]),  # 1 - (2+6)/2, 2 - (1+6)/2, 6 - (1+2)/2
        ([1.0, 2.0, 6.0, 0.0, 0.0, 3.0], 3, [-3.0, -1.5, 4.5, -1.5, -1.5, 3.0]),  # two prompts, apart
        ([4.0, 4.0, 4.0, 4.0], 4, [0.0, 0.0, 0.0, 0.0]),  # equal rewards: nothing to learn
    ],
)
def test_leave_one_out_advantages_by_hand(rewards, k, expected):
    assert leave_one_out_advantages(torch.tensor(rewards), k).tolist() == pytest.approx(expected)


def test_leave_one_out_matches_a_plain_loop_and_sums_to_zero_per_prompt():
    torch.manual_seed(0)
    k, prompts = 4, 5
    rewards = torch.randn(prompts * k, dtype=torch.float64)
    got = leave_one_out_advantages(rewards, k)
    for p in range(prompts):
        group = rewards[p * k : (p + 1) * k].tolist()
        for j in range(k):
            others = group[:j] + group[j + 1 :]
            assert got[p * k + j].item() == pytest.approx(group[j] - sum(others) / (k - 1))
        assert got[p * k : (p + 1) * k].sum().item() == pytest.approx(0.0, abs=1e-12)


def test_leave_one_out_refuses_k_below_two_or_a_broken_group():
    with pytest.raises(ValueError, match="k >= 2"):
        leave_one_out_advantages(torch.zeros(3), 1)
    with pytest.raises(ValueError, match="not whole groups of k = 2"):
        leave_one_out_advantages(torch.zeros(3), 2)


def test_every_response_token_carries_its_sequence_advantage_and_reinforce_by_hand():
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    a = token_advantages(torch.tensor([2.0, -1.0]), mask)
    assert a.tolist() == [[2.0, 2.0], [-1.0, 0.0]]
    assert token_advantages(torch.tensor([0.5, -1.5]), mask.long()).tolist() == [[0.5, 0.5], [-1.5, 0.0]]  # rollout's
    logprobs = torch.tensor([[-1.0, -2.0], [-0.5, 0.0]], requires_grad=True)
    loss = reinforce_loss(logprobs, a, mask)
    # -(2 * -1 + 2 * -2 + -1 * -0.5) / 3 tokens = 5.5 / 3
    assert loss.item() == pytest.approx(5.5 / 3)
    loss.backward()
    assert logprobs.grad.flatten().tolist() == pytest.approx([-2 / 3, -2 / 3, 1 / 3, 0.0])  # -A / 3 a token


def test_the_win_fraction_is_each_responses_mean_bradley_terry_odds_against_the_others():
    from training.rloo.losses import win_fractions

    s = lambda x: 1 / (1 + math.exp(-x))  # noqa: E731
    got = win_fractions(torch.tensor([0.0, 1.0, 3.0, 2.0, 2.0, 2.0]), k=3).tolist()
    # prompt 0: W_0 = (s(-1) + s(-3)) / 2, W_1 = (s(1) + s(-2)) / 2, W_2 = (s(3) + s(2)) / 2; prompt 1: ties, 1/2
    want = [(s(-1) + s(-3)) / 2, (s(1) + s(-2)) / 2, (s(3) + s(2)) / 2, 0.5, 0.5, 0.5]
    assert got == pytest.approx(want)
    assert sum(got[:3]) == pytest.approx(1.5)  # k / 2 per prompt


def test_the_win_fraction_ignores_the_scores_scale_offset_and_order_within_a_prompt():
    from training.rloo.losses import win_fractions

    scores = torch.tensor([0.3, -1.2, 2.0, 0.0], dtype=torch.float64)
    base = win_fractions(scores, 4)
    assert win_fractions(scores + 7.0, 4).tolist() == pytest.approx(base.tolist())
    assert win_fractions(scores.flip(0), 4).tolist() == pytest.approx(base.flip(0).tolist())
    ranks = base.argsort().tolist()
    assert ranks == scores.argsort().tolist()  # the order is the score's
    with pytest.raises(ValueError):
        win_fractions(torch.zeros(5), 2)


def test_the_quantile_reward_is_the_scores_place_among_the_references_samples():
    from training.rloo.losses import quantile_rewards

    scores = torch.tensor([0.5, 2.0, -1.0, 1.0])  # two prompts, k = 2
    ref = torch.tensor([0.0, 1.0, 1.0, 3.0, 1.0, 1.0, 1.0, 1.0])  # m = 4 each
    # prompt 0: 0.5 beats 0.0 -> 1/4; 2.0 beats 0, 1, 1 -> 3/4. prompt 1: -1 beats none -> 0; 1.0 ties all four -> 1/2
    assert quantile_rewards(scores, ref, k=2, m=4).tolist() == pytest.approx([0.25, 0.75, 0.0, 0.5])
    assert quantile_rewards(scores * 10 + 3, ref * 10 + 3, 2, 4).tolist() == pytest.approx([0.25, 0.75, 0.0, 0.5])
    with pytest.raises(ValueError):
        quantile_rewards(scores, ref[:6], k=2, m=4)
