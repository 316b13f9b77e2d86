"""DPO training, one DeepSpeed process per rank:

    deepspeed --num_accelerators N --module training.dpo.train --config RUN/config.json

Reads the pairs from files (never the database), computes the frozen reference's log-probability of every distinct
sequence once (then frees the reference), trains the policy with the DPO (or IPO) loss on the response tokens,
evaluates the implicit reward's accuracy on held-out prompts, checkpoints, resumes, and saves the policy as a plain
HF folder in RUN/policy."""

from __future__ import annotations

import math
import random

import torch

from training import prefix
from training.dpo.config import DPOConfig
from training.dpo.data import Key, chunk_response, collate, key_groups, shared_rows, shared_split
from training.dpo.losses import dpo_loss, implicit_rewards, ipo_loss, preference_logits, sequence_logprobs
from training.engine import finish_pairs, initialize, pair_loop, run_main, setup_distributed
from training.linear import onednn_linears
from training.models import (
    SAFE_LOAD,
    SAFE_WEIGHTS,
    add_lora,
    dropout_off,
    last_positions,
    resolve_model,
    training_attention,
)
from training.pairs import PairEncoder, batches, load_pairs, pack, rank_batches, step_plan
from training.runs import RunFiles

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def load_causal(ref: str, dtype: torch.dtype = torch.float32):
    from transformers import AutoModelForCausalLM

    # the reference and the policy both: the same kernel gives the same log-probs before the first update
    kernel = training_attention()
    model = AutoModelForCausalLM.from_pretrained(resolve_model(ref), dtype=dtype, **SAFE_WEIGHTS, **kernel)
    dropout_off(model)
    return onednn_linears(model)  # fp32 on a CPU: linear layers through oneDNN (training/linear.py)


def response_logprobs(model, ids, attention, response, head: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(sum (U,), token count (U,)) of the response tokens' log-probabilities under `model`. The LM head runs only
    from position `head` on (`logits_to_keep`; about a quarter of a step on 64 + 64 tokens): the prompt's positions
    need no vocabulary logits. `head` is one rule for the whole run (the shortest prompt's last position, see
    `head_position`), not per batch, so a sequence gets the same numbers in whichever batch it is scored."""
    head = min(head, ids.shape[1] - 1)
    keep = last_positions(ids.shape[1] - head, ids.shape[1], ids.device)
    logits = model(input_ids=ids, attention_mask=attention, logits_to_keep=keep).logits[:, :-1]
    return sequence_logprobs(logits, ids[:, head + 1 :], response[:, head:]), response.sum(-1)


def shared_logprobs(model, shared, keys: list, device) -> tuple[torch.Tensor, torch.Tensor]:
    """`response_logprobs` with the prompts run once (training/prefix.py): the prefix pass keeps one position's
    logits, the chunks (the prompt's last token and the response) keep all of theirs."""
    out = prefix.forward(model, shared, device, prefix_kwargs={"logits_to_keep": 1})
    response = chunk_response(keys, shared.offset.tolist(), shared.chunk_ids.shape[1]).to(device)
    labels = shared.chunk_ids[:, 1:].to(device)
    return sequence_logprobs(out.logits[:, :-1], labels, response), response.sum(-1)


def head_position(keys: list[Key]) -> int:
    """The first logits position that predicts a response token in any of the run's sequences."""
    return max(min(start for start, _ in keys) - 1, 0)


def reference_logprobs(cfg: DPOConfig, groups: dict, pad: int, rank: int, world: int, head: int) -> dict:
    """{sequence: (sum, count)} under the frozen reference, each sequence once: every rank scores its share of the
    rankings (`groups`: sequence -> ranking), all ranks get all of them. A ranking's sequences go through together,
    as in training, so with prefix sharing each is split where the policy's batches split it. The reference is freed
    afterwards (DPO never needs it again)."""
    model = load_causal(cfg.reference or cfg.model, DTYPES[cfg.dtype]).eval()
    device = next(model.parameters()).device
    units: dict = {}
    for key, g in groups.items():
        units.setdefault(g, []).append(key)
    out = {}
    with torch.no_grad():
        for chunk in pack(list(units.values())[rank::world], 2 * cfg.batch_pairs):
            sums, counts = reference_batch(model, chunk, groups, pad, cfg, head, device)
            out.update(zip(chunk, zip(sums, counts, strict=True), strict=True))
    del model
    gathered = [None] * world
    torch.distributed.all_gather_object(gathered, out)
    return {k: v for part in gathered for k, v in part.items()}


def reference_batch(model, chunk: list[Key], groups: dict, pad: int, cfg: DPOConfig, head: int, device):
    """(sums, counts) as lists for the sequences of `chunk` under the reference."""
    from training.pairs import Tokenised

    shared = shared_split(chunk, [groups[k] for k in chunk], pad) if prefix.enabled(cfg) else None
    if shared is not None:
        logp, count = shared_logprobs(model, shared, chunk, device)
    else:
        pairs = [Tokenised(list(s), list(s), 0.0, 0, False, start, start) for start, s in chunk]  # each with itself
        ids, attention, response, *_ = collate(pairs, pad)
        logp, count = response_logprobs(model, ids, attention, response, head)
    return logp.tolist(), count.tolist()


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
    """Every rank scores its share in lockstep (ZeRO-3 gathers weights collectively); all ranks get every pair."""
    mine, rounds = eval_batches[rank::world], math.ceil(len(eval_batches) / world)
    terms, losses = [], []
    engine.eval()
    with torch.no_grad():
        for i in range(rounds):
            batch = mine[i] if i < len(mine) else eval_batches[0]  # a spare forward keeps ranks in step
            loss, t = pair_terms(engine, batch, pad, ref, cfg, device, head)
            if i < len(mine):
                terms.append({k: v.cpu() for k, v in t.items()})
                losses.append((loss.item(), len(batch)))
    engine.train()
    gathered = [None] * world
    torch.distributed.all_gather_object(gathered, (terms, losses))
    terms = [t for part in gathered for t in part[0]]
    losses = [x for part in gathered for x in part[1]]
    loss = sum(value * n for value, n in losses) / sum(n for _, n in losses)
    ev = summary(loss, terms, "eval/")
    ev["eval/dpo_accuracy"] = ev.pop("eval/accuracy")
    ev["eval/pairs"] = sum(n for _, n in losses)
    return ev


def build_engine(cfg: DPOConfig, total: int):
    """The policy (the SFT model; gradient checkpointing and LoRA as configured) on DeepSpeed."""
    policy = load_causal(cfg.model)
    if cfg.gradient_checkpointing:
        policy.gradient_checkpointing_enable()
    if cfg.lora_rank:
        policy = add_lora(policy, cfg.lora_rank, cfg.lora_alpha, causal=True)
    return initialize(cfg, policy, total)


def train(cfg: DPOConfig) -> None:
    from transformers import AutoTokenizer

    # 1. ranks, seeds, the pairs tokenised as every trainer presents them
    rank, world = setup_distributed()
    run = RunFiles(cfg.output_dir, rank)
    run.status("running", step=0)
    random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    tokenizer = AutoTokenizer.from_pretrained(resolve_model(cfg.model), **SAFE_LOAD)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id  # masks are explicit
    train_rows, eval_rows = load_pairs(cfg.data)
    enc = PairEncoder(tokenizer, cfg.max_length)
    train_pairs, eval_pairs = [enc.pair(r, 0.0) for r in train_rows], [enc.pair(r, 0.0) for r in eval_rows]
    eval_batches = batches(eval_pairs, cfg.batch_pairs, cfg.seed, -1, False)
    per_epoch, total = step_plan(cfg, train_pairs, world)
    # 2. the reference's log-probs, once per distinct sequence; then the policy on DeepSpeed
    groups = key_groups(train_pairs + eval_pairs)
    head = head_position(list(groups))
    ref = reference_logprobs(cfg, groups, pad, rank, world, head)
    engine, sched = build_engine(cfg, total)
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
    micro = pair_loop(engine, run, cfg, total, mine, micro_step, step_row, heldout if eval_batches else None)
    if micro is not None:  # None: a Stop ended it, checkpointed
        # 4. the final evaluation and the policy as a plain HF folder
        final = heldout() if eval_batches else {}
        finish_pairs(engine, run, cfg, micro, final, tokenizer, "policy", rank)
        kept = {k: v for k, v in final.items() if k.startswith("eval/")}
        run.status("finished", step=engine.global_steps, total_steps=total, final=kept)


def main(argv: list[str] | None = None) -> None:
    run_main(DPOConfig, train, __doc__, argv)


if __name__ == "__main__":
    main()
