"""Tiny real models for `rlhf demo --quick` (and tests): the whole pipeline runs on them in minutes on a CPU.

A random tiny Llama samples uniformly from its 49k-token vocabulary and almost never ends, so no preference over
its text could be learned from a few hundred rankings. The quick demo's actor is a tiny Llama built to talk like a
small model does: it says words from a fixed list of `n_words` whole English words and ends each reply with a
chosen probability per token, so replies vary in length (what the demo's annotator cares about) and a reward model
can learn from a few hundred rankings. Its reward model starts from a plain random tiny Llama."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import torch

from training.models import resolve_model


def _copy_tokenizer_files(tokenizer, src: Path, out: Path) -> None:
    tokenizer.save_pretrained(out)
    template = src / "chat_template.jinja"
    if template.exists() and not (out / template.name).exists():
        shutil.copy(template, out / template.name)


def word_tokens(tokenizer, n_words: int) -> list[int]:
    """The first n_words vocabulary entries that are a whole lower-case word with its leading space (3+ letters)."""
    ids = []
    for i, tok in enumerate(tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))):
        if tok.startswith("Ġ") and tok[1:].isalpha() and tok[1:].islower() and len(tok) >= 4:
            ids.append(i)
            if len(ids) == n_words:
                return ids
    raise ValueError(f"the tokenizer has fewer than {n_words} word tokens")


def _config(tokenizer, hidden: int, tie: bool, heads: int = 4):
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=2,
        num_attention_heads=heads,
        num_key_value_heads=max(1, heads // 2),
        max_position_embeddings=1024,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=tie,
    )


def build_talking_model(
    out: Path, n_words: int = 48, eos_rate: float = 0.08, seed: int = 0, heads: int = 4, spread: float = 0.0
) -> Path:
    """A tiny Llama (hidden 64, 2 layers) with the default model's tokenizer and chat template that says one of
    n_words words per token and ends with probability eos_rate per token. spread > 0: the j-th word's logit is
    spread * j below the first's (a graded distribution, for tests of top-k and top-p), EOS as if all were equal.

    How: every token embeds with a large constant in dimension 0, so after the final RMSNorm (weight 1 on
    dimension 0, 0 elsewhere) the last hidden state is c * e_0 for a constant c. The (untied) output head is zero
    except column 0: logit = c * w for the words and for EOS, with w chosen so the words take all but a negligible
    share of the mass and EOS takes eos_rate of it. Everything stays trainable: PPO moves these weights."""
    from transformers import AutoTokenizer, LlamaForCausalLM

    src = resolve_model("default")
    tokenizer = AutoTokenizer.from_pretrained(src, local_files_only=True)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(_config(tokenizer, 64, tie=False, heads=heads))  # vLLM on a CPU: heads=2 (head 32)
    words = word_tokens(tokenizer, n_words)
    eos = tokenizer.eos_token_id
    with torch.no_grad():
        model.model.embed_tokens.weight[:, 0] = 10.0
        model.model.norm.weight.zero_()
        model.model.norm.weight[0] = 1.0
        model.lm_head.weight.zero_()
        # the constant c, measured: the last hidden state's dimension 0 on a short input
        c = float(
            model.model(input_ids=torch.tensor([[tokenizer.bos_token_id or 1, 2, 3]])).last_hidden_state[0, -1, 0]
        )
        word_logit = math.log(len(tokenizer)) + 8.0  # the rest of the vocabulary gets about e^-8 of the mass
        eos_logit = word_logit + math.log(n_words * eos_rate / (1 - eos_rate))
        model.lm_head.weight[words, 0] = (word_logit - spread * torch.arange(n_words)) / c
        model.lm_head.weight[eos, 0] = eos_logit / c
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    _copy_tokenizer_files(tokenizer, src, out)
    return out


def build_plain_model(out: Path, hidden: int = 32, seed: int = 1) -> Path:
    """A plain random tiny Llama (hidden 32, 2 layers, tied embeddings) with the default model's tokenizer and chat
    template: the quick demo's reward-model base, and the tests' tiny model."""
    from transformers import AutoTokenizer, LlamaForCausalLM

    src = resolve_model("default")
    tokenizer = AutoTokenizer.from_pretrained(src, local_files_only=True)
    torch.manual_seed(seed)
    LlamaForCausalLM(_config(tokenizer, hidden, tie=True)).save_pretrained(out)
    _copy_tokenizer_files(tokenizer, src, out)
    return out
