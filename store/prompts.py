"""Prompts: deduplicated by text, so re-adding a file is harmless."""

from __future__ import annotations

from store.protocol import Connection


def next_ids(con: Connection, sequence: str, n: int) -> list[int]:
    """n fresh ids from one of our sequences (a name from store/schema.sql), in order: batch inserts give their
    rows explicit ids, so ids follow the input order and nothing is inserted row by row."""
    if n == 0:
        return []
    return sorted(i for (i,) in con.execute(f"SELECT nextval('{sequence}') FROM range(?)", [n]).fetchall())


def add_prompts(con: Connection, texts: list[str], source: str) -> tuple[int, int]:
    """Insert the texts not yet stored, ids in file order; returns (added, already there). Runs inside the caller's
    transaction: two statements, whatever the number of texts."""
    unique = list(dict.fromkeys(texts))
    have = {
        t
        for (t,) in con.execute(
            "SELECT text FROM prompts WHERE text IN (SELECT unnest(?::VARCHAR[]))", [unique]
        ).fetchall()
    }
    new = [t for t in unique if t not in have]
    if new:
        con.execute(
            "INSERT INTO prompts (prompt_id, text, source) SELECT unnest(?::BIGINT[]), unnest(?::VARCHAR[]), ?",
            [next_ids(con, "prompt_ids", len(new)), new, source],
        )
    return len(new), len(texts) - len(new)


def prompt_ids(con: Connection, texts: list[str], source: str) -> dict[str, int]:
    """prompt text -> id, creating the missing ones."""
    add_prompts(con, texts, source)
    rows = con.execute(
        "SELECT text, prompt_id FROM prompts WHERE text IN (SELECT unnest(?::VARCHAR[]))", [list(set(texts))]
    ).fetchall()
    return dict(rows)


def pending_count(con: Connection, limit: int | None = None) -> int:
    """How many prompts have no response yet (at most `limit`): the size of the next `rlhf sample`."""
    (n,) = con.execute(
        "SELECT count(*) FROM prompts p WHERE NOT EXISTS (SELECT 1 FROM responses r WHERE r.prompt_id = p.prompt_id)"
    ).fetchone()
    return n if limit is None else min(n, limit)


def pending_prompts(con: Connection, limit: int | None = None) -> list[tuple[int, str]]:
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


def prompt_text(con: Connection, prompt_id: int) -> str:
    return con.execute("SELECT text FROM prompts WHERE prompt_id = ?", [prompt_id]).fetchone()[0]


def find_prompt(con: Connection, prompt_id: int) -> str | None:
    """The prompt's text, or None when no prompt has this id."""
    row = con.execute("SELECT text FROM prompts WHERE prompt_id = ?", [prompt_id]).fetchone()
    return row[0] if row else None


def all_prompts(con: Connection) -> list[tuple[int, str]]:
    """(prompt id, text) of every prompt, in the order they were added."""
    return con.execute("SELECT prompt_id, text FROM prompts ORDER BY prompt_id").fetchall()


def prompts_by_text(con: Connection, texts: list[str]) -> list[tuple[int, str]]:
    """(prompt id, text) of the stored prompts among these texts, in the order they were added."""
    return con.execute(
        "SELECT prompt_id, text FROM prompts WHERE text IN (SELECT unnest(?::VARCHAR[])) ORDER BY prompt_id", [texts]
    ).fetchall()


def conversation_prompts(con: Connection, limit: int = 200) -> list[tuple[int, str]]:
    """(prompt id, text) of the newest `limit` conversation prompts (store/conversations.py), newest first: what the
    Compare tab offers to chat from."""
    from store.conversations import conversation_of

    rows = con.execute(
        """SELECT prompt_id, text FROM prompts WHERE starts_with(text, '[{"role": ') ORDER BY prompt_id DESC LIMIT ?""",
        [limit],
    ).fetchall()
    return [(pid, text) for pid, text in rows if conversation_of(text)]
