"""Gold prompts (migration 0010): marking rankings as their prompt's reference answer, reading them back, and the
annotators' rankings of gold prompts beside the gold ones (annotation/gold.py scores them). Every function runs
inside the caller's transaction."""

from __future__ import annotations

from dataclasses import dataclass

from store.errors import UserError
from store.protocol import Connection


@dataclass(frozen=True)
class Gold:
    prompt_id: int
    ranking_id: int
    annotator: str  # who made the gold ranking
    marked_by: str
    marked_at: str


def mark_gold(con: Connection, ranking_ids: list[int], by: str) -> int:
    """Mark these rankings as their prompts' gold answers (a prompt's earlier gold is replaced); returns how many.
    An unknown id, a skip, or two rankings of one prompt is a UserError and marks nothing."""
    ids = sorted({int(r) for r in ranking_ids})
    if not ids:
        raise UserError("name at least one ranking to mark as gold")
    rows = con.execute(
        "SELECT ranking_id, prompt_id, skipped FROM rankings WHERE ranking_id IN (SELECT unnest(?::BIGINT[]))", [ids]
    ).fetchall()
    found = {r: (p, s) for r, p, s in rows}
    missing = [r for r in ids if r not in found]
    if missing:
        raise UserError(f"no ranking {missing[0]} in the store")
    skipped = [r for r in ids if found[r][1]]
    if skipped:
        raise UserError(f"ranking {skipped[0]} is a skip: only a ranking can be gold")
    prompts = [found[r][0] for r in ids]
    if len(set(prompts)) < len(prompts):
        raise UserError("two of these rankings are of the same prompt: a prompt has one gold ranking")
    con.execute("DELETE FROM gold WHERE prompt_id IN (SELECT unnest(?::BIGINT[]))", [prompts])
    con.execute("DELETE FROM gold WHERE ranking_id IN (SELECT unnest(?::BIGINT[]))", [ids])
    con.execute(
        "INSERT INTO gold (prompt_id, ranking_id, marked_by) SELECT unnest(?::BIGINT[]), unnest(?::BIGINT[]), ?",
        [prompts, ids, by],
    )
    return len(ids)


def latest_rankings_of(con: Connection, annotator: str) -> list[int]:
    """The ids of an annotator's rankings (not skips), the latest one per prompt: what `rlhf gold add --annotator`
    marks (a lead's own answers)."""
    rows = con.execute(
        """SELECT max(ranking_id) FROM rankings WHERE annotator = ? AND NOT skipped
           GROUP BY prompt_id ORDER BY 1""",
        [annotator],
    ).fetchall()
    return [r for (r,) in rows]


def unmark_gold(con: Connection, prompt_ids: list[int]) -> int:
    """These prompts are gold no more; returns how many were."""
    n = con.execute(
        "SELECT count(*) FROM gold WHERE prompt_id IN (SELECT unnest(?::BIGINT[]))", [list(prompt_ids)]
    ).fetchone()[0]
    con.execute("DELETE FROM gold WHERE prompt_id IN (SELECT unnest(?::BIGINT[]))", [list(prompt_ids)])
    return n


def unmark_ranking(con: Connection, ranking_id: int) -> None:
    """A ranking that is deleted (undone) is no longer its prompt's gold."""
    con.execute("DELETE FROM gold WHERE ranking_id = ?", [ranking_id])


def gold_list(con: Connection) -> list[Gold]:
    rows = con.execute(
        """SELECT g.prompt_id, g.ranking_id, r.annotator, g.marked_by, g.marked_at::VARCHAR
           FROM gold g JOIN rankings r USING (ranking_id) ORDER BY g.prompt_id"""
    ).fetchall()
    return [Gold(*row) for row in rows]


def gold_answers(con: Connection) -> list[tuple[str, dict[int, int], dict[int, int] | None]]:
    """(annotator, the gold ranking's {response id: rank}, theirs) for every answer of a gold prompt other than the
    gold ranking itself, in ranking order. A skip's ranks are None; an all-bad answer without an edit ties every
    response the gold ranking has (it said none is better than another)."""
    rows = con.execute(
        """WITH ranks AS (SELECT ranking_id, map_from_entries(list((response_id, rank))) AS m
                          FROM ranking_items WHERE ranking_id IN (
                              SELECT ranking_id FROM gold
                              UNION ALL
                              SELECT r.ranking_id FROM rankings r JOIN gold g USING (prompt_id))
                          GROUP BY ranking_id)
           SELECT r.annotator, gr.m, mine.m, r.skipped, coalesce(r.all_bad, false)
           FROM rankings r JOIN gold g USING (prompt_id)
           JOIN ranks gr ON gr.ranking_id = g.ranking_id LEFT JOIN ranks mine ON mine.ranking_id = r.ranking_id
           WHERE r.ranking_id <> g.ranking_id ORDER BY r.ranking_id"""
    ).fetchall()
    out = []
    for annotator, gold, mine, skipped, all_bad in rows:
        if skipped:
            mine = dict.fromkeys(dict(gold), 1) if all_bad else None
        out.append((annotator, dict(gold), None if mine is None else dict(mine)))
    return out
