"""Reading pairs out of the store: export to JSONL/Parquet/CSV and the counts behind `rlhf pairs --stats`.

Pairs are the SQL view `pairs` (store/schema.sql); nothing here loops over rankings in Python."""

from __future__ import annotations

import csv
import os
from dataclasses import dataclass
from pathlib import Path

import duckdb

from store.db import sql_string
from store.durable import rename_durably
from store.errors import UserError
from store.protocol import Connection

PAIR_COLUMNS = (
    "prompt, chosen, rejected, margin, annotator, source, prompt_id, ranking_id, chosen_id, rejected_id, flagged, "
    "strength, answers"
)


def pairs_query(drop_flagged: bool = False, with_votes: bool = False) -> str:
    """The store's pairs; with_votes: the Compare tab's decided votes after them (store/compare.py)."""
    where = "WHERE NOT flagged" if drop_flagged else ""
    source = "(SELECT * FROM pairs UNION ALL BY NAME SELECT * FROM vote_pairs)" if with_votes else "pairs"
    order = "prompt_id NULLS LAST, prompt, ranking_id, chosen_id, rejected_id, chosen"
    return f"SELECT {PAIR_COLUMNS} FROM {source} {where} ORDER BY {order}"


def _copy_format(path: Path) -> str:
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        return "(FORMAT json)"
    if suffix == ".parquet":
        return "(FORMAT parquet, COMPRESSION zstd)"
    if suffix == ".csv":
        return "csv"
    raise UserError(f"cannot write {path.name}: the pairs file must end in .jsonl, .parquet or .csv")


# A cell a spreadsheet would run as a formula (OWASP "CSV injection"): prompts and responses are user text.
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value: object) -> object:
    """The value as a spreadsheet shows it, never as a formula: text starting with = + - @ TAB CR gets a leading '."""
    return "'" + value if isinstance(value, str) and value.startswith(FORMULA_START) else value


def _write_csv(con: Connection, query: str, path: Path) -> None:
    cur = con.execute(query)
    with path.open("w", newline="", encoding="utf-8") as f:
        out = csv.writer(f)
        out.writerow([c.strip() for c in PAIR_COLUMNS.split(",")])
        while rows := cur.fetchmany(10_000):
            out.writerows([csv_cell(v) for v in row] for row in rows)


def export_pairs(con: Connection, out: str | os.PathLike, drop_flagged: bool = False, with_votes: bool = False) -> int:
    """Write all pairs to OUT (.jsonl, .parquet or .csv); the file appears whole or not at all. Returns the count."""
    out = Path(out)
    fmt = _copy_format(out)
    if not out.parent.is_dir():
        raise UserError(f"cannot write {out}: folder {out.parent} does not exist")
    tmp = out.with_name(f".{out.name}.tmp")
    try:
        if fmt == "csv":
            _write_csv(con, pairs_query(drop_flagged, with_votes), tmp)
        else:
            con.execute(f"COPY ({pairs_query(drop_flagged, with_votes)}) TO {sql_string(tmp)} {fmt}")
        rename_durably(tmp, out)
    except duckdb.Error as e:
        raise UserError(f"cannot write {out}: {str(e).splitlines()[0]}") from None
    except OSError as e:
        raise UserError(f"cannot write {out}: {e.strerror or e}") from None
    finally:
        tmp.unlink(missing_ok=True)
    return count_pairs(con, drop_flagged, with_votes)


def pair_texts(con: Connection, drop_flagged: bool = False, with_votes: bool = False) -> list[tuple[str, str, str]]:
    """(prompt, chosen, rejected) of every pair, in the export's order."""
    return con.execute(f"SELECT prompt, chosen, rejected FROM ({pairs_query(drop_flagged, with_votes)})").fetchall()


def count_pairs(con: Connection, drop_flagged: bool = False, with_votes: bool = False) -> int:
    return con.execute(f"SELECT count(*) FROM ({pairs_query(drop_flagged, with_votes)})").fetchone()[0]


def stats(con: Connection) -> dict:
    """Headline counts of the store, plus per-annotator and per-source breakdowns. The rankings, skips and pairs
    come from the counters kept at write time (ranking_counts, store/tasks.py): counting the pairs view took 3 s of
    the Data tab's page load on a store of a million rankings."""
    one = lambda sql: con.execute(sql).fetchone()[0]  # noqa: E731
    per_annotator = con.execute(
        """SELECT annotator, sum(rankings)::BIGINT, sum(skipped)::BIGINT, sum(pairs)::BIGINT FROM ranking_counts
           GROUP BY annotator HAVING sum(rankings) + sum(skipped) > 0 ORDER BY annotator"""
    ).fetchall()
    per_source = con.execute(
        "SELECT source, count(*) FROM rankings WHERE NOT skipped GROUP BY source ORDER BY source"
    ).fetchall()
    return {
        "prompts": one("SELECT count(*) FROM prompts"),
        "prompts_with_responses": one("SELECT count(DISTINCT prompt_id) FROM responses"),
        "prompts_pending": one(
            """SELECT count(*) FROM prompts p
               WHERE NOT EXISTS (SELECT 1 FROM responses r WHERE r.prompt_id = p.prompt_id)"""
        ),
        "responses": one("SELECT count(*) FROM responses"),
        "duplicate_responses": one("SELECT count(*) FROM responses WHERE duplicate_of IS NOT NULL"),
        "rankings": one("SELECT count(*) FROM rankings WHERE NOT skipped"),
        "skipped": one("SELECT count(*) FROM rankings WHERE skipped"),
        "flagged": one("SELECT count(*) FROM rankings WHERE len(flags) > 0"),
        "pairs": one("SELECT coalesce(sum(pairs), 0)::BIGINT FROM ranking_counts"),
        "tied_pairs": one(
            """SELECT count(*) FROM ranking_items a JOIN ranking_items b
               ON a.ranking_id = b.ranking_id AND a.rank = b.rank AND a.response_id < b.response_id
               JOIN rankings r ON r.ranking_id = a.ranking_id WHERE NOT r.skipped"""
        ),
        "annotators": [{"annotator": a, "rankings": n, "skipped": s, "pairs": p} for a, n, s, p in per_annotator],
        "sources": dict(per_source),
    }


def rankings_for_agreement(con: Connection) -> list[tuple[int, str, dict[int, int]]]:
    """(prompt id, annotator, {response id: rank}) for every ranked prompt that two or more annotators ranked."""
    rows = con.execute(
        """WITH shared AS (SELECT prompt_id FROM rankings WHERE NOT skipped
                           GROUP BY prompt_id HAVING count(DISTINCT annotator) >= 2)
           SELECT r.prompt_id, r.annotator, map_from_entries(list((i.response_id, i.rank)))
           FROM rankings r JOIN ranking_items i USING (ranking_id)
           WHERE NOT r.skipped AND r.prompt_id IN (SELECT prompt_id FROM shared)
           GROUP BY r.ranking_id, r.prompt_id, r.annotator ORDER BY r.ranking_id"""
    ).fetchall()
    return [(p, a, dict(m)) for p, a, m in rows]


@dataclass(frozen=True)
class TextPair:
    """A pair as text: the prompt, the preferred response and the other."""

    prompt: str
    chosen: str
    rejected: str


def round_pairs(con: Connection, round_: int) -> list[TextPair]:
    """The pairs of one round (store/rounds.py), ranking by ranking."""
    rows = con.execute(
        "SELECT prompt, chosen, rejected FROM pairs WHERE round = ? ORDER BY ranking_id, chosen_id, rejected_id",
        [round_],
    ).fetchall()
    return [TextPair(*row) for row in rows]


# bench/pairs.py times the `pair_ids` view against a Python loop, each keeping its rows: the view's go into the
# temporary table kept_pair_ids (gone when the connection closes).


def keep_pair_ids(con: Connection) -> None:
    """Materialise the `pair_ids` view into kept_pair_ids (drop it first: `drop_kept_pair_ids`)."""
    con.execute("CREATE TEMP TABLE kept_pair_ids AS SELECT ranking_id, chosen_id, rejected_id FROM pair_ids")


def drop_kept_pair_ids(con: Connection) -> None:
    con.execute("DROP TABLE IF EXISTS kept_pair_ids")


def count_kept_pair_ids(con: Connection) -> int:
    return con.execute("SELECT count(*) FROM kept_pair_ids").fetchone()[0]
