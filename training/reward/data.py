"""Pairs for reward-model training, read from a store snapshot (or a pairs file) without the database, tokenised
the way the PPO rollout will present sequences to the reward model:

    chat_template(prompt, add_generation_prompt) + response + EOS

so the score is read on the EOS token the policy emits, never on a different ending (a DeepSpeed-Chat pitfall)."""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq

REQUIRED = ("prompt", "chosen", "rejected")


class DataError(ValueError):
    """Unusable training data; the message is one line for the user."""


def _read_table(path: Path) -> list[dict]:
    try:
        if path.suffix == ".parquet":
            rows = pq.read_table(path).to_pylist()
        elif path.suffix == ".jsonl":
            rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        else:
            raise DataError(f"{path}: pairs come from a snapshot folder, .jsonl or .parquet")
    except (OSError, ValueError) as e:
        if isinstance(e, DataError):
            raise
        raise DataError(f"cannot read pairs from {path}: {str(e).splitlines()[0][:200]}") from None
    return rows


def _check(rows: list[dict], where: str) -> list[dict]:
    if not rows:
        raise DataError(f"{where}: no pairs")
    missing = [c for c in REQUIRED if c not in rows[0]]
    if missing:
        raise DataError(f"{where}: the pairs have no {missing[0]!r} column")
    for n, r in enumerate(rows, 1):
        if not all(isinstance(r.get(c), str) for c in REQUIRED):
            raise DataError(f"{where} row {n}: prompt, chosen and rejected must be text")
    return rows


def _split_by_prompt(rows: list[dict], eval_fraction: float, seed: int) -> tuple[list[dict], list[dict]]:
    """Same rule as store.snapshot.split_of: a prompt's pairs all land on one side."""

    def is_eval(prompt: str) -> bool:
        return int.from_bytes(hashlib.sha256(f"{seed}:{prompt}".encode()).digest()[:8], "big") / 2**64 < eval_fraction

    train = [r for r in rows if not is_eval(r["prompt"])]
    evals = [r for r in rows if is_eval(r["prompt"])]
    return train, evals


def load_pairs(data: str, eval_fraction: float = 0.1, seed: int = 0) -> tuple[list[dict], list[dict]]:
    """(train rows, eval rows): from a snapshot folder's two files, or split by prompt from one pairs file."""
    path = Path(data)
    if path.is_dir():
        manifest = path / "manifest.json"
        if not manifest.is_file():
            raise DataError(f"{path} is not a snapshot: no manifest.json")
        info = json.loads(manifest.read_text())
        train = _check(_read_table(path / info["splits"]["train"]["file"]), f"{path.name} train")
        evals = _read_table(path / info["splits"]["eval"]["file"])
        return train, (_check(evals, f"{path.name} eval") if evals else [])
    if not path.is_file():
        raise DataError(f"{data}: no such snapshot or pairs file")
    rows = _check(_read_table(path), path.name)
    return _split_by_prompt(rows, eval_fraction, seed)


def chat_prompt(tokenizer, prompt: str) -> str:
    """The prompt as every model sees it: reward-model training, PPO rollouts and scoring all use this one text, so
    the reward model always reads the sequence ending it was trained on."""
    if tokenizer.chat_template:
        return tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=False
        )
    return prompt + "\n"


@dataclass
class Tokenised:
    chosen: list[int]
    rejected: list[int]
    margin: float
    group: object  # ranking id (pairs of one ranking can share a batch)
    truncated: bool


class PairEncoder:
    """Turns (prompt, response) into token ids ending in EOS, cutting prompt tokens from the left when too long."""

    def __init__(self, tokenizer, max_length: int):
        self.tok = tokenizer
        self.max_length = max_length
        self.eos = tokenizer.eos_token

    def prompt_text(self, prompt: str) -> str:
        return chat_prompt(self.tok, prompt)

    def encode(self, prompt: str, response: str) -> tuple[list[int], bool]:
        p = self.tok(self.prompt_text(prompt), add_special_tokens=False)["input_ids"]
        r = self.tok(response + self.eos, add_special_tokens=False)["input_ids"]
        if len(r) >= self.max_length:  # keep the response end (where the score is read) and drop the prompt
            return r[-self.max_length :], True
        keep = self.max_length - len(r)
        return p[-keep:] + r, len(p) > keep

    def pair(self, row: dict, margin_scale: float) -> Tokenised:
        c, tc = self.encode(row["prompt"], row["chosen"])
        r, tr = self.encode(row["prompt"], row["rejected"])
        margin = margin_scale * float(row.get("margin") or 1)
        return Tokenised(c, r, margin, row.get("ranking_id", id(row)), tc or tr)


def batches(pairs: list[Tokenised], batch_pairs: int, seed: int, epoch: int, group: bool) -> list[list[Tokenised]]:
    """A deterministic order for (seed, epoch), so a resumed run sees the same batches. With group=True the
    pairs of one ranking stay together (InstructGPT trains all C(K,2) comparisons of a prompt as one element)."""
    rng = random.Random(f"{seed}:{epoch}")
    if not group:
        order = pairs[:]
        rng.shuffle(order)
        return [order[i : i + batch_pairs] for i in range(0, len(order), batch_pairs)]
    groups: dict[object, list[Tokenised]] = {}
    for p in pairs:
        groups.setdefault(p.group, []).append(p)
    units = list(groups.values())
    rng.shuffle(units)
    out, current = [], []
    for unit in units:
        if current and len(current) + len(unit) > batch_pairs:
            out.append(current)
            current = []
        current.extend(unit)
    if current:
        out.append(current)
    return out


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
