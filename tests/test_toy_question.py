"""A question registered only here (issue 54: "a toy question ... reaches the widget, native and Label Studio files,
the store and the pairs without touching a tab, session or store signature"). tests/toy_question.py's `confidence`
asks how sure the annotator is of their order, 1 to 5; registered here, it is asked by the widget, Label Studio's
config and the files, and its answer lands in ranking_answers, which the pairs view carries as `answers`. The
browser test (tests/test_browser.py) answers it by clicking in the app."""

import json
import re

import pytest

from annotation.labelstudio_export import ranker_config
from annotation.questions import register
from store.errors import UserError
from tests.builders import exported_ls_task, seed_store
from tests.builders import ls_choices as _choices
from tests.conftest import query, store_rows, write_jsonl
from tests.toy_question import CONFIDENCE

LINE = {
    "prompt": "Name a fruit.",
    "responses": ["Banana.", "A pear.", "Rocks."],
    "ranks": [2, 1, 3],
    "annotator": "ann",
}


@pytest.fixture
def confidence():
    with register(CONFIDENCE) as q:
        yield q


def _pair_answers(db) -> list:
    return sorted({json.loads(a)["confidence"] for (a,) in query(db, "SELECT answers FROM pairs")})


def test_a_native_line_brings_it_to_the_store_and_every_pair(db, cli, tmp_path, confidence):
    code, out, err = cli("import", str(write_jsonl(tmp_path / "r.jsonl", [{**LINE, "confidence": 4}])))
    assert code == 0 and "pairs added 3" in out, err
    assert query(db, "SELECT question, value FROM ranking_answers") == [("confidence", "4")]
    assert query(db, "SELECT count(*) FROM pairs WHERE answers IS NOT NULL") == [(3,)] and _pair_answers(db) == [4]


def test_a_pairs_export_and_a_snapshot_carry_it(db, cli, tmp_path, confidence):
    import pyarrow.parquet as pq

    from store.db import write
    from store.snapshot import write_snapshot

    assert cli("import", str(write_jsonl(tmp_path / "r.jsonl", [{**LINE, "confidence": 4}])))[0] == 0
    code, _, err = cli("pairs", "--out", str(tmp_path / "pairs.jsonl"))
    exported = [json.loads(line) for line in (tmp_path / "pairs.jsonl").read_text().splitlines()]
    assert code == 0 and [row["answers"] for row in exported] == [{"confidence": 4}] * 3, err
    with write(db) as con:
        folder = write_snapshot(con, tmp_path / "snaps", eval_fraction=0.0)
    frozen = pq.read_table(folder / "train.parquet").to_pylist()
    assert [json.loads(row["answers"]) for row in frozen] == [{"confidence": 4}] * 3


def test_the_annotators_dashboard_counts_it(db, cli, tmp_path, confidence):
    from annotation.dashboard import annotator_rows, table

    lines = [{**LINE, "confidence": 4}, {**LINE, "prompt": "Name a tree.", "confidence": 2}]
    lines.append({**LINE, "prompt": "Name a car.", "annotator": "bob", "best_good": True})
    assert cli("import", str(write_jsonl(tmp_path / "r.jsonl", lines)))[0] == 0
    ann, bob = annotator_rows(db)
    assert ann.answers == {"confidence": 2} and bob.answers == {"best_good": 1}
    assert [row[7] for row in table([ann, bob])] == ["confidence 2", "best_good 1"]


def test_a_bad_answer_is_one_line_and_nothing_is_stored(db, cli, tmp_path, confidence):
    cli("init")
    before = store_rows(db)
    path = write_jsonl(tmp_path / "r.jsonl", [LINE, {**LINE, "prompt": "Other.", "confidence": 9}])
    code, out, err = cli("import", str(path))
    assert code == 1 and err.strip() == "error: r.jsonl line 2: 'confidence' must be a whole number from 1 to 5, got 9"
    assert store_rows(db) == before


def test_label_studio_asks_it_and_its_annotation_brings_it(db, cli, tmp_path, confidence):
    config = ranker_config(3)
    assert config.count('<Choices name="confidence"') == 1
    export = tmp_path / "export.json"
    export.write_text(json.dumps(exported_ls_task(LINE["prompt"], LINE["responses"], [_choices("confidence", "2")])))
    code, out, err = cli("import-ls", str(export))
    assert code == 0 and "pairs added 3" in out, err
    assert _pair_answers(db) == [2]


def test_the_annotate_tab_stores_it_from_the_widgets_value_and_undo_removes_it(db, confidence):
    from app.faces.annotate_tab import on_load, on_submit, on_undo
    from app.faces.ui import AppContext

    seed_store(db, 2, k=3)
    ctx = AppContext(db)
    view = on_load(ctx, "ann")

    def ranked(ranker: dict) -> dict:  # the first two swapped: not the shown order
        return {**ranker, "items": [{**it, "rank": n} for n, it in zip((2, 1, 3), ranker["items"], strict=True)]}

    after = on_submit(ctx, "ann", view.task, {**ranked(view.ranker), "confidence": 5}, True)
    assert query(db, "SELECT count(*) FROM pairs WHERE answers IS NOT NULL") == [(3,)] and _pair_answers(db) == [5]
    asked = {"name": "confidence", "title": CONFIDENCE.title, "choices": ["1", "2", "3", "4", "5"]}
    assert view.ranker["more"][-1] == asked  # after the built-in question asked this way (best_good.py)
    with pytest.raises(UserError, match="'confidence' must be a whole number from 1 to 5, got 'sure'"):
        on_submit(ctx, "ann", after.task, {**ranked(after.ranker), "confidence": "sure"}, True)
    assert query(db, "SELECT count(*) FROM rankings") == [(1,)]
    back = on_undo(ctx, "ann")
    assert back.ranker["confidence"] == "5"  # the undone answer's, given back to the widget as its choice
    assert query(db, "SELECT count(*) FROM ranking_answers") == [(0,)]


def test_without_it_registered_the_same_answer_is_refused_not_dropped(db):
    from annotation.session import next_task, submit_and_next

    seed_store(db, 1, k=3)
    task = next_task(db, "ann")
    with pytest.raises(UserError, match="no question is called 'confidence'"):
        submit_and_next(db, "ann", task.assignment_id, [2, 1, 3], answers={"confidence": 3})
    assert query(db, "SELECT count(*) FROM rankings") == [(0,)]


def test_rlhf_questions_loads_it_for_every_command_and_a_bad_entry_is_one_line(db, cli, tmp_path, monkeypatch):
    from annotation.questions import QUESTIONS

    monkeypatch.setenv("RLHF_QUESTIONS", "tests.toy_question:CONFIDENCE")
    try:
        code, out, err = cli("import", str(write_jsonl(tmp_path / "r.jsonl", [{**LINE, "confidence": 1}])))
        assert code == 0 and _pair_answers(db) == [1], err
    finally:
        QUESTIONS[:] = [q for q in QUESTIONS if q.name != "confidence"]
    monkeypatch.setenv("RLHF_QUESTIONS", "tests.toy_question:LEVELS")
    code, out, err = cli("import", str(tmp_path / "r.jsonl"))
    assert code == 1 and err.strip() == "error: RLHF_QUESTIONS: 'tests.toy_question:LEVELS' is a list, not a Question"


def test_a_question_cannot_take_a_name_in_use_and_rlhf_questions_says_why_in_one_line(db, cli, monkeypatch):
    import dataclasses

    from annotation.questions import load_questions

    with pytest.raises(ValueError, match="a question called 'tags' is already asked"):
        with register(dataclasses.replace(CONFIDENCE, name="tags")):
            pass
    with pytest.raises(ValueError, match="a question cannot be called 'ranks': the ranking itself uses that key"):
        with register(dataclasses.replace(CONFIDENCE, name="ranks")):
            pass
    for spec, said in (
        ("tests.toy_question", "'tests.toy_question' is not module:NAME"),
        ("tests.no_such_module:Q", "cannot load 'tests.no_such_module:Q' (ModuleNotFoundError: No module named"),
    ):
        with pytest.raises(UserError, match=re.escape(said)):
            load_questions(spec)


def test_rankings_made_in_code_with_an_answer_no_question_asks_are_refused_and_nothing_is_stored(db):
    from annotation.judgement import write_rankings
    from store.db import write
    from store.rankings import RankedItem, RankingIn

    ranking = RankingIn("p", [RankedItem("a", 1), RankedItem("b", 2)], "ann", "native", answers={"mood": "fine"})
    with pytest.raises(UserError, match="no question is called 'mood'"):
        with write(db) as con:
            write_rankings(con, [ranking])
    assert query(db, "SELECT count(*) FROM rankings") == [(0,)]
