"""Rollout sampling: a plain decode loop over a preallocated KV cache, in place of `generate`.

On a 2-core CPU with SmolLM2-135M and 8 sequences, `generate` spent about 40 ms per token, of which the model's
step was 25-30 ms; the rest was its per-step machinery and a growing cache re-concatenated every step. This loop
preallocates the cache, keeps the raw logits' log-probability of each sampled token (the old log-probs, when the
caller wants them), and stops when every sequence has emitted EOS. Its model calls: a Llama on a CPU takes
llama_step.py's steps (about 23 ms a token, weights packed), any other model transformers' forward over a
StaticCache. `sample` reads packed weights (training/kernels/linear.py).

The prompt's pass runs SDPA even where the trainers load their kernel (training/kernels/attention.py's "lean", eager's
rounding), so the sampler does not round as the scoring forward does. In bf16 that matters: once the actor's
weights differ from the reference's, even by a change too small to matter, the two models round differently, and
a sampler that shares the actor's roundings favours the tokens they favour, so the sampled KL (k1) counts them as
divergence. Measured with bench/kl_rounding.py (SmolLM2-135M, 96 responses of 64 tokens, a weight change whose
fp32 KL is 0.000 +- 0.009 nats a response): +0.17 +- 0.05 with the trainers' kernel in the prompt's pass, -0.09
+- 0.05 with SDPA (rounding left as noise rather than bias). PPO's 20-step KL curve (bench/ppo_curve.py) rose by
0.13 nats when the trainers' kernel first reached the decode, and is back with this.

Sampling follows the same rules as `generate`: temperature, then top-k, then top-p; EOS is held back until
min_new_tokens; never greedy."""

from __future__ import annotations

import contextlib

import torch

from training.kernels.hf_cache import with_cache
from training.kernels.linear import packed_linears
from training.kernels.llama_step import LlamaSteps, covers
from training.kernels.logprobs import position_ids, without_eos


def filter_logits(logits: torch.Tensor, temperature: float, top_k: int, top_p: float) -> torch.Tensor:
    """(B, V) logits -> the logits sampling draws from: / temperature, then top-k, then nucleus top-p (the
    smallest set of tokens whose probability reaches top_p; the most likely token always stays)."""
    logits = logits / temperature
    if top_k and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=True, dim=-1)
        cum = sorted_logits.softmax(-1).cumsum(-1)
        drop = cum - sorted_logits.softmax(-1) >= top_p  # mass before this token already reaches top_p
        logits = logits.masked_fill(drop.scatter(-1, order, drop), float("-inf"))
    return logits


def draw(probs: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """One token per row of (B, V) probabilities by inverting the CDF with one uniform number per row: the same
    distribution as torch.multinomial, about 35x faster on CPU for a 49k vocabulary (multinomial draws a random
    number per vocabulary entry). Tokens of probability 0 own an empty interval and are never drawn."""
    cdf = probs.cumsum(-1)
    u = torch.rand(probs.shape[0], 1, device=probs.device, dtype=cdf.dtype, generator=generator) * cdf[:, -1:]
    return torch.searchsorted(cdf, u, right=True).squeeze(1).clamp(max=probs.shape[-1] - 1)


def _cache(model, batch: int, length: int):
    from transformers import DynamicCache, StaticCache

    try:
        return StaticCache(config=model.config, max_cache_len=length), True
    except (TypeError, ValueError, NotImplementedError):  # an architecture without static-cache support
        return DynamicCache(config=model.config), False


@torch.no_grad()
def decode_steps(
    model,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    cfg,
    eos_id: int,
    pad_id: int,
    synced: bool = False,
    generator: torch.Generator | None = None,
):
    """Yields (token (B,), raw logits (B, V)) per generated position: pad once a row has emitted EOS; stops when
    every row is done or after cfg.max_new_tokens. The PPO rollout and the Compare tab's streaming chat use it.

    prompt_ids, prompt_mask: (B, P), left-padded.
    synced: under ZeRO-3 with several ranks every forward is collective, so all ranks step until all are done."""
    B, N = prompt_ids.shape[0], cfg.max_new_tokens
    with prompt_pass_kernel(model):
        steps = (LlamaSteps if covers(model) and not synced else _Steps)(model, prompt_ids, prompt_mask, N)
    logits = steps.first
    done = torch.zeros(B, dtype=torch.bool, device=prompt_ids.device)
    for t in range(N):
        logits = logits.float()  # (B, V) raw: the policy itself
        scores = filter_logits(logits, cfg.temperature, cfg.top_k, cfg.top_p)
        if t < cfg.min_new_tokens - 1:
            scores[:, eos_id] = float("-inf")
        token = draw(scores.softmax(-1), generator)
        token = torch.where(done, torch.full_like(token, pad_id), token)
        yield token, logits
        done |= token == eos_id
        if t == N - 1 or _all_done(done, synced):
            return
        logits = steps.step(token, t)


@contextlib.contextmanager
def prompt_pass_kernel(model):
    """SDPA for the prompt's pass of a model loaded with eager's rounding (eager, or the trainers' "lean"); any
    other kernel stays. The model's own setting is back when the pass is done."""
    from training.kernels.attention import NAME

    config = getattr(model, "config", None)
    kernel = getattr(config, "_attn_implementation", None)
    if kernel not in ("eager", NAME):
        yield
        return
    config._attn_implementation = "sdpa"
    try:
        yield
    finally:
        config._attn_implementation = kernel


class _Steps:
    """The decode's model calls through transformers' forward, over a static KV cache where the architecture has
    one (any model; llama_step.LlamaSteps is the faster path for Llamas on a CPU)."""

    def __init__(self, model, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, new_tokens: int):
        B, P = prompt_ids.shape
        device = prompt_ids.device
        self.model, self.prompt_len = model, P
        self.cache, self.static = _cache(model, B, P + new_tokens)
        ones = torch.ones(B, new_tokens, dtype=prompt_mask.dtype, device=device)
        self.mask = torch.cat([prompt_mask, ones], 1)
        positions = position_ids(prompt_mask)
        self.first = self._call(prompt_ids, prompt_mask, positions, torch.arange(P, device=device))
        self.next_position = positions[:, -1:] + 1

    def _call(self, ids, mask, positions, cache_position) -> torch.Tensor:
        out = self.model(
            input_ids=ids,
            attention_mask=mask,
            position_ids=positions,
            **with_cache(self.cache),
            use_cache=True,
            cache_position=cache_position if self.static else None,
            logits_to_keep=1,
        )
        return out.logits[:, -1]

    def step(self, token: torch.Tensor, t: int) -> torch.Tensor:
        """The logits after the t-th sampled token (B,)."""
        n = self.prompt_len + t + 1
        at = torch.tensor([n - 1], device=token.device)
        logits = self._call(token[:, None], self.mask[:, :n], self.next_position, at)
        self.next_position = self.next_position + 1
        return logits


def sample(
    model,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    cfg,
    eos_id: int,
    pad_id: int,
    want_logprobs: bool = False,
    synced: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(response (B, T) with pad after EOS, raw log-probs of the sampled tokens (B, T) or None).
    T <= cfg.max_new_tokens (fewer when all rows stop early). While EOS is held back (min_new_tokens) the
    log-probs are those of the distribution drawn from, EOS removed (models.logprobs_of's `held`)."""
    tokens, logprobs = [], []
    with packed_linears(model, prompt_ids.shape[0]):  # weights read at memory speed (training/kernels/linear.py)
        for t, (token, logits) in enumerate(decode_steps(model, prompt_ids, prompt_mask, cfg, eos_id, pad_id, synced)):
            tokens.append(token)
            if want_logprobs:
                if t < cfg.min_new_tokens - 1:
                    logits = without_eos(logits, eos_id)
                logprobs.append(logits.gather(1, token[:, None]).squeeze(1) - torch.logsumexp(logits, -1))
    response = torch.stack(tokens, 1)
    return response, (torch.stack(logprobs, 1) if want_logprobs else None)


def _all_done(done: torch.Tensor, synced: bool) -> bool:
    if not synced:
        return bool(done.all())
    flag = done.all().to(torch.int32).reshape(1)
    torch.distributed.all_reduce(flag, op=torch.distributed.ReduceOp.MIN)
    return bool(flag.item())
