"""Handing prompts to annotators (migration 0002). All functions run inside the caller's transaction."""

from __future__ import annotations

import random

import duckdb

# Responses an annotator can rank: not an identical repeat of another sample, not empty.
RANKABLE = "r.duplicate_of IS NULL AND trim(r.text) <> ''"


def open_assignment(con: duckdb.DuckDBPyConnection, annotator: str) -> tuple | None:
    """(assignment_id, prompt_id, shown_order, seconds since assigned) of the annotator's open assignment."""
    return con.execute(
        """SELECT assignment_id, prompt_id, shown_order,
                  date_diff('millisecond', assigned_at, current_timestamp::TIMESTAMP) / 1000.0
           FROM assignments WHERE annotator = ? AND status = 'open' ORDER BY assignment_id LIMIT 1""",
        [annotator],
    ).fetchone()


def claim_next(con: duckdb.DuckDBPyConnection, annotator: str, overlap: int, rng: random.Random) -> int | None:
    """Assign the next prompt this annotator has not seen and fewer than `overlap` others hold or have done.

    Prompts with the fewest annotators go first, then the oldest. Returns the new assignment id, or None."""
    row = con.execute(
        f"""WITH rankable AS (
                SELECT r.prompt_id, list(r.response_id ORDER BY r.response_id) AS ids
                FROM responses r WHERE {RANKABLE} GROUP BY r.prompt_id HAVING count(*) >= 2),
            holders AS (
                SELECT prompt_id, annotator FROM assignments
                UNION SELECT prompt_id, annotator FROM rankings WHERE source = 'ui')
            SELECT k.prompt_id, k.ids FROM rankable k
            WHERE NOT EXISTS (SELECT 1 FROM holders h WHERE h.prompt_id = k.prompt_id AND h.annotator = ?)
              AND (SELECT count(*) FROM holders h WHERE h.prompt_id = k.prompt_id) < ?
            ORDER BY (SELECT count(*) FROM holders h WHERE h.prompt_id = k.prompt_id), k.prompt_id
            LIMIT 1""",
        [annotator, overlap],
    ).fetchone()
    if row is None:
        return None
    prompt_id, ids = row
    rng.shuffle(ids)  # each annotator sees their own order; it is stored with the ranking
    return con.execute(
        "INSERT INTO assignments (prompt_id, annotator, shown_order) VALUES (?, ?, ?) RETURNING assignment_id",
        [prompt_id, annotator, ids],
    ).fetchone()[0]


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


def delete_ranking(con: duckdb.DuckDBPyConnection, ranking_id: int) -> None:
    con.execute("DELETE FROM ranking_items WHERE ranking_id = ?", [ranking_id])
    con.execute("DELETE FROM rankings WHERE ranking_id = ?", [ranking_id])


def annotation_counts(con: duckdb.DuckDBPyConnection, annotator: str, source: str, overlap: int) -> tuple:
    """(rankings by this annotator, rankings by everyone, prompts still needing rankings, pairs in the store)."""
    mine, team = con.execute(
        "SELECT count(*) FILTER (WHERE annotator = ?), count(*) FROM rankings WHERE source = ? AND NOT skipped",
        [annotator, source],
    ).fetchone()
    pending = con.execute(
        f"""WITH rankable AS (SELECT r.prompt_id FROM responses r WHERE {RANKABLE}
                              GROUP BY r.prompt_id HAVING count(*) >= 2)
            SELECT count(*) FROM rankable k
            WHERE (SELECT count(*) FROM rankings g WHERE g.prompt_id = k.prompt_id AND g.source = ?) < ?""",
        [source, overlap],
    ).fetchone()[0]
    pairs = con.execute("SELECT count(*) FROM pairs").fetchone()[0]
    return mine, team, pending, pairs
