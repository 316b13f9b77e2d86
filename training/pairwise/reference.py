"""The frozen reference of the trainers on pairs and unpaired data (DPO, KTO, the next one): the log-probability of
every distinct sequence under the reference, computed once before training (each rank scores its share, all ranks
get all), then the reference is freed. Also the policy's own sequence log-probs, with the prompt run once per group
where prefix sharing is on (training/pairwise/prefix.py): both sides score a sequence the same way, so the first update
starts from log-ratios of exactly 0."""

from __future__ import annotations

import math

import torch

from training.kernels.linear import onednn_linears
from training.models import SAFE_WEIGHTS, dropout_off, last_positions, resolve_model, training_attention
from training.pairwise import prefix
from training.pairwise.pairs import pack
from training.pairwise.sequences import Key, chunk_response, collate, sequence_logprobs, shared_split

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def load_causal(ref: str, dtype: torch.dtype = torch.float32):
    from transformers import AutoModelForCausalLM

    # the reference and the policy both: the same kernel gives the same log-probs before the first update
    kernel = training_attention()
    model = AutoModelForCausalLM.from_pretrained(resolve_model(ref), dtype=dtype, **SAFE_WEIGHTS, **kernel)
    dropout_off(model)
    return onednn_linears(model)  # fp32 on a CPU: linear layers through oneDNN (training/kernels/linear.py)


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
    """`response_logprobs` with the prompts run once (training/pairwise/prefix.py): the prefix pass keeps one position's
    logits, the chunks (the prompt's last token and the response) keep all of theirs."""
    out = prefix.forward(model, shared, device, prefix_kwargs={"logits_to_keep": 1})
    response = chunk_response(keys, shared.offset.tolist(), shared.chunk_ids.shape[1]).to(device)
    labels = shared.chunk_ids[:, 1:].to(device)
    return sequence_logprobs(out.logits[:, :-1], labels, response), response.sum(-1)


def head_position(keys: list[Key]) -> int:
    """The first logits position that predicts a response token in any of the run's sequences."""
    return max(min(start for start, _ in keys) - 1, 0)


def reference_logprobs(cfg, groups: dict, pad: int, rank: int, world: int, head: int) -> dict:
    """{sequence: (sum, count)} under the frozen reference, each sequence once: every rank scores its share of the
    rankings (`groups`: sequence -> ranking), all ranks get all of them. A ranking's sequences go through together,
    as in training, so with prefix sharing each is split where the policy's batches split it. The reference is freed
    afterwards (the trainer never needs it again). `cfg`: the trainer's settings (reference or model, dtype,
    batch_pairs, prefix sharing)."""
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


def reference_batch(model, chunk: list[Key], groups: dict, pad: int, cfg, head: int, device):
    """(sums, counts) as lists for the sequences of `chunk` under the reference."""
    logp, count = key_logprobs(model, chunk, [groups[k] for k in chunk], pad, prefix.enabled(cfg), head, device)
    return logp.tolist(), count.tolist()


def key_logprobs(model, keys: list[Key], groups: list, pad: int, share: bool, head: int, device, in_step=False):
    """(sum (U,), token count (U,)) of the response tokens' log-probabilities of each sequence of `keys` under
    `model`, each a row of its own (a trainer on unpaired data has no pairs to collate): with `share`, the prompt
    runs once per group (`groups`: one per key). `in_step`: a training engine on several ranks, where all must
    make the same passes (prefix.agree)."""
    from training.pairwise.pairs import Tokenised

    shared = shared_split(keys, groups, pad) if share else None
    if in_step and share:
        shared = prefix.agree(shared, device)
    if shared is not None:
        return shared_logprobs(model, shared, keys, device)
    pairs = [Tokenised(list(s), list(s), 0.0, 0, False, start, start) for start, s in keys]  # each with itself
    ids, attention, response, *_ = collate(pairs, pad)
    return response_logprobs(model, ids.to(device), attention.to(device), response.to(device), head)


# --- the frame of a run that trains a policy against a frozen reference (DPO, KTO) --------------------------------


def policy_run(cfg):
    """The start of such a run on every rank: (rank, world, the run's files with status running, the tokenizer, its
    pad id), the seeds set."""
    import random

    from transformers import AutoTokenizer

    from training.engine import setup_distributed
    from training.models import SAFE_LOAD
    from training.runs import RunFiles

    rank, world = setup_distributed()
    run = RunFiles(cfg.output_dir, rank)
    run.status("running", step=0)
    random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    tokenizer = AutoTokenizer.from_pretrained(resolve_model(cfg.model), **SAFE_LOAD)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id  # masks are explicit
    return rank, world, run, tokenizer, pad


def policy_engine(cfg, total: int):
    """The policy (the SFT model; gradient checkpointing and LoRA as configured) on DeepSpeed: (engine, scheduler)."""
    from training.engine import initialize
    from training.models import add_lora

    policy = load_causal(cfg.model)
    if cfg.gradient_checkpointing:
        policy.gradient_checkpointing_enable()
    if cfg.lora_rank:
        policy = add_lora(policy, cfg.lora_rank, cfg.lora_alpha, causal=True)
    return initialize(cfg, policy, total)


def heldout_terms(engine, eval_batches: list, rank: int, world: int, score) -> tuple[list[dict], float, int]:
    """The held-out pass of a policy trainer: every rank scores its share of the batches in lockstep (ZeRO-3 gathers
    weights collectively, so a rank with fewer batches runs a spare forward on the first one, `score(batch, True)`,
    and keeps nothing of it); every rank gets all of them back. score(batch, spare) -> (loss, terms of the batch).
    Returns (the terms of every batch, the loss averaged over rows, the rows)."""
    mine, rounds = eval_batches[rank::world], math.ceil(len(eval_batches) / world)
    terms, losses = [], []
    engine.eval()
    with torch.no_grad():
        for i in range(rounds):
            spare = i >= len(mine)
            loss, t = score(eval_batches[0] if spare else mine[i], spare)
            if not spare:
                terms.append({k: v.cpu() for k, v in t.items()})
                losses.append((loss.item(), len(mine[i])))
    engine.train()
    gathered = [None] * world
    torch.distributed.all_gather_object(gathered, (terms, losses))
    terms = [t for part in gathered for t in part[0]]
    losses = [x for part in gathered for x in part[1]]
    n = sum(k for _, k in losses)
    return terms, sum(value * k for value, k in losses) / n, n


def train_policy(engine, run, cfg, total: int, steps: tuple, heldout, has_eval: bool, tokenizer, rank: int) -> None:
    """The updates (training/engine.py::pair_loop with the trainer's `steps`: batches of an epoch, the loss of a
    micro-batch, the metrics row of a step), then, unless a Stop ended it, the final evaluation, the policy saved as
    a plain HF folder in RUN/policy and the status finished."""
    from training.engine import finish_pairs, pair_loop

    micro = pair_loop(engine, run, cfg, total, *steps, heldout if has_eval else None)
    if micro is not None:  # None: a Stop ended it, checkpointed
        final = heldout() if has_eval else {}
        finish_pairs(engine, run, cfg, micro, final, tokenizer, "policy", rank)
        kept = {k: v for k, v in final.items() if k.startswith("eval/")}
        run.status("finished", step=engine.global_steps, total_steps=total, final=kept)
