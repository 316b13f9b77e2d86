"""The counters the Annotate queue reads on every submit (migration 0009), kept in the same transaction as the
write that changes them, so a submit reads a few rows instead of scanning every response and ranking.

`tasks`: each prompt's current task (its latest round) with its rankable responses, assignments and answers.
`ranking_counts`: rankings, skips and pairs per (annotator, source). Every function runs inside the caller's
transaction; `drift` compares both with the base tables (tests, `rlhf doctor`-style checks)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from store.protocol import Connection


def refresh_tasks(con: Connection, prompt_ids: Iterable[int]) -> None:
    """Recompute these prompts' tasks from the base tables: after their responses, rounds or asking order
    changed (sampling, an import, a round)."""
    ids = sorted({int(p) for p in prompt_ids})
    if ids:
        con.execute("DELETE FROM tasks WHERE prompt_id IN (SELECT unnest(?::BIGINT[]))", [ids])
        con.execute("INSERT INTO tasks SELECT * FROM task_state WHERE prompt_id IN (SELECT unnest(?::BIGINT[]))", [ids])


def count_assignment(con: Connection, prompt_id: int, round_: int, assigned: int, done: int) -> None:
    """An assignment handed out (+1, 0), answered (0, +1), reopened (0, -1) or dropped (-1, 0). One for a round
    that is no longer the prompt's latest counts for nothing (no row matches): the queue hands out the latest."""
    con.execute(
        "UPDATE tasks SET assigned = assigned + ?, done = done + ? WHERE prompt_id = ? AND round = ?",
        [assigned, done, prompt_id, round_],
    )


def count_rankings(con: Connection, rows: Iterable[tuple[str, str, bool, int]], sign: int = 1) -> None:
    """Add (sign=1) or take away (sign=-1) rankings given as (annotator, source, skipped, pairs)."""
    totals: Counter = Counter()
    for annotator, source, skipped, pairs in rows:
        key = (annotator, source)
        totals[key + ("rankings",)] += 0 if skipped else sign
        totals[key + ("skipped",)] += sign if skipped else 0
        totals[key + ("pairs",)] += 0 if skipped else sign * pairs
    for key in sorted({k[:2] for k in totals}):
        values = [totals[key + (c,)] for c in ("rankings", "skipped", "pairs")]
        updated = con.execute(  # an UPDATE of the row, far cheaper in DuckDB than INSERT ... ON CONFLICT
            """UPDATE ranking_counts SET rankings = rankings + ?, skipped = skipped + ?, pairs = pairs + ?
               WHERE annotator = ? AND source = ? RETURNING 1""",
            [*values, *key],
        ).fetchall()
        if not updated:
            con.execute("INSERT INTO ranking_counts VALUES (?, ?, ?, ?, ?)", [*key, *values])


def pairs_of_ranks(ranks: list[int]) -> int:
    """The pairs a ranking expands to: every i, j with rank_i < rank_j (the `pair_ids` view's rule)."""
    return sum(1 for a in ranks for b in ranks if a < b)


def uncount_ranking(con: Connection, ranking_id: int) -> None:
    """Take a ranking about to be deleted out of ranking_counts (call before deleting its items)."""
    row = con.execute(
        """SELECT r.annotator, r.source, r.skipped,
                  (SELECT count(*) FROM ranking_items a JOIN ranking_items b
                     ON a.ranking_id = b.ranking_id AND a.rank < b.rank WHERE a.ranking_id = r.ranking_id)
           FROM rankings r WHERE r.ranking_id = ?""",
        [ranking_id],
    ).fetchone()
    if row is not None:
        count_rankings(con, [row], sign=-1)


def drift(con: Connection) -> dict[str, list]:
    """Rows where the kept counters and the base tables disagree (empty lists: none)."""
    tasks = con.execute(
        """(SELECT 'kept' AS side, * FROM (SELECT * FROM tasks EXCEPT SELECT * FROM task_state))
           UNION ALL (SELECT 'base', * FROM (SELECT * FROM task_state EXCEPT SELECT * FROM tasks))
           ORDER BY 2, 1"""
    ).fetchall()
    counts = con.execute(
        """WITH kept AS (SELECT * FROM ranking_counts WHERE rankings <> 0 OR skipped <> 0 OR pairs <> 0)
           (SELECT 'kept' AS side, * FROM (SELECT * FROM kept EXCEPT SELECT * FROM ranking_count_state))
           UNION ALL (SELECT 'base', * FROM (SELECT * FROM ranking_count_state EXCEPT SELECT * FROM kept))
           ORDER BY 2, 3, 1"""
    ).fetchall()
    return {"tasks": tasks, "ranking_counts": counts}
