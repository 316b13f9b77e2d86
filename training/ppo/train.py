"""PPO (DeepSpeed-Chat step 3), one DeepSpeed process per rank:

    deepspeed --num_accelerators N --module training.ppo.train --config RUN/config.json

Each step: 1. rollout (sample responses), 2. score (old and reference log-probs, values, RM scores), 3. rewards
and advantages, 4. PPO updates of actor and critic, 5. KL control and metrics, 6. checkpoint. The actor and critic
are DeepSpeed engines; the reference and reward models are frozen. Saves RUN/actor and RUN/critic as HF folders."""

from __future__ import annotations

import copy
import dataclasses
import random
import time
from pathlib import Path

import torch

from training.engine import (
    drop_older,
    initialize,
    optimizer_mb,
    peak_memory,
    run_main,
    save_hf,
    setup_distributed,
    tensors_mb,
)
from training.engine import save_checkpoint as save_engine_checkpoint
from training.kernels.linear import onednn_linears
from training.kernels.logprobs import response_logprobs
from training.loaders import fingerprints_by_rank, load_scalar_model, load_tokenizer, param_fingerprint
from training.models import add_lora, training_attention
from training.ppo.config import PPOConfig
from training.ppo.data import read_texts, unsup_batch
from training.ppo.experience import add_advantages
from training.ppo.losses import critic_loss_fn
from training.ppo.models import Critic
from training.rollouts.checkpoints import evaluate
from training.rollouts.policy_losses import actor_loss_fn, adaptive_kl_update, approx_kl, clip_fraction, masked_mean
from training.rollouts.profile import Clock
from training.rollouts.prompt_data import encode_prompts, fitted_batch, prompt_batches, read_prompts
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
    seed_rollout,
    tensorboard_writer,
    watch_stats,
)
from training.rollouts.rollout import Experience, rollout, score
from training.runs import RunFiles, read_metrics
from training.watch import Watch


class Models:
    """The four models: actor and critic as DeepSpeed engines, reference and reward frozen."""

    def __init__(self, cfg: PPOConfig, steps: int, world: int):
        self.cfg = cfg
        actor, ref, judges, folders = load_policy_models(cfg)
        critic = Critic(load_scalar_model(cfg.critic or cfg.reward, cfg.dtype, training_attention()))
        onednn_linears(critic)  # fp32 on a CPU: linear layers through oneDNN (training/kernels/linear.py)
        if cfg.gradient_checkpointing:
            critic.model.gradient_checkpointing_enable()
        if cfg.critic_lora_rank:
            critic.model = add_lora(critic.model, cfg.critic_lora_rank, cfg.lora_alpha)
        self.actor, self.critic = (
            initialize(cfg, model, steps, lr=lr, micro_batch=cfg.minibatch_size, grad_accum=1)[0]
            for model, lr in ((actor, cfg.actor_lr), (critic, cfg.critic_lr))
        )
        self.device = self.actor.device
        self.clock = Clock(self.device)  # the step's parts, timed (training/rollouts/profile.py)
        self.ref_fingerprint = param_fingerprint(ref) if cfg.zero_stage < 3 else None
        self.ref = self._frozen(ref)
        self.judges = frozen_judges(cfg, judges, folders, self.device)
        self.synced = cfg.zero_stage == 3 and world > 1  # every rank must join each generate step under ZeRO-3
        self.ema = [p.detach().float().clone() for p in self.actor.module.parameters()] if cfg.ema_beta else None
        self.eval_prompts: list[
            list[int]
        ] = []  # held-out prompts for the checkpoints (training/rollouts/checkpoints.py)
        self.tokenizer = None
        self.rollouts = (
            None  # the vLLM engine of the rollouts (training/sampling/rollout_engine.py), set up with the tokenizer
        )
        self.unsup: list[list[int]] = []  # PPO-ptx texts, tokenised (empty: off)

    def _frozen(self, model):
        return frozen(model, self.cfg, self.cfg.minibatch_size, self.device)

    def generator(self):
        return self.actor.module

    def engine(self, probe: list[int]):
        """The vLLM engine holding the actor's current weights, or None (the trainers' own decode). probe: a prompt
        of the batch it samples next, on which the sync is checked."""
        return self.rollouts.engine_for(self.actor, probe) if self.rollouts is not None else None

    def save(self, folder: Path, step: int, state: dict) -> None:
        save_checkpoint(self, folder, step, state)

    def update_ema(self, beta: float) -> None:
        move_toward(self.ema, list(self.actor.module.parameters()), beta)  # the EMA is fp32

    def update_reference(self, beta: float) -> None:
        """The reference one step toward the actor (--ref-ema-beta; Xu et al. 2024): every rank holds the same
        full actor under ZeRO 0-2, so the references stay equal."""
        move_toward(list(self.ref.parameters()), list(self.actor.module.parameters()), beta)


@torch.no_grad()
def move_toward(target: list[torch.Tensor], source: list[torch.Tensor], beta: float) -> None:
    """target = beta * target + (1 - beta) * source, in place, tensor by tensor (the same shapes, in order)."""
    if len(target) != len(source):
        raise ValueError(f"{len(target)} tensors cannot follow {len(source)}")
    for t, s in zip(target, source, strict=True):
        t.mul_(beta).add_(s.detach().to(t.dtype), alpha=1 - beta)


def _actor_folder(cfg: PPOConfig):
    from training.models import resolve_model

    return resolve_model(cfg.actor)


def ppo_update(m: Models, exp: Experience, cfg: PPOConfig) -> dict:
    """One actor step and one critic step on a minibatch (DeepSpeed-Chat's train_rlhf); returns its statistics."""
    m.actor.train()
    m.critic.train()
    part = m.clock.part
    if exp.live:  # single pass: the scoring forwards were these forwards
        logprobs, values = exp.live
        exp.live = None
    else:
        with part("actor_forward"):
            logprobs = response_logprobs(m.actor, exp.ids, exp.attention_mask, exp.prompt_len, exp.held)
        values = None
    actor_loss = actor_loss_fn(logprobs, exp.logprobs, exp.advantages, exp.mask, cfg.cliprange)
    with part("actor_backward"):
        m.actor.backward(actor_loss)
    with part("actor_step"):
        m.actor.step()
        if m.ema is not None:
            m.update_ema(cfg.ema_beta)
    if values is None:
        with part("critic_forward"):
            values = m.critic(exp.ids, exp.attention_mask, exp.prompt_len)
    critic_loss = critic_loss_fn(values, exp.values, exp.returns, exp.mask, cfg.cliprange_value)
    with part("critic_backward"):
        m.critic.backward(critic_loss)
    with part("critic_step"):
        m.critic.step()
    lp = logprobs.detach()
    return {
        "loss/actor": actor_loss.item(),
        "loss/critic": critic_loss.item(),
        "policy/approx_kl": approx_kl(lp, exp.logprobs, exp.mask).item(),
        "policy/clipfrac": clip_fraction(lp, exp.logprobs, exp.mask, cfg.cliprange).item(),
    }


def experience_stats(buffer: list[Experience], kl_ctl: float, cfg: PPOConfig) -> dict:
    """Per-step means over the sequences of this rank's buffer."""
    cat = lambda f: torch.cat([f(e) for e in buffer])  # noqa: E731
    kl_seq = cat(lambda e: ((e.logprobs - e.ref_logprobs) * e.mask).sum(1))  # sampled KL per sequence (k1)
    return {
        "reward/score_mean": cat(lambda e: e.raw_scores).mean().item(),
        "reward/score_std": cat(lambda e: e.raw_scores).std().item() if sum(map(len, buffer)) > 1 else 0.0,
        "reward/kl": kl_seq.mean().item(),
        "reward/kl_penalty": (-kl_ctl * kl_seq).mean().item(),
        "reward/total_mean": cat(lambda e: (e.rewards * e.mask).sum(1)).mean().item(),
        "value/mean": torch.cat([masked_mean(e.values, e.mask, 1) for e in buffer]).mean().item(),
        "returns/mean": torch.cat([masked_mean(e.returns, e.mask, 1) for e in buffer]).mean().item(),
        "response/length_mean": cat(lambda e: e.lengths.float()).mean().item(),
        "response/eos_rate": cat(lambda e: e.ended.float()).mean().item(),
        # decode steps, summed over the rollout batches: each runs to its last row's EOS (or max_new_tokens)
        "response/decoded": float(sum(e.mask.shape[1] for e in buffer)),
        **watch_stats(buffer),
    }


def save_checkpoint(m: Models, folder: Path, step: int, state: dict) -> None:
    tag = f"step{step}"
    save_engine_checkpoint(m.critic, folder / "critic", tag, drop=False)
    if m.ema is not None and torch.distributed.get_rank() == 0:
        torch.save(m.ema, folder / f"ema-{tag}.pt")
    if m.cfg.ref_ema_beta and torch.distributed.get_rank() == 0:  # a moving reference is state too
        torch.save([p.detach() for p in m.ref.parameters()], folder / f"ref-{tag}.pt")
    save_engine_checkpoint(m.actor, folder / "actor", tag, client_state=state)  # last: its 'latest' marks done
    if torch.distributed.get_rank() == 0:  # the whole checkpoint is down: the critic's older tags go too
        drop_older(folder / "critic", tag)


def load_checkpoint(m: Models, folder: Path) -> dict | None:
    if not (folder / "actor" / "latest").is_file():
        return None
    tag = (folder / "actor" / "latest").read_text().strip()
    _, state = m.actor.load_checkpoint(str(folder / "actor"), tag=tag)
    m.critic.load_checkpoint(str(folder / "critic"), tag=tag)
    if m.ema is not None:
        m.ema = torch.load(folder / f"ema-{tag}.pt", weights_only=True)
    if m.cfg.ref_ema_beta:
        saved = torch.load(folder / f"ref-{tag}.pt", weights_only=True)
        with torch.no_grad():
            for p, v in zip(m.ref.parameters(), saved, strict=True):
                p.copy_(v)
    return state


def make_experience(
    m: Models, cfg: PPOConfig, prompts: list, mine_of, step: int, ctx: dict
) -> tuple[list, float, float]:
    """Steps 1-3 for each batch of the buffer: rollouts, scoring (reference, reward, critic), rewards and
    advantages. mine_of(b): this rank's prompt indices of batch b. Returns (buffer, sampling s, scoring s)."""
    buffer, gen_s, score_s = [], 0.0, 0.0
    for b in range(cfg.generation_batches):
        m.actor.eval()
        m.critic.eval()
        seed_rollout(cfg, step, b, ctx["rank"])
        t = time.time()
        want = cfg.reuse_rollout_logprobs and cfg.dtype == "fp32" and not cfg.single_pass
        mine = [prompts[i] for i in mine_of(b)]
        engine = m.engine(mine[0])  # a vLLM engine gets the actor's latest weights first (the clock's weight_sync)
        with m.clock.part("decode"):
            batch = rollout(m.generator(), mine, ctx["tokenizer"], cfg, m.synced, want, engine=engine)
        gen_s += time.time() - t
        t = time.time()
        if cfg.single_pass:
            m.actor.train()
            m.critic.train()
        exp = score(batch, m.actor, m.ref, m.critic, m.judges, ctx["stats"], cfg, cfg.single_pass, m.clock)
        buffer.append(add_advantages(exp, ctx["kl_ctl"], cfg))
        score_s += time.time() - t
    return buffer, gen_s, score_s


def ppo_epochs(m: Models, buffer: list[Experience], cfg: PPOConfig, step: int) -> list[dict]:
    """Step 4: `ppo_epochs` passes over minibatches of the buffer, in an order fixed by (seed, step)."""
    rng = random.Random(f"{cfg.seed}:{step}")
    updates = []
    for _ in range(cfg.ppo_epochs):
        chunks = [
            e if len(e) <= cfg.minibatch_size else e.select(torch.arange(i, min(i + cfg.minibatch_size, len(e))))
            for e in buffer
            for i in range(0, len(e), cfg.minibatch_size)
        ]
        rng.shuffle(chunks)
        for mb in chunks:
            updates.append(ppo_update(m, mb, cfg))
            if m.unsup:  # PPO-ptx: an LM step on unlabelled text after each actor step (DeepSpeed-Chat's order)
                per_step = cfg.ppo_epochs * len(chunks)
                updates[-1]["loss/unsup"] = unsup_step(m, cfg, step * per_step + len(updates) - 1)
    return updates


def unsup_step(m: Models, cfg: PPOConfig, index: int) -> float:
    """DeepSpeed-Chat's train_unsupervised: the actor's language-modelling loss on the index-th batch of
    unlabelled text, times unsup_coef, in its own optimizer step (InstructGPT's PPO-ptx term)."""
    pad = m.tokenizer.pad_token_id if m.tokenizer.pad_token_id is not None else m.tokenizer.eos_token_id
    ids, mask, labels = unsup_batch(m.unsup, cfg.minibatch_size, cfg.seed, index, pad)
    m.actor.train()
    out = m.actor(input_ids=ids.to(m.device), attention_mask=mask.to(m.device), labels=labels.to(m.device))
    m.actor.backward(cfg.unsup_coef * out.loss)
    m.actor.step()
    return out.loss.item()


def step_metrics(
    m: Models, cfg: PPOConfig, buffer, updates, times: dict, kl_ctl: float, world: int
) -> tuple[dict, float]:
    """Step 5: the step's metrics row (averaged over ranks) and the KL coefficient for the next step."""
    row = experience_stats(buffer, kl_ctl, cfg)
    row.update({k: sum(u[k] for u in updates) / len(updates) for k in updates[0]})
    row.update({f"perf/{k}": v for k, v in times.items()})
    row.update(m.clock.take())
    if m.rollouts is not None:
        row.update(m.rollouts.take())  # the weights sent to the vLLM engine, and their check
    row = mean_across_ranks(row, m.device)
    row["perf/tokens_per_s"] = sum(e.ids.numel() for e in buffer) * world / times["step_s"]
    row["policy/kl_ctl"] = kl_ctl
    row["lr/actor"] = m.actor.lr_scheduler.get_last_lr()[0]
    if cfg.adaptive_kl:
        n = cfg.generation_batch_size * cfg.generation_batches * world  # sequences behind this KL
        kl_ctl = adaptive_kl_update(kl_ctl, row["reward/kl"], cfg.kl_target, n, cfg.kl_horizon)
    return row, kl_ctl


def setup(cfg: PPOConfig, rank: int, world: int) -> tuple:
    """The settings with the rollout batch fitted to the prompts, the prompts, the step count, the four models, the
    reward statistics and where a resumed run starts."""
    tokenizer = load_tokenizer(_actor_folder(cfg))
    prompts, skipped = encode_prompts(tokenizer, read_prompts(cfg.prompts), cfg.max_prompt_length)
    batch = fitted_batch(len(prompts), cfg.generation_batch_size, world, cfg.generation_batches)
    if batch == 0:
        raise ValueError(f"{len(prompts)} usable prompts are fewer than one a rank for {world} rank(s)")
    cfg = dataclasses.replace(cfg, generation_batch_size=batch)
    per_epoch = len(prompt_batches(len(prompts), batch, world, cfg.seed, 0)) // cfg.generation_batches
    total = cfg.max_steps or per_epoch * cfg.epochs
    updates_per_step = cfg.ppo_epochs * sum(
        -(-cfg.generation_batch_size // cfg.minibatch_size) for _ in range(cfg.generation_batches)
    )
    m = Models(cfg, total * updates_per_step, world)
    state = load_checkpoint(m, Path(cfg.output_dir) / "checkpoints") or {"step": 0, "kl_ctl": cfg.kl_ctl}
    info = {"prompts": len(prompts), "skipped_prompts": skipped, "world_size": world, "total_steps": total}
    info["generation_batch_size"] = batch  # the setting's, or the prompts a rank has where they are fewer
    m.eval_prompts = eval_prompts(cfg, tokenizer)
    if m.eval_prompts:
        info["eval_prompts"] = len(m.eval_prompts)
    m.tokenizer = tokenizer
    m.rollouts, info["rollout_engine"] = rollout_engine(cfg, tokenizer.eos_token_id, m.clock)
    if cfg.unsupervised_data:
        limit = cfg.max_prompt_length + cfg.max_new_tokens
        texts = read_texts(cfg.unsupervised_data)
        m.unsup = [tokenizer(t + tokenizer.eos_token, add_special_tokens=False)["input_ids"][:limit] for t in texts]
        info["unsupervised_texts"] = len(m.unsup)
    return cfg, tokenizer, prompts, per_epoch, total, m, state, info


def train(cfg: PPOConfig) -> None:
    rank, world = setup_distributed()
    run = RunFiles(cfg.output_dir, rank)
    run.status("running", step=0)
    random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    cfg, tokenizer, prompts, per_epoch, total, m, state, info = setup(cfg, rank, world)
    if state["step"]:
        run.metrics({"event": "resumed", "step": state["step"]})
    run.metrics({"event": "start", **info})
    step, ctx = (
        state["step"],
        {"rank": rank, "tokenizer": tokenizer, "stats": reward_stats(cfg), "kl_ctl": state["kl_ctl"]},
    )
    board = tensorboard_writer(cfg, rank)
    watch = resume_watch(cfg, step, total)
    while step < total:
        epoch, index = divmod(step, per_epoch)
        order = prompt_batches(len(prompts), cfg.generation_batch_size, world, cfg.seed, epoch)
        t0 = time.time()
        # 1-3. rollouts, scoring, rewards and advantages, for each batch of the buffer
        mine_of = lambda b: order[index * cfg.generation_batches + b][rank::world]  # noqa: B023, E731
        buffer, gen_s, score_s = make_experience(m, cfg, prompts, mine_of, step, ctx)
        # 4. PPO epochs over minibatches of the buffer
        t = time.time()
        updates = ppo_epochs(m, buffer, cfg, step)
        if cfg.ref_ema_beta:
            m.update_reference(cfg.ref_ema_beta)
        step += 1
        # 5. KL control and metrics
        times = {"gen_s": gen_s, "score_s": score_s, "train_s": time.time() - t, "step_s": time.time() - t0}
        row, next_kl = step_metrics(m, cfg, buffer, updates, times, ctx["kl_ctl"], world)
        ctx["kl_ctl"] = next_kl
        # 6. the watch, checkpoints every save_every steps judged on held-out prompts, the log, Stop
        at = {"step": step, "epoch": epoch, "total": total, "kl_ctl": ctx["kl_ctl"]}
        if not after_step(m, cfg, run, board, watch, at, row, buffer):
            break
    else:
        finish(m, cfg, run, step, ctx["kl_ctl"], total, tokenizer, watch)
    if board:
        board.close()
    if m.rollouts is not None:
        m.rollouts.close()


def finish(
    m: Models, cfg: PPOConfig, run: RunFiles, step: int, kl_ctl: float, total: int, tokenizer, watch: Watch
) -> None:
    out = Path(cfg.output_dir)
    save_checkpoint(m, out / "checkpoints", step, {"step": step, "kl_ctl": kl_ctl})
    zero3 = cfg.zero_stage == 3
    # each rank's actor after the last update, before any save merges adapters (ZeRO-3's ranks hold shards)
    by_rank = None if zero3 else fingerprints_by_rank(m.actor.module)
    last = evaluate(m, m.eval_prompts, tokenizer, cfg, step) if m.eval_prompts else None  # before LoRA merges
    if m.ema is not None and run.rank == 0:  # first: saving a LoRA actor merges its adapters in place
        ema = copy.deepcopy(m.actor.module)
        with torch.no_grad():
            for p, e in zip(ema.parameters(), m.ema, strict=True):
                p.copy_(e.to(p.dtype))
        save_hf(None, ema, tokenizer, out / "actor_ema", 0, False, bool(cfg.actor_lora_rank))
        del ema
    save_hf(m.actor, m.actor.module, tokenizer, out / "actor", run.rank, zero3, bool(cfg.actor_lora_rank))
    save_hf(m.critic, m.critic.module.model, tokenizer, out / "critic", run.rank, zero3, bool(cfg.critic_lora_rank))
    rows = [r for r in read_metrics(out) if "reward/score_mean" in r]
    final = {k: rows[-1][k] for k in ("reward/score_mean", "reward/kl", "policy/approx_kl")} if rows else {}
    if m.ref_fingerprint:
        final["reference/sha256_start"] = m.ref_fingerprint
        final["reference/sha256_end"] = param_fingerprint(m.ref)
    if by_rank:
        final["actor/sha256_by_rank"] = by_rank
    final.update(judge_last(run, cfg, step, watch, last))
    final.update(peak_memory())
    final.update(model_memory(m))
    run.metrics({"event": "final", "step": step, **final})
    run.status("finished", step=step, total_steps=total, final=final, **alarm_field(watch.reason))


def model_memory(m: Models) -> dict:
    """This rank's MB per model (its share under ZeRO-3): each model's weights, and the actor's and critic's
    optimizer (fp32 masters and AdamW's moments). Gradients and activations live within a step and show only in
    the peak."""
    return {
        "memory/actor_mb": tensors_mb(m.actor.module.parameters()),
        "memory/actor_optimizer_mb": optimizer_mb(m.actor),
        "memory/reference_mb": tensors_mb(m.ref.parameters()),
        "memory/critic_mb": tensors_mb(m.critic.module.parameters()),
        "memory/critic_optimizer_mb": optimizer_mb(m.critic),
        "memory/reward_mb": tensors_mb(p for j in m.judges.models for p in j.parameters()),
    }


def main(argv: list[str] | None = None) -> None:
    run_main(PPOConfig, train, __doc__, argv)


if __name__ == "__main__":
    main()
