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

from store.db import read
from store.pairs import count_kept_pair_ids, drop_kept_pair_ids, keep_pair_ids
from store.rankings import items_by_ranking
from store.synthetic import fill_cyclic_rankings


def build_store(path: str, n: int, k: int) -> None:
    """n rankings of k responses; the ranks of ranking r are a cyclic shift of 1..k (a permutation, no ties)."""
    with read(path) as con:
        fill_cyclic_rankings(con, n, k)


def duckdb_pairs(path: str, repeats: int = 5) -> tuple[int, float]:
    """Median of `repeats` runs after one warm-up (the first run also pays for reading the file)."""
    with read(path) as con:
        times = []
        for _ in range(repeats + 1):
            drop_kept_pair_ids(con)
            start = time.perf_counter()
            keep_pair_ids(con)
            times.append(time.perf_counter() - start)
        return count_kept_pair_ids(con), statistics.median(times[1:])


def loop_pairs(path: str) -> tuple[int, float]:
    with read(path) as con:
        rows = items_by_ranking(con)
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
