"""Rollouts on prompts: sample one response per prompt, then score it (old and reference log-probs, values, the
judges' scores) into an Experience (DeepSpeed-Chat's `generate_experience`). Shapes: B sequences, P padded prompt
tokens, T response slots. Used by PPO (which adds rewards and advantages, training/ppo/experience.py), the next
trainer on prompts, and the checkpoints' evaluation (training/rollouts/checkpoints.py)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from training.kernels.logprobs import held_eos, response_logprobs
from training.rollouts.profile import OFF, Clock
from training.sampling.decode import sample
from training.sampling.rollout_engine import engine_response


@dataclass
class Experience:
    prompt_len: int  # P: prompts are left-padded to it
    ids: torch.Tensor  # (B, P+T) prompt + response, pad after EOS
    attention_mask: torch.Tensor  # (B, P+T)
    mask: torch.Tensor  # (B, T) response tokens up to and including EOS: the loss mask
    lengths: torch.Tensor  # (B,) response tokens (EOS included)
    ended: torch.Tensor  # (B,) bool: the response emitted EOS (else it was cut at max_new_tokens)
    logprobs: torch.Tensor  # (B, T) old log-probs of the response tokens under the actor
    ref_logprobs: torch.Tensor  # (B, T) the same under the frozen reference
    values: torch.Tensor  # (B, T) critic values, zeroed after each response's end
    raw_scores: torch.Tensor  # (B,) reward-model scores as read (the optimised members' combination)
    scores: torch.Tensor  # (B,) after normalisation and the missing-EOS penalty (before the clip)
    rewards: torch.Tensor | None = None  # (B, T) per-token rewards
    advantages: torch.Tensor | None = None  # (B, T)
    returns: torch.Tensor | None = None  # (B, T)
    live: tuple | None = None  # (logprobs, values) still attached to their graphs (single-pass PPO)
    heldout_scores: torch.Tensor | None = None  # (B,) the held-out judges' standardised scores, if any
    held: tuple | None = None  # (eos id, n): EOS was held back at the first n response positions (min_new_tokens)

    def __len__(self) -> int:
        return self.ids.shape[0]

    def select(self, rows: torch.Tensor) -> Experience:
        """The sequences `rows` of this batch (a PPO minibatch)."""
        pick = {k: (v[rows] if isinstance(v, torch.Tensor) else v) for k, v in self.__dict__.items()}
        return Experience(**{**pick, "live": None})


def left_pad(prompts: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids (B, P), attention_mask (B, P)), prompts right-aligned."""
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, width - len(p) :] = torch.tensor(p, dtype=torch.long)
        mask[i, width - len(p) :] = 1
    return ids, mask


def response_mask(response: torch.Tensor, eos_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(mask (B, T), lengths (B,), ended (B,)): each response runs to its first EOS, inclusive, or to the end."""
    is_eos = response == eos_id
    ended = is_eos.any(1)
    first = torch.where(ended, is_eos.float().argmax(1), torch.full_like(ended, response.shape[1], dtype=torch.long))
    lengths = torch.where(ended, first + 1, first)
    mask = (torch.arange(response.shape[1]).unsqueeze(0) < lengths.unsqueeze(1)).long()
    return mask, lengths, ended


def shape_scores(
    raw: torch.Tensor, ended: torch.Tensor, mean: float = 0.0, std: float = 1.0, missing_eos_penalty: float = 0.0
) -> torch.Tensor:
    """(raw - mean) / std, minus the penalty for responses cut before EOS (TRL's missing_eos_penalty)."""
    return (raw - mean) / std - missing_eos_penalty * (~ended).float()


@torch.no_grad()
def rollout(
    actor, prompts: list[list[int]], tokenizer, cfg, synced: bool = False, want_logprobs: bool = False, engine=None
) -> dict:
    """Sample one response per prompt (EOS stops it; pad never equals EOS): from `engine` (a vLLM engine holding
    the actor's current weights, training/sampling/rollout_engine.py) where there is one, else with the trainers' own
    decode of `actor`. With want_logprobs (own decode only) the old log-probs are read off the decode's raw logits (one
    actor forward saved; exact up to float rounding, so the trainer asks for them in fp32 only)."""
    pad, eos = tokenizer.pad_token_id, tokenizer.eos_token_id
    prompt_ids, prompt_mask = left_pad(prompts, pad)
    prompt_ids, prompt_mask = prompt_ids.to(actor.device), prompt_mask.to(actor.device)
    if engine is not None:
        response, logprobs = engine_response(engine, prompts, cfg, eos, pad).to(actor.device), None
    else:
        response, logprobs = sample(actor, prompt_ids, prompt_mask, cfg, eos, pad, want_logprobs, synced)
    P = prompt_ids.shape[1]
    mask, lengths, ended = response_mask(response.cpu(), eos)
    mask = mask.to(response.device)
    response = response.masked_fill(mask == 0, pad)
    batch = {
        "prompt_len": P,
        "ids": torch.cat([prompt_ids, response], 1),
        "attention_mask": torch.cat([prompt_mask, mask], 1),
        "mask": mask,
        "lengths": lengths.to(response.device),
        "ended": ended.to(response.device),
        "held": held_eos(eos, cfg.min_new_tokens),
    }
    if logprobs is not None:
        batch["logprobs"] = logprobs
    return batch


def score(
    batch: dict, actor, ref, critic, judges, stats: tuple[float, float], cfg, live: bool = False, clock: Clock = OFF
) -> Experience:
    """Old log-probs, reference log-probs, values and reward-model scores of a rollout (dropout is off in all four
    models); judges(ids, attention, last) gives (score, held-out score or None), see training/judges.py.
    With live=True the actor and critic forwards keep their graphs (Experience.live) for the update to reuse: in
    single-pass PPO these forwards are the update's own. critic=None skips the values (zeros): an evaluation
    needs no critic. `clock` times each model's forward (training/rollouts/profile.py)."""
    P, ids, attn, held = batch["prompt_len"], batch["ids"], batch["attention_mask"], batch.get("held")
    logprobs = batch.pop("logprobs", None)
    with torch.set_grad_enabled(live):
        if logprobs is None or live:
            with clock.part("actor_forward"):
                logprobs = response_logprobs(actor, ids, attn, P, held)
        if critic is None:  # an evaluation, or a critic-free trainer: nothing to time
            values = torch.zeros_like(logprobs)
        else:
            with clock.part("critic_forward"):
                values = critic(ids, attn, P)
    with torch.no_grad():
        with clock.part("reference_forward"):
            ref_logprobs = response_logprobs(ref, ids, attn, P, held)
        last = P + batch["lengths"] - 1  # EOS, or the last token of a cut response: where the RM was trained to read
        with clock.part("reward_forward"):
            raw, heldout = judges(ids, attn, last)
    scores = shape_scores(raw, batch["ended"], *stats, cfg.missing_eos_penalty)
    return Experience(
        **batch,
        logprobs=logprobs.detach(),
        ref_logprobs=ref_logprobs,
        values=values.detach(),
        raw_scores=raw,
        scores=scores,
        live=(logprobs, values) if live else None,
        heldout_scores=heldout,
    )
