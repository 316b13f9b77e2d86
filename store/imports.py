"""Import records: one row per import batch (a file, or a live pull) that added rankings, with its summary. All
functions run inside the caller's transaction, the one that writes the batch's rankings (store/rankings.py)."""

from __future__ import annotations

import json

from store.protocol import Connection


def open_import(con: Connection, source: str, origin: str, content_sha256: str | None) -> int:
    """A new import record with an empty summary; returns its id, for the rankings it adds to name."""
    return con.execute(
        "INSERT INTO imports (source, origin, content_sha256, summary) VALUES (?, ?, ?, '{}') RETURNING import_id",
        [source, origin, content_sha256],
    ).fetchone()[0]


def set_import_summary(con: Connection, import_id: int, summary: dict) -> None:
    con.execute("UPDATE imports SET summary = ? WHERE import_id = ?", [json.dumps(summary), import_id])


def drop_import(con: Connection, import_id: int) -> None:
    """Delete an import record that added nothing (no ranking refers to it)."""
    con.execute("DELETE FROM imports WHERE import_id = ?", [import_id])
