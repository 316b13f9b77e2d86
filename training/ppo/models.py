"""The four PPO models and the forward passes the trainer needs from them.

- actor, reference: causal LMs from the SFT folder; only the response positions go through the LM head.
- critic, reward: the reward model's backbone and scalar head, without any LM head. The critic reads a value at
  every response position; the reward reads one score at the last response token (the EOS the RM was trained to
  score on, or the last token of a cut response).

Every forward gets explicit position ids from the attention mask, so left-padded prompts get the same positions
in scoring and training as in `generate` (DeepSpeed-Chat leaves this to the model)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import torch

from training.models import (
    SAFE_LOAD,
    SAFE_WEIGHTS,
    ModelError,
    dropout_off,
    last_positions,
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


def _unwrap(model):
    """The transformers model inside a peft wrapper (LoRA layers stay injected in it), else the model itself."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def _backbone(model):
    model = _unwrap(model)
    return getattr(model, model.base_model_prefix)


class Critic(torch.nn.Module):
    """Per-token values from a reward model's backbone and scalar head (DeepSpeed-Chat starts the critic as an
    exact copy of the RM). Holds the HF model, so it saves as one."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask, prompt_len: int) -> torch.Tensor:
        """(B, T) values at the positions that emit the response tokens (P-1 .. P+T-2), the same positions as the
        actor's log-probs."""
        hidden = _backbone(self.model)(
            input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids(attention_mask)
        ).last_hidden_state
        return _unwrap(self.model).score(hidden[:, prompt_len - 1 : -1]).squeeze(-1).float()


def reward_scores(model, ids: torch.Tensor, attention_mask: torch.Tensor, last: torch.Tensor) -> torch.Tensor:
    """(B,) reward-model scores read at position `last` (B,) of each row: the sequence's final token."""
    hidden = _backbone(model)(
        input_ids=ids, attention_mask=attention_mask, position_ids=position_ids(attention_mask)
    ).last_hidden_state
    rows = torch.arange(ids.shape[0], device=ids.device)
    return model.score(hidden[rows, last]).squeeze(-1).float()


def judge_folders(ref: str) -> list[Path]:
    """The reward model's folders: an ensemble run's members in order (training/reward/ensemble.py), else one."""
    from training.runs import ENSEMBLE_FILE, ensemble_members

    path = Path(ref).expanduser()
    return ensemble_members(path) if (path / ENSEMBLE_FILE).is_file() else [reward_folder(ref)]


def held_stats(folder: Path) -> tuple[float, float]:
    """(mean, std) of a reward model's held-out scores (its reward_stats.json), (0, 1) where it has none."""
    path = folder / "reward_stats.json"
    stats = json.loads(path.read_text()) if path.is_file() else {}
    if "score_mean" not in stats:
        return 0.0, 1.0
    return float(stats["score_mean"]), max(float(stats["score_std"]), 1e-6)


class Judges:
    """The reward model PPO optimises and the held-out judges that only watch (training/watch.py).

    One member: its score, as before. Several optimised members: each member's score standardised by its own
    held-out statistics, combined by `rule`, and put back on member 0's scale (so clipping, normalisation and the
    KL coefficient mean what they mean for one model). Held-out judges: the mean of their standardised scores."""

    def __init__(self, models: list, stats: list[tuple[float, float]], heldout: int, rule: str):
        from training.watch import split_members

        self.models, self.stats, self.rule = models, stats, rule
        self.optimised, self.heldout = split_members(len(models), heldout)

    def _standard(self, i: int, ids, attention_mask, last) -> torch.Tensor:
        mean, std = self.stats[i]
        return (reward_scores(self.models[i], ids, attention_mask, last) - mean) / std

    def __call__(self, ids, attention_mask, last) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(optimised score (B,), held-out judges' mean standardised score (B,) or None)."""
        from training.watch import combine

        if len(self.optimised) == 1:
            score = reward_scores(self.models[self.optimised[0]], ids, attention_mask, last)
        else:
            z = torch.stack([self._standard(i, ids, attention_mask, last) for i in self.optimised])
            mean, std = self.stats[self.optimised[0]]
            score = combine(z, self.rule) * std + mean
        if not self.heldout:
            return score, None
        return score, torch.stack([self._standard(i, ids, attention_mask, last) for i in self.heldout]).mean(0)


def param_fingerprint(model) -> str:
    """sha256 over every parameter's bytes, in order: proves a frozen model (the reference) never changed."""
    digest = hashlib.sha256()
    for name, p in model.named_parameters():
        digest.update(name.encode())
        digest.update(p.detach().float().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()
