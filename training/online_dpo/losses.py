"""Online DPO's math (Guo et al. 2024; iterative DPO on the reward model's labels, Xiong et al. 2024, RLHFlow), as
pure functions: tensors in, tensors out (imports only torch). Each step samples k responses for each prompt from
the current policy (prompt-major: row p * k + j is the j-th response of prompt p); the reward model labels them,
and the best against the worst of each prompt is one DPO pair, kept only when the reward model tells them apart
by more than a margin. The loss is DPO's (training/dpo/losses.py, no label smoothing) on those pairs, with the
frozen reference as the anchor (beta plays the part PPO's kl_ctl plays). Shapes: N = P * k sequences, T response
positions."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def best_worst_pairs(scores: torch.Tensor, k: int, min_gap: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """(chosen rows, rejected rows), one pair per prompt whose best score beats its worst by more than min_gap:
    chosen = the prompt's highest score, rejected = its lowest (the first such row on a tie). scores (N,)
    prompt-major, N = P * k, k >= 2. Row indices into the N sequences; prompts whose k scores lie within min_gap
    give no pair (nothing to learn)."""
    if k < 2:
        raise ValueError(f"a pair needs k >= 2 responses per prompt, got {k}")
    if scores.shape[0] % k:
        raise ValueError(f"{scores.shape[0]} scores are not whole groups of k = {k}")
    grouped = scores.view(-1, k)
    best, worst = grouped.argmax(1), grouped.argmin(1)
    gap = grouped.max(1).values - grouped.min(1).values
    keep = gap > min_gap
    base = torch.arange(grouped.shape[0], device=scores.device) * k
    return (base + best)[keep], (base + worst)[keep]


def sequence_sums(logprobs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """log pi(y | x) of each response: its per-token log-probs (N, T) summed over the mask, (N,)."""
    return (logprobs * mask.to(logprobs.dtype)).sum(1)


def online_dpo_loss(
    logprobs: torch.Tensor,
    ref_logprobs: torch.Tensor,
    mask: torch.Tensor,
    chosen: torch.Tensor,
    rejected: torch.Tensor,
    beta: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(DPO's loss over the pairs, h per pair): logprobs and ref_logprobs (N, T) per token under the policy and the
    reference, mask (N, T), chosen and rejected row indices (M,). h = (pi_c - ref_c) - (pi_r - ref_r) of sequence
    sums; the loss is -log sigmoid(beta * h), mean over the M pairs."""
    pi, ref = sequence_sums(logprobs, mask), sequence_sums(ref_logprobs, mask)
    h = (pi[chosen] - ref[chosen]) - (pi[rejected] - ref[rejected])
    return -F.logsigmoid(beta * h).mean(), h.detach()
