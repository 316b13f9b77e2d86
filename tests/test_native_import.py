"""Native JSONL rankings: what lands in the store, re-imports, and every malformed case."""

import json

import pytest

from tests.conftest import query, store_rows, write_jsonl

GOOD = {"prompt": "Say hi.", "responses": ["hi", "hello there", "yo"], "ranks": [2, 1, 3], "annotator": "ann"}


def test_import_then_pairs_file(cli, db, tmp_path):
    f = write_jsonl(tmp_path / "r.jsonl", [GOOD, {**GOOD, "annotator": "bob", "ranks": [1, 1, 2]}])
    code, out, err = cli("import", str(f))
    assert code == 0, err
    # ann: 3 pairs (no ties); bob: hi = hello > yo: 2 pairs
    assert out.strip() == (
        "tasks 2, annotations 2, rankings added 2, pairs added 5, already imported 0, skipped 0, flagged 0"
    )
    code, out, _ = cli("pairs", "--out", str(tmp_path / "pairs.jsonl"))
    assert code == 0 and out.strip() == f"wrote 5 pairs to {tmp_path / 'pairs.jsonl'}"
    rows = [json.loads(line) for line in (tmp_path / "pairs.jsonl").read_text().splitlines()]
    got = {(r["annotator"], r["chosen"], r["rejected"], r["margin"]) for r in rows}
    assert got == {
        ("ann", "hello there", "hi", 1),
        ("ann", "hello there", "yo", 2),
        ("ann", "hi", "yo", 1),
        ("bob", "hi", "yo", 1),
        ("bob", "hello there", "yo", 1),
    }
    assert set(rows[0]) >= {"prompt", "chosen", "rejected", "margin", "annotator", "prompt_id", "ranking_id"}


def test_parquet_pairs_file_has_the_same_rows(cli, db, tmp_path):
    import duckdb

    cli("import", str(write_jsonl(tmp_path / "r.jsonl", [GOOD])))
    assert cli("pairs", "--out", str(tmp_path / "p.parquet"))[0] == 0
    rows = duckdb.sql(f"SELECT chosen, rejected FROM '{tmp_path / 'p.parquet'}'").fetchall()
    assert sorted(rows) == [("hello there", "hi"), ("hello there", "yo"), ("hi", "yo")]


def test_reimport_adds_nothing(cli, db, tmp_path):
    f = write_jsonl(tmp_path / "r.jsonl", [GOOD])
    cli("import", str(f))
    before = store_rows(db)
    code, out, _ = cli("import", str(f))
    assert code == 0 and "rankings added 0" in out and "already imported 1" in out
    assert store_rows(db) == before


def test_shown_position_is_the_file_order(cli, db, tmp_path):
    cli("import", str(write_jsonl(tmp_path / "r.jsonl", [GOOD])))
    rows = query(
        db,
        "SELECT r.text, i.rank, i.shown_position FROM ranking_items i JOIN responses r USING "
        "(response_id) ORDER BY i.shown_position",
    )
    assert rows == [("hi", 2, 0), ("hello there", 1, 1), ("yo", 3, 2)]


BAD_LINES = [
    ('{"prompt": "p", "responses": ["a", "b"], "ranks": [1, 2]', "line 1: not valid JSON"),
    ('{"prompt": "p", "responses": ["a", "b"], "ranks": [1, 2, 3]}', "line 1: 3 ranks for 2 responses"),
    ('{"prompt": "p", "responses": ["a", "b"]}', "line 1: missing field 'ranks'"),
    ('{"prompt": "p", "responses": ["a", "b"], "ranks": [1, 5]}', "line 1: rank 5 of response 2 is out of range 1..2"),
    ('{"prompt": "p", "responses": ["a", "b"], "ranks": [0, 1]}', "line 1: rank 0 of response 1 is out of range"),
    ('{"prompt": "p", "responses": ["a", "b"], "ranks": ["1", 2]}', "line 1: rank '1' of response 1 is out of range"),
    ('{"prompt": "p", "responses": ["a"], "ranks": [1]}', "line 1: a ranking needs at least 2 responses, got 1"),
    ('{"prompt": "p", "responses": [], "ranks": []}', "line 1: a ranking needs at least 2 responses, got 0"),
    ('{"prompt": "p", "responses": ["a", "a"], "ranks": [1, 2]}', "line 1: responses 1 and 2 are identical"),
    ('{"prompt": "p", "responses": ["a", " "], "ranks": [1, 2]}', "line 1: response 2 is empty"),
    ('{"prompt": " ", "responses": ["a", "b"], "ranks": [1, 2]}', "line 1: the prompt is empty"),
    ('["p", ["a", "b"], [1, 2]]', "line 1: expected a JSON object, got list"),
    ("[" * 100000 + "]" * 100000, "line 1: JSON nested too deeply"),
]


@pytest.mark.parametrize("line, message", BAD_LINES)
def test_bad_line_is_one_error_and_changes_nothing(cli, db, tmp_path, line, message):
    cli("import", str(write_jsonl(tmp_path / "ok.jsonl", [GOOD])))
    before = store_rows(db)
    f = tmp_path / "bad.jsonl"
    # a good line first: the whole file is refused, the good line too
    f.write_text(json.dumps({**GOOD, "annotator": "zed"}) + "\n" + line + "\n")
    code, out, err = cli("import", str(f))
    assert code == 1 and out == ""
    assert len(err.strip().splitlines()) == 1 and err.startswith("error: ")
    assert message.replace("line 1", "line 2") in err
    assert store_rows(db) == before


@pytest.mark.parametrize(
    "content, message",
    [(b"", "the file is empty"), (b"\n\n", "the file is empty"), (b"\xff\xfe\x00bad", "not UTF-8 text")],
)
def test_unreadable_files(cli, db, tmp_path, content, message):
    before = store_rows(db)
    f = tmp_path / "x.jsonl"
    f.write_bytes(content)
    code, _, err = cli("import", str(f))
    assert code == 1 and message in err and len(err.strip().splitlines()) == 1
    assert store_rows(db) == before


def test_missing_file(cli, tmp_path):
    code, _, err = cli("import", str(tmp_path / "nope.jsonl"))
    assert code == 1 and err.strip() == f"error: {tmp_path / 'nope.jsonl'}: no such file"
