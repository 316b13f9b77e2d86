"""Rankings -> pairs: the SQL view against hand-computed expectations and a plain-loop reference."""

import random

import pytest

from annotation.imports import import_native
from tests.conftest import query, write_jsonl

RESPONSES = ["a", "b", "c", "d"]


@pytest.mark.parametrize(
    "ranks, expected",
    [
        # no ties: C(4,2) = 6 pairs, margin = rank gap
        ([1, 2, 3, 4], {("a", "b", 1), ("a", "c", 2), ("a", "d", 3), ("b", "c", 1), ("b", "d", 2), ("c", "d", 1)}),
        # reversed order: same 6 pairs, the other way round
        ([4, 3, 2, 1], {("d", "c", 1), ("d", "b", 2), ("d", "a", 3), ("c", "b", 1), ("c", "a", 2), ("b", "a", 1)}),
        # b and c tie at 1: no b-c pair; 2 x 2 pairs against a (rank 3) and d (rank 4), plus a > d: 5 pairs
        ([3, 1, 1, 4], {("b", "a", 2), ("c", "a", 2), ("b", "d", 3), ("c", "d", 3), ("a", "d", 1)}),
        # two tiers of two: 2 x 2 = 4 pairs, none inside a tier
        ([1, 1, 2, 2], {("a", "c", 1), ("a", "d", 1), ("b", "c", 1), ("b", "d", 1)}),
        # all tied: nothing
        ([1, 1, 1, 1], set()),
    ],
)
def test_pairs_match_the_native_definition(db, tmp_path, ranks, expected):
    f = write_jsonl(tmp_path / "r.jsonl", [{"prompt": "p", "responses": RESPONSES, "ranks": ranks}])
    summary = import_native(db, f)
    got = set(query(db, "SELECT chosen, rejected, margin FROM pairs"))
    assert got == expected
    assert summary.pairs == len(expected)


def test_one_set_of_pairs_per_annotator(db, tmp_path):
    rows = [
        {"prompt": "p", "responses": RESPONSES, "ranks": [1, 2, 3, 4], "annotator": "ann"},
        {"prompt": "p", "responses": RESPONSES, "ranks": [4, 3, 2, 1], "annotator": "bob"},
    ]
    import_native(db, write_jsonl(tmp_path / "r.jsonl", rows))
    per = dict(query(db, "SELECT annotator, count(*) FROM pairs GROUP BY annotator"))
    assert per == {"ann": 6, "bob": 6}
    # both annotators ranked the same four stored responses (shared rows, so agreement can be computed later)
    assert query(db, "SELECT count(*) FROM responses") == [(4,)]
    assert query(db, "SELECT count(*) FROM prompts") == [(1,)]


def _loop_pairs(rankings):
    """Plain-loop reference: every i, j with rank_i < rank_j."""
    out = set()
    for n, ranks in enumerate(rankings):
        for i, ri in enumerate(ranks):
            for j, rj in enumerate(ranks):
                if ri < rj:
                    out.add((f"p{n}", f"p{n}-r{i}", f"p{n}-r{j}", rj - ri))
    return out


def test_sql_view_equals_plain_loop_on_random_rankings(db, tmp_path):
    rng = random.Random(7)
    rankings = []
    for _ in range(60):
        k = rng.randint(2, 9)
        rankings.append([rng.randint(1, k) for _ in range(k)])
    rows = [
        {"prompt": f"p{n}", "responses": [f"p{n}-r{i}" for i in range(len(r))], "ranks": r}
        for n, r in enumerate(rankings)
    ]
    import_native(db, write_jsonl(tmp_path / "r.jsonl", rows))
    got = set(query(db, "SELECT prompt, chosen, rejected, margin FROM pairs"))
    assert got == _loop_pairs(rankings)
