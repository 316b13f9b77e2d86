"""Prompts: deduplicated by text, so re-adding a file is harmless."""

from __future__ import annotations

import duckdb


def add_prompts(con: duckdb.DuckDBPyConnection, texts: list[str], source: str) -> tuple[int, int]:
    """Insert the texts not yet stored; returns (added, already there). Runs inside the caller's transaction."""
    unique = list(dict.fromkeys(texts))
    before = con.execute("SELECT count(*) FROM prompts").fetchone()[0]
    con.executemany(
        "INSERT INTO prompts (text, source) VALUES (?, ?) ON CONFLICT (text) DO NOTHING",
        [[t, source] for t in unique],
    )
    added = con.execute("SELECT count(*) FROM prompts").fetchone()[0] - before
    return added, len(texts) - added


def prompt_ids(con: duckdb.DuckDBPyConnection, texts: list[str], source: str) -> dict[str, int]:
    """prompt text -> id, creating the missing ones."""
    add_prompts(con, texts, source)
    rows = con.execute(
        "SELECT text, prompt_id FROM prompts WHERE text IN (SELECT unnest(?::VARCHAR[]))", [list(set(texts))]
    ).fetchall()
    return dict(rows)


def pending_prompts(con: duckdb.DuckDBPyConnection, limit: int | None = None) -> list[tuple[int, str]]:
    """Prompts that have no response yet, oldest first: what `rlhf sample` works through."""
    sql = """
        SELECT p.prompt_id, p.text FROM prompts p
        WHERE NOT EXISTS (SELECT 1 FROM responses r WHERE r.prompt_id = p.prompt_id)
        ORDER BY p.prompt_id
    """
    if limit is not None:
        sql += " LIMIT ?"
        return con.execute(sql, [limit]).fetchall()
    return con.execute(sql).fetchall()
