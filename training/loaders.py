"""Loading the models a trainer on prompts reads: the tokenizer (left padding, pad distinct from EOS), causal LMs
(actor, reference) and scalar-head models (reward, critic), dropout off in all of them, and a fingerprint that
proves a frozen model never changed. Used by PPO and the next trainer on prompts, chat, best-of-N and batched
scoring (training/pairwise/scoring.py)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import torch

from training.models import (
    SAFE_LOAD,
    SAFE_WEIGHTS,
    ModelError,
    dropout_off,
    pick_pad_token,
    resolve_model,
    reward_folder,
)

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def load_tokenizer(folder: Path):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder, **SAFE_LOAD)
    if pick_pad_token(tokenizer):
        raise ModelError(f"{folder}: the tokenizer has no spare token to pad with (pad must differ from EOS)")
    tokenizer.padding_side = "left"
    return tokenizer


def load_causal_lm(ref: str, dtype: str, attention: dict | None = None):
    """`attention`: from_pretrained's kernel choice; PPO passes training_attention() for all four models."""
    from transformers import AutoModelForCausalLM

    folder = resolve_model(ref)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=DTYPES[dtype], **SAFE_WEIGHTS, **(attention or {}))
    dropout_off(model)
    return model


def load_scalar_model(ref: str, dtype: str, attention: dict | None = None):
    from transformers import AutoModelForSequenceClassification

    model = AutoModelForSequenceClassification.from_pretrained(
        reward_folder(ref), num_labels=1, dtype=DTYPES[dtype], **SAFE_WEIGHTS, **(attention or {})
    )
    dropout_off(model)
    return model


def fingerprints_by_rank(model) -> list[str]:
    """Each rank's param_fingerprint of its copy of `model`, in rank order (one entry outside a distributed run):
    replicas that stepped together must read alike, so a two-rank run can show its ranks agree."""
    import torch.distributed as dist

    mine = param_fingerprint(model)
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return [mine]
    out: list = [None] * dist.get_world_size()
    dist.all_gather_object(out, mine)
    return out


def param_fingerprint(model) -> str:
    """sha256 over every parameter's bytes, in order: proves a frozen model (the reference) never changed."""
    digest = hashlib.sha256()
    for name, p in model.named_parameters():
        digest.update(name.encode())
        digest.update(p.detach().float().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()
