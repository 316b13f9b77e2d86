"""What a user can do to the data, as plain functions returning one summary line. The CLI and the app's Data tab
both call these; a UserError carries the one-line message for a mistake."""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

from annotation.agreement import pairwise_agreement
from annotation.labelstudio_export import export_ls
from annotation.prompt_files import read_prompts
from store.db import StoreRef, read, write
from store.pairs import export_pairs, rankings_for_agreement, stats
from store.prompts import add_prompts
from store.responses import rankable_sets

EXAMPLE_PROMPTS = "example_prompts.txt"


def example_prompts_path() -> Path:
    return Path(str(resources.files("annotation").joinpath("data", EXAMPLE_PROMPTS)))


def add_prompt_file(db: StoreRef, path: str | os.PathLike, source: str | None = None) -> str:
    texts = read_prompts(path)
    with write(db) as con:
        added, already = add_prompts(con, texts, source=source or os.path.basename(path))
    return f"prompts: {added} added, {already} already in the store"


def add_example_prompts(db: StoreRef) -> str:
    return add_prompt_file(db, example_prompts_path(), source="example")


def write_pairs_file(db: StoreRef, out: str | os.PathLike, drop_flagged: bool = False, with_votes: bool = False) -> str:
    with read(db, create=False) as con:  # the file and its count see the same pairs
        n = export_pairs(con, out, drop_flagged=drop_flagged, with_votes=with_votes)
    return f"wrote {n} pairs to {out}" + (" (the Compare tab's decided votes included)" if with_votes else "")


def write_trl_pairs(
    db: StoreRef,
    out: str | os.PathLike,
    drop_flagged: bool = False,
    with_votes: bool = False,
    conversational: bool = False,
) -> str:
    """The store's pairs in TRL's preference format (annotation/preference_files.py) to a .jsonl or .parquet file
    or a `datasets` folder; conversational: in its conversational form whatever the prompts (`--format
    openrlhf`)."""
    from annotation.preference_files import trl_rows, write_trl
    from store.pairs import pair_texts

    with read(db, create=False) as con:
        rows = pair_texts(con, drop_flagged, with_votes)
    write_trl(trl_rows(rows, conversational), out)
    form = "OpenRLHF's chat form" if conversational else "TRL's format"
    return f"wrote {len(rows)} pairs in {form} (prompt, chosen, rejected) to {out}"


def write_ls_export(db: StoreRef, out: str | os.PathLike, seed: int = 0) -> tuple[Path, Path, int]:
    """Label Studio Ranker tasks + labeling config in folder OUT: (tasks file, config file, number of tasks)."""
    with read(db, create=False) as con:
        sets = rankable_sets(con)
    return export_ls(sets, out, seed=seed)


def agreement(db: StoreRef) -> list[dict]:
    """Mean Kendall tau-b per pair of annotators over the prompts both ranked (rlhf ui --overlap 2+)."""
    with read(db, create=False) as con:
        return pairwise_agreement(rankings_for_agreement(con))


def store_stats(db: StoreRef) -> dict:
    with read(db, create=False) as con:
        return stats(con)


def stats_lines(s: dict) -> list[str]:
    lines = [
        f"prompts {s['prompts']} ({s['prompts_with_responses']} with responses, {s['prompts_pending']} pending)",
        f"responses {s['responses']} ({s['duplicate_responses']} identical to another sample)",
        f"rankings {s['rankings']} (skipped {s['skipped']}, flagged {s['flagged']})",
        f"pairs {s['pairs']} (tied pairs left out: {s['tied_pairs']})",
    ]
    lines += [
        f"  {a['annotator']}: {_n(a['rankings'], 'ranking')}, {a['skipped']} skipped, {_n(a['pairs'], 'pair')}"
        for a in s["annotators"]
    ]
    return lines


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def set_guideline_text(db: StoreRef, text: str, author: str) -> str:
    """Make `text` the campaign's guideline (store/guidelines.py): a new version, shown with every task handed out
    from now on; the same text as the current one keeps its version."""
    from store.errors import UserError
    from store.guidelines import current_guideline, guideline_problem, set_guideline

    if problem := guideline_problem(text):
        raise UserError(problem)
    with write(db) as con:
        before = current_guideline(con)
        version = set_guideline(con, text, author)
    if before is not None and before[0] == version:
        return f"guideline: unchanged (version {version})"
    return f"guideline: version {version} set by {author}; tasks handed out from now on show it"


def guideline_lines(db: StoreRef) -> list[str]:
    """The current guideline and every version's author and rankings, for `rlhf guideline`."""
    from store.guidelines import current_guideline, guideline_versions

    with read(db, create=False) as con:
        current = current_guideline(con)
        versions = guideline_versions(con)
    if current is None:
        return ["no guideline set: `rlhf guideline --set FILE.md` (or the Data tab) sets one"]
    lines = [f"version {v}: set by {who} at {at:%Y-%m-%d %H:%M}, {n} answers" for v, who, at, n in versions]
    return [*lines, "", current[1]]
