"""Pair expansion: the store's SQL view (`pair_ids`, a self-join on ranking items) against a plain Python loop,
for 1M rankings of K = 4 and K = 9 responses without ties (C(K,2) pairs each).

Both sides produce the same (ranking_id, chosen_id, rejected_id) rows and keep them: DuckDB into a table, the loop
into a list. The loop is timed on items already in Python lists (fetching them is not counted against it); DuckDB
is timed warm (median of 5 after one run that reads the file), as the loop's input is warm; the loop is the
median of 3 runs."""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

from store.db import connect


def build_store(path: str, n: int, k: int) -> None:
    """n rankings of k responses; the ranks of ranking r are a cyclic shift of 1..k (a permutation, no ties)."""
    with connect(path) as con:
        con.execute("INSERT INTO prompts (prompt_id, text, source) VALUES (0, 'p', 'bench')")
        con.execute(
            "INSERT INTO responses (response_id, prompt_id, text, model_id, position) "
            "SELECT i, 0, 'r', 'bench', 0 FROM range(?) t(i)",
            [n * k],
        )
        con.execute(
            "INSERT INTO rankings (ranking_id, prompt_id, annotator, source) SELECT r, 0, 'a', 'bench' "
            "FROM range(?) t(r)",
            [n],
        )
        con.execute(
            "INSERT INTO ranking_items (ranking_id, response_id, rank) "
            "SELECT r, r * ? + i, 1 + (i + r) % ? FROM range(?) a(r), range(?) b(i)",
            [k, k, n, k],
        )


def duckdb_pairs(path: str, repeats: int = 5) -> tuple[int, float]:
    """Median of `repeats` runs after one warm-up (the first run also pays for reading the file)."""
    with connect(path) as con:
        times = []
        for _ in range(repeats + 1):
            con.execute("DROP TABLE IF EXISTS out")
            start = time.perf_counter()
            con.execute("CREATE TEMP TABLE out AS SELECT ranking_id, chosen_id, rejected_id FROM pair_ids")
            times.append(time.perf_counter() - start)
        return con.execute("SELECT count(*) FROM out").fetchone()[0], statistics.median(times[1:])


def loop_pairs(path: str) -> tuple[int, float]:
    with connect(path) as con:
        rows = con.execute(
            "SELECT ranking_id, list(response_id ORDER BY response_id), list(rank ORDER BY response_id) "
            "FROM ranking_items GROUP BY ranking_id"
        ).fetchall()
    times = []
    for _ in range(3):
        start = time.perf_counter()
        out = []
        for ranking_id, ids, ranks in rows:
            for i, ri in enumerate(ranks):
                for j, rj in enumerate(ranks):
                    if ri < rj:
                        out.append((ranking_id, ids[i], ids[j]))
        times.append(time.perf_counter() - start)
        n = len(out)
        del out
    return n, statistics.median(times)


def run(n: int = 1_000_000, ks: tuple[int, ...] = (4, 9)) -> list[dict]:
    results = []
    for k in ks:
        with tempfile.TemporaryDirectory() as tmp:
            path = str(Path(tmp) / "bench.duckdb")
            build_store(path, n, k)
            n_sql, t_sql = duckdb_pairs(path)
            n_loop, t_loop = loop_pairs(path)
        expected = n * k * (k - 1) // 2
        assert n_sql == n_loop == expected, (n_sql, n_loop, expected)
        results.append(
            {
                "k": k,
                "rankings": n,
                "pairs": expected,
                "duckdb_pairs_per_s": n_sql / t_sql,
                "loop_pairs_per_s": n_loop / t_loop,
                "duckdb_s": t_sql,
                "loop_s": t_loop,
                "ratio": t_loop / t_sql,
            }
        )
    return results
