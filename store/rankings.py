"""Rankings and their items. Parsers (native JSONL, Label Studio, the UI) produce `RankingIn`; this module is
the one place that writes them, always inside the caller's transaction."""

from __future__ import annotations

from dataclasses import dataclass, field

import duckdb

from store.prompts import prompt_ids


@dataclass
class RankedItem:
    """One response inside a ranking. rank 1 = best; equal ranks are a tie."""

    text: str
    rank: int
    shown_position: int | None = None
    response_id: int | None = None  # known when the response came from this store (UI, export-ls round trip)


@dataclass
class RankingIn:
    prompt: str
    items: list[RankedItem]
    annotator: str
    source: str  # 'native', 'labelstudio', 'ui', 'compare'
    external_key: str | None = None
    lead_time_s: float | None = None
    flags: list[str] = field(default_factory=list)
    skipped: bool = False
    skip_reason: str | None = None

    def problem(self) -> str | None:
        """Why this ranking cannot be stored, or None. Parsers prefix it with the line or task it came from."""
        if not self.prompt.strip():
            return "the prompt is empty"
        if self.skipped:
            return None
        k = len(self.items)
        if k < 2:
            return f"a ranking needs at least 2 responses, got {k}"
        seen: dict[str, int] = {}
        for i, it in enumerate(self.items, 1):
            if not it.text.strip():
                return f"response {i} is empty"
            if it.text in seen:
                return f"responses {seen[it.text]} and {i} are identical"
            seen[it.text] = i
            if isinstance(it.rank, bool) or not isinstance(it.rank, int) or not 1 <= it.rank <= k:
                return f"rank {it.rank!r} of response {i} is out of range 1..{k}"
        return None

    @property
    def n_pairs(self) -> int:
        """Pairs this ranking expands to: every i, j with rank_i < rank_j (same rule as the SQL view)."""
        if self.skipped:
            return 0
        ranks = [it.rank for it in self.items]
        return sum(1 for a in ranks for b in ranks if a < b)


@dataclass
class InsertResult:
    added: int = 0
    already: int = 0  # external key seen before (re-import of the same export)
    pairs: int = 0
    flagged: int = 0


def _response_ids(con: duckdb.DuckDBPyConnection, prompt_id: int, items: list[RankedItem], model_id: str) -> list[int]:
    """Match each item to a stored response of this prompt (by id when given, else by text), creating the rest."""
    ids = []
    stored = dict(
        con.execute(
            "SELECT text, min(response_id) FROM responses WHERE prompt_id = ? GROUP BY text", [prompt_id]
        ).fetchall()
    )
    known = {}
    if any(it.response_id is not None for it in items):
        rows = con.execute(
            "SELECT response_id, text FROM responses WHERE prompt_id = ? AND response_id IN "
            "(SELECT unnest(?::BIGINT[]))",
            [prompt_id, [it.response_id for it in items if it.response_id is not None]],
        ).fetchall()
        known = dict(rows)
    next_pos = con.execute("SELECT coalesce(max(position) + 1, 0) FROM responses WHERE prompt_id = ?", [prompt_id])
    next_pos = next_pos.fetchone()[0]
    for it in items:
        if it.response_id is not None and known.get(it.response_id) == it.text:
            ids.append(it.response_id)
        elif it.text in stored:
            ids.append(stored[it.text])
        else:
            rid = con.execute(
                "INSERT INTO responses (prompt_id, text, model_id, position) VALUES (?, ?, ?, ?) RETURNING response_id",
                [prompt_id, it.text, model_id, next_pos],
            ).fetchone()[0]
            stored[it.text] = rid
            next_pos += 1
            ids.append(rid)
    return ids


def insert_rankings(
    con: duckdb.DuckDBPyConnection, rankings: list[RankingIn], import_id: int | None = None
) -> InsertResult:
    """Write rankings whose external key is new; re-imported ones are counted in `already` and left alone."""
    result = InsertResult()
    keys = [r.external_key for r in rankings if r.external_key]
    seen = set()
    if keys:
        seen = {
            k
            for (k,) in con.execute(
                "SELECT external_key FROM rankings WHERE external_key IN (SELECT unnest(?::VARCHAR[]))", [keys]
            ).fetchall()
        }
    ids = prompt_ids(con, [r.prompt for r in rankings], source=f"import:{rankings[0].source}") if rankings else {}
    for r in rankings:
        if r.external_key and r.external_key in seen:
            result.already += 1
            continue
        if r.external_key:
            seen.add(r.external_key)
        prompt_id = ids[r.prompt]
        response_ids = _response_ids(con, prompt_id, r.items, model_id=f"import:{r.source}")
        ranking_id = con.execute(
            """INSERT INTO rankings (prompt_id, annotator, source, external_key, import_id, lead_time_s,
                                     skipped, skip_reason, flags)
               VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING ranking_id""",
            [
                prompt_id,
                r.annotator,
                r.source,
                r.external_key,
                import_id,
                r.lead_time_s,
                r.skipped,
                r.skip_reason,
                r.flags,
            ],
        ).fetchone()[0]
        con.executemany(
            "INSERT INTO ranking_items (ranking_id, response_id, rank, shown_position) VALUES (?, ?, ?, ?)",
            [[ranking_id, rid, it.rank, it.shown_position] for rid, it in zip(response_ids, r.items, strict=True)],
        )
        result.added += 1
        result.pairs += r.n_pairs
        result.flagged += bool(r.flags)
    return result
