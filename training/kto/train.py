"""KTO training, one DeepSpeed process per rank:

    deepspeed --num_accelerators N --module training.kto.train --config RUN/config.json

Reads unpaired rows from a snapshot (never the database; a pairs snapshot through the one conversion,
training/pairwise/data_types.py), scores every sequence and its KL partner once under the frozen reference (the shared
machinery of training/pairwise/reference.py, then frees it), trains the policy with KTO's loss, evaluates how well the
implicit reward orders held-out thumbs up above thumbs down, checkpoints, resumes, and saves the policy as a plain
HF folder in RUN/policy."""

from __future__ import annotations

import torch

from training.engine import run_main
from training.kto.config import KTOConfig
from training.kto.data import distinct, encode_rows, key_groups
from training.kto.losses import kl_reference_point, kto_loss, ranking_accuracy
from training.pairwise import prefix
from training.pairwise.data_types import load_unpaired
from training.pairwise.pairs import PairEncoder, batches, rank_batches, step_plan
from training.pairwise.reference import (
    head_position,
    heldout_terms,
    key_logprobs,
    policy_engine,
    policy_run,
    reference_logprobs,
    train_policy,
)


def batch_terms(engine, batch, pad: int, ref: dict, cfg: KTOConfig, device, head: int, spare=False):
    """The batch's loss and per-row quantities: one policy forward (with gradients) over its distinct sequences,
    one without over its KL partners; z0 is the partners' mean log-ratio over every rank's batch (a spare batch,
    which only keeps ranks in step, adds nothing to it)."""
    share = prefix.enabled(cfg)
    keys, at = distinct([r.key for r in batch])
    groups = {r.key: r.group for r in batch}
    logp, _ = key_logprobs(engine, keys, [groups[k] for k in keys], pad, share, head, device, in_step=True)
    kl_keys, kl_at = distinct([r.kl for r in batch])
    kl_groups = {r.kl: ("kl", r.group) for r in batch}
    with torch.no_grad():
        kl_logp, _ = key_logprobs(engine, kl_keys, [kl_groups[k] for k in kl_keys], pad, share, head, device, True)
    ref_logp = torch.tensor([ref[k][0] for k in keys], device=device)
    ref_kl = torch.tensor([ref[k][0] for k in kl_keys], device=device)
    logratio = (logp - ref_logp)[at]
    kl_ratio = (kl_logp.detach().float() - ref_kl)[kl_at]
    total = torch.stack([kl_ratio.sum(), torch.tensor(float(len(batch)), device=device)]) * (0.0 if spare else 1.0)
    if torch.distributed.is_initialized():
        torch.distributed.all_reduce(total)
    z0 = kl_reference_point(total[0], total[1])
    desirable = torch.tensor([r.desirable for r in batch], device=device)
    loss = kto_loss(logratio, desirable, z0, cfg.beta, cfg.desirable_weight, cfg.undesirable_weight)
    return loss, {"reward": (cfg.beta * logratio).detach(), "desirable": desirable, "z0": z0.reshape(1)}


def summary(loss: float, terms: list[dict], prefix_: str) -> dict:
    """Metrics of a set of rows: the loss, how well the implicit reward orders thumbs up above thumbs down, the mean
    rewards of each side and the KL reference point."""
    cat = {k: torch.cat([t[k].float().cpu() for t in terms]) for k in terms[0]}
    up = cat["desirable"].bool()
    reward = cat["reward"]
    mean = lambda x: x.mean().item() if len(x) else float("nan")  # noqa: E731
    return {
        f"{prefix_}loss": loss,
        f"{prefix_}accuracy": ranking_accuracy(reward, up),
        f"{prefix_}rewards_desirable": mean(reward[up]),
        f"{prefix_}rewards_undesirable": mean(reward[~up]),
        f"{prefix_}margin": mean(reward[up]) - mean(reward[~up]),
        f"{prefix_}kl": cat["z0"].mean().item(),
    }


def evaluate(engine, eval_batches, pad, ref, cfg, rank, world, device, head) -> dict:
    """The held-out rows' loss and accuracy (training/pairwise/reference.py::heldout_terms: all ranks get all)."""
    terms, loss, n = heldout_terms(
        engine,
        eval_batches,
        rank,
        world,
        lambda batch, spare: batch_terms(engine, batch, pad, ref, cfg, device, head, spare=spare),
    )
    ev = summary(loss, terms, "eval/")
    ev["eval/kto_accuracy"] = ev.pop("eval/accuracy")
    ev["eval/rows"] = n
    return ev


def train(cfg: KTOConfig) -> None:
    # 1. ranks, seeds, the rows tokenised as every trainer presents them, each with its KL partner
    rank, world, run, tokenizer, pad = policy_run(cfg)
    train_rows, eval_rows = load_unpaired(cfg.data)
    enc = PairEncoder(tokenizer, cfg.max_length)
    train_items, eval_items = encode_rows(enc, train_rows, cfg.seed), encode_rows(enc, eval_rows, cfg.seed)
    eval_batches = batches(eval_items, cfg.batch_pairs, cfg.seed, -1, False)
    per_epoch, total = step_plan(cfg, train_items, world)
    # 2. the reference's log-probs of every sequence and partner, once; then the policy on DeepSpeed
    groups = key_groups(train_items + eval_items)
    head = head_position(list(groups))
    ref = reference_logprobs(cfg, groups, pad, rank, world, head)
    engine, sched = policy_engine(cfg, total)
    device = engine.device
    run.metrics(
        {
            "event": "start",
            "train_rows": len(train_items),
            "eval_rows": len(eval_items),
            "desirable_rows": sum(r.desirable for r in train_items),
            "truncated_rows": sum(r.truncated for r in train_items + eval_items),
            "sequences": len(ref),
            "world_size": world,
            "total_steps": total,
        }
    )

    # 3. the updates: KTO's loss on each batch
    def mine(epoch: int) -> list:
        return rank_batches(cfg, train_items, epoch, rank, world, per_epoch)

    def step_row(window, seconds):
        row = summary(sum(w[0] for w in window) / len(window), [w[1] for w in window], "kto/")
        row["loss/kto"] = row.pop("kto/loss")
        row["perf/rows_per_s"] = world * sum(w[2] for w in window) / max(seconds, 1e-9)
        return {**row, "lr": sched.get_last_lr()[0]}

    def heldout() -> dict:
        return evaluate(engine, eval_batches, pad, ref, cfg, rank, world, device, head)

    micro_step = lambda raw: batch_terms(engine, raw, pad, ref, cfg, device, head)  # noqa: E731
    # 4. then the final evaluation and the policy as a plain HF folder
    train_policy(engine, run, cfg, total, (mine, micro_step, step_row), heldout, bool(eval_batches), tokenizer, rank)


def main(argv: list[str] | None = None) -> None:
    run_main(KTOConfig, train, __doc__, argv)


if __name__ == "__main__":
    main()
