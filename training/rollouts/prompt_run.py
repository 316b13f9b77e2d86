"""The loop around a trainer on prompts, shared by PPO and the critic-free trainers: the reward model's statistics,
the rollout seeds, the step's watch numbers and logging, the over-optimisation watch (training/watch.py) fed by the
steps and by the checkpoint evaluations (training/rollouts/checkpoints.py), Stop, and the best checkpoint kept.

`m`, a trainer's models, provides: `actor` (a DeepSpeed engine), `ref`, `judges` (training/judges.py), `synced`,
`generator()`, `engine()` (the vLLM engine with the actor's current weights, or None:
training/sampling/rollout_engine.py), `tokenizer`, `eval_prompts` (held-out prompts, tokenised; empty: no evaluation)
and `save(folder, step, state)`, which checkpoints everything the trainer trains (its `load` is its own)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch

from training.engine import ds_config, save_hf
from training.judges import Judges, held_stats, judge_folders
from training.kernels.linear import onednn_linears
from training.loaders import load_causal_lm, load_scalar_model
from training.models import add_lora, reward_folder, training_attention
from training.rollouts.checkpoints import (
    CHECKPOINTS_FILE,
    best_checkpoint,
    checkpoint_folder,
    evaluate,
    read_checkpoints,
)
from training.rollouts.prompt_data import encode_prompts, read_prompts
from training.rollouts.prompts_config import PromptsConfig
from training.rollouts.rollout import Experience
from training.runs import RunFiles, link_tree, read_metrics, request_stop, stop_requested
from training.watch import Watch, pearson


def reward_stats(cfg: PromptsConfig) -> tuple[float, float]:
    """(mean, std) of the reward model's held-out scores, for --normalize-reward (else (0, 1))."""
    if not cfg.normalize_reward:
        return 0.0, 1.0
    path = reward_folder(cfg.reward) / "reward_stats.json"
    if not path.is_file():
        raise ValueError(f"--normalize-reward needs {path} (written by rlhf train-rm)")
    stats = json.loads(path.read_text())
    return float(stats["score_mean"]), max(float(stats["score_std"]), 1e-6)


def watch_stats(buffer: list[Experience]) -> dict:
    """The watch's per-step numbers (training/watch.py): the length-score correlation within the batch, the
    reference's per-token log-likelihood of the actor's samples, and the held-out judges' mean score."""
    lengths = torch.cat([e.lengths.float() for e in buffer])
    row = {
        "watch/length_score_corr": pearson(lengths.cpu(), torch.cat([e.raw_scores for e in buffer]).cpu()),
        "watch/ref_logprob_mean": (
            sum((e.ref_logprobs * e.mask).sum() for e in buffer) / sum(e.mask.sum() for e in buffer)
        ).item(),
    }
    if buffer[0].heldout_scores is not None:
        row["watch/heldout_score_mean"] = torch.cat([e.heldout_scores for e in buffer]).mean().item()
    return row


def mean_across_ranks(row: dict, device) -> dict:
    keys = sorted(row)
    t = torch.tensor([float(row[k]) for k in keys], dtype=torch.float64, device=device)  # NCCL needs GPU tensors
    torch.distributed.all_reduce(t)
    return {k: v / torch.distributed.get_world_size() for k, v in zip(keys, t.tolist(), strict=True)}


def log_samples(run: RunFiles, step: int, exp: Experience, tokenizer, n: int = 2) -> None:
    if run.rank != 0:
        return
    rows = []
    for i in range(min(n, len(exp))):
        prompt = exp.ids[i, : exp.prompt_len][exp.attention_mask[i, : exp.prompt_len].bool()]
        response = exp.ids[i, exp.prompt_len : exp.prompt_len + int(exp.lengths[i])]
        rows.append(
            {
                "step": step,
                "prompt": tokenizer.decode(prompt, skip_special_tokens=True),
                "response": tokenizer.decode(response, skip_special_tokens=True),
                "score": round(exp.raw_scores[i].item(), 4),
                "ended": bool(exp.ended[i]),
            }
        )
    with (run.folder / "samples.jsonl").open("a") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)


def tensorboard_writer(cfg: PromptsConfig, rank: int):
    """A SummaryWriter on rank 0 with --tensorboard (events in RUN/tensorboard), else None."""
    if not cfg.tensorboard or rank != 0:
        return None
    from torch.utils.tensorboard import SummaryWriter

    return SummaryWriter(str(Path(cfg.output_dir) / "tensorboard"))


def seed_rollout(cfg: PromptsConfig, step: int, batch: int, rank: int) -> None:
    """Sampling depends on (seed, step, batch, rank) only, so a resumed run samples what the first one would."""
    torch.manual_seed(((cfg.seed * 1_000_003 + step) * 1009 + batch) * 131 + rank)


def planned_evaluations(cfg: PromptsConfig, total: int) -> int:
    """Checkpoint evaluations a run of `total` steps makes: every save_every steps before the end, and the end."""
    return (total - 1) // cfg.save_every + 1 if cfg.save_every and total else 1


def new_watch(cfg: PromptsConfig, total: int) -> Watch:
    return Watch(
        alpha=cfg.watch_alpha,
        evaluations=planned_evaluations(cfg, total),
        tolerance=cfg.watch_tolerance,
        kl_budget=cfg.kl_budget or None,
    )


def watch_step(watch: Watch, step: int, row: dict) -> str | None:
    """Feed the step's row (the same on every rank: it is averaged across them); the alarm's reason the step it
    fires. Adds watch/alarm (1 once fired)."""
    fired = watch.update(step, row["reward/score_mean"], row.get("watch/heldout_score_mean"), row["reward/kl"])
    row["watch/alarm"] = float(watch.reason is not None)
    return fired


def watch_checkpoint(watch: Watch, row: dict) -> str | None:
    """Feed a checkpoint evaluation (training/rollouts/checkpoints.py's row); the alarm's reason if it fires now.
    Without a held-out judge there is nothing to compare."""
    if "heldout_scores" not in row:
        return None
    return watch.evaluated(row["step"], row["scores"], row["heldout_scores"])


def resume_watch(cfg: PromptsConfig, step: int, total: int) -> Watch:
    """The watch as it was after `step`: the logged rows of steps 1..step and the checkpoint evaluations up to it
    replayed in step order (a step logged twice, by a run killed after it and the resumed one, counts once:
    resumed steps repeat the same numbers)."""
    watch = new_watch(cfg, total)
    rows = {r["step"]: r for r in read_metrics(cfg.output_dir) if "reward/score_mean" in r and r["step"] <= step}
    evaluations = {r["step"]: r for r in read_checkpoints(cfg.output_dir) if r["step"] <= step}
    for s in sorted(rows.keys() | evaluations.keys()):
        if s in rows:
            watch_step(watch, s, dict(rows[s]))
        if s in evaluations:
            watch_checkpoint(watch, evaluations[s])
    return watch


def on_alarm(run: RunFiles, cfg: PromptsConfig, step: int, reason: str) -> None:
    """Say so in the metrics (the CLI prints it, the Train tab shows it); stop, resumable, if asked to."""
    run.metrics({"event": "alarm", "step": step, "reason": reason, "stopping": cfg.stop_on_overoptimization})
    if cfg.stop_on_overoptimization and run.rank == 0:
        request_stop(cfg.output_dir)


def log_step(
    run: RunFiles, board, cfg: PromptsConfig, step: int, epoch: int, row: dict, buffer, tokenizer, total, alarm=None
) -> None:
    run.metrics({"step": step, "epoch": epoch, **row})
    if board:
        for key, value in row.items():
            board.add_scalar(key, value, step)
    if cfg.sample_every and step % cfg.sample_every == 0:
        log_samples(run, step, buffer[0], tokenizer)
    run.status("running", step=step, total_steps=total, **alarm_field(alarm))


def alarm_field(alarm: str | None) -> dict:
    return {"alarm": alarm} if alarm else {}


def checkpoint_due(cfg: PromptsConfig, step: int, total: int) -> bool:
    """Every save_every steps before the last (the last one's is `finish`'s)."""
    return bool(cfg.save_every) and step % cfg.save_every == 0 and step < total


def judge_checkpoint(m, cfg: PromptsConfig, run: RunFiles, step: int, kl_ctl: float, watch: Watch) -> str | None:
    """Checkpoint, evaluate on the held-out prompts and feed the watch; the alarm's reason if it fires here (every
    rank decides alike: they evaluate the same prompts)."""
    m.save(Path(cfg.output_dir) / "checkpoints", step, {"step": step, "kl_ctl": kl_ctl})
    row = evaluate_checkpoint(m, cfg, run, step)
    return watch_checkpoint(watch, row) if row else None


def step_end(
    m, cfg: PromptsConfig, run: RunFiles, step: int, total: int, kl_ctl: float, alarm=None, saved=False
) -> bool:
    """A Stop (the app's, `rlhf`'s, or the alarm's with --stop-on-overoptimization) checkpoints, unless this step
    was just saved, and ends the run (False)."""
    if step < total and stop_requested(cfg.output_dir, m.device):
        if not saved:
            m.save(Path(cfg.output_dir) / "checkpoints", step, {"step": step, "kl_ctl": kl_ctl})
        run.metrics({"event": "stopped", "step": step})
        run.status("stopped", step=step, total_steps=total, **alarm_field(alarm))
        return False
    return True


def evaluate_checkpoint(m, cfg: PromptsConfig, run: RunFiles, step: int) -> dict | None:
    """The actor on the held-out prompts (training/rollouts/checkpoints.py), saved as RUN/checkpoints/actor-stepN; the
    evaluation's row (None without held-out prompts)."""
    if not m.eval_prompts:
        return None
    row = evaluate(m, m.eval_prompts, m.tokenizer, cfg, step)
    row["actor"] = str(checkpoint_folder(cfg.output_dir, step))
    lora = bool(cfg.actor_lora_rank)
    save_hf(m.actor, m.actor.module, m.tokenizer, Path(row["actor"]), run.rank, cfg.zero_stage == 3, lora, keep=True)
    record_checkpoint(run, cfg, row)
    return row


def record_checkpoint(run: RunFiles, cfg: PromptsConfig, row: dict) -> None:
    """A row in RUN/checkpoints.jsonl and a `checkpoint` metrics line (the Train tab plots it)."""
    if run.rank == 0:
        with (Path(cfg.output_dir) / CHECKPOINTS_FILE).open("a") as f:
            f.write(json.dumps(row) + "\n")
    means = {f"checkpoint/{k}": v for k, v in row.items() if k != "step" and not isinstance(v, list)}
    run.metrics({"event": "checkpoint", "step": row["step"], **means})  # the per-prompt lists stay in the file


def keep_best(run: RunFiles, cfg: PromptsConfig, last: dict) -> dict:
    """The best evaluated checkpoint, the last one included; with --keep-best it becomes RUN/actor (the last one
    moves to RUN/actor_last). Returns the final metrics' best/... keys."""
    out = Path(cfg.output_dir)
    last["actor"] = str(out / "actor")
    best = best_checkpoint([r for r in read_checkpoints(out) if r["step"] < last["step"]] + [last])
    if cfg.keep_best and best["step"] != last["step"]:
        last["actor"] = str(out / "actor_last")
        if run.rank == 0:
            (out / "actor").rename(out / "actor_last")
            link_tree(Path(best["actor"]), out / "actor")
    record_checkpoint(run, cfg, last)
    return {f"best/{k}": v for k, v in best.items() if k != "actor"}


def after_step(m, cfg: PromptsConfig, run: RunFiles, board, watch: Watch, at: dict, row: dict, buffer) -> bool:
    """The end of a training step, the same for every trainer on prompts: feed the watch; every save_every steps
    checkpoint and judge on the held-out prompts (the watch's evidence); log; say so if the alarm fired; a Stop
    from the app or `rlhf` (or the alarm's) checkpoints and ends the run, resumable. `at`: step, epoch, total and
    the kl_ctl to checkpoint. False when the run ends here."""
    step, total, kl_ctl = at["step"], at["total"], at["kl_ctl"]
    fired = watch_step(watch, step, row)
    saved = checkpoint_due(cfg, step, total)
    if saved:
        fired = judge_checkpoint(m, cfg, run, step, kl_ctl, watch) or fired
        row["watch/alarm"] = float(watch.reason is not None)
    log_step(run, board, cfg, step, at["epoch"], row, buffer, m.tokenizer, total, watch.reason)
    if fired:
        on_alarm(run, cfg, step, fired)
    return step_end(m, cfg, run, step, total, kl_ctl, watch.reason, saved)


def judge_last(run: RunFiles, cfg: PromptsConfig, step: int, watch: Watch, last: dict | None) -> dict:
    """The final evaluation fed to the watch (the run ends here anyway) and the best checkpoint kept; the final
    metrics' best/... keys ({} without held-out prompts)."""
    if last is None:
        return {}
    fired = watch_checkpoint(watch, last)
    if fired:
        on_alarm(run, cfg, step, fired)
    return keep_best(run, cfg, last)


def load_policy_models(cfg: PromptsConfig):
    """The actor (gradient checkpointing and LoRA as `cfg` says), its reference and the reward models, loaded with
    the trainers' attention and, in fp32 on a CPU, oneDNN's linear layers (training/kernels/linear.py). Returns
    (actor, ref, judges, the judges' folders)."""
    kernel = training_attention()  # on a CPU training/kernels/attention.py's: faster and leaner than SDPA there
    actor = load_causal_lm(cfg.actor, cfg.dtype, kernel)
    ref = load_causal_lm(cfg.reference or cfg.actor, cfg.dtype, kernel)
    folders = judge_folders(cfg.reward)
    judges = [load_scalar_model(str(f), cfg.dtype, kernel) for f in folders]
    for model in (actor, ref, *judges):
        onednn_linears(model)
    if cfg.gradient_checkpointing:
        actor.gradient_checkpointing_enable()
    if cfg.actor_lora_rank:
        actor = add_lora(actor, cfg.actor_lora_rank, cfg.lora_alpha, causal=True)
    return actor, ref, judges, folders


# Why `auto` rolls out with the trainers' own decode on a CPU: a vLLM engine sharing the trainer's cores was slower
# there (bench/ppo.py, SmolLM2-135M, 2 cores, 2026-12-05, docs/benchmarks.md: 11.25 s a step against 10.37 at the
# default shape in bf16, 6.91 against 5.23 at the fixed one, 11.76 against 8.33 in fp32, with 0.4-0.8 s of weight
# sync). On a GPU `auto` takes vLLM; `--rollout-engine vllm` or RLHF_ENGINE=vllm asks for it anywhere.
CPU_ROLLOUTS = "on a CPU the trainers' own decode rolls out at least as fast as vLLM beside the trainer"


def rollout_engine(cfg: PromptsConfig, eos_id: int, clock=None):
    """(the vLLM engine the rollouts come from, or None for the trainers' own decode; the line that says which and
    why, for the run's start event). cfg.dtype is resolved by now. Under `auto` on a CPU: the own decode
    (CPU_ROLLOUTS)."""
    from training.models import resolve_model
    from training.sampling.vllm_engine import EngineError, open_engine

    def vllm(why):
        from training.sampling.rollout_engine import EngineRollouts

        max_len = cfg.max_prompt_length + cfg.max_new_tokens
        engine = EngineRollouts(folder, cfg.dtype, eos_id, max_len, cfg.seed, cfg.zero_stage == 3, clock)
        return engine, f"vllm ({why})"

    folder = resolve_model(cfg.actor)
    choice = cfg.rollout_engine
    if choice == "auto" and not os.environ.get("RLHF_ENGINE") and not torch.cuda.is_available():
        return None, f"hf (auto: {CPU_ROLLOUTS})"
    try:
        return open_engine(folder, choice, vllm, lambda why: (None, f"hf ({why})"))
    except EngineError as e:
        raise ValueError(str(e)) from None


def frozen_judges(cfg: PromptsConfig, judges: list, folders: list, device) -> Judges:
    """The reward models frozen beside the actor, with their held-out statistics and the combination rule."""
    heldout = cfg.heldout_judges if cfg.heldout_judges >= 0 else int(len(judges) > 1)
    stats = [held_stats(f) for f in folders]
    return Judges([frozen(j, cfg, cfg.minibatch_size, device) for j in judges], stats, heldout, cfg.reward_combine)


def frozen(model, cfg: PromptsConfig, micro_batch: int, device):
    """Eval mode, no gradients; partitioned with an inference-only ZeRO-3 engine when the actor is ZeRO-3."""
    model.requires_grad_(False)
    model.eval()
    if cfg.zero_stage == 3:
        import deepspeed

        config = ds_config(micro_batch, 1, 3, cfg.dtype)
        return deepspeed.initialize(model=model, config=config)[0].module
    return model.to(device)


def eval_prompts(cfg: PromptsConfig, tokenizer) -> list[list[int]]:
    """The held-out prompts the checkpoints are judged on, tokenised ([] when nothing evaluates checkpoints)."""
    if not cfg.eval_prompts or not (cfg.save_every or cfg.keep_best):
        return []
    return encode_prompts(tokenizer, read_prompts(cfg.eval_prompts)[: cfg.eval_limit], cfg.max_prompt_length)[0]


def evaluate_policy(policy: str, cfg: PromptsConfig) -> dict:
    """A saved policy (any trainer's, e.g. DPO's RUN/policy) judged as a run's checkpoints are (training/
    checkpoints.py::evaluate): `cfg`'s held-out prompts, reference, reward models and sampling settings, one reply a
    prompt with the same seeds; its sampled KL from that reference, scores and length. One process, no DeepSpeed."""
    from dataclasses import replace
    from types import SimpleNamespace

    from training.loaders import load_tokenizer
    from training.models import resolve_model

    cfg = replace(
        cfg,
        actor=policy,
        reference=cfg.reference or cfg.actor,
        actor_lora_rank=0,
        gradient_checkpointing=False,
        zero_stage=0,
    )
    actor, ref, judges, folders = load_policy_models(cfg)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    actor = frozen(actor, cfg, cfg.minibatch_size, device)
    m = SimpleNamespace(
        actor=actor,
        ref=frozen(ref, cfg, cfg.minibatch_size, device),
        judges=frozen_judges(cfg, judges, folders, device),
        synced=False,
        generator=lambda: actor,
        engine=lambda probe: None,  # the trainers' own decode: a policy judged once needs no engine
    )
    tokenizer = load_tokenizer(resolve_model(policy))
    prompts = eval_prompts(cfg, tokenizer)
    if not prompts:
        raise ValueError("no held-out prompts to judge the policy on: the run evaluates no checkpoints")
    return evaluate(m, prompts, tokenizer, cfg, step=0)
