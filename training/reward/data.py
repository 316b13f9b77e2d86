"""Reward-model batches: each distinct sequence of a batch scored once (training/pairwise/pairs.py reads and tokenises
the pairs, shared with DPO)."""

from __future__ import annotations

from training.pairwise.pairs import PairEncoder, Tokenised, batches

__all__ = ["PairEncoder", "Tokenised", "batches", "collate"]


def collate(batch: list[Tokenised], pad_id: int):
    """(input_ids (U, T), attention_mask (U, T), chosen_index (B,), rejected_index (B,), margin (B,)).

    Each distinct sequence of the batch appears once (U <= 2B), right-padded: the C(K,2) pairs of a K-way ranking
    kept together (--group-by-ranking) need K forward rows, not K(K-1). chosen_index[i] is the row of pair i's
    chosen sequence."""
    import torch

    rows: dict[tuple[int, ...], int] = {}
    for p in batch:
        for seq in (p.chosen, p.rejected):
            rows.setdefault(tuple(seq), len(rows))
    width = max(len(s) for s in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for seq, i in rows.items():
        ids[i, : len(seq)] = torch.tensor(seq)
        mask[i, : len(seq)] = 1
    chosen = torch.tensor([rows[tuple(p.chosen)] for p in batch])
    rejected = torch.tensor([rows[tuple(p.rejected)] for p in batch])
    return ids, mask, chosen, rejected, torch.tensor([p.margin for p in batch], dtype=torch.float32)


def shared_rows(batch: list[Tokenised], pad_id: int):
    """collate's rows (same order) split for prefix sharing (training/pairwise/prefix.py), a ranking's responses sharing
    their prompt; the score is read at a row's last token, so each chunk keeps at least that one. None when no two
    rows of a ranking share a prefix."""
    from training.pairwise.prefix import split

    rows: dict[tuple[int, ...], object] = {}
    for p in batch:
        for seq in (p.chosen, p.rejected):
            rows.setdefault(tuple(seq), p.group)
    seqs = list(rows)
    return split(seqs, list(rows.values()), [len(s) - 1 for s in seqs], pad_id)
