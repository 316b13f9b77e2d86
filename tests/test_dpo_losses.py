"""The DPO and IPO losses on a two-pair example worked out by hand, and the sequence log-probabilities against a
plain loop."""

import math
import subprocess
import sys

import pytest
import torch

from training.dpo.losses import dpo_loss, implicit_rewards, ipo_loss, preference_logits
from training.pairwise.sequences import sequence_logprobs

T = torch.tensor

# Two pairs. Pair 1: pi_c = -10, pi_r = -14, ref_c = -11, ref_r = -13: h = (-10 + 11) - (-14 + 13) = 1 + 1 = 2.
# Pair 2: pi_c = -9, pi_r = -8, ref_c = -8, ref_r = -9: h = (-9 + 8) - (-8 + 9) = -1 - 1 = -2.
PI_C, PI_R, REF_C, REF_R = T([-10.0, -9.0]), T([-14.0, -8.0]), T([-11.0, -8.0]), T([-13.0, -9.0])


def test_preference_logits_by_hand():
    assert preference_logits(PI_C, PI_R, REF_C, REF_R).tolist() == [2.0, -2.0]


@pytest.mark.parametrize(
    "beta, smoothing, expected",
    [
        # beta .1: z = [.2, -.2]; -log sigmoid(.2) = log(1 + e^-.2) = .59814, -log sigmoid(-.2) = log(1 + e^.2) = .79814
        # mean = (.59814 + .79814) / 2 = .69814
        (0.1, 0.0, 0.69814),
        # beta 1: z = [2, -2]; log(1 + e^-2) = .12693, log(1 + e^2) = 2.12693; mean = 1.12693
        (1.0, 0.0, 1.12693),
        # beta 1, eps .1: pair 1: .9 * .12693 + .1 * 2.12693 = .32693; pair 2: .9 * 2.12693 + .1 * .12693 = 1.92693
        # mean = 1.12693 (symmetric pairs: smoothing moves each pair, not their mean)
        (1.0, 0.1, 1.12693),
    ],
)
def test_dpo_loss_by_hand(beta, smoothing, expected):
    h = preference_logits(PI_C, PI_R, REF_C, REF_R)
    assert dpo_loss(h, beta, smoothing).item() == pytest.approx(expected, abs=1e-5)


def test_dpo_loss_of_one_pair_with_smoothing_by_hand():
    # h = 2, beta 1, eps .1: .9 * log(1 + e^-2) + .1 * log(1 + e^2) = .9 * .126928 + .1 * 2.126928 = .326928
    assert dpo_loss(T([2.0]), 1.0, 0.1).item() == pytest.approx(0.326928, abs=1e-5)


@pytest.mark.parametrize(
    "beta, expected",
    [
        # target 1 / (2 * .1) = 5: ((2 - 5)^2 + (-2 - 5)^2) / 2 = (9 + 49) / 2 = 29
        (0.1, 29.0),
        # target 1 / (2 * .25) = 2: (0 + 16) / 2 = 8
        (0.25, 8.0),
    ],
)
def test_ipo_loss_by_hand(beta, expected):
    assert ipo_loss(preference_logits(PI_C, PI_R, REF_C, REF_R), beta).item() == pytest.approx(expected)


def test_implicit_rewards_and_accuracy_by_hand():
    # beta .1: chosen = .1 * [1, -1] = [.1, -.1], rejected = .1 * [-1, 1] = [-.1, .1]; pair 1 right, pair 2 wrong
    chosen, rejected = implicit_rewards(PI_C, PI_R, REF_C, REF_R, 0.1)
    assert chosen.tolist() == pytest.approx([0.1, -0.1]) and rejected.tolist() == pytest.approx([-0.1, 0.1])
    assert (chosen > rejected).float().mean().item() == 0.5
    assert (chosen - rejected).tolist() == pytest.approx([0.2, -0.2])  # beta * h


def test_dpo_gradient_raises_the_chosen_and_lowers_the_rejected():
    pi_c, pi_r = T([-10.0], requires_grad=True), T([-10.0], requires_grad=True)
    dpo_loss(preference_logits(pi_c, pi_r, T([-10.0]), T([-10.0])), beta=0.1).backward()
    # d/dpi_c of -log sigmoid(beta h) at h = 0: -beta * (1 - sigmoid(0)) = -.05; the rejected gets +.05
    assert pi_c.grad.item() == pytest.approx(-0.05) and pi_r.grad.item() == pytest.approx(0.05)


def test_sequence_logprobs_by_hand_and_against_a_loop():
    # V = 2, one sequence, two positions; logits [0, ln 3] -> p = [.25, .75]; label 1 at t0 (.75), label 0 at t1 (.25)
    logits = T([[[0.0, math.log(3.0)], [0.0, math.log(3.0)]]])
    assert sequence_logprobs(logits, T([[1, 0]]), T([[1.0, 1.0]])).item() == pytest.approx(math.log(0.75 * 0.25))
    assert sequence_logprobs(logits, T([[1, 0]]), T([[1.0, 0.0]])).item() == pytest.approx(math.log(0.75))
    g = torch.Generator().manual_seed(0)
    logits, labels = torch.randn(3, 5, 7, generator=g), torch.randint(0, 7, (3, 5), generator=g)
    mask = (torch.rand(3, 5, generator=g) > 0.3).float()
    loop = [
        sum(math.log(torch.softmax(logits[b, t], -1)[labels[b, t]].item()) for t in range(5) if mask[b, t])
        for b in range(3)
    ]
    assert sequence_logprobs(logits, labels, mask).tolist() == pytest.approx(loop, abs=1e-5)
    assert sequence_logprobs(logits.bfloat16(), labels, mask).dtype == torch.float32


@pytest.mark.integration
def test_the_dpo_loss_module_imports_only_torch():
    code = (
        "import sys; import training.dpo.losses; "
        "print(sorted(m for m in ('deepspeed', 'gradio', 'duckdb', 'transformers') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
