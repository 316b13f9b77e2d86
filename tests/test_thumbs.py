"""Thumbs in the store (the `thumbs` view, migration 0016): a judgement on single responses that pairs cannot carry.
An Annotate-tab "all bad" without an edit is a thumbs down on each response the task showed; a Compare vote "both
bad" a thumbs down on each reply; everything else gives none (its information is in the pairs)."""

from pathlib import Path

import pytest

from store.compare import Vote, record_vote
from store.db import write
from tests.builders import seed_store
from tests.conftest import query


def test_an_all_bad_task_and_a_both_bad_vote_are_thumbs_down_and_nothing_else_is(db):
    from app.faces.annotate_tab import on_all_bad, on_load, on_submit
    from app.faces.ui import AppContext

    seed_store(db, 3, k=3)
    ctx = AppContext(db)
    first = on_load(ctx, "ann")
    shown = sorted(it["text"] for it in first.ranker["items"])
    second = on_all_bad(ctx, "ann", first.task, first.ranker)  # all bad, no edit: a skip that keeps the shown
    on_submit(ctx, "ann", second.task, second.ranker, True)  # an ordinary ranking: pairs, no thumbs
    with write(db) as con:
        for choice in ("both_bad", "left", "tie"):
            record_vote(con, Vote("ann", "a question?", [("reply A", "m1"), ("reply B", "m2")], choice, {}, 1))
    rows = query(db, "SELECT source, completion, label FROM thumbs ORDER BY source, completion")
    from_task = [(s, c, lab) for s, c, lab in rows if s != "compare"]
    assert [c for _, c, _ in from_task] == shown and not any(lab for *_, lab in from_task)
    assert [r for r in rows if r[0] == "compare"] == [("compare", "reply A", False), ("compare", "reply B", False)]
    assert query(db, "SELECT count(*) FROM pairs")[0][0] == 3  # the ordinary ranking's C(3,2)


def test_a_snapshot_for_kto_holds_the_thumbs_beside_the_pairs_split_by_prompt(db, tmp_path):
    from app.faces.annotate_tab import on_all_bad, on_load, on_submit
    from app.faces.ui import AppContext
    from store.db import read
    from store.snapshot import freeze_snapshot, verify_snapshot
    from training.pairwise.data_types import load_unpaired

    seed_store(db, 4, k=3)
    ctx = AppContext(db)
    view = on_load(ctx, "ann")
    view = on_all_bad(ctx, "ann", view.task, view.ranker)  # 3 thumbs down
    for _ in range(3):  # 3 rankings of 3: 9 pairs, read as 2 thumbs each (net wins; the middle one ties)
        view = on_submit(ctx, "ann", view.task, view.ranker, True)
    with write(db) as con:
        record_vote(con, Vote("ann", "a question?", [("reply A", "m1"), ("reply B", "m2")], "both_bad", {}, 1))
    with read(db) as con:
        plain, _ = freeze_snapshot(con, tmp_path / "a", eval_fraction=0.5, seed=3)
        folder, manifest = freeze_snapshot(con, tmp_path / "b", eval_fraction=0.5, seed=3, thumbs=True)
        voted, _ = freeze_snapshot(con, tmp_path / "c", eval_fraction=0.5, seed=3, thumbs=True, with_votes=True)
    counts = {s: manifest["splits"][s]["thumbs"]["rows"] for s in ("train", "eval")}
    assert sum(counts.values()) == 3  # the all-bad task's; the vote's only with --with-votes
    verify_snapshot(folder)
    train, evals = load_unpaired(str(folder))
    downs = [r for r in train + evals if r["ranking_id"] is None]
    assert len(downs) == 3 and not any(r["label"] for r in downs)
    assert len(train + evals) == 3 * 2 + 3 and len(load_unpaired(str(plain))[0] + load_unpaired(str(plain))[1]) == 6
    # every prompt on one side: the all-bad task's prompt is where its pairs' split rule puts it
    sides = {r["prompt"]: side for side, rows in (("train", train), ("eval", evals)) for r in rows}
    assert all(sides[r["prompt"]] == side for side, rows in (("train", train), ("eval", evals)) for r in rows)
    with_votes = load_unpaired(str(voted))
    assert len(with_votes[0] + with_votes[1]) == 3 * 2 + 3 + 2


def test_rlhf_train_kto_on_the_store_freezes_its_thumbs_and_dpo_does_not(db, tmp_path, tiny_model_dir):
    import json

    from app.faces.annotate_tab import on_all_bad, on_load, on_submit
    from app.faces.ui import AppContext
    from app.jobs.training import prepare_run
    from training.dpo.config import DPOConfig
    from training.kto.config import KTOConfig

    seed_store(db, 6, k=3)
    ctx = AppContext(db)
    view = on_all_bad(ctx, "ann", on_load(ctx, "ann").task, on_load(ctx, "ann").ranker)
    for _ in range(4):
        view = on_submit(ctx, "ann", view.task, view.ranker, True)
    for config in (KTOConfig(model=str(tiny_model_dir)), DPOConfig(model=str(tiny_model_dir))):
        run = prepare_run(db, config, tmp_path / "runs")
        manifest = json.loads(
            (Path(json.loads((run / "config.json").read_text())["data"]) / "manifest.json").read_text()
        )
        has = {s: "thumbs" in manifest["splits"][s] for s in ("train", "eval")}
        assert has == ({"train": True, "eval": True} if config.KIND == "kto" else {"train": False, "eval": False})


def test_best_good_is_a_thumbs_up_or_down_on_what_was_ranked_first_and_an_edit_is_not_it(db, cli, tmp_path):
    """annotation/questions/best_good.py through the one write path: "yes" is a thumbs up on the response ranked
    first, "no" a thumbs down on each of two tied first; with an edit ranked above them, the thumbs go to the shown
    response ranked first, not the edit. A native line's `best_good: true` is one more up; an answer that is
    neither is one line and nothing stored."""
    from app.faces.annotate_tab import on_load, on_submit
    from app.faces.ui import AppContext
    from tests.conftest import store_rows, write_jsonl

    seed_store(db, 3, k=3)
    ctx = AppContext(db, allow_edits=True)
    view = on_load(ctx, "ann")

    def answer(view, ranks: list[int], **more):
        items = [{**it, "rank": r} for it, r in zip(view.ranker["items"], ranks, strict=True)]
        best = sorted(it["text"] for it in items if it["rank"] == 1)
        return on_submit(ctx, "ann", view.task, {**view.ranker, "items": items, **more}, True), best

    view, up = answer(view, [2, 1, 3], best_good="yes")
    view, down = answer(view, [1, 1, 2], best_good="no")
    view, edited = answer(view, [3, 1, 2], best_good="no", edit="A corrected answer.")
    rows = query(db, "SELECT completion, label FROM thumbs WHERE source = 'ui' ORDER BY label DESC, completion")
    assert rows == [(up[0], True), *sorted((t, False) for t in down + edited)]
    assert query(db, "SELECT count(*) FROM thumbs WHERE completion = 'A corrected answer.'") == [(0,)]
    line = {"prompt": "Name a fruit.", "responses": ["A pear.", "Rocks."], "ranks": [1, 2], "annotator": "kim"}
    assert cli("import", str(write_jsonl(tmp_path / "r.jsonl", [{**line, "best_good": True}])))[0] == 0
    assert query(db, "SELECT completion, label FROM thumbs WHERE source = 'native'") == [("A pear.", True)]
    before = store_rows(db)
    code, _, err = cli("import", str(write_jsonl(tmp_path / "bad.jsonl", [{**line, "prompt": "x", "best_good": 2}])))
    assert code == 1 and err.strip() == "error: bad.jsonl line 1: 'best_good' must be yes or no (true or false), got 2"
    assert store_rows(db) == before


def test_best_good_yes_cannot_go_with_an_edit_or_all_bad_and_all_bad_alone_keeps_no_answer(db, cli, tmp_path):
    from app.faces.annotate_tab import on_all_bad, on_load
    from app.faces.ui import AppContext
    from store.errors import UserError
    from tests.conftest import store_rows, write_jsonl

    line = {"prompt": "Name a fruit.", "responses": ["A pear.", "Rocks."], "ranks": [1, 2], "annotator": "kim"}
    cli("init")
    before = store_rows(db)
    for extra, said in (
        ({"edit": "A ripe pear."}, "cannot be good as it is and corrected by your edit"),
        ({"all_bad": True, "edit": "A ripe pear."}, "cannot be good as it is when none of them is good"),
    ):
        path = write_jsonl(tmp_path / "r.jsonl", [{**line, "best_good": True, **extra}])
        code, _, err = cli("import", str(path))
        assert code == 1 and said in err, err
    assert store_rows(db) == before
    seed_store(db, 1, k=3)
    ctx = AppContext(db)
    view = on_load(ctx, "ann")
    with pytest.raises(UserError, match=r"keeps no other answer \(best_good\)"):  # was dropped without a word
        on_all_bad(ctx, "ann", view.task, {**view.ranker, "best_good": "no"})
    assert query(db, "SELECT count(*) FROM rankings") == [(0,)]


def test_an_undone_best_good_comes_back_to_the_widget_as_its_choice(db):
    from app.faces.annotate_tab import on_load, on_submit, on_undo
    from app.faces.ui import AppContext

    seed_store(db, 2, k=3)
    ctx = AppContext(db)
    view = on_load(ctx, "ann")
    items = [{**it, "rank": r} for it, r in zip(view.ranker["items"], (2, 1, 3), strict=True)]
    on_submit(ctx, "ann", view.task, {**view.ranker, "items": items, "best_good": "no"}, True)
    assert query(db, "SELECT count(*) FROM thumbs WHERE NOT label") == [(1,)]
    back = on_undo(ctx, "ann")
    assert back.ranker["best_good"] == "no" and query(db, "SELECT count(*) FROM thumbs") == [(0,)]
