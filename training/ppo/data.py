"""PPO-ptx's unlabelled text: read from a .txt or .jsonl file (with training/rollouts/prompt_data.py's readers) and cut
into language-modelling batches."""

from __future__ import annotations

import random
from pathlib import Path

from training.models import DataError
from training.rollouts.prompt_data import file_texts, guarded


def read_texts(source: str) -> list[str]:
    """Unlabelled text for PPO-ptx: .txt (one text per line) or .jsonl (a "text" field per line), non-empty."""
    path = Path(source)

    def read() -> list[str]:
        texts = file_texts(path, "text")
        if texts is not None:
            return texts
        if path.exists():
            raise DataError(f"{source}: unsupervised text comes from a .txt or .jsonl file")
        raise DataError(f"{source}: no such unsupervised data file")

    texts = guarded(source, "unsupervised data", read)
    out = [t for t in texts if t.strip()]
    if not out:
        raise DataError(f"{source}: no text")
    return out


def unsup_batch(texts: list[list[int]], batch_size: int, seed: int, index: int, pad_id: int):
    """The `index`-th language-modelling batch (input_ids, attention_mask, labels; pad positions labelled -100):
    batches cycle through a fixed shuffle of the texts, so a resumed run takes the same ones."""
    import torch

    order = list(range(len(texts)))
    random.Random(f"unsup:{seed}").shuffle(order)
    rows = [texts[order[(index * batch_size + j) % len(texts)]] for j in range(batch_size)]
    width = max(len(r) for r in rows)
    ids = torch.full((batch_size, width), pad_id, dtype=torch.long)
    mask = torch.zeros((batch_size, width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = torch.tensor(r)
        mask[i, : len(r)] = 1
    return ids, mask, ids.masked_fill(mask == 0, -100)
