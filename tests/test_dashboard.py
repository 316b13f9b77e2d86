"""The annotator dashboard (annotation/dashboard.py, `rlhf annotators`): counts, lead times, agreement and the
reasons to look at someone, against numbers worked out by hand on a small campaign."""

import json

import pytest

from annotation.dashboard import annotator_rows, over_time, table, text_table
from app.faces.cli import main
from tests.builders import campaign_store


@pytest.fixture
def campaign(db):
    return campaign_store(db)


def test_every_number_of_the_dashboard_by_hand(campaign):
    """tau_b per prompt: ann/bob 4/6, ann/dee 4/6, bob/dee 2/6, ann/cy -1, bob/cy -4/6, dee/cy -4/6. Each one's
    agreement is the mean over their three comparisons: ann (4/6 + 4/6 - 1) / 3 = 1/9, bob (4/6 + 2/6 - 4/6) / 3
    = 1/9, dee 1/9, cy (-1 - 4/6 - 4/6) / 3 = -7/9."""
    rows = {r.annotator: r for r in annotator_rows(campaign)}
    assert list(rows) == ["ann", "bob", "cy", "dee"]
    ann, bob, cy, dee = rows["ann"], rows["bob"], rows["cy"], rows["dee"]
    assert (ann.rankings, ann.skipped, ann.median_s) == (5, 0, 5.0)
    assert ann.tasks_per_hour == pytest.approx(3600 * 5 / 25)  # 5 answers in 1+3+5+7+9 = 25 s
    assert ann.fast_share == pytest.approx(0.2) and ann.shown_order_share == 1.0  # 1 s is under 2 s
    assert bob.tasks_per_hour == pytest.approx(360) and bob.fast_share == 0 and bob.shown_order_share == 0
    # dee's rankings carry no lead time (an import's may not): only the skip's 4 s is timed
    assert (dee.rankings, dee.skipped, dee.median_s, dee.tasks_per_hour) == (5, 1, 4.0, pytest.approx(900))
    for r in (ann, bob, dee):
        assert r.agreement == pytest.approx(1 / 9) and r.shared_prompts == 5
    assert cy.agreement == pytest.approx(-7 / 9)
    # who to look at: ann ranks fast and leaves the shown order; cy disagrees with everyone (-0.78 against 0.11)
    assert ann.watch == ["fast: 20% of rankings under 2 s", "shown order: 100% of rankings"]
    assert bob.watch == [] and dee.watch == []
    assert cy.watch == ["low agreement: tau -0.78 on 5 prompts, others 0.11"]
    assert table([cy])[0] == ["cy", cy.watch[0], 5, 0, 0, 0, "", "", 30.0, 120, -0.78, 5, "0%", "0%", "", 0, ""]


@pytest.mark.store_file
def test_rlhf_annotators_prints_the_table_and_json(campaign, capsys):
    assert main(["--db", campaign, "annotators"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split()[:3] == ["annotator", "rankings", "skips"]
    assert out.splitlines()[3].startswith("cy ") and "low agreement" in out
    assert main(["--db", campaign, "annotators", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["annotator"] for r in rows] == ["ann", "bob", "cy", "dee"]
    assert rows[3]["skipped"] == 1 and rows[0]["watch"][1] == "shown order: 100% of rankings"
    assert text_table([]).startswith("annotator")


def test_answers_over_time_per_hour(campaign):
    bucket, points = over_time(campaign)
    assert bucket == "hour"  # all stored within the test
    assert sum(n for _, _, n in points) == 21 and {a for a, _, _ in points} == {"ann", "bob", "cy", "dee"}


def test_an_empty_store_has_no_rows(db):
    assert annotator_rows(db) == [] and over_time(db) == ("hour", [])
