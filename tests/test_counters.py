"""The counters the Annotate queue reads on every submit (migration 0009, store/tasks.py) stay equal to what the base
tables say, through every write that moves them: sampling, imports, assignment, submit, skip, undo, a new round;
and a store of the previous schema (8) migrates to counters that already agree."""

import duckdb

from annotation.imports import import_native
from annotation.session import next_task, progress, skip, submit, submit_and_next, undo_last
from store.db import connect, migrate, write
from store.pairs import stats
from store.responses import Sample, add_samples
from store.rounds import record_round
from store.tasks import drift, pairs_of_ranks
from tests.builders import seed_store
from tests.conftest import write_jsonl


def _no_drift(db) -> None:
    with connect(db) as con:
        assert drift(con) == {"tasks": [], "ranking_counts": []}
        # the store's counts (`rlhf pairs --stats`, the Data tab) read the counters: the same as the pairs view says
        s = stats(con)
        per = con.execute(
            """SELECT annotator, count(*) FILTER (WHERE NOT skipped), count(*) FILTER (WHERE skipped),
                      (SELECT count(*) FROM pairs p WHERE p.annotator = r.annotator)
               FROM rankings r GROUP BY annotator ORDER BY annotator"""
        ).fetchall()
        assert s["pairs"] == con.execute("SELECT count(*) FROM pairs").fetchone()[0]
        assert [(a["annotator"], a["rankings"], a["skipped"], a["pairs"]) for a in s["annotators"]] == per


def _tasks(db) -> dict:
    with connect(db) as con:
        rows = con.execute("SELECT prompt_id, round, rankable, assigned, done FROM tasks ORDER BY prompt_id").fetchall()
    return {p: tuple(rest) for p, *rest in rows}


def test_pairs_of_ranks_by_hand():
    assert pairs_of_ranks([1, 2, 3, 4]) == 6  # C(4, 2)
    assert pairs_of_ranks([1, 1, 2]) == 2  # the tie gives no pair
    assert pairs_of_ranks([2, 2]) == 0


def test_every_write_keeps_the_counters_equal_to_the_base_tables(db, tmp_path):
    seed_store(db, 4, k=3)
    _no_drift(db)
    assert _tasks(db) == {p: (1, 3, 0, 0) for p in (1, 2, 3, 4)}
    a = next_task(db, "ann", overlap=2)
    b = next_task(db, "bob", overlap=2)
    assert _tasks(db)[a.prompt_id][2] == 1 + (b.prompt_id == a.prompt_id)
    submit(db, "ann", a.assignment_id, [1, 2, 3])
    skip(db, "bob", b.assignment_id, "cannot judge")
    _no_drift(db)
    c, _ = submit_and_next(db, "ann", next_task(db, "ann", overlap=2).assignment_id, [1, 1, 2], overlap=2)
    undo_last(db, "ann")  # the tied ranking comes back, and the task ann held meanwhile goes back to the pool
    _no_drift(db)
    import_native(
        db,
        write_jsonl(
            tmp_path / "r.jsonl",
            [
                {"prompt": "imported", "responses": ["x", "y", "z"], "ranks": [1, 2, 3], "annotator": "carl"},
                {"prompt": "imported 2", "responses": ["u", "v"], "ranks": [2, 1], "annotator": "carl"},
            ],
        ),
    )
    _no_drift(db)
    with connect(db) as con:
        kept = con.execute("SELECT rankings, skipped, pairs FROM ranking_counts WHERE annotator = 'carl'").fetchone()
    assert kept == (2, 0, 3 + 1)
    with write(db) as con:  # round 2 asks prompt 1 again with two new responses
        record_round(con, 2, "default", None, "random", {}, [(1, None)])
        new = [Sample(1, text, position, 2, "eos", 0) for position, text in ((9, "new a"), (10, "new b"))]
        assert add_samples(con, new, "m", round_=2) == 0
    assert _tasks(db)[1] == (2, 2, 0, 0)  # a new task: round 2's two responses, handed to nobody yet
    _no_drift(db)
    mine = progress(db, "ann", overlap=2)
    with connect(db) as con:
        ann = con.execute("SELECT count(*) FROM rankings WHERE annotator = 'ann' AND source = 'ui' AND NOT skipped")
        assert mine.mine == ann.fetchone()[0] == 1


def test_a_schema_8_store_migrates_to_counters_that_agree(tmp_path):
    path = str(tmp_path / "v8.duckdb")
    con = duckdb.connect(path)
    assert migrate(con, upto=8) == (0, 8)
    con.execute("INSERT INTO prompts (text, source) VALUES ('first?', 't'), ('second?', 't')")
    con.execute(
        "INSERT INTO responses (prompt_id, text, model_id, position) VALUES "
        "(1, 'a', 'm', 0), (1, 'b', 'm', 1), (1, 'c', 'm', 2), (2, 'd', 'm', 0), (2, ' ', 'm', 1)"
    )
    con.execute(
        "INSERT INTO assignments (prompt_id, annotator, shown_order, status, ranking_id) VALUES "
        "(1, 'ann', [2, 1, 3], 'done', 1), (1, 'bob', [3, 2, 1], 'open', NULL)"
    )
    con.execute("INSERT INTO rankings (prompt_id, annotator, source) VALUES (1, 'ann', 'ui')")
    con.execute("INSERT INTO ranking_items VALUES (1, 1, 2, 1), (1, 2, 1, 0), (1, 3, 3, 2)")
    con.close()
    assert _tasks(path) == {1: (1, 3, 2, 1), 2: (1, 1, 0, 0)}  # prompt 2 has one rankable response (one is blank)
    with connect(path) as con:
        assert con.execute("SELECT annotator, source, rankings, skipped, pairs FROM ranking_counts").fetchall() == [
            ("ann", "ui", 1, 0, 3)
        ]
        assert con.execute("SELECT round FROM assignments ORDER BY assignment_id").fetchall() == [(1,), (1,)]
    _no_drift(path)
    assert next_task(path, "cat", overlap=2) is None  # prompt 1 has its two annotators, prompt 2 too few responses
    assert next_task(path, "cat", overlap=3).prompt_id == 1


def test_a_task_the_counters_call_rankable_but_is_not_is_mended_and_passed_over(db):
    seed_store(db, 2, k=3)
    with write(db) as con:  # drift, as a bug or a hand edit would make it: prompt 2 counted, its responses blank
        con.execute("UPDATE responses SET text = ' ' WHERE prompt_id = 2")
    with connect(db) as con:
        assert drift(con)["tasks"]  # the kept row still says 3 rankable
    first = next_task(db, "ann", overlap=1, seed=0)
    assert first.prompt_id == 1
    second = next_task(db, "bob", overlap=1, seed=0)
    assert second is None  # prompt 2 has nothing to rank: mended, not handed out
    _no_drift(db)
