"""Synthetic stores for the benchmarks: rows written straight into the tables in a few bulk statements, far faster
than the import path (store/rankings.py) at a million rankings, in exactly the shape a benchmark asks for. Ids are
given explicitly, past the sequences: only for a store made for the benchmark and thrown away after it."""

from __future__ import annotations

from store.protocol import Connection


def fill_cyclic_rankings(con: Connection, n: int, k: int) -> None:
    """n rankings of k responses of one prompt; the ranks of ranking r are a cyclic shift of 1..k (a permutation, no
    ties), so each gives C(k, 2) pairs."""
    con.execute("INSERT INTO prompts (prompt_id, text, source) VALUES (0, 'p', 'bench')")
    con.execute(
        "INSERT INTO responses (response_id, prompt_id, text, model_id, position) "
        "SELECT i, 0, 'r', 'bench', 0 FROM range(?) t(i)",
        [n * k],
    )
    con.execute(
        "INSERT INTO rankings (ranking_id, prompt_id, annotator, source) SELECT r, 0, 'a', 'bench' FROM range(?) t(r)",
        [n],
    )
    con.execute(
        "INSERT INTO ranking_items (ranking_id, response_id, rank) "
        "SELECT r, r * ? + i, 1 + (i + r) % ? FROM range(?) a(r), range(?) b(i)",
        [k, k, n, k],
    )
