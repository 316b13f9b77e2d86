"""PPO's own math, as pure functions: GAE and the clipped value loss (imports only torch, and the shared policy
math in training/rollouts/policy_losses.py, which imports only torch).

Index convention as in training/rollouts/policy_losses.py: position t of `values` and `rewards` (B, L) refers to the
action `seq[t+1]`; the trainer passes the response positions only (start = 0). Shapes: B sequences, L positions,
T = L - start response positions."""

from __future__ import annotations

import torch

from training.rollouts.policy_losses import masked_mean


def get_advantages_and_returns(
    values: torch.Tensor, rewards: torch.Tensor, start: int, gamma: float = 1.0, lam: float = 0.95
) -> tuple[torch.Tensor, torch.Tensor]:
    """GAE (Schulman et al. 2016) from the last position back to `start`, with V_L = 0:

        delta_t = r_t + gamma * V_{t+1} - V_t,   A_t = delta_t + gamma * lam * A_{t+1}

    values, rewards: (B, L). Returns (advantages (B, T) detached, returns (B, T) = advantages + values[:, start:])."""
    length = rewards.shape[1]
    last = torch.zeros_like(rewards[:, 0])
    reversed_adv = []
    for t in reversed(range(start, length)):
        next_values = values[:, t + 1] if t < length - 1 else torch.zeros_like(values[:, t])
        delta = rewards[:, t] + gamma * next_values - values[:, t]
        last = delta + gamma * lam * last
        reversed_adv.append(last)
    advantages = torch.stack(reversed_adv[::-1], dim=1)
    returns = advantages + values[:, start:]
    return advantages.detach(), returns


def critic_loss_fn(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    mask: torch.Tensor,
    cliprange_value: float = 0.2,
) -> torch.Tensor:
    """Clipped value loss, all (B, T): 0.5 * masked mean of max((V - R)^2, (clip(V, V_old +- c) - R)^2)."""
    clipped = torch.clamp(values, old_values - cliprange_value, old_values + cliprange_value)
    return 0.5 * masked_mean(torch.max((values - returns) ** 2, (clipped - returns) ** 2), mask)
