"""Prefix sharing for the pair trainers (reward model, DPO): the responses of one prompt share its tokens, so the
prompt goes through the model once per ranking and every response attends to its keys and values.

A chosen and a rejected response of one prompt (and the K responses of a ranking) start with the same tokens: the
chat prompt. A causal model's hidden states over a prefix do not depend on what follows, so running the common
prefix once and continuing each sequence from its key/value cache gives the same outputs as running every
sequence whole (Wang et al. 2024, "Accelerating Direct Preference Optimization with Prefix Sharing"). On 64 prompt
and 64 response tokens a pair costs 192 tokens of model work instead of 256, a 4-way ranking 320 instead of 512.

The two passes: the groups' prefixes, left-padded (each prefix ends where its chunks begin), return their cache;
the cache is gathered to one row per sequence (the backward sums a prefix's gradients over its sequences) and the
sequences' remaining tokens (the chunks, right-padded) run on top of it with position ids that continue the prefix.
A group's prefix stops before every sequence's `limit` (a position the caller needs an output at), so every chunk
holds the positions the loss reads. Gradient checkpointing turns the cache off in training, so it turns sharing
off too. A prompt cut to fit --max-length is cut per response (training/pairwise/pairs.py), so responses of different
lengths keep different cuts and share only what their cuts have in common (often nothing)."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import torch

from training.kernels.hf_cache import cache_of, with_cache


@dataclass
class Shared:
    prefix_ids: torch.Tensor  # (G, P) left-padded
    prefix_mask: torch.Tensor  # (G, P)
    chunk_ids: torch.Tensor  # (U, C) right-padded: each sequence's tokens after its group's prefix
    chunk_mask: torch.Tensor  # (U, C)
    group: torch.Tensor  # (U,) the prefix row of each sequence
    offset: torch.Tensor  # (U,) the prefix's length: where the chunk starts in the sequence


def common_prefix(seqs: Sequence[Sequence[int]]) -> int:
    """Length of the longest prefix every sequence starts with."""
    n = min(len(s) for s in seqs)
    for i in range(n):
        t = seqs[0][i]
        if any(s[i] != t for s in seqs):
            return i
    return n


def prefix_lengths(seqs: Sequence[Sequence[int]], groups: Sequence[Hashable], limits: Sequence[int]) -> dict:
    """{group: its shared prefix length}: the common prefix of its sequences, no longer than any member's limit
    (and 0 for a group of one sequence: nothing to share)."""
    members: dict[Hashable, list[int]] = {}
    for i, g in enumerate(groups):
        members.setdefault(g, []).append(i)
    out = {}
    for g, idx in members.items():
        if len(idx) < 2:
            out[g] = 0
            continue
        out[g] = max(0, min([common_prefix([seqs[i] for i in idx])] + [limits[i] for i in idx]))
    return out


def split(seqs: Sequence[Sequence[int]], groups: Sequence[Hashable], limits: Sequence[int], pad_id: int):
    """The two passes' tensors, or None when no group shares a prefix (the caller runs the sequences whole)."""
    lengths = prefix_lengths(seqs, groups, limits)
    if not any(lengths.values()):
        return None
    order = list(lengths)
    row = {g: i for i, g in enumerate(order)}
    width = max(lengths.values())
    prefix_ids = torch.full((len(order), width), pad_id, dtype=torch.long)
    prefix_mask = torch.zeros((len(order), width), dtype=torch.long)
    first = {}
    for i, g in enumerate(groups):
        first.setdefault(g, i)
    for g, n in lengths.items():
        if n:
            prefix_ids[row[g], width - n :] = torch.tensor(list(seqs[first[g]][:n]))
            prefix_mask[row[g], width - n :] = 1
    offset = [lengths[g] for g in groups]
    chunk_width = max(len(s) - o for s, o in zip(seqs, offset, strict=True))
    chunk_ids = torch.full((len(seqs), chunk_width), pad_id, dtype=torch.long)
    chunk_mask = torch.zeros((len(seqs), chunk_width), dtype=torch.long)
    for i, (s, o) in enumerate(zip(seqs, offset, strict=True)):
        chunk_ids[i, : len(s) - o] = torch.tensor(list(s[o:]))
        chunk_mask[i, : len(s) - o] = 1
    group = torch.tensor([row[g] for g in groups])
    return Shared(prefix_ids, prefix_mask, chunk_ids, chunk_mask, group, torch.tensor(offset))


def enabled(cfg) -> bool:
    """A pair trainer's config shares prompts unless told not to or checkpointing gradients (no cache then)."""
    return cfg.share_prompt and not cfg.gradient_checkpointing


def agree(s: Shared | None, device) -> Shared | None:
    """`s` if every rank has a split for its batch, else None on all of them: with ZeRO-3 each forward gathers the
    weights collectively, so all ranks must make the same number of passes (one whole, or two shared). Call it once
    per micro-batch on every rank, in step."""
    if not torch.distributed.is_initialized() or torch.distributed.get_world_size() == 1:
        return s
    flag = torch.tensor([0 if s is None else 1], device=device)
    torch.distributed.all_reduce(flag, op=torch.distributed.ReduceOp.MIN)
    return s if flag.item() else None


def forward(model, s: Shared, device, prefix_kwargs: dict | None = None, **kwargs):
    """The model's output on the chunks, each continuing its group's prefix (same as on the whole sequences)."""
    prefix_mask = s.prefix_mask.to(device)
    positions = (prefix_mask.cumsum(-1) - 1).clamp(min=0)
    out = model(
        input_ids=s.prefix_ids.to(device),
        attention_mask=prefix_mask,
        position_ids=positions,
        use_cache=True,
        **(prefix_kwargs or {}),
    )
    cache = cache_of(out)
    group = s.group.to(device)
    cache.batch_select_indices(group)
    mask = torch.cat([prefix_mask[group], s.chunk_mask.to(device)], dim=1)
    positions = s.offset.to(device)[:, None] + torch.arange(s.chunk_ids.shape[1], device=device)[None, :]
    return model(
        input_ids=s.chunk_ids.to(device),
        attention_mask=mask,
        position_ids=positions,
        **with_cache(cache),
        use_cache=True,
        **kwargs,
    )
