"""Handing prompts to annotators (migration 0002). All functions run inside the caller's transaction."""

from __future__ import annotations

import random
from dataclasses import dataclass

import duckdb

# Responses an annotator can rank: not an identical repeat of another sample, not empty. ltrim, not trim: the same
# test (blank = spaces only), but it stops at the first other character where trim reads every text to its end,
# and this runs over every response twice per submit (10x less CPU on 10,000 responses).
RANKABLE = "r.duplicate_of IS NULL AND ltrim(r.text) <> ''"


def open_assignment(con: duckdb.DuckDBPyConnection, annotator: str) -> tuple | None:
    """(assignment_id, prompt_id, shown_order, seconds since assigned) of the annotator's open assignment."""
    return con.execute(
        """SELECT assignment_id, prompt_id, shown_order,
                  date_diff('millisecond', assigned_at, current_timestamp::TIMESTAMP) / 1000.0
           FROM assignments WHERE annotator = ? AND status = 'open' ORDER BY assignment_id LIMIT 1""",
        [annotator],
    ).fetchone()


def claim_next(
    con: duckdb.DuckDBPyConnection, annotator: str, overlap: int, rng: random.Random
) -> tuple[int, int, list[int]] | None:
    """Assign the next prompt this annotator has not had and fewer than `overlap` annotators have had.

    Every browser ranking comes from an assignment, so assignments alone say who has (had) a prompt. A prompt asked
    again in a later round (store/rounds.py) is a new task: only its latest round's responses are shown, and only
    that round's assignments count. Prompts with the fewest annotators go first, then the newest round's, in the
    order its selection chose them, then the oldest. Returns (assignment id, prompt id, shown order), or None."""
    row = con.execute(
        f"""WITH cur AS (SELECT prompt_id, max(round) AS round FROM response_round GROUP BY prompt_id),
                 held AS (SELECT a.prompt_id, count(*) AS n, bool_or(a.annotator = ?) AS mine
                          FROM assignments a JOIN response_round x ON x.response_id = a.shown_order[1]
                          JOIN cur ON cur.prompt_id = a.prompt_id AND cur.round = x.round
                          GROUP BY a.prompt_id),
                 rankable AS (SELECT r.prompt_id FROM responses r JOIN response_round x USING (response_id)
                              JOIN cur ON cur.prompt_id = r.prompt_id AND cur.round = x.round
                              WHERE {RANKABLE} GROUP BY r.prompt_id HAVING count(*) >= 2)
            SELECT k.prompt_id, cur.round FROM rankable k JOIN cur USING (prompt_id) LEFT JOIN held h USING (prompt_id)
            LEFT JOIN round_prompts q ON q.prompt_id = k.prompt_id AND q.round = cur.round
            WHERE coalesce(h.n, 0) < ? AND NOT coalesce(h.mine, false)
            ORDER BY coalesce(h.n, 0), cur.round DESC, q.position NULLS LAST, k.prompt_id LIMIT 1""",
        [annotator, overlap],
    ).fetchone()
    if row is None:
        return None
    ids = [
        i
        for (i,) in con.execute(
            f"""SELECT r.response_id FROM responses r JOIN response_round x USING (response_id)
                WHERE r.prompt_id = ? AND x.round = ? AND {RANKABLE} ORDER BY r.response_id""",
            [row[0], row[1]],
        ).fetchall()
    ]
    rng.shuffle(ids)  # each annotator sees their own order; it is stored with the ranking
    assignment_id = con.execute(
        "INSERT INTO assignments (prompt_id, annotator, shown_order) VALUES (?, ?, ?) RETURNING assignment_id",
        [row[0], annotator, ids],
    ).fetchone()[0]
    return assignment_id, row[0], ids


def get_assignment(con: duckdb.DuckDBPyConnection, assignment_id: int) -> tuple | None:
    """(annotator, prompt_id, shown_order, status, ranking_id, seconds since assigned)."""
    return con.execute(
        """SELECT annotator, prompt_id, shown_order, status, ranking_id,
                  date_diff('millisecond', assigned_at, current_timestamp::TIMESTAMP) / 1000.0
           FROM assignments WHERE assignment_id = ?""",
        [assignment_id],
    ).fetchone()


def close_assignment(con: duckdb.DuckDBPyConnection, assignment_id: int, ranking_id: int) -> None:
    con.execute(
        "UPDATE assignments SET status = 'done', ranking_id = ?, closed_at = current_timestamp WHERE assignment_id = ?",
        [ranking_id, assignment_id],
    )


def last_closed(con: duckdb.DuckDBPyConnection, annotator: str) -> tuple | None:
    """(assignment_id, ranking_id) of the annotator's most recently closed assignment."""
    return con.execute(
        """SELECT assignment_id, ranking_id FROM assignments
           WHERE annotator = ? AND status = 'done' ORDER BY closed_at DESC, assignment_id DESC LIMIT 1""",
        [annotator],
    ).fetchone()


def reopen(con: duckdb.DuckDBPyConnection, assignment_id: int) -> None:
    """Back to 'open' (for undo/edit): the clock for the lead time starts again."""
    con.execute(
        """UPDATE assignments SET status = 'open', ranking_id = NULL, closed_at = NULL,
                  assigned_at = current_timestamp WHERE assignment_id = ?""",
        [assignment_id],
    )


def is_undone(con: duckdb.DuckDBPyConnection, assignment_id: int) -> bool:
    """Whether this open task is one an undo handed back (a second undo would reach the answer before it)."""
    return (
        con.execute("SELECT count(*) FROM undone_rankings WHERE assignment_id = ?", [assignment_id]).fetchone()[0] > 0
    )


def keep_undone(con: duckdb.DuckDBPyConnection, ranking_id: int, assignment_id: int) -> None:
    """Copy a ranking (or skip) about to be undone into undone_rankings, in the caller's transaction."""
    con.execute(
        """INSERT INTO undone_rankings (ranking_id, assignment_id, prompt_id, annotator, skipped, skip_reason,
                                        response_ids, ranks, ranked_at)
           SELECT r.ranking_id, ?, r.prompt_id, r.annotator, r.skipped, r.skip_reason,
                  coalesce(list(i.response_id ORDER BY i.shown_position) FILTER (i.response_id IS NOT NULL), []),
                  coalesce(list(i.rank ORDER BY i.shown_position) FILTER (i.response_id IS NOT NULL), []),
                  r.created_at
           FROM rankings r LEFT JOIN ranking_items i USING (ranking_id) WHERE r.ranking_id = ?
           GROUP BY ALL""",
        [assignment_id, ranking_id],
    )


@dataclass
class Undone:
    """One undone answer, as `rlhf undone` lists it."""

    undo_id: int
    annotator: str
    prompt_id: int
    ranking_id: int
    skipped: bool
    skip_reason: str | None
    response_ids: list[int]
    ranks: list[int]
    ranked_at: str
    undone_at: str


def undone(con: duckdb.DuckDBPyConnection, annotator: str | None = None) -> list[Undone]:
    """Every undone answer (one annotator's with `annotator`), oldest first."""
    rows = con.execute(
        """SELECT undo_id, annotator, prompt_id, ranking_id, skipped, skip_reason, response_ids, ranks,
                  strftime(ranked_at, '%Y-%m-%d %H:%M:%S'), strftime(undone_at, '%Y-%m-%d %H:%M:%S')
           FROM undone_rankings WHERE ? IS NULL OR annotator = ? ORDER BY undo_id""",
        [annotator, annotator],
    ).fetchall()
    return [Undone(*row) for row in rows]


def delete_ranking(con: duckdb.DuckDBPyConnection, ranking_id: int) -> None:
    con.execute("DELETE FROM ranking_items WHERE ranking_id = ?", [ranking_id])
    con.execute("DELETE FROM rankings WHERE ranking_id = ?", [ranking_id])


def annotation_counts(con: duckdb.DuckDBPyConnection, annotator: str, source: str, overlap: int) -> tuple:
    """(rankings by this annotator, rankings by everyone, prompts still needing rankings, pairs in the store);
    one query, since it runs after every submission. A prompt waits while its latest round (store/rounds.py) has
    fewer than `overlap` of the source's rankings (or skips), each found through the assignment that made it."""
    return con.execute(
        f"""WITH cur AS (SELECT prompt_id, max(round) AS round FROM response_round GROUP BY prompt_id),
                 rankable AS (SELECT r.prompt_id FROM responses r JOIN response_round x USING (response_id)
                              JOIN cur ON cur.prompt_id = r.prompt_id AND cur.round = x.round
                              WHERE {RANKABLE} GROUP BY r.prompt_id HAVING count(*) >= 2),
                 done AS (SELECT a.prompt_id, count(*) AS n FROM rankings k
                          JOIN assignments a ON a.ranking_id = k.ranking_id
                          JOIN response_round x ON x.response_id = a.shown_order[1]
                          JOIN cur ON cur.prompt_id = a.prompt_id AND cur.round = x.round
                          WHERE k.source = $source GROUP BY a.prompt_id)
            SELECT
              (SELECT count(*) FROM rankings WHERE source = $source AND NOT skipped AND annotator = $annotator),
              (SELECT count(*) FROM rankings WHERE source = $source AND NOT skipped),
              (SELECT count(*) FROM rankable k LEFT JOIN done d USING (prompt_id) WHERE coalesce(d.n, 0) < $overlap),
              -- pair ids only: counting the full `pairs` view would join every text
              (SELECT count(*) FROM pair_ids x JOIN rankings r USING (ranking_id) WHERE NOT r.skipped)""",
        {"source": source, "annotator": annotator, "overlap": overlap},
    ).fetchone()
