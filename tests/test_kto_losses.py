"""KTO's loss, its reference point and its held-out accuracy on examples worked out by hand."""

import math

import pytest
import torch

from training.kto.losses import kl_reference_point, kto_loss, ranking_accuracy

T = torch.tensor
SIG = 1 / (1 + math.exp(-0.15))  # sigmoid(0.15) = 0.537430


def test_before_the_first_update_every_row_loses_one_half():
    # policy = reference: every log-ratio is 0 and so is z0; 1 - sigmoid(0) = 0.5 for either label
    assert kto_loss(T([0.0, 0.0, 0.0]), T([True, False, True]), T(0.0)).item() == pytest.approx(0.5)


def test_the_loss_by_hand():
    # beta 0.1, z0 0.5; a thumbs-up row with r = 2: 1 - sigmoid(0.1 * (2 - 0.5)) = 1 - sigmoid(0.15)
    # a thumbs-down row with r = -1: 1 - sigmoid(0.1 * (0.5 - (-1))) = 1 - sigmoid(0.15)
    r, up, z0 = T([2.0, -1.0]), T([True, False]), T(0.5)
    assert kto_loss(r, up, z0, beta=0.1).item() == pytest.approx(1 - SIG, abs=1e-6)
    # lambda_D = 2, lambda_U = 1: (2 (1 - s) + (1 - s)) / 2
    assert kto_loss(r, up, z0, 0.1, 2.0, 1.0).item() == pytest.approx(1.5 * (1 - SIG), abs=1e-6)


def test_the_gradient_raises_thumbs_up_and_lowers_thumbs_down():
    r = T([0.3, 0.3], requires_grad=True)
    kto_loss(r, T([True, False]), T(0.0), beta=0.1).backward()
    # d/dr (1 - sigmoid(b (r - z))) / 2 = -b s (1 - s) / 2 at s = sigmoid(0.03): the same size, opposite signs
    s = 1 / (1 + math.exp(-0.03))
    assert r.grad.tolist() == pytest.approx([-0.1 * s * (1 - s) / 2, 0.1 * s * (1 - s) / 2], abs=1e-7)


def test_the_reference_point_is_a_mean_clamped_at_zero_and_not_differentiated():
    x = T(3.0, requires_grad=True)
    z0 = kl_reference_point(x, T(2.0))
    assert z0.item() == 1.5 and not z0.requires_grad
    assert kl_reference_point(T(-3.0), T(2.0)).item() == 0.0  # a negative estimate is clamped (TRL's clamp(min=0))
    assert kl_reference_point(T(0.0), T(0.0)).item() == 0.0  # no rows: no division by zero


def test_ranking_accuracy_counts_pairs_of_rows_and_ties_as_half():
    # up rewards 3 and 1, down rewards 2 and 0: 3 > 2, 3 > 0, 1 < 2, 1 > 0 -> 3 of 4
    assert ranking_accuracy(T([3.0, 1.0, 2.0, 0.0]), T([True, True, False, False])) == 0.75
    assert ranking_accuracy(T([1.0, 1.0]), T([True, False])) == 0.5
    assert math.isnan(ranking_accuracy(T([1.0, 2.0]), T([True, True])))
