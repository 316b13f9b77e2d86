"""The policy-gradient math of DeepSpeed-Chat step 3 that any trainer on prompts shares, as pure functions:
tensors in, tensors out (imports only torch). Masked means and whitening, the KL estimate and the KL-shaped
per-token rewards, the clipped surrogate, its diagnostics (clip fraction, approximate KL) and the adaptive KL
controller. Used by PPO (whose GAE and value loss are in training/ppo/losses.py) and the next trainer on prompts.

Index convention (DeepSpeed-Chat's): a sequence is prompt + response, `seq[0..L]`. Position t of `log_probs`,
`ref_log_probs`, `values` and `action_mask` (all (B, L)) refers to the action `seq[t+1]`, so the first response
token is position `start = prompt_length - 1`. The trainer passes the response positions only (start = 0);
the functions accept any `start`, as in DeepSpeed-Chat.

Shapes: B sequences, L positions, T = L - start response positions."""

from __future__ import annotations

import torch


def masked_mean(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """sum(x * mask) / sum(mask), over all elements or along `dim`."""
    if dim is None:
        return (x * mask).sum() / mask.sum()
    return (x * mask).sum(dim) / mask.sum(dim)


def masked_whiten(x: torch.Tensor, mask: torch.Tensor, shift_mean: bool = True) -> torch.Tensor:
    """(x - mean) / std over the masked elements (unbiased variance), as TRL's `masked_whiten`; positions outside
    the mask keep their whitened value too, they are masked later."""
    mean = masked_mean(x, mask)
    n = mask.sum()
    var = masked_mean((x - mean) ** 2, mask) * n / (n - 1).clamp(min=1)
    out = (x - mean) * torch.rsqrt(var + 1e-8)
    return out if shift_mean else out + mean


def kl_estimate(log_probs: torch.Tensor, ref_log_probs: torch.Tensor, estimator: str = "k1") -> torch.Tensor:
    """Per-token estimate of KL(policy || reference) from the sampled token's log-probabilities.

    k1 = log p - log q (DeepSpeed-Chat; unbiased, can be negative per token);
    k3 = exp(log q - log p) - 1 - (log q - log p) (Schulman's estimator; unbiased and always >= 0)."""
    d = log_probs - ref_log_probs
    if estimator == "k1":
        return d
    if estimator == "k3":
        return torch.expm1(-d) + d
    raise ValueError(f"unknown KL estimator {estimator!r} (k1 or k3)")


def compute_rewards(
    log_probs: torch.Tensor,
    ref_log_probs: torch.Tensor,
    reward_score: torch.Tensor,
    action_mask: torch.Tensor,
    start: int,
    kl_ctl: float,
    clip_reward_value: float = 5.0,
    kl_estimator: str = "k1",
) -> torch.Tensor:
    """Per-token rewards (B, L): r_t = -kl_ctl * KL_t, plus clip(score, +-clip_reward_value) at position
    min(ends, L) - 1 with ends = start + action_mask[:, start:].sum(1) + 1.

    The score lands on the last position the mask counts, plus one. The trainer passes a mask without the last
    response token, so the score lands on the token that emits EOS (or the last token of a response cut at the
    length limit), while the EOS itself stays inside the loss mask (DeepSpeed-Chat masks it, since pad = eos).
    A mask that counts every position up to L (DeepSpeed-Chat's own convention for a response cut at the limit)
    gives ends = L + 1; DeepSpeed-Chat's slice `rewards[j, start:ends[j]][-1]` then takes position L - 1, and so
    does the clamp here."""
    rewards = -kl_ctl * kl_estimate(log_probs, ref_log_probs, kl_estimator)
    ends = (start + action_mask[:, start:].sum(1).long() + 1).clamp(max=rewards.shape[1])  # (B,)
    score = reward_score.clamp(-clip_reward_value, clip_reward_value).to(rewards.dtype)
    return rewards.scatter_add(1, (ends - 1).unsqueeze(1), score.unsqueeze(1))


def zero_after_end(x: torch.Tensor, action_mask: torch.Tensor, start: int) -> torch.Tensor:
    """x with positions >= ends set to 0 (ends as in compute_rewards), DeepSpeed-Chat's fix (PR #620) that keeps
    the values and KL of padding out of GAE."""
    ends = start + action_mask[:, start:].sum(1).long() + 1
    positions = torch.arange(x.shape[1], device=x.device).unsqueeze(0)
    return x.masked_fill(positions >= ends.unsqueeze(1), 0.0)


def actor_loss_fn(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    cliprange: float = 0.2,
) -> torch.Tensor:
    """Clipped surrogate (PPO, Schulman et al. 2017), masked token mean; all (B, T):

    ratio = exp((logprobs - old_logprobs) * mask)
    loss = sum(max(-A * ratio, -A * clip(ratio, 1 - c, 1 + c)) * mask) / sum(mask)"""
    ratio = torch.exp((logprobs - old_logprobs) * mask)
    loss1 = -advantages * ratio
    loss2 = -advantages * torch.clamp(ratio, 1.0 - cliprange, 1.0 + cliprange)
    return masked_mean(torch.max(loss1, loss2), mask)


def clip_fraction(
    logprobs: torch.Tensor, old_logprobs: torch.Tensor, mask: torch.Tensor, cliprange: float
) -> torch.Tensor:
    """Share of response tokens whose ratio left [1 - c, 1 + c] (`policy/clipfrac`)."""
    ratio = torch.exp((logprobs - old_logprobs) * mask)
    return masked_mean(((ratio - 1.0).abs() > cliprange).float(), mask)


def approx_kl(logprobs: torch.Tensor, old_logprobs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """KL(old || new) over the update, k3 estimator, masked mean (`policy/approx_kl`)."""
    log_ratio = (logprobs - old_logprobs) * mask
    return masked_mean(torch.expm1(log_ratio) - log_ratio, mask)


def adaptive_kl_update(kl_coef: float, current_kl: float, target: float, n_steps: int, horizon: int) -> float:
    """Ziegler et al. 2019's controller: the coefficient moves toward keeping the measured KL near `target`:

    e = clip(current_kl / target - 1, -0.2, 0.2),   kl_coef *= 1 + e * n_steps / horizon"""
    error = min(max(current_kl / target - 1.0, -0.2), 0.2)
    return kl_coef * (1.0 + error * n_steps / horizon)
