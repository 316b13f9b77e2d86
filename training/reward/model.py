"""The reward model: AutoModelForSequenceClassification(num_labels=1) on the SFT base, scored at the last
non-pad token. Saved as a standard HF folder that plain transformers loads and scores identically.

Pad and EOS are kept apart: the sequence ends with EOS and that EOS is the token scored. If the tokenizer pads
with EOS (SmolLM2 does), transformers would score the token before EOS; we pad with another special token."""

from __future__ import annotations

from pathlib import Path

import torch

from training.models import SAFE_LOAD, SAFE_WEIGHTS


def pick_pad_token(tokenizer) -> bool:
    """Make the pad token differ from EOS; returns True when a new token had to be added."""
    if tokenizer.pad_token_id is not None and tokenizer.pad_token_id != tokenizer.eos_token_id:
        return False
    for candidate in ("<|endoftext|>", "<pad>", "[PAD]", tokenizer.unk_token):
        if (
            candidate
            and candidate in tokenizer.get_vocab()
            and tokenizer.convert_tokens_to_ids(candidate) != tokenizer.eos_token_id
        ):
            tokenizer.pad_token = candidate
            return False
    tokenizer.add_special_tokens({"pad_token": "[PAD]"})
    return True


def dropout_off(model: torch.nn.Module) -> None:
    """Training with dropout makes the scores noisy for the same input (and PPO later compares them)."""
    for m in model.modules():
        if isinstance(m, torch.nn.Dropout):
            m.p = 0.0
    for name in ("attention_dropout", "hidden_dropout", "dropout", "resid_pdrop", "embd_pdrop", "attn_pdrop"):
        if hasattr(model.config, name):
            setattr(model.config, name, 0.0)


def load_reward_model(folder: str | Path, dtype: torch.dtype = torch.float32):
    """(model, tokenizer) from a causal-LM folder (new scalar head) or a saved reward model."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder, **SAFE_LOAD)
    added = pick_pad_token(tokenizer)
    tokenizer.padding_side = "right"
    model = AutoModelForSequenceClassification.from_pretrained(folder, num_labels=1, dtype=dtype, **SAFE_WEIGHTS)
    if added:
        model.resize_token_embeddings(len(tokenizer))
    model.config.pad_token_id = tokenizer.pad_token_id
    dropout_off(model)
    return model, tokenizer


def scores(model, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """(B,) scalar rewards; transformers reads the head at the last non-pad token of each row."""
    return model(input_ids=input_ids, attention_mask=attention_mask).logits[:, 0].float()


def add_lora(model, rank: int, alpha: float):
    """LoRA adapters on every linear layer of the backbone; the score head trains in full."""
    from peft import LoraConfig, TaskType, get_peft_model

    config = LoraConfig(
        task_type=TaskType.SEQ_CLS,
        r=rank,
        lora_alpha=alpha,
        lora_dropout=0.0,
        target_modules="all-linear",
        modules_to_save=["score"],
    )
    return get_peft_model(model, config)
