"""Blind side-by-side votes from the Compare tab, stored as rankings with source 'compare': the two replies are
responses of the prompt (with the model, sampling parameters and seed that made them), the vote is their ranks."""

from __future__ import annotations

import duckdb

from store.prompts import prompt_ids
from store.rankings import RankedItem, RankingIn, insert_rankings
from store.responses import Sample, add_samples

CHOICES = ("left", "right", "tie", "both_bad")


def record_vote(
    con: duckdb.DuckDBPyConnection,
    prompt: str,
    replies: list[tuple[str, str]],
    choice: str,
    annotator: str,
    params: dict,
    seed: int,
    flags: list[str] | None = None,
) -> int:
    """replies: [(text, model_id) for left, right]. left/right: that side ranks 1, the other 2; tie: both 1 (no
    pair); both_bad: stored as skipped with the reason (no pair). Returns the ranking id."""
    if choice not in CHOICES:
        raise ValueError(f"unknown vote {choice!r}: one of {', '.join(CHOICES)}")
    (pid,) = prompt_ids(con, [prompt], source="compare").values()
    ids = []
    for position, (text, model_id) in enumerate(replies):
        add_samples(con, [Sample(pid, text, position, 0, "", seed, params)], model_id)
        ids.append(con.execute("SELECT max(response_id) FROM responses WHERE prompt_id = ?", [pid]).fetchone()[0])
    ranks = {"left": (1, 2), "right": (2, 1), "tie": (1, 1), "both_bad": (1, 1)}[choice]
    items = [
        RankedItem(text, rank, shown, rid)
        for (text, _), rank, shown, rid in zip(replies, ranks, (0, 1), ids, strict=True)
    ]
    same = replies[0][0] == replies[1][0]
    ranking = RankingIn(
        prompt,
        items,
        annotator,
        "compare",
        flags=list(flags or []),
        skipped=choice == "both_bad" or same,
        skip_reason="both bad" if choice == "both_bad" else ("identical replies" if same else None),
    )
    insert_rankings(con, [ranking])
    return con.execute("SELECT max(ranking_id) FROM rankings WHERE source = 'compare'").fetchone()[0]


def compare_votes(con: duckdb.DuckDBPyConnection) -> list[tuple[str, str, str]]:
    """(model of the left reply, model of the right reply, outcome) for every compare vote, oldest first;
    outcome is 'left', 'right', 'tie' or 'both_bad'."""
    rows = con.execute(
        """SELECT r.ranking_id, r.skipped, r.skip_reason, i.shown_position, i.rank, s.model_id
           FROM rankings r JOIN ranking_items i USING (ranking_id) JOIN responses s USING (response_id)
           WHERE r.source = 'compare' ORDER BY r.ranking_id, i.shown_position"""
    ).fetchall()
    votes: dict[int, list] = {}
    for rid, skipped, reason, _, rank, model in rows:
        votes.setdefault(rid, [skipped, reason, []])[2].append((rank, model))
    out = []
    for skipped, reason, sides in votes.values():
        if len(sides) != 2:
            continue
        (rl, ml), (rr, mr) = sides
        if skipped:
            outcome = "both_bad" if reason == "both bad" else "tie"
        else:
            outcome = "tie" if rl == rr else ("left" if rl < rr else "right")
        out.append((ml, mr, outcome))
    return out
