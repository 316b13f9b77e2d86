"""RLOO (Ahmadian et al. 2024, "Back to Basics"), one DeepSpeed process per rank:

    deepspeed --num_accelerators N --module training.rloo.train --config RUN/config.json

Each step: 1. rollout (k responses for each of this rank's prompts), 2. score (old and reference log-probs, reward
model scores), 3. sequence rewards (score less the KL penalty) and leave-one-out advantages, 4. updates of the actor
(PPO's clipped ratio, or plain REINFORCE), 5. metrics, 6. the watch, checkpoints and Stop as PPO has them. No
critic: the other k - 1 responses to the same prompt are the baseline, so three models, one of them trained.
Saves RUN/actor as an HF folder."""

from __future__ import annotations

import random
import time
from pathlib import Path

import torch

from training.checkpoints import evaluate
from training.engine import (
    initialize,
    optimizer_mb,
    peak_memory,
    run_main,
    save_hf,
    setup_distributed,
    tensors_mb,
)
from training.engine import save_checkpoint as save_engine_checkpoint
from training.loaders import load_tokenizer
from training.logprobs import response_logprobs
from training.models import resolve_model
from training.policy_losses import actor_loss_fn, approx_kl, clip_fraction, kl_estimate
from training.profile import Clock
from training.prompt_data import encode_prompts, prompt_batches, read_prompts
from training.prompt_run import (
    after_step,
    alarm_field,
    eval_prompts,
    frozen,
    frozen_judges,
    judge_last,
    load_policy_models,
    mean_across_ranks,
    resume_watch,
    reward_stats,
    rollout_engine,
    seed_rollout,
    tensorboard_writer,
    watch_stats,
)
from training.rloo.config import RLOOConfig
from training.rloo.losses import leave_one_out_advantages, reinforce_loss, sequence_rewards, token_advantages
from training.rollout import Experience, rollout, score
from training.runs import RunFiles, read_metrics
from training.watch import Watch


class Models:
    """Actor (a DeepSpeed engine), reference and reward models (frozen). No critic."""

    def __init__(self, cfg: RLOOConfig, steps: int, world: int):
        self.cfg = cfg
        actor, ref, judges, folders = load_policy_models(cfg)
        self.actor = initialize(cfg, actor, steps, lr=cfg.actor_lr, micro_batch=cfg.minibatch_size, grad_accum=1)[0]
        self.device = self.actor.device
        self.clock = Clock(self.device)
        self.ref = frozen(ref, cfg, cfg.minibatch_size, self.device)
        self.judges = frozen_judges(cfg, judges, folders, self.device)
        self.synced = cfg.zero_stage == 3 and world > 1  # every rank must join each generate step under ZeRO-3
        self.eval_prompts: list[list[int]] = []
        self.tokenizer = None
        self.rollouts = None  # the vLLM engine of the rollouts (training/rollout_engine.py), set up with the tokenizer

    def generator(self):
        return self.actor.module

    def engine(self, probe: list[int]):
        """The vLLM engine holding the actor's current weights, or None (the trainers' own decode). probe: a prompt
        of the batch it samples next, on which the sync is checked."""
        return self.rollouts.engine_for(self.actor, probe) if self.rollouts is not None else None

    def save(self, folder: Path, step: int, state: dict) -> None:
        save_engine_checkpoint(self.actor, folder / "actor", f"step{step}", client_state=state)

    def load(self, folder: Path) -> dict | None:
        if not (folder / "actor" / "latest").is_file():
            return None
        tag = (folder / "actor" / "latest").read_text().strip()
        return self.actor.load_checkpoint(str(folder / "actor"), tag=tag)[1]


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
    rewards = sequence_rewards(exp.scores.to(kl.dtype), kl, exp.mask, cfg.kl_ctl, cfg.clip_reward_value)
    exp.advantages = token_advantages(leave_one_out_advantages(rewards, cfg.k), exp.mask)
    return exp, rewards


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


def updates_of(m: Models, exp: Experience, cfg: RLOOConfig, step: int) -> list[dict]:
    """Step 4: `update_epochs` passes over minibatches of the step's sequences, in an order fixed by (seed, step)."""
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
    row.update({k: sum(u[k] for u in updates) / len(updates) for k in updates[0]})
    row.update({f"perf/{k}": v for k, v in times.items()})
    row.update(m.clock.take())
    if m.rollouts is not None:
        row.update(m.rollouts.take())  # the weights sent to the vLLM engine, and their check
    row = mean_across_ranks(row, m.device)
    row["perf/tokens_per_s"] = exp.ids.numel() * world / times["step_s"]
    row["policy/kl_ctl"] = cfg.kl_ctl
    row["lr/actor"] = m.actor.lr_scheduler.get_last_lr()[0]
    return row


def setup(cfg: RLOOConfig, world: int) -> tuple:
    """The prompts, the steps per epoch and in all, the models, and where a resumed run starts."""
    tokenizer = load_tokenizer(resolve_model(cfg.actor))
    prompts, skipped = encode_prompts(tokenizer, read_prompts(cfg.prompts), cfg.max_prompt_length)
    per_epoch = len(prompt_batches(len(prompts), cfg.generation_batch_size, world, cfg.seed, 0))
    if per_epoch == 0:
        raise ValueError(f"{len(prompts)} usable prompts are fewer than one rollout batch for {world} rank(s)")
    total = cfg.max_steps or per_epoch * cfg.epochs
    m = Models(cfg, total * cfg.update_epochs * -(-cfg.sequences // cfg.minibatch_size), world)
    m.tokenizer, m.eval_prompts = tokenizer, eval_prompts(cfg, tokenizer)
    state = m.load(Path(cfg.output_dir) / "checkpoints") or {"step": 0, "kl_ctl": cfg.kl_ctl}
    info = {"prompts": len(prompts), "skipped_prompts": skipped, "world_size": world, "total_steps": total}
    if m.eval_prompts:
        info["eval_prompts"] = len(m.eval_prompts)
    m.rollouts, info["rollout_engine"] = rollout_engine(cfg, tokenizer.eos_token_id, m.clock)
    return prompts, per_epoch, total, m, state, info


def train(cfg: RLOOConfig) -> None:
    rank, world = setup_distributed()
    run = RunFiles(cfg.output_dir, rank)
    run.status("running", step=0)
    random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    prompts, per_epoch, total, m, state, info = setup(cfg, world)
    if state["step"]:
        run.metrics({"event": "resumed", "step": state["step"]})
    run.metrics({"event": "start", **info})
    step, stats = state["step"], reward_stats(cfg)
    board = tensorboard_writer(cfg, rank)
    watch = resume_watch(cfg, step, total)
    while step < total:
        epoch, index = divmod(step, per_epoch)
        mine = prompt_batches(len(prompts), cfg.generation_batch_size, world, cfg.seed, epoch)[index][rank::world]
        t0 = time.time()
        # 1-3. k responses per prompt, scored; sequence rewards and leave-one-out advantages
        exp, rewards = make_experience(m, cfg, [prompts[i] for i in mine], step, rank, stats)
        t = time.time()
        # 4. updates of the actor
        updates = updates_of(m, exp, cfg, step)
        step += 1
        # 5. metrics
        times = {"gen_s": t - t0, "train_s": time.time() - t, "step_s": time.time() - t0}
        row = step_metrics(m, cfg, exp, rewards, updates, times, world)
        # 6. the watch, checkpoints every save_every steps judged on held-out prompts, the log, Stop
        at = {"step": step, "epoch": epoch, "total": total, "kl_ctl": cfg.kl_ctl}
        if not after_step(m, cfg, run, board, watch, at, row, [exp]):
            break
    else:
        finish(m, cfg, run, step, total, watch)
    if board:
        board.close()
    if m.rollouts is not None:
        m.rollouts.close()


def finish(m: Models, cfg: RLOOConfig, run: RunFiles, step: int, total: int, watch: Watch) -> None:
    out = Path(cfg.output_dir)
    m.save(out / "checkpoints", step, {"step": step, "kl_ctl": cfg.kl_ctl})
    last = evaluate(m, m.eval_prompts, m.tokenizer, cfg, step) if m.eval_prompts else None  # before LoRA merges
    lora = bool(cfg.actor_lora_rank)
    save_hf(m.actor, m.actor.module, m.tokenizer, out / "actor", run.rank, cfg.zero_stage == 3, lora)
    rows = [r for r in read_metrics(out) if "reward/score_mean" in r]
    final = {k: rows[-1][k] for k in ("reward/score_mean", "reward/kl", "policy/approx_kl")} if rows else {}
    final.update(judge_last(run, cfg, step, watch, last))
    final.update(peak_memory())
    final.update(
        {
            "memory/actor_mb": tensors_mb(m.actor.module.parameters()),
            "memory/actor_optimizer_mb": optimizer_mb(m.actor),
            "memory/reference_mb": tensors_mb(m.ref.parameters()),
            "memory/reward_mb": tensors_mb(p for j in m.judges.models for p in j.parameters()),
        }
    )
    run.metrics({"event": "final", "step": step, **final})
    run.status("finished", step=step, total_steps=total, final=final, **alarm_field(watch.reason))


def main(argv: list[str] | None = None) -> None:
    run_main(RLOOConfig, train, __doc__, argv)


if __name__ == "__main__":
    main()
