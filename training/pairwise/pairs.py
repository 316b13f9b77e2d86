"""Preference pairs as every pairwise trainer reads them (the reward model, DPO), from a snapshot folder (of the store,
or of a pairs file), never the database; tokenised the way the PPO rollout presents a sequence:

    chat_template(prompt, add_generation_prompt) + response + EOS

and put in a deterministic batch order that can keep the pairs of one ranking together."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq

from training.models import DataError, chat_prompt

REQUIRED = ("prompt", "chosen", "rejected")


def read_table(path: Path) -> list[dict]:
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


def check_pairs(rows: list[dict], where: str) -> list[dict]:
    if not rows:
        raise DataError(f"{where}: no pairs")
    missing = [c for c in REQUIRED if c not in rows[0]]
    if missing:
        raise DataError(f"{where}: the pairs have no {missing[0]!r} column")
    for n, r in enumerate(rows, 1):
        if not all(isinstance(r.get(c), str) for c in REQUIRED):
            raise DataError(f"{where} row {n}: prompt, chosen and rejected must be text")
        if not number_or_none(r.get("margin"), float) or not number_or_none(r.get("ranking_id"), int):
            raise DataError(f"{where} row {n}: margin must be a number and ranking_id an integer, where given")
        strength = r.get("strength")
        if strength is not None and (not number_or_none(strength, int) or not 0 <= strength <= 3):
            raise DataError(f"{where} row {n}: strength must be a level 0..3 (the strength question's), where given")
    return rows


def number_or_none(x: object, kind: type) -> bool:
    return x is None or (isinstance(x, int | float) and not isinstance(x, bool) and (kind is float or x == int(x)))


def snapshot_file(folder: Path, split: str) -> Path:
    """The file of one split ("train", "eval") of a snapshot folder, as its manifest.json names it (the trainers'
    one reader of what store/snapshot.py writes)."""
    manifest = folder / "manifest.json"
    if not manifest.is_file():
        raise DataError(f"{folder} is not a snapshot: no manifest.json (`rlhf train-*` freezes a file into one)")
    try:
        return folder / json.loads(manifest.read_text())["splits"][split]["file"]
    except (ValueError, KeyError, TypeError) as e:
        raise DataError(f"{folder}: manifest.json names no {split} file ({type(e).__name__}: {e})") from None


def load_pairs(data: str) -> tuple[list[dict], list[dict]]:
    """(train rows, eval rows) of a snapshot folder: the store's pairs, or a pairs file's, frozen and split by
    prompt by store/snapshot.py (the one split rule)."""
    path = Path(data)
    train = check_pairs(read_table(snapshot_file(path, "train")), f"{path.name} train")
    evals = read_table(snapshot_file(path, "eval"))
    return train, (check_pairs(evals, f"{path.name} eval") if evals else [])


# Llama 2's margins by preference strength (Touvron et al. 2023, table 27, "margin small"): negligibly better or
# unsure 0, slightly better 1/3, better 2/3, significantly better 1 (levels of annotation/questions/strength.py)
STRENGTH_MARGINS = (0.0, 1 / 3, 2 / 3, 1.0)


@dataclass
class Tokenised:
    chosen: list[int]
    rejected: list[int]
    margin: float
    group: object  # ranking id (pairs of one ranking can share a batch)
    truncated: bool
    chosen_start: int = 0  # index of the first response token (DPO's log-probs are over the response only)
    rejected_start: int = 0
    strength: int | None = None  # the annotator's preference strength (annotation/questions/strength.py), where given


class PairEncoder:
    """Turns (prompt, response) into token ids ending in EOS, cutting prompt tokens from the left when too long."""

    def __init__(self, tokenizer, max_length: int):
        self.tok = tokenizer
        self.max_length = max_length
        self.eos = tokenizer.eos_token

    def prompt_text(self, prompt: str) -> str:
        return chat_prompt(self.tok, prompt)

    def encode(self, prompt: str, response: str) -> tuple[list[int], bool]:
        ids, _, truncated = self.encode_response(prompt, response)
        return ids, truncated

    def encode_response(self, prompt: str, response: str) -> tuple[list[int], int, bool]:
        """(ids, index of the first response token in ids, truncated)."""
        p = self.tok(self.prompt_text(prompt), add_special_tokens=False)["input_ids"]
        r = self.tok(response + self.eos, add_special_tokens=False)["input_ids"]
        if len(r) >= self.max_length:  # keep the response end (where the score is read) and drop the prompt
            return r[-self.max_length :], 0, True
        keep = self.max_length - len(r)
        kept = p[-keep:]
        return kept + r, len(kept), len(p) > keep

    def pair(self, row: dict, margin_scale: float, margin_from: str = "rank") -> Tokenised:
        """margin_from: 'rank' (scale x the rank gap, 1 where none is given) or 'strength' (scale x Llama 2's
        margin for the pair's strength, 0 where none is given)."""
        c, cs, tc = self.encode_response(row["prompt"], row["chosen"])
        r, rs, tr = self.encode_response(row["prompt"], row["rejected"])
        strength = row.get("strength")
        strength = None if strength is None or strength != strength else int(strength)  # NaN: a parquet null
        if margin_from == "strength":
            margin = margin_scale * (0.0 if strength is None else STRENGTH_MARGINS[strength])
        else:
            margin = margin_scale * float(row.get("margin") or 1)
        group = row.get("ranking_id")  # a vote's or a file's pair without one is a unit of its own
        return Tokenised(c, r, margin, id(row) if group is None else group, tc or tr, cs, rs, strength)


def batches(pairs: list, batch_pairs: int, seed: int, epoch: int, group: bool) -> list[list]:
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
    return pack(units, batch_pairs)


def pack(units: list[list], size: int) -> list[list]:
    """Whole units (a ranking's pairs or sequences), in order, in batches of at most `size` items (a larger unit on
    its own)."""
    out, current = [], []
    for unit in units:
        if current and len(current) + len(unit) > size:
            out.append(current)
            current = []
        current += unit
    return out + ([current] if current else [])


def step_plan(cfg, train_pairs: list, world: int) -> tuple[int, int]:
    """(batches per rank per epoch, optimizer steps in all) for a trainer on pairs."""
    per_epoch = len(batches(train_pairs, cfg.batch_pairs, cfg.seed, 0, cfg.group_by_ranking)) // world
    if per_epoch == 0:
        raise ValueError(f"{len(train_pairs)} training pairs are fewer than one batch per rank")
    return per_epoch, cfg.max_steps or max(1, per_epoch // cfg.grad_accum) * cfg.epochs


def rank_batches(cfg, train_pairs: list, epoch: int, rank: int, world: int, per_epoch: int) -> list:
    """This rank's batches of an epoch: every rank the same count, in the order fixed by (seed, epoch)."""
    return batches(train_pairs, cfg.batch_pairs, cfg.seed, epoch, cfg.group_by_ranking)[rank::world][:per_epoch]
