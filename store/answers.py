"""The answers of questions that keep no table of their own (migration 0017): one JSON value per ranking and
question. annotation/judgement.py::write_answers is the one writer; the pairs view carries them as `answers` (and
`rlhf pairs` exports and snapshots with it); the annotators' dashboard counts them."""

from __future__ import annotations

import json

from store.protocol import Connection


def add_answers(con: Connection, rows: list[tuple[int, str, object]]) -> int:
    """(ranking id, question, answer) rows, each answer stored as JSON, in one INSERT; returns the rows written."""
    if rows:
        con.execute(
            "INSERT INTO ranking_answers SELECT unnest(?::BIGINT[]), unnest(?::VARCHAR[]), unnest(?::JSON[])",
            [[r for r, _, _ in rows], [q for _, q, _ in rows], [json.dumps(a) for _, _, a in rows]],
        )
    return len(rows)


def answers_of(con: Connection, ranking_id: int) -> dict[str, object]:
    """question -> answer of one ranking (only the questions stored here)."""
    rows = con.execute("SELECT question, value FROM ranking_answers WHERE ranking_id = ?", [ranking_id]).fetchall()
    return {q: json.loads(v) for q, v in rows}


def answer_counts(con: Connection) -> dict[str, dict[str, int]]:
    """annotator -> question -> how many of their rankings answered it (one aggregate)."""
    out: dict[str, dict[str, int]] = {}
    rows = con.execute(
        "SELECT r.annotator, a.question, count(*) FROM ranking_answers a JOIN rankings r USING (ranking_id) "
        "GROUP BY ALL"
    ).fetchall()
    for annotator, question, n in rows:
        out.setdefault(annotator, {})[question] = n
    return out
