"""Reward-model losses against hand-computed numbers and a plain-loop reference."""

import math
import subprocess
import sys

import pytest
import torch

from training.reward.losses import pair_accuracy, pairwise_loss


@pytest.mark.parametrize(
    "chosen, rejected, margin, center, expected",
    [
        ([2.0], [0.0], None, 0.0, 0.126928),  # log(1 + e^-2) = 0.126928
        ([1.0], [1.0], None, 0.0, 0.693147),  # equal scores: log 2
        ([0.0], [2.0], None, 0.0, 2.126928),  # wrong order: log(1 + e^2) = 2.126928
        ([2.0], [0.0], [1.0], 0.0, 0.313262),  # margin 1: log(1 + e^-(2-0-1)) = log(1 + e^-1) = 0.313262
        ([2.0, 1.0], [0.0, 1.0], None, 0.0, (0.126928 + 0.693147) / 2),  # batch mean: 0.410038
        ([1.0], [1.0], None, 0.5, 0.693147 + 0.5 * 4.0),  # centring: 0.5 * (1 + 1)^2 = 2 -> 2.693147
        ([60.0], [-60.0], None, 0.0, 0.0),  # no overflow for large gaps: log(1 + e^-120) ~ 0
        ([-60.0], [60.0], None, 0.0, 120.0),  # nor underflow: log(1 + e^120) ~ 120
    ],
)
def test_pairwise_loss_by_hand(chosen, rejected, margin, center, expected):
    m = torch.tensor(margin) if margin is not None else None
    got = pairwise_loss(torch.tensor(chosen), torch.tensor(rejected), m, center)
    assert got.item() == pytest.approx(expected, abs=1e-6)


def test_matches_a_plain_loop():
    g = torch.Generator().manual_seed(0)
    c, r, m = torch.randn(64, generator=g) * 3, torch.randn(64, generator=g) * 3, torch.rand(64, generator=g)
    loop = (
        sum(
            math.log1p(math.exp(-(ci - ri - mi))) for ci, ri, mi in zip(c.tolist(), r.tolist(), m.tolist(), strict=True)
        )
        / 64
    )
    loop += 0.01 * sum((ci + ri) ** 2 for ci, ri in zip(c.tolist(), r.tolist(), strict=True)) / 64
    assert pairwise_loss(c, r, m, 0.01).item() == pytest.approx(loop, rel=1e-5)


def test_gradient_pushes_chosen_up_and_rejected_down():
    c, r = torch.tensor([0.5], requires_grad=True), torch.tensor([0.5], requires_grad=True)
    pairwise_loss(c, r).backward()
    # d/dc -log sigmoid(c - r) = -(1 - sigmoid(0)) = -0.5; d/dr = +0.5
    assert c.grad.item() == pytest.approx(-0.5) and r.grad.item() == pytest.approx(0.5)


def test_accuracy():
    assert pair_accuracy(torch.tensor([1.0, 2.0, 0.0, 3.0]), torch.tensor([0.0, 3.0, 0.0, 1.0])).item() == 0.5


@pytest.mark.integration
def test_loss_modules_import_only_torch():
    code = (
        "import sys; import training.reward.losses; "
        "print(sorted(m for m in ('deepspeed', 'gradio', 'duckdb', 'transformers') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_collate_scores_each_distinct_sequence_once():
    from training.reward.data import Tokenised, collate

    a, b, c = [5, 6, 7], [5, 8], [5, 9, 9, 9]
    # a ranking of three responses a > b > c: 3 pairs, 3 distinct sequences
    batch = [Tokenised(a, b, 1.0, 0, False), Tokenised(a, c, 2.0, 0, False), Tokenised(b, c, 1.0, 0, False)]
    ids, mask, chosen, rejected, margin = collate(batch, pad_id=0)
    assert ids.tolist() == [[5, 6, 7, 0], [5, 8, 0, 0], [5, 9, 9, 9]]
    assert mask.tolist() == [[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1]]
    assert chosen.tolist() == [0, 0, 1] and rejected.tolist() == [1, 2, 2] and margin.tolist() == [1.0, 2.0, 1.0]
