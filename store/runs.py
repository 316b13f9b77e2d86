"""Training runs recorded in the store (migration 0003). Progress lives in the run folder, not here."""

from __future__ import annotations

import json
from dataclasses import dataclass

from store.protocol import Connection


@dataclass
class RecordedRun:
    run_id: str
    kind: str
    path: str  # absolute, as recorded when the run was prepared
    created_at: str


def record_run(con: Connection, run_id: str, kind: str, path: str, config: dict, snapshot_id: int | None) -> None:
    con.execute(
        "INSERT INTO runs (run_id, kind, path, snapshot_id, config) VALUES (?, ?, ?, ?, ?)",
        [run_id, kind, path, snapshot_id, json.dumps(config)],
    )


def list_runs(con: Connection) -> list[tuple[str, str, str, str]]:
    """(run id, kind, path, created at) newest first."""
    return [
        (r, k, p, str(c))
        for r, k, p, c in con.execute(
            "SELECT run_id, kind, path, created_at FROM runs ORDER BY created_at DESC, run_id DESC"
        ).fetchall()
    ]


def run_by_id(con: Connection, run_id: str) -> RecordedRun | None:
    row = con.execute("SELECT run_id, kind, path, created_at FROM runs WHERE run_id = ?", [run_id]).fetchone()
    return None if row is None else RecordedRun(row[0], row[1], row[2], str(row[3]))


def runs_of_kinds(con: Connection, kinds: list[str]) -> list[tuple[str, str]]:
    """(run id, path) of the runs of these kinds, newest first."""
    return con.execute(
        "SELECT run_id, path FROM runs WHERE kind IN (SELECT unnest(?::VARCHAR[])) ORDER BY created_at DESC", [kinds]
    ).fetchall()


def reward_run_paths(con: Connection, before: str | None = None) -> list[str]:
    """The folders of the reward runs, newest first; with `before` (a run id), only those recorded before it."""
    if before is None:
        rows = con.execute("SELECT path FROM runs WHERE kind = 'reward' ORDER BY created_at DESC").fetchall()
    else:
        rows = con.execute(
            "SELECT path FROM runs WHERE kind = 'reward' AND created_at < "
            "(SELECT created_at FROM runs WHERE run_id = ?) ORDER BY created_at DESC",
            [before],
        ).fetchall()
    return [p for (p,) in rows]


def keep_runs(con: Connection, run_ids: list[str], old: str, new: str) -> None:
    """A store copied into another folder (`rlhf demo --fork`): only these runs recorded, and the folder `old` named
    `new` in the runs' and the snapshots' paths (the other runs' folders were not copied)."""
    con.execute("DELETE FROM runs WHERE run_id NOT IN (SELECT unnest(?::VARCHAR[]))", [run_ids])
    con.execute(
        "UPDATE runs SET path = replace(path, ?, ?), config = replace(config::VARCHAR, ?, ?)::JSON",
        [old, new, old, new],
    )
    con.execute("UPDATE snapshots SET path = replace(path, ?, ?)", [old, new])
