"""A reward model's scores of the store's ranked responses (migration 0014), and each annotator's agreement with
them: the share of their pairs whose chosen response the model scores higher (an equal score counts half, as a
tie does in the dashboard's other measures). All functions run inside the caller's transaction."""

from __future__ import annotations

from store.protocol import Connection


def unscored(con: Connection, run_id: str, limit: int) -> list[tuple[int, str, str]]:
    """(response id, prompt text, response text) of up to `limit` responses of answered rankings that `run_id` has
    not scored yet, by response id."""
    return con.execute(
        """SELECT DISTINCT i.response_id, p.text, r.text
           FROM ranking_items i JOIN responses r USING (response_id) JOIN prompts p ON p.prompt_id = r.prompt_id
           WHERE NOT EXISTS (SELECT 1 FROM response_scores s WHERE s.run_id = ? AND s.response_id = i.response_id)
           ORDER BY i.response_id LIMIT ?""",
        [run_id, limit],
    ).fetchall()


def add_scores(con: Connection, run_id: str, response_ids: list[int], scores: list[float]) -> None:
    con.execute(
        # OR IGNORE: a second scoring of the same run at once scores some responses twice; the first score stays
        "INSERT OR IGNORE INTO response_scores SELECT ?, unnest(?::BIGINT[]), unnest(?::DOUBLE[])",
        [run_id, response_ids, scores],
    )


def scored_runs(con: Connection) -> list[tuple[str, int]]:
    """(run id, responses scored) of every run with scores, the newest run first (by when the store recorded it)."""
    return con.execute(
        """SELECT s.run_id, count(*) FROM response_scores s LEFT JOIN runs r USING (run_id)
           GROUP BY s.run_id, r.created_at ORDER BY r.created_at DESC NULLS LAST, s.run_id DESC"""
    ).fetchall()


def rm_agreement(con: Connection, run_id: str) -> dict[str, tuple[float, int]]:
    """annotator -> (share of their pairs the model orders as they did, pairs it rests on): the pairs whose two
    responses both have a score from `run_id`."""
    rows = con.execute(
        """SELECT r.annotator, count(*),
                  sum(CASE WHEN c.score > j.score THEN 1.0 WHEN c.score = j.score THEN 0.5 ELSE 0.0 END)
           FROM pair_ids x JOIN rankings r ON r.ranking_id = x.ranking_id
           JOIN response_scores c ON c.run_id = $run AND c.response_id = x.chosen_id
           JOIN response_scores j ON j.run_id = $run AND j.response_id = x.rejected_id
           WHERE NOT r.skipped GROUP BY r.annotator""",
        {"run": run_id},
    ).fetchall()
    return {a: (float(agree) / n, n) for a, n, agree in rows}
