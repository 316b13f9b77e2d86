"""KTO's rows as the policy and the reference score them: each unpaired row is one sequence (prompt + completion +
EOS, as every trainer presents it) and its KL partner, the same prompt with another row's completion (TRL's
mismatched pairs). The partners are fixed once, by a seeded shuffle rotated by one, so the reference scores every
sequence the run will ever see before training."""

from __future__ import annotations

import random
from dataclasses import dataclass

from training.pairwise.pairs import PairEncoder
from training.pairwise.sequences import Key


@dataclass
class Row:
    key: Key  # (response start, token ids) of prompt + completion
    kl: Key  # the same prompt with another row's completion
    desirable: bool
    group: object  # the ranking (or the row's prompt) it came from: a batch keeps a group together
    truncated: bool


def encode_rows(enc: PairEncoder, rows: list[dict], seed: int) -> list[Row]:
    """Unpaired rows (prompt, completion, label, ranking_id) tokenised, each with its KL partner."""
    order = list(range(len(rows)))
    random.Random(f"kto-kl:{seed}").shuffle(order)
    partner = {order[i]: order[i - 1] for i in range(len(order))}  # rotated by one: another row where there is one
    out = []
    for n, r in enumerate(rows):
        ids, start, cut = enc.encode_response(r["prompt"], r["completion"])
        kl_ids, kl_start, _ = enc.encode_response(r["prompt"], rows[partner[n]]["completion"])
        group = r.get("ranking_id")
        group = ("prompt", r["prompt"]) if group is None else ("ranking", group)
        out.append(Row((start, tuple(ids)), (kl_start, tuple(kl_ids)), bool(r["label"]), group, cut))
    return out


def key_groups(rows: list[Row]) -> dict[Key, object]:
    """Every distinct sequence, the rows' and their partners' (first-seen order), and the group it goes through the
    model with (a partner with its row's group: same prompt, so with prefix sharing it shares the row's prefix)."""
    out: dict[Key, object] = {}
    for r in rows:
        out.setdefault(r.key, r.group)
    for r in rows:
        out.setdefault(r.kl, ("kl", r.group))
    return out


def distinct(keys: list[Key]) -> tuple[list[Key], list[int]]:
    """(the distinct keys in first-seen order, each input's index among them)."""
    index: dict[Key, int] = {}
    for k in keys:
        index.setdefault(k, len(index))
    return list(index), [index[k] for k in keys]
