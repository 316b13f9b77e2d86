"""DPO and IPO losses: tensors in, tensors out. Imports only torch.

Shapes: B = pairs in the batch, T = tokens of a sequence, V = vocabulary. Log-probabilities of a whole response are
sums over its tokens: pi_c = log pi(y_c | x), pi_r = log pi(y_r | x), and ref_c, ref_r the same under the frozen
reference. h = (pi_c - ref_c) - (pi_r - ref_r) is how much more the policy, relative to the reference, prefers the
chosen response; every loss below is a function of h alone."""

import torch
import torch.nn.functional as F


def preference_logits(pi_c: torch.Tensor, pi_r: torch.Tensor, ref_c: torch.Tensor, ref_r: torch.Tensor) -> torch.Tensor:
    """h = (pi_c - ref_c) - (pi_r - ref_r), (B,)."""
    return (pi_c - ref_c) - (pi_r - ref_r)


def dpo_loss(h: torch.Tensor, beta: float = 0.1, label_smoothing: float = 0.0) -> torch.Tensor:
    """DPO's sigmoid loss (Rafailov et al. 2023, eq. 7), mean over the batch:

        loss = -(1 - eps) * log sigmoid(beta * h) - eps * log sigmoid(-beta * h)

    eps = label_smoothing (the conservative DPO of Mitchell 2023: the label is wrong with probability eps); 0 is
    plain DPO. logsigmoid, not log(sigmoid(.)), so a large negative beta * h does not underflow to log(0)."""
    z = beta * h
    return (-(1 - label_smoothing) * F.logsigmoid(z) - label_smoothing * F.logsigmoid(-z)).mean()


def ipo_loss(h: torch.Tensor, beta: float = 0.1) -> torch.Tensor:
    """IPO (Azar et al. 2023, eq. 17), mean over the batch: loss = (h - 1 / (2 * beta))^2. It regresses h to a
    fixed target instead of pushing it to infinity, so it does not overfit deterministic preferences. Here beta is
    the paper's tau. The paper's h uses whole-sequence log-likelihoods; TRL averages them per token for IPO; the
    caller chooses by what it passes in."""
    return ((h - 1 / (2 * beta)) ** 2).mean()


def implicit_rewards(
    pi_c: torch.Tensor, pi_r: torch.Tensor, ref_c: torch.Tensor, ref_r: torch.Tensor, beta: float = 0.1
) -> tuple[torch.Tensor, torch.Tensor]:
    """DPO's implicit reward of each response, r = beta * (log pi - log ref), detached: (chosen (B,), rejected (B,)).
    Their difference is beta * h; the share of pairs where chosen > rejected is `eval/dpo_accuracy`."""
    return (beta * (pi_c - ref_c)).detach(), (beta * (pi_r - ref_r)).detach()
