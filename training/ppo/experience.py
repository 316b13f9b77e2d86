"""PPO's rewards and advantages on a scored rollout (training/rollouts/rollout.py's Experience): DeepSpeed-Chat's
`train_rlhf`, per-token rewards then GAE."""

from __future__ import annotations

import torch

from training.ppo.losses import get_advantages_and_returns
from training.rollouts.policy_losses import compute_rewards, masked_whiten, zero_after_end
from training.rollouts.rollout import Experience


def add_advantages(exp: Experience, kl_ctl: float, cfg) -> Experience:
    """Per-token rewards, then GAE (DeepSpeed-Chat's train_rlhf, on the response positions: start = 0)."""
    rows = torch.arange(len(exp), device=exp.mask.device)
    score_mask = exp.mask.clone()
    score_mask[rows, exp.lengths - 1] = 0  # so ends - 1 is the position that emits EOS (see compute_rewards)
    rewards = compute_rewards(
        exp.logprobs, exp.ref_logprobs, exp.scores, score_mask, 0, kl_ctl, cfg.clip_reward_value, cfg.kl_estimator
    )
    exp.rewards = zero_after_end(rewards, score_mask, 0)
    exp.values = zero_after_end(exp.values, score_mask, 0)
    advantages, exp.returns = get_advantages_and_returns(exp.values, exp.rewards, 0, cfg.gamma, cfg.lam)
    exp.advantages = masked_whiten(advantages, exp.mask) if cfg.whiten_advantages else advantages
    return exp
