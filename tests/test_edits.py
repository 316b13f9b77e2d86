"""Edits (store/edits.py, migration 0012; Llama 3's edited > chosen > rejected): an annotator's correction of the
response they ranked best is a response of its own ranked above all, never handed out as a task's response; the
pairs it adds counted by hand, every refusal changing nothing, and undo giving the edit back."""

import duckdb
import pytest

from annotation.questions.edit import MAX_EDIT_CHARS
from annotation.session import next_task, submit_and_next, undo_last
from store.db import connect, migrate
from store.errors import UserError
from store.tasks import drift
from tests.builders import seed_store
from tests.conftest import query, store_rows


def _no_drift(db) -> None:
    with connect(db) as con:
        assert drift(con) == {"tasks": [], "ranking_counts": []}


def test_an_edit_is_ranked_above_every_shown_response_and_adds_k_pairs(db):
    seed_store(db, 2, k=3)
    task = next_task(db, "ann", overlap=2, seed=0)
    best = task.response_ids[1]  # ranked 1 below
    submit_and_next(db, "ann", task.assignment_id, [2, 1, 3], overlap=2, answers={"edit": "  p0 answer, corrected  "})
    ((edit_id, text, model),) = query(db, "SELECT response_id, text, model_id FROM responses WHERE model_id = 'edit'")
    assert (text, model) == ("p0 answer, corrected", "edit")
    assert query(db, "SELECT edit_of, annotator FROM edits WHERE response_id = ?", [edit_id]) == [(best, "ann")]
    items = dict(query(db, "SELECT response_id, rank FROM ranking_items"))
    assert items == {task.response_ids[0]: 3, best: 2, task.response_ids[2]: 4, edit_id: 1}
    # C(3, 2) = 3 pairs among the shown responses, and the edit over each of the 3: edited > chosen > rejected
    chosen = query(
        db, "SELECT chosen, rejected, margin FROM pairs WHERE chosen = 'p0 answer, corrected' ORDER BY margin"
    )
    assert [(r[1], r[2]) for r in chosen] == [
        (task.responses[1], 1),
        (task.responses[0], 2),
        (task.responses[2], 3),
    ]
    assert query(db, "SELECT count(*) FROM pairs") == [(6,)]
    assert query(db, "SELECT pairs FROM ranking_counts WHERE annotator = 'ann'") == [(6,)]
    _no_drift(db)


def test_an_edit_is_never_handed_out_to_another_annotator(db):
    seed_store(db, 1, k=3)
    task = next_task(db, "ann", overlap=2, seed=0)
    nxt, _ = submit_and_next(db, "ann", task.assignment_id, [1, 2, 3], overlap=2, answers={"edit": "a better answer"})
    assert nxt is None  # one prompt, and ann answered it
    bob = next_task(db, "bob", overlap=2, seed=0)
    assert sorted(bob.response_ids) == sorted(task.response_ids) and "a better answer" not in bob.responses
    assert query(db, "SELECT rankable FROM tasks") == [(3,)]  # the counters leave the edit out too
    _no_drift(db)


def test_strengths_with_an_edit_are_the_shown_responses_steps(db):
    seed_store(db, 1, k=3)
    task = next_task(db, "ann", seed=0)
    submit_and_next(db, "ann", task.assignment_id, [1, 2, 3], answers={"strengths": [3, 1], "edit": "edited"})
    rows = query(db, "SELECT chosen, rejected, strength FROM pairs ORDER BY chosen, rejected")
    by = {(c, r): s for c, r, s in rows}
    a, b, c = task.responses
    assert by[(a, b)] == 3 and by[(b, c)] == 1 and by[(a, c)] == 3  # the largest step between them
    assert [by[("edited", t)] for t in (a, b, c)] == [None, None, None]  # nobody said how much better the edit is


@pytest.mark.parametrize(
    "ranks, edit, message",
    [
        ([1, 1, 2], "better", "rank one response best to edit it"),
        ([1, 2, 3], "p0 answer 2", "the edit is the same as response"),
        ([1, 2, 3], "x" * (MAX_EDIT_CHARS + 1), f"the most is {MAX_EDIT_CHARS:,}"),
    ],
)
def test_a_refused_edit_is_one_error_and_stores_nothing(db, ranks, edit, message):
    seed_store(db, 1, k=3)
    task = next_task(db, "ann", seed=0)
    before = store_rows(db)
    with pytest.raises(UserError, match=message):
        submit_and_next(db, "ann", task.assignment_id, ranks, answers={"edit": edit})
    assert store_rows(db) == before and next_task(db, "ann").assignment_id == task.assignment_id  # still open


def test_a_blank_edit_is_no_edit(db):
    seed_store(db, 1, k=3)
    task = next_task(db, "ann", seed=0)
    submit_and_next(db, "ann", task.assignment_id, [1, 2, 3], answers={"edit": "   \n"})
    assert query(db, "SELECT count(*) FROM edits") == [(0,)] and query(db, "SELECT count(*) FROM pairs") == [(3,)]


def test_undo_gives_the_edit_back_with_the_shown_responses_ranks(db):
    seed_store(db, 1, k=3)
    task = next_task(db, "ann", seed=0)
    submit_and_next(db, "ann", task.assignment_id, [2, 1, 3], answers={"edit": "my version"})
    back = undo_last(db, "ann")
    assert back.previous_ranks == [2, 1, 3] and back.previous_edit == "my version"
    assert back.response_ids == task.response_ids and "my version" not in back.responses
    submit_and_next(db, "ann", back.assignment_id, [1, 2, 3], answers={"edit": "my second version"})
    assert query(db, "SELECT r.text FROM ranking_items i JOIN responses r USING (response_id) WHERE i.rank = 1") == [
        ("my second version",)
    ]
    _no_drift(db)


def test_a_schema_11_store_migrates_with_its_tasks_unchanged(tmp_path):
    path = str(tmp_path / "v11.duckdb")
    con = duckdb.connect(path)
    assert migrate(con, upto=11) == (0, 11)
    con.execute("INSERT INTO prompts (text, source) VALUES ('first?', 't')")
    con.execute("INSERT INTO responses (prompt_id, text, model_id, position) VALUES (1, 'a', 'm', 0), (1, 'b', 'm', 1)")
    con.execute("INSERT INTO tasks SELECT * FROM task_state")
    before = con.execute("SELECT * FROM tasks").fetchall()
    con.close()
    with connect(path) as con:
        assert con.execute("SELECT max(version) FROM schema_version").fetchone()[0] >= 12
        assert con.execute("SELECT * FROM task_state").fetchall() == before == [(1, 1, 2, None, 0, 0)]
    assert next_task(path, "ann", seed=0).prompt_id == 1


def test_the_annotate_tab_takes_an_edit_only_where_the_campaign_allows_it(db):
    from app.faces.annotate_tab import on_load, on_submit, on_undo
    from app.faces.ui import AppContext

    seed_store(db, 2)
    off = AppContext(db)
    view = on_load(off, "ann")
    assert view.ranker["edit_ok"] is False
    value = {**view.ranker, "edit": "my version"}
    before = store_rows(db)
    with pytest.raises(UserError, match="takes no edits"):
        on_submit(off, "ann", view.task, value, True)
    assert store_rows(db) == before
    on = AppContext(db, allow_edits=True)
    assert on_load(on, "ann").ranker["edit_ok"] is True
    assert on_submit(on, "ann", view.task, value, True).ranker["edit"] == ""  # the next task starts blank
    assert query(db, "SELECT text FROM responses r JOIN edits USING (response_id)") == [("my version",)]
    assert on_undo(on, "ann").ranker["edit"] == "my version"  # undo gives it back in the box


def test_the_dashboard_counts_each_annotators_edits(db):
    from annotation.dashboard import annotator_rows

    seed_store(db, 2, k=3)
    for name, edit in (("ann", "ann's version"), ("bob", "")):
        task = next_task(db, name, overlap=2, seed=0)
        submit_and_next(db, name, task.assignment_id, [1, 2, 3], overlap=2, answers={"edit": edit})
    assert {r.annotator: r.edits for r in annotator_rows(db)} == {"ann": 1, "bob": 0}
    assert query(db, "SELECT annotator, flags FROM rankings ORDER BY annotator") == [
        ("ann", ["shown_order"]),  # an edit is no flag: --drop-flagged keeps the edited ranking's pairs
        ("bob", ["shown_order"]),
    ]


def test_an_edited_ranking_is_not_flagged_and_undo_takes_its_edit_off_the_dashboard(db):
    from annotation.dashboard import annotator_rows
    from store.pairs import count_pairs

    seed_store(db, 1, k=3)
    task = next_task(db, "ann", seed=0)
    submit_and_next(db, "ann", task.assignment_id, [2, 1, 3], answers={"edit": "my version"})
    with connect(db) as con:
        assert count_pairs(con, drop_flagged=True) == 6  # C(3, 2) + the edit over 3: none dropped
    assert [r.edits for r in annotator_rows(db)] == [1]
    back = undo_last(db, "ann")
    submit_and_next(db, "ann", back.assignment_id, [2, 1, 3])  # answered again, without the edit
    assert [r.edits for r in annotator_rows(db)] == [0]  # the undone ranking's edit counts no more
