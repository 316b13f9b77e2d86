"""RLOO's math (Ahmadian et al. 2024, "Back to Basics"), as pure functions: tensors in, tensors out (imports only
torch). k responses are sampled for each prompt; the k rows of one prompt are adjacent (prompt-major: row
p * k + j is the j-th response of prompt p).

Each response's reward is one number per sequence: the clipped reward-model score minus the KL penalty summed over
its tokens, R_i = clip(score_i) - kl_ctl * sum_t KL_t (TRL's and OpenRLHF's RLOO put the KL into the reward the same
way). Its advantage is R_i minus the mean reward of the other k - 1 responses to the same prompt, the leave-one-out
baseline: an unbiased baseline with no critic. Every token of the response carries that advantage.

Shapes: N = P * k sequences, T response positions."""

from __future__ import annotations

import torch


def sequence_rewards(
    scores: torch.Tensor,
    kl: torch.Tensor,
    mask: torch.Tensor,
    kl_ctl: float,
    clip_reward_value: float = 5.0,
) -> torch.Tensor:
    """R (N,) = clip(scores, +-clip_reward_value) - kl_ctl * sum_t kl * mask; scores (N,), kl and mask (N, T)."""
    return scores.clamp(-clip_reward_value, clip_reward_value) - kl_ctl * (kl * mask).sum(1)


def win_fractions(scores: torch.Tensor, k: int) -> torch.Tensor:
    """The pairwise group reward (Tinker's RLHF recipe; Nemotron 3's pairwise reward model): each response's mean
    chance of beating each other response to its prompt, read off the reward model as Bradley-Terry odds,
    W_i = mean_{j != i} sigmoid(s_i - s_j), in (0, 1). It is free of the score's scale and offset, so a reward
    model whose scores drift or spread makes the same reward; the k values of a prompt sum to k / 2. scores (N,)
    prompt-major, N = P * k, k >= 2."""
    if k < 2:
        raise ValueError(f"a win fraction needs k >= 2 responses per prompt, got {k}")
    if scores.shape[0] % k:
        raise ValueError(f"{scores.shape[0]} scores are not whole groups of k = {k}")
    grouped = scores.view(-1, k)
    odds = torch.sigmoid(grouped.unsqueeze(2) - grouped.unsqueeze(1))  # [p, i, j] = sigmoid(s_i - s_j)
    return ((odds.sum(2) - 0.5) / (k - 1)).view(-1)  # less sigmoid(0) = 1/2, the response against itself


def quantile_rewards(scores: torch.Tensor, ref_scores: torch.Tensor, k: int, m: int) -> torch.Tensor:
    """The calibrated reward (InfAlign, Balashankar et al. 2025): each response's score as its quantile among m
    samples of the reference for the same prompt, Q_i = (#{ref < s_i} + #{ref = s_i} / 2) / m, in [0, 1]. Free of
    the score's scale and offset, and of how the reward model spreads one prompt's scores against another's.
    scores (P * k,) and ref_scores (P * m,), both prompt-major."""
    if k < 1 or m < 1:
        raise ValueError(f"a quantile needs k >= 1 responses and m >= 1 reference samples per prompt, got {k}, {m}")
    if scores.shape[0] % k or ref_scores.shape[0] % m or scores.shape[0] // k != ref_scores.shape[0] // m:
        raise ValueError(f"{scores.shape[0]} scores in groups of {k} and {ref_scores.shape[0]} in groups of {m}")
    s = scores.view(-1, k, 1)
    ref = ref_scores.view(-1, 1, m).to(s.dtype)
    below = (ref < s).to(s.dtype).sum(2) + 0.5 * (ref == s).to(s.dtype).sum(2)
    return (below / m).view(-1)


def leave_one_out_advantages(rewards: torch.Tensor, k: int) -> torch.Tensor:
    """A_i = R_i - mean_{j != i} R_j within each prompt's k responses; rewards (N,) prompt-major, N = P * k, k >= 2.

    Equivalently A_i = k / (k - 1) * (R_i - mean_j R_j): the k advantages of a prompt sum to zero."""
    if k < 2:
        raise ValueError(f"the leave-one-out baseline needs k >= 2 responses per prompt, got {k}")
    if rewards.shape[0] % k:
        raise ValueError(f"{rewards.shape[0]} rewards are not whole groups of k = {k}")
    grouped = rewards.view(-1, k)  # (P, k)
    baseline = (grouped.sum(1, keepdim=True) - grouped) / (k - 1)
    return (grouped - baseline).view(-1)


def token_advantages(advantages: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Each sequence's advantage (N,) on every one of its response tokens: (N, T) in the advantages' dtype, zero
    outside the mask (which may be an integer tensor, as the rollout's is)."""
    return advantages.unsqueeze(1) * mask.to(advantages.dtype)


def reinforce_loss(logprobs: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Plain REINFORCE with the leave-one-out baseline: -sum(A * logprobs * mask) / sum(mask), all (N, T). Its
    gradient equals the clipped loss's on the first update of a batch (the ratio is 1 there, nothing is clipped)."""
    return -(advantages * logprobs * mask).sum() / mask.sum()
