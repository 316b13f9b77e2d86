"""The reward model: AutoModelForSequenceClassification(num_labels=1) on the SFT base, scored at the last
non-pad token. Saved as a standard HF folder that plain transformers loads and scores identically.

Pad and EOS are kept apart: the sequence ends with EOS and that EOS is the token scored. If the tokenizer pads
with EOS (SmolLM2 does), transformers would score the token before EOS; we pad with another special token."""

from __future__ import annotations

from pathlib import Path

import torch

from training.kernels.linear import onednn_linears
from training.models import SAFE_LOAD, SAFE_WEIGHTS, dropout_off, pick_pad_token, training_attention


def load_reward_model(folder: str | Path, dtype: torch.dtype = torch.float32, training: bool = False):
    """(model, tokenizer) from a causal-LM folder (new scalar head) or a saved reward model; training=True picks
    the attention kernel that trains fastest here (`training_attention`)."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder, **SAFE_LOAD)
    added = pick_pad_token(tokenizer)
    tokenizer.padding_side = "right"
    attention = training_attention() if training else {}
    model = AutoModelForSequenceClassification.from_pretrained(
        folder, num_labels=1, dtype=dtype, **SAFE_WEIGHTS, **attention
    )
    if added:
        model.resize_token_embeddings(len(tokenizer))
    model.config.pad_token_id = tokenizer.pad_token_id
    dropout_off(model)
    if training:
        onednn_linears(model)  # fp32 on a CPU: linear layers through oneDNN (training/kernels/linear.py)
    return model, tokenizer


def scores(model, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """(B,) scalar rewards; transformers reads the head at the last non-pad token of each row."""
    return model(input_ids=input_ids, attention_mask=attention_mask).logits[:, 0].float()
