"""Guidelines and tags (migration 0013; issue 30). The guideline is the campaign's Markdown, set by an admin and
kept in numbered versions; each ranking made in the Annotate tab records the version shown with its task. Tags are
an annotator's marks on single responses of their ranking (TAGS), stored per ranking and counted on the dashboard.
All functions but the guideline's check run inside the caller's transaction. The tags' rules are the tags
question's (annotation/questions/tags.py)."""

from __future__ import annotations

from store.protocol import Connection

TAGS = ("unsafe", "factually wrong", "off topic", "other")  # the CHECK of migration 0013 lists the same
MAX_GUIDELINE_CHARS = 50_000  # the longest guideline the server takes (a long style guide is about 20,000)


def guideline_problem(text: str) -> str | None:
    """Why `text` cannot be a guideline (None: it can)."""
    if not isinstance(text, str) or not text.strip():
        return "the guideline is empty: write what annotators should prefer, in Markdown"
    if len(text) > MAX_GUIDELINE_CHARS:
        return f"the guideline has {len(text):,} characters; the most is {MAX_GUIDELINE_CHARS:,}"
    return None


def set_guideline(con: Connection, text: str, author: str) -> int:
    """Store `text` as the next version (the same text as the current one adds none); returns the current
    version. The caller checks guideline_problem first."""
    current = current_guideline(con)
    if current is not None and current[1] == text:
        return current[0]
    version = (current[0] if current else 0) + 1
    con.execute("INSERT INTO guidelines (version, text, author) VALUES (?, ?, ?)", [version, text, author])
    return version


def current_guideline(con: Connection) -> tuple[int, str] | None:
    """(version, text) of the latest guideline, or None before one is set."""
    return con.execute("SELECT version, text FROM guidelines ORDER BY version DESC LIMIT 1").fetchone()


def guideline_versions(con: Connection) -> list[tuple[int, str, object, int]]:
    """(version, author, set at, answers (rankings and skips) made under it) of every version, oldest first."""
    return con.execute(
        """SELECT g.version, g.author, g.created_at, count(r.ranking_id)
           FROM guidelines g LEFT JOIN rankings r ON r.guideline_version = g.version
           GROUP BY ALL ORDER BY g.version"""
    ).fetchall()


def add_tags(con: Connection, rows: list[tuple[int, int, str]]) -> int:
    """(ranking id, response id, tag) rows into response_tags, one INSERT for any number of rankings (the tags
    question's rows: annotation/questions/tags.py); returns the rows written."""
    if rows:
        con.execute(
            "INSERT INTO response_tags SELECT unnest(?::BIGINT[]), unnest(?::BIGINT[]), unnest(?::VARCHAR[])",
            [list(col) for col in zip(*rows, strict=True)],
        )
    return len(rows)


def tags_of(con: Connection, ranking_id: int) -> dict[int, list[str]]:
    """response id -> its tags in this ranking (in TAGS' order); responses without tags are left out."""
    rows = con.execute("SELECT response_id, tag FROM response_tags WHERE ranking_id = ?", [ranking_id]).fetchall()
    out: dict[int, list[str]] = {}
    for rid, tag in rows:
        out.setdefault(rid, []).append(tag)
    return {rid: sorted(given, key=TAGS.index) for rid, given in out.items()}


def tag_counts(con: Connection) -> dict[str, dict[str, int]]:
    """annotator -> tag -> how many responses they gave it (one aggregate over the tags, none over responses)."""
    out: dict[str, dict[str, int]] = {}
    rows = con.execute(
        "SELECT r.annotator, t.tag, count(*) FROM response_tags t JOIN rankings r USING (ranking_id) GROUP BY ALL"
    ).fetchall()
    for annotator, tag, n in rows:
        out.setdefault(annotator, {})[tag] = n
    return out
