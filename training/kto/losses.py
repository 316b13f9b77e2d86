"""KTO's loss (Ethayarajh et al. 2024, eq. 8, as TRL's KTOTrainer computes it): tensors in, tensors out. Imports
only torch.

Each row is one response y to a prompt x with a label: desirable (thumbs up) or undesirable. Its log-ratio is
r = log pi(y | x) - log ref(y | x) (sums over the response tokens). The reference point z0 is the policy's KL from
the reference, estimated on mismatched pairs (x, y') (a response to another prompt), averaged over the batch on
every rank, clamped at 0 and not differentiated:

    desirable:    loss = lambda_D * (1 - sigmoid(beta * (r - z0)))
    undesirable:  loss = lambda_U * (1 - sigmoid(beta * (z0 - r)))

mean over the batch's rows. Before the first update r = z0 = 0 and every row's loss is 1 - sigmoid(0) = 0.5."""

import torch


def kl_reference_point(kl_logratio_sum: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
    """z0 = max(0, sum of the mismatched rows' log-ratios / their count), detached: the sum and count already added
    over the ranks (a rank's spare batch adds 0 to both)."""
    return (kl_logratio_sum / count.clamp(min=1)).clamp(min=0).detach()


def kto_loss(
    logratio: torch.Tensor,
    desirable: torch.Tensor,
    z0: torch.Tensor,
    beta: float = 0.1,
    desirable_weight: float = 1.0,
    undesirable_weight: float = 1.0,
) -> torch.Tensor:
    """The mean KTO loss of a batch: logratio (B,), desirable (B,) bool, z0 a scalar tensor."""
    up = desirable_weight * (1 - torch.sigmoid(beta * (logratio - z0)))
    down = undesirable_weight * (1 - torch.sigmoid(beta * (z0 - logratio)))
    return torch.where(desirable, up, down).mean()


def ranking_accuracy(reward: torch.Tensor, desirable: torch.Tensor) -> float:
    """The share of (desirable, undesirable) pairs of rows, over all such pairs, where the desirable one's implicit
    reward beta * r is higher (a tie counts one half): the area under the ROC curve of the implicit reward as a
    thumbs classifier. NaN where either label is missing."""
    up, down = reward[desirable].float(), reward[~desirable].float()
    if not len(up) or not len(down):
        return float("nan")
    diff = up[:, None] - down[None, :]
    return ((diff > 0).float().mean() + 0.5 * (diff == 0).float().mean()).item()
