"""RLOO (Ahmadian et al. 2024, "Back to Basics"), one DeepSpeed process per rank:

    deepspeed --num_accelerators N --module training.rloo.train --config RUN/config.json

Each step: 1. rollout (k responses for each of this rank's prompts), 2. score (old and reference log-probs, reward
model scores), 3. sequence rewards (score less the KL penalty) and leave-one-out advantages, 4. updates of the actor
(PPO's clipped ratio, or plain REINFORCE), 5. metrics, 6. the watch, checkpoints and Stop as PPO has them. No
critic: the other k - 1 responses to the same prompt are the baseline, so three models, one of them trained.
Saves RUN/actor as an HF folder."""

from __future__ import annotations

import random

import torch

from training.engine import (
    run_main,
)
from training.kernels.logprobs import response_logprobs
from training.rloo.config import RLOOConfig
from training.rloo.losses import (
    leave_one_out_advantages,
    quantile_rewards,
    reinforce_loss,
    sequence_rewards,
    token_advantages,
    win_fractions,
)
from training.rollouts.critic_free import Models, finish_row, run_loop
from training.rollouts.policy_losses import actor_loss_fn, approx_kl, clip_fraction, kl_estimate
from training.rollouts.prompt_run import (
    seed_rollout,
    watch_stats,
)
from training.rollouts.rollout import Experience, rollout, score, shape_scores


def make_experience(
    m: Models, cfg: RLOOConfig, prompts: list[list[int]], step: int, rank: int, stats
) -> tuple[Experience, torch.Tensor]:
    """Steps 1-3: k responses for each prompt (prompt-major: row p * k + j), scored, with the leave-one-out
    advantage on every response token (`advantages`); returns it and the sequence rewards (B,)."""
    m.actor.eval()
    seed_rollout(cfg, step, 0, rank)
    repeated = [p for p in prompts for _ in range(cfg.k)]
    want = cfg.dtype == "fp32" and not cfg.single_pass
    engine = m.engine(prompts[0])  # a vLLM engine gets the actor's latest weights first (the clock's weight_sync)
    with m.clock.part("decode"):
        batch = rollout(m.generator(), repeated, m.tokenizer, cfg, m.synced, want_logprobs=want, engine=engine)
    if cfg.single_pass:
        m.actor.train()
    exp = score(batch, m.actor, m.ref, None, m.judges, stats, cfg, live=cfg.single_pass, clock=m.clock)
    kl = kl_estimate(exp.logprobs, exp.ref_logprobs, cfg.kl_estimator)
    shaped = exp.scores
    if cfg.reward_shape == "win_fraction":
        shaped = win_fractions(exp.scores, cfg.k)
    elif cfg.reward_shape == "quantile":
        shaped = quantile_rewards(exp.scores, reference_scores(m, cfg, prompts, stats), cfg.k, cfg.calibration_samples)
    rewards = sequence_rewards(shaped.to(kl.dtype), kl, exp.mask, cfg.kl_ctl, cfg.clip_reward_value)
    exp.advantages = token_advantages(leave_one_out_advantages(rewards, cfg.k), exp.mask)
    return exp, rewards


@torch.no_grad()
def reference_scores(m: Models, cfg: RLOOConfig, prompts: list[list[int]], stats) -> torch.Tensor:
    """The reward model's scores (shaped as the actor's are) of calibration_samples samples of the frozen reference
    for each prompt, prompt-major: the distribution a quantile reward is read against."""
    repeated = [p for p in prompts for _ in range(cfg.calibration_samples)]
    with m.clock.part("reference_decode"):
        batch = rollout(m.ref, repeated, m.tokenizer, cfg, m.synced)
    with m.clock.part("reward_forward"):
        raw, _ = m.judges(batch["ids"], batch["attention_mask"], batch["prompt_len"] + batch["lengths"] - 1)
    return shape_scores(raw, batch["ended"], *stats, cfg.missing_eos_penalty)


def update(m: Models, mb: Experience, cfg: RLOOConfig) -> dict:
    """One actor step on a minibatch; returns its statistics."""
    m.actor.train()
    if mb.live:  # single pass: the scoring forward was this forward
        logprobs, mb.live = mb.live[0], None
    else:
        with m.clock.part("actor_forward"):
            logprobs = response_logprobs(m.actor, mb.ids, mb.attention_mask, mb.prompt_len, mb.held)
    if cfg.loss == "reinforce":
        loss = reinforce_loss(logprobs, mb.advantages, mb.mask)
    else:
        loss = actor_loss_fn(logprobs, mb.logprobs, mb.advantages, mb.mask, cfg.cliprange)
    with m.clock.part("actor_backward"):
        m.actor.backward(loss)
    with m.clock.part("actor_step"):
        m.actor.step()
    lp = logprobs.detach()
    return {
        "loss/actor": loss.item(),
        "policy/approx_kl": approx_kl(lp, mb.logprobs, mb.mask).item(),
        "policy/clipfrac": clip_fraction(lp, mb.logprobs, mb.mask, cfg.cliprange).item(),
    }


def updates_of(m: Models, exp: Experience, cfg: RLOOConfig, step: int, rewards=None) -> list[dict]:
    """Step 4: `update_epochs` passes over minibatches of the step's sequences, in an order fixed by (seed, step)
    (the sequence rewards, given by the loop, are already in the advantages)."""
    rng = random.Random(f"{cfg.seed}:{step}")
    out = []
    for _ in range(cfg.update_epochs):
        starts = list(range(0, len(exp), cfg.minibatch_size))
        rng.shuffle(starts)
        for i in starts:
            rows = torch.arange(i, min(i + cfg.minibatch_size, len(exp)))
            # the rollout itself when one minibatch holds it (a single pass keeps its live forward)
            out.append(update(m, exp if len(exp) <= cfg.minibatch_size else exp.select(rows), cfg))
    return out


def step_metrics(m: Models, cfg: RLOOConfig, exp: Experience, rewards, updates: list[dict], times, world: int) -> dict:
    """Step 5: the step's metrics row, averaged over ranks (PPO's keys where they mean the same)."""
    kl_seq = ((exp.logprobs - exp.ref_logprobs) * exp.mask).sum(1)  # sampled KL per sequence (k1)
    advantages = exp.advantages[:, 0]
    row = {
        "reward/score_mean": exp.raw_scores.mean().item(),
        "reward/score_std": exp.raw_scores.std().item() if len(exp) > 1 else 0.0,
        "reward/kl": kl_seq.mean().item(),
        "reward/kl_penalty": (-cfg.kl_ctl * kl_seq).mean().item(),
        "reward/total_mean": rewards.mean().item(),
        "rloo/advantage_abs_mean": advantages.abs().mean().item(),
        "response/length_mean": exp.lengths.float().mean().item(),
        "response/eos_rate": exp.ended.float().mean().item(),
        "response/decoded": float(exp.mask.shape[1]),
        **watch_stats([exp]),
    }
    return finish_row(m, cfg, exp, row, updates, times, world)


def train(cfg: RLOOConfig) -> None:
    run_loop(cfg, make_experience, updates_of, step_metrics)


def main(argv: list[str] | None = None) -> None:
    run_main(RLOOConfig, train, __doc__, argv)


if __name__ == "__main__":
    main()
