"""Reward-model losses: tensors in, tensors out. Imports only torch.

Shapes: B = pairs in the batch. `chosen` and `rejected` are the scalar scores r(x, y_c), r(x, y_r), each (B,)."""

import torch
import torch.nn.functional as F


def pairwise_loss(
    chosen: torch.Tensor,
    rejected: torch.Tensor,
    margin: torch.Tensor | None = None,
    center_coef: float = 0.0,
) -> torch.Tensor:
    """Bradley-Terry loss, mean over the batch:

        loss = mean( -log sigmoid(r_c - r_r - m) ) + center_coef * mean( (r_c + r_r)^2 )

    m (B,) is an optional margin (Llama 2 uses the preference strength; here the rank gap scaled by the caller),
    0 when None. The centring term (Eisenstein et al. 2023, "auxiliary loss") keeps scores near zero so that the
    PPO reward scale does not drift; 0 turns it off. logsigmoid is used instead of log(sigmoid(.)) so large
    negative differences do not underflow to log(0)."""
    diff = chosen - rejected
    if margin is not None:
        diff = diff - margin
    loss = -F.logsigmoid(diff).mean()
    if center_coef:
        loss = loss + center_coef * ((chosen + rejected) ** 2).mean()
    return loss


def pair_accuracy(chosen: torch.Tensor, rejected: torch.Tensor) -> torch.Tensor:
    """Share of pairs the model orders like the annotator (ties count as wrong), as a 0-dim tensor."""
    return (chosen > rejected).float().mean()


def accuracy_by_strength(
    chosen: list[float], rejected: list[float], strengths: list[int | None]
) -> dict[int, tuple[float, int]]:
    """{strength: (share of its pairs scored chosen > rejected, pairs)} over the pairs that have a strength: Llama 2
    reports its reward models' accuracy this way (high on significantly better, near chance on negligible)."""
    right: dict[int, int] = {}
    seen: dict[int, int] = {}
    for c, r, s in zip(chosen, rejected, strengths, strict=True):
        if s is not None:
            seen[s] = seen.get(s, 0) + 1
            right[s] = right.get(s, 0) + (c > r)
    return {s: (right[s] / seen[s], seen[s]) for s in sorted(seen)}
