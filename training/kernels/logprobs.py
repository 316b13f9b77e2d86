"""Log-probabilities of response tokens under a causal LM, read as the sampler drew them (EOS held back while
`min_new_tokens` holds it). Every forward gets explicit position ids from the attention mask, so left-padded
prompts get the same positions in scoring and training as in `generate` (DeepSpeed-Chat leaves this to the
model). Used by PPO and the next trainer on prompts (rollout, scoring, updates, the critic) and by the decode
that samples rollouts and chat replies."""

from __future__ import annotations

import torch

from training.models import last_positions


def position_ids(attention_mask: torch.Tensor) -> torch.Tensor:
    """0, 1, 2, ... from each row's first real token (left padding gets 0), as `generate` numbers them."""
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


def response_logprobs(
    model, ids: torch.Tensor, attention_mask: torch.Tensor, prompt_len: int, held: tuple[int, int] | None = None
) -> torch.Tensor:
    """(B, T) log-probabilities of the response tokens ids[:, P:] under `model` (an HF causal LM or a DeepSpeed
    engine around one). The LM head runs on the T positions that predict them only (`logits_to_keep`).
    held: (eos id, n) read the first n positions with EOS held back, as the sampler drew them (`logprobs_of`)."""
    n = ids.shape[1] - prompt_len
    keep = last_positions(n + 1, ids.shape[1], ids.device)
    out = model(
        input_ids=ids, attention_mask=attention_mask, position_ids=position_ids(attention_mask), logits_to_keep=keep
    )
    return logprobs_of(out.logits[:, :-1], ids[:, prompt_len:], held)  # position P-1+t predicts ids[:, P+t]


def held_eos(eos_id: int, min_new_tokens: int) -> tuple[int, int] | None:
    """What the sampler holds back: EOS at the first min_new_tokens - 1 response positions (None: nothing)."""
    return (eos_id, min_new_tokens - 1) if min_new_tokens > 1 else None


def without_eos(logits: torch.Tensor, eos_id: int) -> torch.Tensor:
    """logits (..., V) with EOS at -inf: the distribution the sampler draws from while it holds EOS back."""
    return logits.masked_fill(torch.arange(logits.shape[-1], device=logits.device) == eos_id, float("-inf"))


def logprobs_of(logits: torch.Tensor, tokens: torch.Tensor, held: tuple[int, int] | None = None) -> torch.Tensor:
    """log softmax(logits)[token] in fp32, (B, T, V) x (B, T) -> (B, T). The log-softmax reads bf16 logits as they
    are, in fp32 inside its kernel: against an fp32 copy minus its logsumexp (SmolLM2's 49,152 words, 8 x 64
    positions) 53 against 63 ms forward, 140 against 201 with the backward.

    held = (eos id, n): the first n positions are read under the distribution the sampler drew them from, EOS
    removed and the rest renormalised (`--min-new-tokens`). The KL of what was sampled is the KL between the two
    models' held-back distributions; reading both unmasked adds log(1 - q_eos) - log(1 - p_eos) per held token.
    Only those n positions are copied (a (B, n, V) slice), not the whole (B, T, V)."""

    def read(part: torch.Tensor, toks: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(part, dim=-1, dtype=torch.float32).gather(-1, toks.unsqueeze(-1)).squeeze(-1)

    n = min(held[1], tokens.shape[1]) if held else 0
    if n <= 0:
        return read(logits, tokens)
    head = read(without_eos(logits[:, :n], held[0]), tokens[:, :n])
    return torch.cat([head, read(logits[:, n:], tokens[:, n:])], 1)
