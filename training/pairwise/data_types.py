"""The kinds of data a trainer asks for (its registry entry's `data`), one list, with TRL's names where it has one:

- pairs: prompt, chosen, rejected (TRL's preference type): a ranking's C(K,2) pairs, a Compare vote, a pairs file;
- unpaired: prompt, completion, label (TRL's unpaired preference type): a thumbs up (True) or down (False) on one
  response; from an unpaired file, or from pairs by `unpaired_from_pairs` (the one conversion);
- prompts: prompts as text or conversations, for the trainers that sample their own responses (PPO, RLOO, ...).

Pairs and unpaired rows reach a trainer the same way: frozen into a snapshot folder (store/snapshot.py) whose
manifest names its data type; a trainer on unpaired data reads a pairs snapshot through the conversion. Imports no
torch (the CLI and the app check files with it)."""

from __future__ import annotations

import json
from pathlib import Path

from training.models import DataError
from training.pairwise.pairs import check_pairs, number_or_none, read_table, snapshot_file

DATA_TYPES = {
    "pairs": "prompt, chosen, rejected: a ranking's C(K,2) pairs, a vote, a pairs file",
    "unpaired": "prompt, completion, label: a thumbs up or down on one response (or pairs split by net wins)",
    "prompts": "prompts as text or conversations: the trainer samples its own responses",
}
SNAPSHOT_TYPES = ("pairs", "unpaired")  # frozen into a snapshot folder (a store snapshot or a file); prompts are not
UNPAIRED = ("prompt", "completion", "label")


def takes_snapshot(data: str) -> bool:
    """A trainer on `data` trains on a snapshot of the store or of a file given with --pairs (pairs, unpaired)."""
    if data not in DATA_TYPES:
        raise ValueError(f"unknown data type {data!r}: one of {', '.join(DATA_TYPES)}")
    return data in SNAPSHOT_TYPES


def unpaired_from_pairs(rows: list[dict]) -> list[dict]:
    """Pairs -> unpaired rows, one per (ranking, prompt, response): desirable (label True) where the response wins
    more of its ranking's pairs than it loses, undesirable where it loses more, left out on a tie. A K-way ranking
    of distinct responses gives its top floor(K/2) as desirable and its bottom floor(K/2) as undesirable (the middle
    one of an odd K is left out); a pair with no ranking (a vote, a file's pair) gives its chosen as desirable and
    its rejected as undesirable. TRL's unpair_preference_dataset instead labels every pair's two sides, which gives
    a ranking's middle responses both labels. Order: first appearance; `ranking_id` is kept where given."""
    wins: dict[tuple, int] = {}
    first: dict[tuple, dict] = {}
    for n, r in enumerate(rows):
        group = ("pair", n) if r.get("ranking_id") is None else ("ranking", r["ranking_id"])
        for side, sign in (("chosen", 1), ("rejected", -1)):
            key = (group, r["prompt"], r[side])
            wins[key] = wins.get(key, 0) + sign
            first.setdefault(key, {"prompt": r["prompt"], "completion": r[side], "ranking_id": r.get("ranking_id")})
    return [{**first[k], "label": w > 0} for k, w in wins.items() if w != 0]


def check_unpaired(rows: list[dict], where: str) -> list[dict]:
    """Unpaired rows checked: prompt and completion text, label a boolean, ranking_id an integer where given."""
    if not rows:
        raise DataError(f"{where}: no rows")
    missing = [c for c in UNPAIRED if c not in rows[0]]
    if missing:
        raise DataError(f"{where}: unpaired rows have no {missing[0]!r} column (prompt, completion, label)")
    for n, r in enumerate(rows, 1):
        if not isinstance(r.get("prompt"), str) or not isinstance(r.get("completion"), str):
            raise DataError(f"{where} row {n}: prompt and completion must be text")
        if not isinstance(r.get("label"), bool):
            raise DataError(f"{where} row {n}: label must be true (desirable) or false (undesirable)")
        if not number_or_none(r.get("ranking_id"), int):
            raise DataError(f"{where} row {n}: ranking_id must be an integer, where given")
    return rows


def read_data_file(path: str | Path, data: str) -> tuple[str, list[dict]]:
    """A file given with --pairs, for a trainer on `data`: (its data type, its rows checked). A trainer on pairs
    takes pairs; one on unpaired data takes unpaired rows (prompt, completion, label) or pairs (converted when read
    from the snapshot)."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: no such snapshot or pairs file")
    rows = read_table(path)
    if data == "unpaired" and rows and "completion" in rows[0]:
        return "unpaired", check_unpaired(rows, path.name)
    return "pairs", check_pairs(rows, path.name)


def snapshot_type(folder: str | Path) -> str:
    """The data type a snapshot folder's manifest names ("pairs" for the snapshots written before it said)."""
    try:
        manifest = json.loads((Path(folder) / "manifest.json").read_text())
    except (OSError, ValueError) as e:
        raise DataError(f"{folder} is not a snapshot: {type(e).__name__}: {e}") from None
    kind = manifest.get("data", "pairs")
    if kind not in SNAPSHOT_TYPES:
        raise DataError(f"{folder}: manifest.json names data type {kind!r}, not pairs or unpaired")
    return kind


def thumbs_of(folder: Path, split: str) -> list[dict]:
    """A pairs snapshot's thumbs of one split (store/snapshot.py writes them for a trainer on unpaired data: an
    all-bad task's responses and a both-bad vote's replies down, a "best good" answer's first-ranked up or down),
    checked; none where it has no thumbs file."""
    entry = json.loads((folder / "manifest.json").read_text())["splits"][split].get("thumbs")
    if not entry:
        return []
    rows = read_table(folder / entry["file"])
    return check_unpaired(rows, f"{folder.name} {entry['file']}") if rows else []


def load_unpaired(data: str) -> tuple[list[dict], list[dict]]:
    """(train rows, eval rows) of unpaired data from a snapshot folder: as frozen, or a pairs snapshot converted by
    `unpaired_from_pairs` (each split on its own: the split is by prompt, so no ranking straddles it)."""
    folder = Path(data)
    if snapshot_type(folder) == "pairs":
        from training.pairwise.pairs import load_pairs

        train, evals = load_pairs(data)
        train, evals = unpaired_from_pairs(train) + thumbs_of(folder, "train"), unpaired_from_pairs(evals)
        return check_unpaired(train, f"{folder.name} train"), evals + thumbs_of(folder, "eval")
    train = check_unpaired(read_table(snapshot_file(folder, "train")), f"{folder.name} train")
    evals = read_table(snapshot_file(folder, "eval"))
    return train, (check_unpaired(evals, f"{folder.name} eval") if evals else [])
