"""Guidelines and tags (store/guidelines.py, migration 0013): the guideline in numbered versions, each ranking
recording the version shown with its task; tags on single responses, stored per ranking, given back by undo,
counted on the dashboard, and leaving the pairs alone; every refusal changing nothing."""

import duckdb
import pytest

from annotation.session import next_task, skip, submit_and_next, undo_last
from store.db import connect, migrate, write
from store.errors import UserError
from store.guidelines import MAX_GUIDELINE_CHARS, guideline_versions, set_guideline
from store.tasks import drift
from tests.builders import seed_store
from tests.conftest import query, store_rows


def _set(db, text: str, author: str = "lead") -> int:
    with write(db) as con:
        return set_guideline(con, text, author)


def test_each_new_text_is_the_next_version_and_the_same_text_keeps_its_own(db):
    seed_store(db, 1)
    assert _set(db, "Prefer *short* answers.") == 1
    assert _set(db, "Prefer *short* answers.") == 1  # a second save of the same text adds no version
    assert _set(db, "Prefer short, correct answers.", "lead2") == 2
    with connect(db) as con:
        assert [(v, who, n) for v, who, _, n in guideline_versions(con)] == [(1, "lead", 0), (2, "lead2", 0)]


def test_a_ranking_records_the_version_shown_with_its_task_not_a_later_one(db):
    seed_store(db, 3, k=2)
    assert next_task(db, "ann", seed=0).guideline is None  # none set yet
    submit_and_next(db, "ann", next_task(db, "ann", seed=0).assignment_id, [2, 1])
    _set(db, "v1")
    task = next_task(db, "ann", seed=0)
    assert task.guideline == (1, "v1")
    _set(db, "v2")  # the lead changes it while ann reads
    nxt, _ = submit_and_next(db, "ann", task.assignment_id, [1, 2], guideline_version=task.guideline[0])
    assert nxt.guideline == (2, "v2")  # the next task shows the new one
    skip(db, "ann", nxt.assignment_id, "cannot judge")  # None: the current one
    assert query(db, "SELECT guideline_version FROM rankings ORDER BY ranking_id") == [(None,), (1,), (2,)]
    with connect(db) as con:
        assert [(v, n) for v, _, _, n in guideline_versions(con)] == [(1, 1), (2, 1)]


@pytest.mark.parametrize("version", [3, 0, "1"])
def test_a_version_never_set_is_refused_and_stores_nothing(db, version):
    seed_store(db, 1, k=2)
    _set(db, "v1")
    _set(db, "v2")
    task = next_task(db, "ann", seed=0)
    before = store_rows(db)
    with pytest.raises(UserError, match="was never set"):
        submit_and_next(db, "ann", task.assignment_id, [1, 2], guideline_version=version)
    assert store_rows(db) == before


def test_tags_are_stored_per_response_and_leave_the_pairs_alone(db):
    seed_store(db, 1, k=3)
    task = next_task(db, "ann", seed=0)
    tags = [[], ["unsafe"], ["off topic", "factually wrong"]]
    submit_and_next(db, "ann", task.assignment_id, [2, 1, 3], answers={"tags": tags})
    rows = query(db, "SELECT response_id, tag FROM response_tags ORDER BY response_id, tag")
    a, b, c = task.response_ids
    assert rows == sorted([(b, "unsafe"), (c, "factually wrong"), (c, "off topic")])
    assert query(db, "SELECT count(*) FROM pairs") == [(3,)]  # C(3, 2), as without tags
    with connect(db) as con:
        assert drift(con) == {"tasks": [], "ranking_counts": []}


@pytest.mark.parametrize(
    "tags, message",
    [
        ([[], ["rude"], []], "'rude' is not a tag"),
        ([[], []], "tags for 2 responses, but 3 were shown"),
        ([["unsafe", "unsafe"], [], []], "has a tag twice"),
        ([[], "unsafe", []], "are not a list"),
    ],
)
def test_a_wrong_tag_is_one_error_and_stores_nothing(db, tags, message):
    seed_store(db, 1, k=3)
    task = next_task(db, "ann", seed=0)
    before = store_rows(db)
    with pytest.raises(UserError, match=message):
        submit_and_next(db, "ann", task.assignment_id, [1, 2, 3], answers={"tags": tags})
    assert store_rows(db) == before


def test_undo_gives_the_tags_back_in_shown_order_and_takes_their_rows(db):
    seed_store(db, 1, k=3)
    task = next_task(db, "ann", seed=0)
    submit_and_next(
        db, "ann", task.assignment_id, [1, 2, 3], answers={"tags": [["other"], [], ["unsafe", "off topic"]]}
    )
    back = undo_last(db, "ann")
    assert back.previous_tags == [["other"], [], ["unsafe", "off topic"]]  # TAGS' order
    assert query(db, "SELECT count(*) FROM response_tags") == [(0,)]
    submit_and_next(db, "ann", back.assignment_id, [1, 2, 3], answers={"tags": [[], ["unsafe"], []]})
    assert query(db, "SELECT response_id, tag FROM response_tags") == [(task.response_ids[1], "unsafe")]


def test_the_dashboard_counts_each_annotators_tags(db, cli):
    from annotation.dashboard import annotator_rows, table, tag_line

    seed_store(db, 2, k=3)
    given = {"ann": [["unsafe"], ["unsafe", "off topic"], []], "bob": None}
    for name, tags in given.items():
        for _ in range(2):
            task = next_task(db, name, overlap=2, seed=0)
            submit_and_next(db, name, task.assignment_id, [2, 1, 3], overlap=2, answers={"tags": tags})
    rows = {r.annotator: r for r in annotator_rows(db)}
    assert rows["ann"].tags == {"unsafe": 4, "off topic": 2} and rows["bob"].tags == {}
    assert tag_line(rows["ann"].tags) == "unsafe 4, off topic 2"
    assert table([rows["ann"]])[0][6] == "unsafe 4, off topic 2"
    code, out, _ = cli("annotators")
    assert code == 0 and "unsafe 4, off topic 2" in out


def test_the_annotate_tab_shows_the_guideline_and_submits_the_widgets_tags(db):
    from app.faces.annotate_tab import on_load, on_submit, on_undo
    from app.faces.ui import AppContext

    seed_store(db, 2, k=3)
    _set(db, "Prefer answers <b>without</b> *fluff*.")
    ctx = AppContext(db)
    view = on_load(ctx, "ann")
    assert view.task["guideline_version"] == 1
    assert "Guidelines (version 1)" in view.guideline and "<em>fluff</em>" in view.guideline
    assert "<b>" not in view.guideline  # the guideline's own HTML is escaped, as a response's is
    assert view.ranker["tag_names"] == ["unsafe", "factually wrong", "off topic", "other"]
    value = {
        **view.ranker,
        "items": [{**it, "tags": ["unsafe"] if i == 0 else []} for i, it in enumerate(view.ranker["items"])],
    }
    _set(db, "v2")
    on_submit(ctx, "ann", view.task, value, True)
    assert query(db, "SELECT guideline_version FROM rankings") == [(1,)]
    assert query(db, "SELECT response_id, tag FROM response_tags") == [(view.task["response_ids"][0], "unsafe")]
    back = on_undo(ctx, "ann")
    assert [it["tags"] for it in back.ranker["items"]] == [["unsafe"], [], []]
    bad = {**back.ranker, "items": [{**it, "tags": ["rude"]} for it in back.ranker["items"]]}
    before = store_rows(db)
    with pytest.raises(UserError, match="'rude' is not a tag"):
        on_submit(ctx, "ann", back.task, bad, True)
    assert store_rows(db) == before


def test_rlhf_guideline_sets_shows_and_refuses(db, cli, tmp_path):
    seed_store(db, 1)
    code, out, _ = cli("guideline")
    assert code == 0 and "no guideline set" in out
    md = tmp_path / "guide.md"
    md.write_text("# Guide\n\nPrefer short answers.\n")
    code, out, _ = cli("guideline", "--set", str(md), "--by", "lead")
    assert code == 0 and "version 1 set by lead" in out
    code, out, _ = cli("guideline", "--set", str(md))
    assert code == 0 and "unchanged (version 1)" in out
    code, out, _ = cli("guideline")
    assert code == 0 and "version 1: set by lead" in out and "0 answers" in out and "Prefer short answers." in out
    md.write_text("x" * (MAX_GUIDELINE_CHARS + 1))
    before = store_rows(db)
    code, _, err = cli("guideline", "--set", str(md))
    assert code != 0 and f"the most is {MAX_GUIDELINE_CHARS:,}" in err and store_rows(db) == before
    md.write_text("  \n")
    code, _, err = cli("guideline", "--set", str(md))
    assert code != 0 and "the guideline is empty" in err


def test_a_schema_12_store_migrates_with_its_rankings_and_no_version(tmp_path):
    path = str(tmp_path / "v12.duckdb")
    con = duckdb.connect(path)
    assert migrate(con, upto=12) == (0, 12)
    con.execute("INSERT INTO prompts (text, source) VALUES ('first?', 't')")
    con.execute("INSERT INTO responses (prompt_id, text, model_id, position) VALUES (1, 'a', 'm', 0), (1, 'b', 'm', 1)")
    con.execute("INSERT INTO rankings (prompt_id, annotator, source) VALUES (1, 'old', 'native')")
    con.execute("INSERT INTO ranking_items VALUES (1, 1, 1, 0), (1, 2, 2, 1)")
    con.close()
    with connect(path) as con:
        assert con.execute("SELECT max(version) FROM schema_version").fetchone()[0] >= 13
        assert con.execute("SELECT annotator, guideline_version FROM rankings").fetchall() == [("old", None)]
        assert con.execute("SELECT chosen, rejected FROM pairs").fetchall() == [("a", "b")]
