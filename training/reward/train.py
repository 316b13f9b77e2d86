"""Reward-model training, one DeepSpeed process per rank:

    deepspeed --num_accelerators N --module training.reward.train --config RUN/config.json

Reads the pairs from files (never the database), trains AutoModelForSequenceClassification(num_labels=1) with the
Bradley-Terry loss, evaluates on held-out prompts, checkpoints, resumes, and saves a plain HF folder to RUN/model."""

from __future__ import annotations

import json
import math
import random
from dataclasses import replace
from pathlib import Path

import torch

from training.engine import finish_pairs, initialize, pair_loop, run_main, setup_distributed
from training.models import add_lora, resolve_model
from training.pairwise import prefix
from training.pairwise.pairs import load_pairs, rank_batches, step_plan
from training.reward.config import RewardConfig
from training.reward.data import PairEncoder, batches, collate, shared_rows
from training.reward.ensemble import half_of, train_ensemble
from training.reward.losses import accuracy_by_strength, pair_accuracy, pairwise_loss
from training.reward.model import load_reward_model, scores
from training.runs import RunFiles


def forward_scores(engine, batch, device, shared=None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """All distinct sequences of the batch in one forward pass (two with `shared`: the prompts once, then each
    response on its prompt's cache): (chosen (B,), rejected (B,), margin (B,))."""
    ids, mask, chosen, rejected, margin = batch
    if shared is not None:
        s = prefix.forward(engine, shared, device).logits[:, 0].float()
    else:
        s = scores(engine, ids.to(device), mask.to(device))  # (U,)
    return s[chosen.to(device)], s[rejected.to(device)], margin.to(device)


def evaluate(engine, eval_batches, rank, world, device) -> dict:
    """Every rank scores its share in lockstep (ZeRO-3 gathers weights collectively); rank 0 gets all scores."""
    mine = eval_batches[rank::world]
    rounds = math.ceil(len(eval_batches) / world)
    chosen, rejected, strengths = [], [], []
    engine.eval()
    with torch.no_grad():
        for i in range(rounds):
            batch, levels = mine[i] if i < len(mine) else eval_batches[0]  # a spare forward keeps ranks in step
            c, r, _ = forward_scores(engine, batch, device)
            if i < len(mine):
                chosen += c.tolist()
                rejected += r.tolist()
                strengths += levels
    engine.train()
    gathered = [None] * world
    torch.distributed.all_gather_object(gathered, (chosen, rejected, strengths))
    c = torch.tensor([x for g in gathered for x in g[0]])
    r = torch.tensor([x for g in gathered for x in g[1]])
    levels = [x for g in gathered for x in g[2]]
    both = torch.cat([c, r])
    by_strength = {
        f"eval/rm_accuracy_strength_{s}": acc
        for s, (acc, _) in accuracy_by_strength(c.tolist(), r.tolist(), levels).items()
    }
    return {
        "eval/loss": pairwise_loss(c, r).item(),
        "eval/rm_accuracy": pair_accuracy(c, r).item(),
        **by_strength,
        "eval/margin_mean": (c - r).mean().item(),
        "eval/score_mean": both.mean().item(),
        "eval/score_std": both.std().item(),
        "eval/pairs": len(c),
        "_scores": {"chosen": c.tolist(), "rejected": r.tolist()},
    }


def histogram(chosen: list[float], rejected: list[float], bins: int = 20) -> dict:
    """Counts of held-out chosen and rejected scores over shared bins (what the app plots)."""
    both = torch.tensor(chosen + rejected)
    lo, hi = both.min().item(), both.max().item()
    if hi == lo:
        hi = lo + 1.0
    count = lambda xs: torch.histc(torch.tensor(xs), bins=bins, min=lo, max=hi).int().tolist()  # noqa: E731
    return {"edges": torch.linspace(lo, hi, bins + 1).tolist(), "chosen": count(chosen), "rejected": count(rejected)}


def load_model(cfg: RewardConfig):
    """(model, tokenizer): the SFT base with a new score head, seeded (seed + member) so it starts the same on
    every rank and every resume; gradient checkpointing and LoRA as configured."""
    torch.manual_seed(cfg.seed + cfg.member)
    model, tokenizer = load_reward_model(resolve_model(cfg.model), training=True)
    if cfg.gradient_checkpointing:
        model.gradient_checkpointing_enable()
    if cfg.lora_rank:
        model = add_lora(model, cfg.lora_rank, cfg.lora_alpha)
    return model, tokenizer


def train(cfg: RewardConfig) -> None:
    """One reward model, or an ensemble's members one after the other (training/reward/ensemble.py)."""
    rank, _ = setup_distributed()
    if cfg.ensemble > 1:
        train_ensemble(cfg, train_one, rank)
    else:
        train_one(cfg)


def train_one(cfg: RewardConfig) -> None:
    # 1. ranks, seeds, the model, the pairs tokenised as every trainer presents them
    rank, world = setup_distributed()
    run = RunFiles(cfg.output_dir, rank)
    run.status("running", step=0)
    random.seed(cfg.seed + cfg.member)
    model, tokenizer = load_model(cfg)
    enc = PairEncoder(tokenizer, cfg.max_length)
    train_rows, eval_rows = load_pairs(cfg.data)  # one held-out split for all members
    if cfg.ensemble > 1:
        train_rows = half_of(train_rows, cfg.member % 2)
    train_pairs = [enc.pair(r, cfg.margin_scale, cfg.margin_from) for r in train_rows]
    eval_pairs = [enc.pair(r, 0.0) for r in eval_rows]
    pad = tokenizer.pad_token_id
    raw_eval = batches(eval_pairs, cfg.batch_pairs, cfg.seed, -1, False)
    eval_batches = [(collate(b, pad), [p.strength for p in b]) for b in raw_eval]
    per_epoch, total = step_plan(cfg, train_pairs, world)
    # 2. the reward model on DeepSpeed
    engine, sched = initialize(cfg, model, total)
    device = engine.device
    run.metrics(
        {
            "event": "start",
            "train_pairs": len(train_pairs),
            "eval_pairs": len(eval_pairs),
            "truncated_pairs": sum(p.truncated for p in train_pairs + eval_pairs),
            "world_size": world,
            "total_steps": total,
        }
    )

    # 3. the updates: the Bradley-Terry loss on each batch's distinct sequences, each scored once
    order = replace(cfg, seed=cfg.seed + cfg.member)  # each ensemble member its own data order

    def mine(epoch: int) -> list:
        return rank_batches(order, train_pairs, epoch, rank, world, per_epoch)

    def micro_step(raw):
        shared = prefix.agree(shared_rows(raw, pad), device) if prefix.enabled(cfg) else None
        c, r, margin = forward_scores(engine, collate(raw, pad), device, shared)
        loss = pairwise_loss(c, r, margin if cfg.margin_scale else None, cfg.center_coef)
        return loss, pair_accuracy(c, r).item()

    def step_row(window, seconds):
        return {
            "loss/rm": sum(w[0] for w in window) / len(window),
            "rm/train_accuracy": sum(w[1] for w in window) / len(window),
            "lr": sched.get_last_lr()[0],
            "perf/pairs_per_s": world * sum(w[2] for w in window) / max(seconds, 1e-9),
        }

    def heldout() -> dict:
        ev = evaluate(engine, eval_batches, rank, world, device)
        ev.pop("_scores")
        return ev

    micro = pair_loop(engine, run, cfg, total, mine, micro_step, step_row, heldout if eval_batches else None)
    if micro is not None:  # None: a Stop ended it, checkpointed
        # 4. the final evaluation, the model as a plain HF folder, its score statistics for PPO
        finish(engine, tokenizer, cfg, run, eval_batches, micro, total, (rank, world, device))


def finish(engine, tokenizer, cfg, run, eval_batches, micro, total, where) -> None:
    rank, world, device = where
    final, stats, hist = {}, {}, None
    if eval_batches:
        ev = evaluate(engine, eval_batches, rank, world, device)
        hist = ev.pop("_scores")
        final.update(ev)
        stats = {"score_mean": ev["eval/score_mean"], "score_std": ev["eval/score_std"]}
    out = finish_pairs(engine, run, cfg, micro, final, tokenizer, "model", rank)
    if rank == 0:
        if hist is not None:
            hist["histogram"] = histogram(hist["chosen"], hist["rejected"])
            (Path(cfg.output_dir) / "eval_scores.json").write_text(json.dumps(hist) + "\n")
        (out / "reward_stats.json").write_text(json.dumps(stats, indent=2) + "\n")
    kept = {k: v for k, v in final.items() if k.startswith("eval/")}
    run.status("finished", step=engine.global_steps, total_steps=total, final=kept)


def main(argv: list[str] | None = None) -> None:
    run_main(RewardConfig, train, __doc__, argv)


if __name__ == "__main__":
    main()
