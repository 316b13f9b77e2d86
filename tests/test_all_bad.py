"""All bad (annotation/questions/all_bad.py): "none of the shown responses is good" is an answer of its own, from the
Annotate tab's button, a native line or a Label Studio annotation alike. Without an edit it ranks nothing (kept as a
skip, no pairs); with one, the edit is ranked over every shown response and they tie below it. The dashboard counts
it, Undo keeps it in its trace, and a malformed one is one line that stores nothing."""

import json

import pytest

from store.errors import UserError
from tests.builders import exported_ls_task, seed_store
from tests.builders import ls_choices as _choices
from tests.conftest import query, store_rows, write_jsonl

FRUIT = ("Name a fruit.", ["Banana.", "A pear, I think.", "Rocks."])
LINE = {"prompt": "Name a fruit.", "responses": ["Rocks.", "Mud.", "Sand."], "ranks": [1, 2, 3], "annotator": "ann"}


def _ls_task(results: list[dict]) -> list[dict]:
    return exported_ls_task(*FRUIT, results)


def _pairs(db) -> set[tuple[str, str]]:
    return set(query(db, "SELECT chosen, rejected FROM pairs"))


def test_a_native_all_bad_line_is_a_skip_without_an_edit_and_the_edits_k_pairs_with_one(db, cli, tmp_path):
    lines = [
        {**LINE, "all_bad": True},
        {**LINE, "prompt": "Name a vegetable.", "all_bad": True, "edit": "A carrot."},
        {**LINE, "prompt": "Name a colour.", "all_bad": False},  # an ordinary ranking: 3 pairs
    ]
    code, out, err = cli("import", str(write_jsonl(tmp_path / "r.jsonl", lines)))
    assert code == 0, err
    got = query(
        db, "SELECT p.text, r.skipped, r.skip_reason, r.all_bad FROM rankings r JOIN prompts p USING (prompt_id)"
    )
    assert sorted(got) == [
        ("Name a colour.", False, None, False),
        ("Name a fruit.", True, "all bad", True),
        ("Name a vegetable.", False, None, True),
    ]
    # by hand: the edit over each of the 3 shown (which tie: no pair among them), and the colour ranking's 3
    assert _pairs(db) == {
        ("A carrot.", "Rocks."),
        ("A carrot.", "Mud."),
        ("A carrot.", "Sand."),
        ("Rocks.", "Mud."),
        ("Rocks.", "Sand."),
        ("Mud.", "Sand."),
    }
    assert query(db, "SELECT count(*) FROM pairs p JOIN prompts USING (prompt_id) WHERE text = 'Name a fruit.'") == [
        (0,)
    ]
    before = store_rows(db)
    assert cli("import", str(tmp_path / "r.jsonl"))[0] == 0 and store_rows(db) == before  # a re-import adds nothing


@pytest.mark.parametrize(
    "change, message",
    [
        ({"all_bad": "yes"}, "'all_bad' must be true or false"),
        ({"all_bad": True, "tags": [["unsafe"], [], []]}, "an all-bad answer without an edit ranks nothing, so it"),
        ({"all_bad": True, "edit": "Rocks."}, "the edit is the same as response 1: change it, or clear it"),
    ],
)
def test_a_bad_all_bad_line_is_one_line_and_nothing_is_stored(db, cli, tmp_path, change, message):
    cli("init")
    before = store_rows(db)
    code, _, err = cli(
        "import", str(write_jsonl(tmp_path / "r.jsonl", [{**LINE, "prompt": "Other."}, {**LINE, **change}]))
    )
    assert code == 1 and err.startswith(f"error: r.jsonl line 2: {message}"), err
    assert store_rows(db) == before


def test_a_label_studio_all_bad_needs_no_order_and_takes_an_edit(db, cli, tmp_path):
    """From tasks `rlhf export-ls` wrote: All bad ticked with the Ranker left empty, or with no Ranker result at all,
    is stored as the tab's; with an edit, the edit goes over every response the task showed, which tie, whatever the
    Ranker holds (here the shown order Label Studio saves when nobody dragged: no shown-order flag)."""
    said = _choices("all_bad", "None of these responses is good")
    empty = _ls_task([said])
    empty[0]["annotations"][0]["result"][0]["value"]["ranker"]["rank"] = []  # nothing ranked
    no_ranker = _ls_task([said])
    del no_ranker[0]["annotations"][0]["result"][0]
    no_ranker[0]["id"], no_ranker[0]["data"]["prompt"] = 9, "Name a plum."
    edited = _ls_task(
        [said, {"from_name": "edit", "to_name": "prompt", "type": "textarea", "value": {"text": ["A pear."]}}]
    )
    edited[0]["annotations"][0]["result"][0]["value"]["ranker"]["rank"] = ["x0", "x1", "x2"]
    edited[0]["id"], edited[0]["data"]["prompt"] = 8, "Name a pear."
    export = tmp_path / "export.json"
    export.write_text(json.dumps(empty + no_ranker + edited))
    code, out, err = cli("import-ls", str(export))
    assert code == 0 and "rankings added 3, pairs added 3, already imported 0, skipped 0, flagged 0" in out, (out, err)
    assert sorted(query(db, "SELECT skipped, all_bad, skip_reason, flags FROM rankings")) == [
        (False, True, None, []),
        (True, True, "all bad", []),
        (True, True, "all bad", []),
    ]
    # by hand: the edit over each of the task's 3 responses, none among them
    assert _pairs(db) == {("A pear.", t) for t in ("Banana.", "A pear, I think.", "Rocks.")}
    before = store_rows(db)
    for results in ([_choices("all_bad", "Everything is fine")], [_choices("all_bad", "Everything is fine"), "empty"]):
        bad = _ls_task([r for r in results if r != "empty"])
        if "empty" in results:
            bad[0]["annotations"][0]["result"][0]["value"]["ranker"]["rank"] = []
        export.write_text(json.dumps(bad))
        code, _, err = cli("import-ls", str(export))
        assert code == 1 and "task 7 annotation 70: the all_bad result holds ['Everything is fine']" in err, err
        assert store_rows(db) == before


def test_the_annotate_tabs_all_bad_button_skips_or_ranks_the_edit_first_and_undo_keeps_the_trace(db):
    from annotation.dashboard import annotator_rows
    from app.faces.annotate_tab import on_all_bad, on_load, on_undo
    from app.faces.ui import AppContext
    from store.assignments import undone
    from store.db import connect

    seed_store(db, 3, k=3)
    ctx = AppContext(db, allow_edits=True)
    first = on_load(ctx, "ann")
    # the widget's order and strengths are no answer here; a tag without an edit is refused, nothing stored
    tagged = {**first.ranker, "items": [{**it, "tags": ["unsafe"]} for it in first.ranker["items"]]}
    before = store_rows(db)
    with pytest.raises(UserError, match=r"all bad without an edit ranks nothing, so it keeps no other answer \(tags\)"):
        on_all_bad(ctx, "ann", first.task, tagged)
    assert store_rows(db) == before
    second = on_all_bad(ctx, "ann", first.task, {**first.ranker, "strengths": [3, 3]})
    assert second.status == "Saved as all bad. Next prompt." and second.task != first.task
    third = on_all_bad(ctx, "ann", second.task, {**second.ranker, "edit": "A better answer."})
    assert third.status == "Saved as all bad, your edit ranked first. Next prompt."
    assert query(db, "SELECT skipped, skip_reason, all_bad FROM rankings ORDER BY ranking_id") == [
        (True, "all bad", True),
        (False, None, True),
    ]
    # the edit over the 3 shown, which tie; no strengths
    assert query(db, "SELECT count(*), count(DISTINCT chosen), max(strength) FROM pairs") == [(3, 1, None)]
    (row,) = annotator_rows(db)
    assert (row.rankings, row.skipped, row.all_bad, row.edits) == (1, 1, 2, 1)
    back = on_undo(ctx, "ann")
    assert back.status == "Your last answer, All bad, is back: press All bad or rank." and back.ranker["edit"] == (
        "A better answer."
    )
    with connect(db, create=False) as con:
        (trace,) = undone(con)
    assert trace.all_bad and not trace.skipped and len(trace.ranks) == 4  # the 3 shown and the edit
    assert query(db, "SELECT count(*) FROM pairs") == [(0,)]


def test_a_store_of_schema_14_migrates_and_its_all_bad_skips_become_the_answer(tmp_path):
    """Before, 'all responses are bad' was one of the Annotate tab's skip reasons: those skips are this answer."""
    import duckdb

    from store.db import connect, migrate

    path = str(tmp_path / "old.duckdb")
    con = duckdb.connect(path)
    migrate(con, upto=14)
    con.execute("INSERT INTO prompts (text, source) VALUES ('p', 't')")
    for reason in ("cannot judge", "all responses are bad"):
        con.execute(
            "INSERT INTO rankings (prompt_id, annotator, source, skipped, skip_reason) VALUES (1, 'a', 'ui', true, ?)",
            [reason],
        )
    con.close()
    with connect(path) as con:
        got = con.execute("SELECT skip_reason, all_bad FROM rankings ORDER BY ranking_id").fetchall()
    assert got == [("cannot judge", False), ("all responses are bad", True)]


def test_an_all_bad_skip_under_a_plain_skips_key_is_a_conflict_not_a_repeat(db):
    """Two skips have no items to tell them apart: under one key, a pass and an all-bad answer are two judgements,
    so the second is reported as a conflict and the stored one stays."""
    from store.db import write
    from store.rankings import RankingIn, insert_rankings

    def skip(all_bad: bool) -> RankingIn:
        return RankingIn("p", [], "ann", "native", "k1", skipped=True, skip_reason="x", answers={"all_bad": all_bad})

    with write(db) as con:
        assert insert_rankings(con, [skip(False)]).added == 1
    before = store_rows(db)
    with write(db) as con:
        result = insert_rankings(con, [skip(True)])
        again = insert_rankings(con, [skip(False)])
    assert (result.added, result.conflicts, again.already) == (0, ["k1"], 1)
    assert store_rows(db) == before
