"""Online DPO (Guo et al. 2024; iterative DPO on the reward model's labels, Xiong et al. 2024), one DeepSpeed
process per rank:

    deepspeed --num_accelerators N --module training.online_dpo.train --config RUN/config.json

Each step: 1. rollout (k responses for each of this rank's prompts, from the current policy), 2. score (reference
log-probs and the reward model's scores), 3. each prompt's best against its worst response as a DPO pair
(training/online_dpo/losses.py), 4. update_epochs passes of DPO's loss over the pairs, 5. metrics, 6. the watch,
checkpoints and Stop as PPO and RLOO have them. Three models (actor, reference, reward), one trained: RLOO's loop
and models (training/rollouts/critic_free.py) with these step functions. Saves RUN/actor as an HF folder."""

from __future__ import annotations

import torch

from training.engine import run_main
from training.kernels.logprobs import response_logprobs
from training.online_dpo.config import OnlineDPOConfig
from training.online_dpo.losses import best_worst_pairs, online_dpo_loss
from training.rollouts.critic_free import finish_row, run_loop
from training.rollouts.policy_losses import approx_kl
from training.rollouts.prompt_run import seed_rollout, watch_stats
from training.rollouts.rollout import Experience, rollout, score


def make_experience(m, cfg: OnlineDPOConfig, prompts: list[list[int]], step: int, rank: int, stats):
    """Steps 1-3: k responses per prompt (prompt-major), scored; returns them and the pairs (chosen rows, rejected
    rows) the reward model's scores make."""
    m.actor.eval()
    seed_rollout(cfg, step, 0, rank)
    repeated = [p for p in prompts for _ in range(cfg.k)]
    engine = m.engine(prompts[0])
    with m.clock.part("decode"):
        batch = rollout(
            m.generator(), repeated, m.tokenizer, cfg, m.synced, want_logprobs=cfg.dtype == "fp32", engine=engine
        )
    exp = score(batch, m.actor, m.ref, None, m.judges, stats, cfg, clock=m.clock)
    return exp, best_worst_pairs(exp.scores, cfg.k, cfg.min_gap)


def global_sums(values: list[float], device) -> list[float]:
    """Each value summed over the ranks (one all-reduce)."""
    t = torch.tensor(values, dtype=torch.float64, device=device)
    torch.distributed.all_reduce(t)
    return t.tolist()


def update(m, exp: Experience, pairs: tuple[torch.Tensor, torch.Tensor], cfg: OnlineDPOConfig) -> dict:
    """One actor step on all of this rank's pairs, every pair of every rank weighing the same: this rank's summed
    loss times world / all ranks' pairs, which DeepSpeed's mean over ranks turns into the mean over all pairs. A rank
    with no pair still takes the step (a zero loss on one sequence), so every rank joins the same all-reduce. The
    metrics are over all ranks' pairs (the same on every rank)."""
    chosen, rejected = pairs
    n = len(chosen)
    m.actor.train()
    rows = torch.cat([chosen, rejected]) if n else torch.tensor([0])
    mb = exp.select(rows.to(exp.ids.device))
    with m.clock.part("actor_forward"):
        logprobs = response_logprobs(m.actor, mb.ids, mb.attention_mask, mb.prompt_len, mb.held)
    if n:
        ours = torch.arange(n, device=logprobs.device)
        mean, h = online_dpo_loss(logprobs, mb.ref_logprobs, mb.mask, ours, ours + n, cfg.beta)
        summed = mean * n
    else:
        summed, h = (logprobs * 0).sum(), torch.zeros(0)
    world = torch.distributed.get_world_size()
    total, loss_sum, right, margin = global_sums(
        [n, summed.item(), (h > 0).sum().item(), (cfg.beta * h).sum().item()], m.device
    )
    loss = summed * world / max(total, 1.0)
    with m.clock.part("actor_backward"):
        m.actor.backward(loss)
    with m.clock.part("actor_step"):
        m.actor.step()
    per_pair = lambda x: x / total if total else 0.0  # noqa: E731
    return {
        "loss/actor": per_pair(loss_sum),
        "online_dpo/accuracy": per_pair(right),
        "online_dpo/margin": per_pair(margin),
        "online_dpo/pairs": total,
        "policy/approx_kl": approx_kl(logprobs.detach(), mb.logprobs, mb.mask).item(),
    }


def updates_of(m, exp: Experience, cfg: OnlineDPOConfig, step: int, pairs) -> list[dict]:
    """Step 4: update_epochs passes over the step's pairs (the pairs stay those the rollout made)."""
    return [update(m, exp, pairs, cfg) for _ in range(cfg.update_epochs)]


def step_metrics(m, cfg: OnlineDPOConfig, exp: Experience, pairs, updates: list[dict], times, world: int) -> dict:
    """Step 5: the step's metrics row, averaged over ranks (PPO's and RLOO's keys where they mean the same)."""
    chosen, rejected = pairs
    kl_seq = ((exp.logprobs - exp.ref_logprobs) * exp.mask).sum(1)
    gaps = (exp.raw_scores[chosen] - exp.raw_scores[rejected]).sum().item()
    total, gap_sum = global_sums([len(chosen), gaps], m.device)
    gap = gap_sum / total if total else 0.0  # over all ranks' pairs: the same on every rank
    row = {
        "reward/score_mean": exp.raw_scores.mean().item(),
        "reward/score_std": exp.raw_scores.std().item() if len(exp) > 1 else 0.0,
        "reward/kl": kl_seq.mean().item(),
        "reward/kl_penalty": (-cfg.kl_ctl * kl_seq).mean().item(),
        "online_dpo/score_gap": gap,
        "response/length_mean": exp.lengths.float().mean().item(),
        "response/eos_rate": exp.ended.float().mean().item(),
        "response/decoded": float(exp.mask.shape[1]),
        **watch_stats([exp]),
    }
    return finish_row(m, cfg, exp, row, updates, times, world)


def train(cfg: OnlineDPOConfig) -> None:
    run_loop(cfg, make_experience, updates_of, step_metrics)


def main(argv: list[str] | None = None) -> None:
    run_main(OnlineDPOConfig, train, __doc__, argv)


if __name__ == "__main__":
    main()
