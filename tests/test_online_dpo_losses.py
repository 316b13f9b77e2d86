"""training/online_dpo/losses.py by hand: the best-against-worst pairs of each prompt's k samples, and DPO's loss
on them from per-token log-probs."""

import math

import pytest
import torch

from training.online_dpo.losses import best_worst_pairs, online_dpo_loss, sequence_sums


def test_each_prompt_gives_its_best_against_its_worst():
    # prompt 0: rows 0-2, best 1 (2.0), worst 2 (-1.0); prompt 1: rows 3-5, best 3 (0.5), worst 5 (0.1)
    chosen, rejected = best_worst_pairs(torch.tensor([0.0, 2.0, -1.0, 0.5, 0.3, 0.1]), k=3)
    assert chosen.tolist() == [1, 3] and rejected.tolist() == [2, 5]


def test_a_prompt_whose_scores_lie_within_the_margin_gives_no_pair():
    scores = torch.tensor([0.0, 2.0, -1.0, 0.5, 0.3, 0.1, 4.0, 4.0, 4.0])
    # gaps: 3.0, 0.4, 0.0; a margin of 0.5 keeps only the first prompt, 0 drops only the tie
    assert [t.tolist() for t in best_worst_pairs(scores, k=3, min_gap=0.5)] == [[1], [2]]
    assert [t.tolist() for t in best_worst_pairs(scores, k=3)] == [[1, 3], [2, 5]]


@pytest.mark.parametrize("n, k", [(5, 2), (4, 1)])
def test_groups_must_be_whole_and_at_least_two(n, k):
    with pytest.raises(ValueError):
        best_worst_pairs(torch.zeros(n), k)


def test_the_loss_is_dpos_on_the_sequence_sums_of_the_pairs():
    logprobs = torch.tensor([[-1.0, -2.0, -9.0], [-0.5, -0.5, -0.5], [-3.0, -1.0, -1.0]])
    ref = torch.tensor([[-1.5, -2.0, -9.0], [-1.0, -1.0, -1.0], [-2.0, -1.0, -1.0]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 1], [1, 1, 1]])
    # sums: policy -3, -1.5, -5; reference -3.5, -3, -4 (row 0's third token masked)
    assert sequence_sums(logprobs, mask).tolist() == [-3.0, -1.5, -5.0]
    # pairs (chosen 1, rejected 2) and (chosen 0, rejected 2):
    # h = (-1.5 + 3) - (-5 + 4) = 2.5 and (-3 + 3.5) - (-5 + 4) = 1.5
    loss, h = online_dpo_loss(logprobs, ref, mask, torch.tensor([1, 0]), torch.tensor([2, 2]), beta=0.5)
    assert h.tolist() == pytest.approx([2.5, 1.5])
    softplus = lambda z: math.log1p(math.exp(-z))  # -log sigmoid(z)  # noqa: E731
    assert loss.item() == pytest.approx((softplus(1.25) + softplus(0.75)) / 2)


def test_the_gradient_raises_the_chosen_and_lowers_the_rejected():
    logprobs = torch.zeros(2, 2, requires_grad=True)
    loss, _ = online_dpo_loss(logprobs, torch.zeros(2, 2), torch.ones(2, 2), torch.tensor([0]), torch.tensor([1]), 1.0)
    loss.backward()
    # d/dpi_c of -log sigmoid(h) at h = 0 is -1/2 on each chosen token, +1/2 on each rejected one
    assert logprobs.grad.tolist() == [[-0.5, -0.5], [0.5, 0.5]]
