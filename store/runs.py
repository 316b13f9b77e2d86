"""Training runs recorded in the store (migration 0003). Progress lives in the run folder, not here."""

from __future__ import annotations

import json
from dataclasses import dataclass

import duckdb


@dataclass
class RecordedRun:
    run_id: str
    kind: str
    path: str  # absolute, as recorded when the run was prepared
    created_at: str


def record_run(
    con: duckdb.DuckDBPyConnection, run_id: str, kind: str, path: str, config: dict, snapshot_id: int | None
) -> None:
    con.execute(
        "INSERT INTO runs (run_id, kind, path, snapshot_id, config) VALUES (?, ?, ?, ?, ?)",
        [run_id, kind, path, snapshot_id, json.dumps(config)],
    )


def list_runs(con: duckdb.DuckDBPyConnection) -> list[tuple[str, str, str, str]]:
    """(run id, kind, path, created at) newest first."""
    return [
        (r, k, p, str(c))
        for r, k, p, c in con.execute(
            "SELECT run_id, kind, path, created_at FROM runs ORDER BY created_at DESC, run_id DESC"
        ).fetchall()
    ]


def run_by_id(con: duckdb.DuckDBPyConnection, run_id: str) -> RecordedRun | None:
    row = con.execute("SELECT run_id, kind, path, created_at FROM runs WHERE run_id = ?", [run_id]).fetchone()
    return None if row is None else RecordedRun(row[0], row[1], row[2], str(row[3]))
