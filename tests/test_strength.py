"""Preference strength (annotation/questions/strength.py; Llama 2's four levels): a ranking's steps expanded into its
pairs, stored and read back through the pairs view and snapshots, and used by the reward model as a margin and to report
accuracy by strength, against values worked out by hand."""

import pytest

from annotation.imports import import_native
from annotation.judgement import write_answers
from annotation.questions.base import Written
from annotation.questions.strength import steps_problem, strength_pairs
from store.db import connect, write
from store.errors import UserError
from store.rankings import add_ranking
from store.snapshot import freeze_snapshot
from tests.builders import seed_store
from tests.conftest import query, store_rows, write_jsonl
from training.pairwise.pairs import STRENGTH_MARGINS
from training.reward.config import RewardConfig
from training.reward.losses import accuracy_by_strength


@pytest.mark.parametrize(
    "ranks, steps, expected",
    [
        # index 1 is best, then 0, then 2; steps: best -> 0 slightly (1), 0 -> 2 significantly (3)
        ([2, 1, 3], [1, 3], {(1, 0, 1), (1, 2, 3), (0, 2, 3)}),
        ([1, 1, 2], [2], {(0, 2, 2), (1, 2, 2)}),  # a tie asks nothing between the tied ones
        ([1, 2, 3, 4], [0, 0, 1], {(0, 1, 0), (0, 2, 0), (1, 2, 0), (0, 3, 1), (1, 3, 1), (2, 3, 1)}),
    ],
)
def test_a_pair_gets_the_largest_step_between_its_responses(ranks, steps, expected):
    assert set(strength_pairs(ranks, steps)) == expected and steps_problem(ranks, steps) is None


def test_steps_must_match_the_ranks():
    assert steps_problem([1, 2, 3], [1]) == "1 strengths for 2 steps between the 3 ranks given"
    assert steps_problem([1, 2], [4]).startswith("strength 4 is not a level 0..3")
    assert steps_problem([1, 2], [True]).startswith("strength True is not a level")


def test_native_import_with_strengths_reaches_the_pairs_and_snapshots(db, tmp_path):
    rows = [
        {"prompt": "p", "responses": ["a", "b", "c"], "ranks": [2, 1, 3], "strengths": [1, 3], "annotator": "x"},
        {"prompt": "q", "responses": ["d", "e"], "ranks": [1, 2], "annotator": "x"},  # no strengths: NULL
    ]
    import_native(db, write_jsonl(tmp_path / "r.jsonl", rows))
    got = set(query(db, "SELECT prompt, chosen, rejected, strength FROM pairs"))
    assert got == {("p", "b", "a", 1), ("p", "b", "c", 3), ("p", "a", "c", 3), ("q", "d", "e", None)}
    with connect(db) as con:
        folder, _ = freeze_snapshot(con, tmp_path / "snaps", eval_fraction=0.0)
    import duckdb

    snap = duckdb.sql(f"SELECT chosen, rejected, strength FROM '{folder / 'train.parquet'}'").fetchall()
    assert ("a", "c", 3) in snap and ("d", "e", None) in snap


def test_a_bad_strengths_line_is_one_error_and_changes_nothing(db, tmp_path):
    before = store_rows(db)
    rows = [
        {"prompt": "p", "responses": ["a", "b"], "ranks": [1, 2], "strengths": [1]},
        {"prompt": "q", "responses": ["a", "b", "c"], "ranks": [1, 2, 3], "strengths": [1]},
    ]
    with pytest.raises(UserError, match=r"line 2: 1 strengths for 2 steps"):
        import_native(db, write_jsonl(tmp_path / "r.jsonl", rows))
    assert store_rows(db) == before


def test_a_submitted_ranking_keeps_its_strengths_until_undone(db):
    seed_store(db, 1)
    ids = [r for (r,) in query(db, "SELECT response_id FROM responses ORDER BY response_id")]
    with write(db) as con:
        ranking = add_ranking(con, 1, "ann", "ui", "ui:1", 5.0, ids, [1, 2, 3, 4], [])
        write_answers(con, [(Written(ranking, "ann", ids, [1, 2, 3, 4]), {"strengths": [3, 0, 1]})])
    assert query(db, "SELECT count(*), max(strength) FROM pairs WHERE ranking_id = ?", [ranking]) == [(6, 3)]
    from store.assignments import delete_ranking

    with write(db) as con:
        delete_ranking(con, ranking)
    assert query(db, "SELECT count(*) FROM pair_strengths") == [(0,)]


def test_accuracy_by_strength_by_hand():
    chosen, rejected = [1.0, 0.0, 2.0, 0.5, 3.0], [0.0, 1.0, 1.0, 0.5, 0.0]
    assert accuracy_by_strength(chosen, rejected, [3, 3, 1, 1, None]) == {1: (0.5, 2), 3: (0.5, 2)}


def test_the_reward_models_margin_from_strength(tiny_model_dir):
    from training.loaders import load_tokenizer
    from training.pairwise.pairs import PairEncoder

    enc = PairEncoder(load_tokenizer(tiny_model_dir), 64)
    row = {"prompt": "p", "chosen": "a", "rejected": "b", "margin": 2, "strength": 2}
    assert enc.pair(row, 3.0, "strength").margin == pytest.approx(3.0 * STRENGTH_MARGINS[2]) == pytest.approx(2.0)
    assert enc.pair({**row, "strength": None}, 3.0, "strength").margin == 0.0
    assert enc.pair(row, 3.0).margin == 6.0 and enc.pair(row, 3.0).strength == 2  # the rank gap, as before
    with pytest.raises(ValueError, match="margin_from must be rank or strength"):
        RewardConfig(margin_from="size").check()


def test_the_widgets_strengths_are_all_or_nothing():
    from annotation.questions import Campaign, Shown
    from annotation.questions.strength import from_widget

    def strengths_from_value(value, ranks, ask=True):
        return from_widget(value, Shown(texts=[], ranks=ranks), Campaign(ask_strength=ask))

    assert strengths_from_value({"strengths": [None, None]}, [1, 2, 3]) is None  # not answered: optional
    assert strengths_from_value({"strengths": [2, 0]}, [1, 2, 3]) == [2, 0]
    assert strengths_from_value({"strengths": [2, 0]}, [1, 2, 3], ask=False) is None  # a campaign that does not ask
    with pytest.raises(UserError, match="for every step between your ranks"):
        strengths_from_value({"strengths": [2, None]}, [1, 2, 3])
    with pytest.raises(UserError, match="do not fit the ranking"):
        strengths_from_value({"strengths": [7, 1]}, [1, 2, 3])


def test_an_import_writes_every_rankings_strengths_in_one_insert(db):
    """annotation/judgement.py hands each question all the rankings that answered it: 3 rankings with strengths are
    one INSERT into pair_strengths (a statement's fixed cost is most of a small insert), and all their rows."""
    from annotation.judgement import write_rankings
    from store.db import write
    from store.rankings import RankedItem, RankingIn

    class Counting:
        def __init__(self, con):
            self.con, self.sql = con, []

        def execute(self, sql, *args):
            self.sql.append(sql)
            return self.con.execute(sql, *args)

        def __getattr__(self, name):
            return getattr(self.con, name)

    rankings = [
        RankingIn(
            f"p{n}",
            [RankedItem("a", 1), RankedItem("b", 2), RankedItem("c", 3)],
            "ann",
            "native",
            answers={"strengths": [n % 4, 3]},
        )
        for n in range(3)
    ]
    with write(db) as con:
        counting = Counting(con)
        write_rankings(counting, rankings)
    assert sum("INSERT INTO pair_strengths" in s for s in counting.sql) == 1
    assert query(db, "SELECT count(*) FROM pair_strengths") == [(9,)]  # 3 pairs each
