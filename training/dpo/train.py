"""DPO training, one DeepSpeed process per rank:

    deepspeed --num_accelerators N --module training.dpo.train --config RUN/config.json

Reads the pairs from files (never the database), computes the frozen reference's log-probability of every distinct
sequence once (then frees the reference), trains the policy with the DPO (or IPO) loss on the response tokens,
evaluates the implicit reward's accuracy on held-out prompts, checkpoints, resumes, and saves the policy as a plain
HF folder in RUN/policy."""

from __future__ import annotations

import torch

from training.dpo.config import DPOConfig
from training.dpo.losses import dpo_loss, implicit_rewards, ipo_loss, preference_logits
from training.engine import run_main
from training.pairwise import prefix
from training.pairwise.pairs import PairEncoder, batches, load_pairs, rank_batches, step_plan
from training.pairwise.reference import (
    head_position,
    heldout_terms,
    policy_engine,
    policy_run,
    reference_logprobs,
    response_logprobs,
    shared_logprobs,
    train_policy,
)
from training.pairwise.sequences import collate, key_groups, shared_rows


def pair_terms(engine, raw, pad: int, ref: dict, cfg: DPOConfig, device, head: int) -> tuple[torch.Tensor, dict]:
    """The batch's loss and its per-pair quantities: one policy forward over the distinct sequences."""
    ids, attention, response, ci, ri, keys = collate(raw, pad)
    shared = prefix.agree(shared_rows(raw, keys, pad), device) if prefix.enabled(cfg) else None
    if shared is not None:
        logp, count = shared_logprobs(engine, shared, keys, device)
    else:
        logp, count = response_logprobs(engine, ids.to(device), attention.to(device), response.to(device), head)
    ref_logp = torch.tensor([ref[k][0] for k in keys], device=device)
    if cfg.loss == "ipo":  # IPO on per-token averages, as TRL computes it
        logp, ref_logp = logp / count.clamp(min=1), ref_logp / count.clamp(min=1)
    pi_c, pi_r, ref_c, ref_r = logp[ci], logp[ri], ref_logp[ci], ref_logp[ri]
    h = preference_logits(pi_c, pi_r, ref_c, ref_r)
    loss = ipo_loss(h, cfg.beta) if cfg.loss == "ipo" else dpo_loss(h, cfg.beta, cfg.label_smoothing)
    chosen, rejected = implicit_rewards(pi_c, pi_r, ref_c, ref_r, cfg.beta)
    terms = {"chosen": chosen, "rejected": rejected, "logp_c": pi_c.detach(), "logp_r": pi_r.detach()}
    return loss, terms


def summary(loss: float, terms: list[dict], prefix: str) -> dict:
    """Metrics of a set of pairs: the loss, the implicit reward's accuracy and margin, the log-probs."""
    cat = {k: torch.cat([t[k].float().cpu() for t in terms]) for k in terms[0]}
    margin = cat["chosen"] - cat["rejected"]
    return {
        f"{prefix}loss": loss,
        f"{prefix}accuracy": (margin > 0).float().mean().item(),
        f"{prefix}reward_margin": margin.mean().item(),
        f"{prefix}chosen_reward": cat["chosen"].mean().item(),
        f"{prefix}rejected_reward": cat["rejected"].mean().item(),
        f"{prefix}logps_chosen": cat["logp_c"].mean().item(),
        f"{prefix}logps_rejected": cat["logp_r"].mean().item(),
    }


def evaluate(engine, eval_batches, pad, ref, cfg, rank, world, device, head) -> dict:
    """The held-out pairs' loss, accuracy and margins (training/pairwise/reference.py::heldout_terms: all ranks get
    all)."""
    terms, loss, n = heldout_terms(
        engine, eval_batches, rank, world, lambda batch, spare: pair_terms(engine, batch, pad, ref, cfg, device, head)
    )
    ev = summary(loss, terms, "eval/")
    ev["eval/dpo_accuracy"] = ev.pop("eval/accuracy")
    ev["eval/pairs"] = n
    return ev


def train(cfg: DPOConfig) -> None:
    # 1. ranks, seeds, the pairs tokenised as every trainer presents them
    rank, world, run, tokenizer, pad = policy_run(cfg)
    train_rows, eval_rows = load_pairs(cfg.data)
    enc = PairEncoder(tokenizer, cfg.max_length)
    train_pairs, eval_pairs = [enc.pair(r, 0.0) for r in train_rows], [enc.pair(r, 0.0) for r in eval_rows]
    eval_batches = batches(eval_pairs, cfg.batch_pairs, cfg.seed, -1, False)
    per_epoch, total = step_plan(cfg, train_pairs, world)
    # 2. the reference's log-probs, once per distinct sequence; then the policy on DeepSpeed
    groups = key_groups(train_pairs + eval_pairs)
    head = head_position(list(groups))
    ref = reference_logprobs(cfg, groups, pad, rank, world, head)
    engine, sched = policy_engine(cfg, total)
    device = engine.device
    run.metrics(
        {
            "event": "start",
            "train_pairs": len(train_pairs),
            "eval_pairs": len(eval_pairs),
            "truncated_pairs": sum(p.truncated for p in train_pairs + eval_pairs),
            "sequences": len(ref),
            "world_size": world,
            "total_steps": total,
        }
    )

    # 3. the updates: the DPO (or IPO) loss on each batch's distinct sequences, each through the policy once
    def mine(epoch: int) -> list:
        return rank_batches(cfg, train_pairs, epoch, rank, world, per_epoch)

    def step_row(window, seconds):
        row = summary(sum(w[0] for w in window) / len(window), [w[1] for w in window], "dpo/")
        row["loss/dpo"] = row.pop("dpo/loss")
        row["perf/pairs_per_s"] = world * sum(w[2] for w in window) / max(seconds, 1e-9)
        return {**row, "lr": sched.get_last_lr()[0]}

    def heldout() -> dict:
        return evaluate(engine, eval_batches, pad, ref, cfg, rank, world, device, head)

    micro_step = lambda raw: pair_terms(engine, raw, pad, ref, cfg, device, head)  # noqa: E731
    # 4. then the final evaluation and the policy as a plain HF folder
    train_policy(engine, run, cfg, total, (mine, micro_step, step_row), heldout, bool(eval_batches), tokenizer, rank)


def main(argv: list[str] | None = None) -> None:
    run_main(DPOConfig, train, __doc__, argv)


if __name__ == "__main__":
    main()
