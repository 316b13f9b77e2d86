"""What the critic-free trainers on prompts share (RLOO, online DPO): their three models (an actor that trains, a
frozen reference and reward model; no critic), the set-up, the loop over prompt batches and the final save. Each
trainer's train.py passes its own steps (the experience it makes of a rollout, its updates, its metrics row) to
`run_loop`. The config is any PromptsConfig with `sequences` and `minibatch_size` (rows per rank per step and per
update)."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from pathlib import Path

import torch

from training.engine import initialize, optimizer_mb, peak_memory, save_hf, setup_distributed, tensors_mb
from training.engine import save_checkpoint as save_engine_checkpoint
from training.loaders import load_tokenizer
from training.models import resolve_model
from training.rollouts.checkpoints import evaluate
from training.rollouts.profile import Clock
from training.rollouts.prompt_data import encode_prompts, prompt_batches, read_prompts
from training.rollouts.prompt_run import (
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
    tensorboard_writer,
)
from training.rollouts.prompts_config import PromptsConfig
from training.runs import RunFiles, read_metrics
from training.watch import Watch


class Models:
    """Actor (a DeepSpeed engine), reference and reward models (frozen). No critic."""

    def __init__(self, cfg: PromptsConfig, steps: int, world: int):
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
        self.rollouts = (
            None  # the vLLM engine of the rollouts (training/sampling/rollout_engine.py), set up with the tokenizer
        )

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


def setup(cfg: PromptsConfig, world: int) -> tuple:
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


def run_loop(cfg: PromptsConfig, experience: Callable, updates: Callable, metrics: Callable) -> None:
    """A critic-free trainer's loop, its steps passed in: experience(m, cfg, prompts, step, rank, stats) ->
    (Experience, extra), updates(m, exp, cfg, step, extra) -> [dict], metrics(m, cfg, exp, extra, updates, times,
    world) -> the step's metrics row."""
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
        exp, extra = experience(m, cfg, [prompts[i] for i in mine], step, rank, stats)
        t = time.time()
        # 4. updates of the actor
        done = updates(m, exp, cfg, step, extra)
        step += 1
        # 5. metrics
        times = {"gen_s": t - t0, "train_s": time.time() - t, "step_s": time.time() - t0}
        row = metrics(m, cfg, exp, extra, done, times, world)
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


def finish(m: Models, cfg: PromptsConfig, run: RunFiles, step: int, total: int, watch: Watch) -> None:
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


def finish_row(m: Models, cfg: PromptsConfig, exp, row: dict, updates: list[dict], times: dict, world: int) -> dict:
    """A step's metrics row completed as every critic-free trainer completes it: the updates' means, the times and
    the clock's parts, the vLLM engine's weight sync, averaged over ranks, then throughput, kl_ctl and the lr."""
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
