"""Sequences as the trainers on pairs and unpaired data score them (DPO, KTO, and the frozen reference of
training/pairwise/reference.py): each distinct sequence of a batch goes through the model once (the C(K,2) pairs of a
K-way ranking need K rows), with a mask over the response tokens whose log-probabilities the losses compare."""

from __future__ import annotations

import torch

from training.pairwise.pairs import Tokenised

Key = tuple[int, tuple[int, ...]]  # (response start, token ids): one sequence


def sequences(batch: list[Tokenised]) -> list[Key]:
    """The distinct sequences of a batch in first-seen order."""
    seen: dict[Key, None] = {}
    for p in batch:
        seen.setdefault((p.chosen_start, tuple(p.chosen)), None)
        seen.setdefault((p.rejected_start, tuple(p.rejected)), None)
    return list(seen)


def collate(batch: list[Tokenised], pad_id: int):
    """(input_ids (U, T), attention_mask (U, T), response_mask (U, T - 1), chosen_index (B,), rejected_index (B,),
    keys (U)). response_mask[u, t] = 1 where ids[u, t + 1] is a response token: logits at t predict token t + 1, so
    the mask lines up with logits[:, :-1] and labels ids[:, 1:]. Right-padded."""
    keys = sequences(batch)
    row = {k: i for i, k in enumerate(keys)}
    width = max(len(ids) for _, ids in keys)
    ids = torch.full((len(keys), width), pad_id, dtype=torch.long)
    attention = torch.zeros((len(keys), width), dtype=torch.long)
    response = torch.zeros((len(keys), width - 1), dtype=torch.float32)
    for i, (start, seq) in enumerate(keys):
        ids[i, : len(seq)] = torch.tensor(seq)
        attention[i, : len(seq)] = 1
        response[i, max(start, 1) - 1 : len(seq) - 1] = 1.0  # predicting tokens start .. len - 1
    chosen = torch.tensor([row[(p.chosen_start, tuple(p.chosen))] for p in batch])
    rejected = torch.tensor([row[(p.rejected_start, tuple(p.rejected))] for p in batch])
    return ids, attention, response, chosen, rejected, keys


def key_groups(pairs: list[Tokenised]) -> dict[Key, object]:
    """Every distinct sequence (first-seen order) and the ranking it came from (its first, should two share it)."""
    out: dict[Key, object] = {}
    for p in pairs:
        out.setdefault((p.chosen_start, tuple(p.chosen)), p.group)
        out.setdefault((p.rejected_start, tuple(p.rejected)), p.group)
    return out


def shared_split(keys: list[Key], groups: list, pad_id: int):
    """Rows `keys` of one ranking group each, split for prefix sharing (training/pairwise/prefix.py): a group's
    sequences share their prompt up to the position whose logits predict the first response token, which stays in every
    chunk. None when no two rows of a group share a prefix."""
    from training.pairwise.prefix import split

    limits = [min(max(start, 1) - 1, len(seq) - 1) for start, seq in keys]
    return split([seq for _, seq in keys], groups, limits, pad_id)


def shared_rows(batch: list[Tokenised], keys: list[Key], pad_id: int):
    """`shared_split` of collate's rows (its `keys`, same order), each grouped by its ranking."""
    group = key_groups(batch)
    return shared_split(keys, [group[k] for k in keys], pad_id)


def chunk_response(keys: list[Key], offset: list[int], width: int) -> torch.Tensor:
    """(U, width - 1): 1 where chunk position t + 1 is a response token of row u (the chunk starts at
    sequence position offset[u]); lines up with the chunk's logits[:, :-1], as `collate`'s mask does whole."""
    response = torch.zeros((len(keys), width - 1), dtype=torch.float32)
    for i, ((start, seq), o) in enumerate(zip(keys, offset, strict=True)):
        response[i, max(start, 1) - 1 - o : len(seq) - 1 - o] = 1.0
    return response


def sequence_logprobs(logits: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Sum over the masked positions of log softmax(logits)[label]: logits (B, T, V) predict labels (B, T) (already
    shifted: logits[:, t] predicts labels[:, t]); mask (B, T) is 1 on response tokens, 0 on prompt and padding.
    Returns (B,). The log-softmax is taken in float32 whatever the logits' dtype (bf16 sums lose the small
    differences DPO learns from)."""
    logp = torch.log_softmax(logits.float(), dim=-1).gather(-1, labels.unsqueeze(-1)).squeeze(-1)
    return (logp * mask).sum(-1)
