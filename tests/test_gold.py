"""Gold prompts (store/gold.py, annotation/gold.py): marking, the queue mixing them in, each annotator's accuracy
on them, and snapshots that leave out the annotators under a threshold, with numbers worked out by hand."""

import json
import random

import pytest

from annotation.dashboard import annotator_rows
from annotation.gold import gold_accuracy, gold_credit, mark, scores
from annotation.session import next_task, submit, undo_last
from app.faces.cli import main
from store.assignments import claim_next
from store.db import connect, write
from store.errors import UserError
from store.gold import gold_list
from store.snapshot import freeze_snapshot
from store.tasks import drift
from tests.builders import campaign_store, seed_store
from tests.conftest import query, store_rows


@pytest.fixture
def campaign(db):
    return campaign_store(db)


@pytest.mark.parametrize(
    "gold, ranks, expected",
    [
        ({1: 1, 2: 2, 3: 3}, {1: 1, 2: 2, 3: 3}, (3.0, 3)),
        ({1: 1, 2: 2, 3: 3}, {1: 1, 2: 3, 3: 2}, (2.0, 3)),  # 1>2 yes, 1>3 yes, 2>3 reversed
        ({1: 1, 2: 2, 3: 3}, {1: 1, 2: 1, 3: 2}, (2.5, 3)),  # 1 and 2 tied: half
        ({1: 1, 2: 1, 3: 2}, {1: 2, 2: 1, 3: 3}, (2.0, 2)),  # gold ties 1 and 2: only 1>3 and 2>3 are asked
        ({1: 1, 2: 2, 3: 3}, {1: 3, 2: 1}, (0.0, 1)),  # only the responses both ranked
        ({1: 1, 2: 2, 3: 3}, None, (0.0, 3)),  # a skip: nothing on each of the 3 ordered pairs
        ({1: 1, 2: 1, 3: 2}, None, (0.0, 2)),  # a gold tie asks nothing, skipped or not
    ],
)
def test_gold_credit_by_hand(gold, ranks, expected):
    assert gold_credit(gold, ranks) == expected


def test_gold_accuracy_pools_an_annotators_pairs():
    answers = [("bob", {1: 1, 2: 2, 3: 3}, {1: 1, 2: 3, 3: 2}), ("bob", {4: 1, 5: 2}, {4: 1, 5: 2})]
    assert gold_accuracy(answers) == {"bob": (pytest.approx(3 / 4), 2)}  # (2 + 1) / (3 + 1)


@pytest.mark.store_file
def test_marking_gold_and_the_dashboard_scores_everyone_against_it(campaign, capsys):
    """ann's 5 rankings [1, 2, 3, 4] become gold: bob's [2, 1, 3, 4] gets 5 of 6 pairs each (83%), dee's
    [1, 2, 4, 3] 5 of 6, cy's reversed 0 of 6; ann's own are the gold ones, not scored."""
    before = store_rows(campaign)
    with pytest.raises(UserError, match="no ranking 999"):
        mark(campaign, [1, 999])
    with pytest.raises(UserError, match="is a skip"):
        mark(campaign, [query(campaign, "SELECT ranking_id FROM rankings WHERE skipped")[0][0]])
    assert store_rows(campaign) == before  # nothing marked by a refused call
    assert main(["--db", campaign, "gold", "add", "--annotator", "ann", "--by", "lead"]) == 0
    assert capsys.readouterr().out.strip().startswith("gold: 5 prompts marked")
    with connect(campaign) as con:
        gold = gold_list(con)
    assert [(g.annotator, g.marked_by) for g in gold] == [("ann", "lead")] * 5
    assert scores(campaign) == {
        "bob": (pytest.approx(5 / 6), 5),
        "cy": (0.0, 5),
        "dee": (pytest.approx(5 / 6), 5),
    }
    rows = {r.annotator: r for r in annotator_rows(campaign)}
    assert rows["ann"].gold_accuracy is None and rows["bob"].gold_tasks == 5
    assert "gold: 0% right on 5 gold prompts" in rows["cy"].watch
    assert not any(w.startswith("gold") for w in rows["bob"].watch)
    # a prompt has one gold ranking: marking bob's ranking of prompt 1 replaces ann's there
    bobs = query(campaign, "SELECT ranking_id FROM rankings WHERE annotator = 'bob' ORDER BY ranking_id")[0][0]
    mark(campaign, [bobs])
    with connect(campaign) as con:
        assert sorted(g.annotator for g in gold_list(con)) == ["ann"] * 4 + ["bob"]
    assert main(["--db", campaign, "gold", "remove", "1", "2"]) == 0
    assert "gold: 2 prompts unmarked" in capsys.readouterr().out


def test_snapshots_leave_out_annotators_under_the_gold_threshold(campaign, tmp_path):
    """cy (0% on gold) is left out at 0.5: their 5 rankings' 30 pairs (C(4, 2) = 6 each); bob and dee (83%) stay,
    ann (never scored: the gold is hers) stays."""
    mark(campaign, [], annotator="ann")
    from annotation.gold import below

    left = below(scores(campaign), 0.5)
    assert left == ["cy"]
    with connect(campaign) as con:
        folder, manifest = freeze_snapshot(
            con, tmp_path / "snaps", left_out={"min_gold_accuracy": 0.5, "annotators": left}
        )
        full, _ = freeze_snapshot(con, tmp_path / "all")
    assert manifest["left_out"] == {"min_gold_accuracy": 0.5, "annotators": ["cy"], "pairs_removed": 30}
    assert sum(manifest["splits"][s]["pairs"] for s in ("train", "eval")) == 4 * 5 * 6 - 30  # no ties anywhere
    assert "left_out" not in json.loads((full / "manifest.json").read_text())


def test_the_queue_mixes_gold_prompts_in_and_undo_unmarks(db):
    """The lead ranks one prompt and marks it gold; at overlap 1 nobody else would get it again, but at gold rate 1
    eve gets it first (and only once), then ordinary prompts; the lead never gets their own gold back; the
    counters stay equal to the base tables; the lead undoing the gold ranking unmarks the prompt."""
    seed_store(db, 4)
    task = next_task(db, "lead", overlap=1)
    ranking = submit(db, "lead", task.assignment_id, [1, 2, 3, 4])
    mark(db, [ranking], by="lead")
    first = next_task(db, "eve", overlap=1, seed=0, gold_rate=1.0)
    assert first.prompt_id == task.prompt_id and sorted(first.response_ids) == sorted(task.response_ids)
    lead_rank = {r: i + 1 for i, r in enumerate(task.response_ids)}  # the lead ranked them as shown to them
    swap = {1: 2, 2: 1, 3: 3, 4: 4}  # eve swaps the lead's top two: 5 of the 6 gold pairs
    submit(db, "eve", first.assignment_id, [swap[lead_rank[r]] for r in first.response_ids])
    second = next_task(db, "eve", overlap=1, seed=0, gold_rate=1.0)
    assert second.prompt_id != task.prompt_id  # no gold left for eve: the ordinary queue
    with write(db) as con:
        assert claim_next(con, "lead", 1, random.Random(0), gold_rate=1.0).prompt_id != task.prompt_id
        assert drift(con) == {"tasks": [], "ranking_counts": []}
    assert scores(db) == {"eve": (pytest.approx(5 / 6), 1)}
    with write(db) as con:  # the lead's open task goes back, so their last answer is the gold ranking
        con.execute("DELETE FROM assignments WHERE annotator = 'lead' AND status = 'open'")
    undo_last(db, "lead")
    with connect(db) as con:
        assert gold_list(con) == []


def test_gold_rate_zero_never_hands_out_a_gold_prompt_twice(db):
    seed_store(db, 2)
    task = next_task(db, "lead", overlap=1)
    mark(db, [submit(db, "lead", task.assignment_id, [1, 2, 3, 4])])
    assert next_task(db, "eve", overlap=1, gold_rate=0.0).prompt_id != task.prompt_id


def test_a_training_run_freezes_the_pairs_without_the_annotators_under_gold(campaign, tmp_path):
    """train-rm/train-dpo --min-gold-accuracy: the run's snapshot leaves cy out and says so; a pairs file
    cannot be filtered by gold and says so."""
    from app.jobs.training import left_out_line, prepare_run
    from training.registry import run_config
    from training.reward.config import RewardConfig

    mark(campaign, [], annotator="ann")
    run = prepare_run(campaign, RewardConfig(min_gold_accuracy=0.5), tmp_path / "runs")
    line = left_out_line(run_config(run)["data"])
    assert line == "left out 30 pairs of 1 annotators under gold accuracy 0.5: cy"
    with pytest.raises(UserError, match="a pairs file has none"):
        prepare_run(campaign, RewardConfig(min_gold_accuracy=0.5), tmp_path / "runs", str(tmp_path / "p.jsonl"))
    with pytest.raises(ValueError, match="from 0 to 1"):
        RewardConfig(min_gold_accuracy=2).check()


def test_a_gold_task_looks_like_any_other_and_skipping_it_is_a_miss(db):
    """Issue 51 item 6: a gold task could be told apart (its responses carried old store ids in the widget, and
    "prompts waiting" did not drop after it), and a skipped gold task was never scored, so an annotator who skipped
    them was kept by --min-gold-accuracy. Now the widget's ids are opaque, annotators are not shown the waiting
    count while gold is on, and a skip scores 0 on every pair the gold ranking orders."""
    from annotation.gold import below
    from app.faces.annotate_tab import on_load, on_skip
    from app.faces.ui import AppContext

    seed_store(db, 3)
    task = next_task(db, "lead", overlap=1)
    mark(db, [submit(db, "lead", task.assignment_id, [1, 2, 3, 4])], by="lead")
    ctx = AppContext(db, gold_rate=1.0, auth=True, admins={"lead"})  # every new task gold while one is left
    view = on_load(ctx, "eve", admin=False)
    assert view.task["response_ids"] and sorted(view.task["response_ids"]) == sorted(task.response_ids)  # gold
    ids = [it["id"] for it in view.ranker["items"]]
    assert len(set(ids)) == 4 and not {str(r) for r in view.task["response_ids"]} & set(ids)
    assert all(len(i) == 12 and int(i, 16) >= 0 for i in ids)  # random hex, new for each task shown
    assert "prompts waiting" not in view.progress and view.progress.startswith("you: 0 ranked")
    assert "prompts waiting: 2" in on_load(ctx, "lead", admin=True).progress  # an admin still sees it
    nxt = on_skip(ctx, "eve", view.task, "cannot judge", admin=False)
    assert nxt.task["response_ids"] != view.task["response_ids"]  # an ordinary prompt next
    assert scores(db) == {"eve": (0.0, 1)}  # the 6 ordered pairs of the gold ranking, none earned
    assert below(scores(db), 0.8) == ["eve"]
