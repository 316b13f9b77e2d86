"""Side-by-side compare: win rates by hand, votes as rankings in the store, the streamed chat with tiny models."""

import pytest

from annotation.winrate import bootstrap_ci, wilson_interval, win_rate, win_table
from tests.conftest import query


def test_win_rate_and_table_by_hand():
    # 3 wins, 1 loss, 2 ties: (3 + 0 + 0.5 * 2) / 6 = 0.6667
    assert win_rate([1, 1, 1, 0, 0.5, 0.5]) == pytest.approx(4 / 6)
    votes = [
        ("actor", "ref", "left"),  # actor wins (left)
        ("ref", "actor", "right"),  # actor wins (right)
        ("ref", "actor", "left"),  # actor loses
        ("actor", "ref", "tie"),
        ("actor", "ref", "both_bad"),  # reported, not in the rate
        ("other", "ref", "left"),  # not the actor's
    ]
    (row,) = win_table(votes, "actor")
    assert (row["opponent"], row["wins"], row["losses"], row["ties"], row["both_bad"], row["votes"]) == (
        "ref",
        2,
        1,
        1,
        1,
        5,
    )
    assert row["win_rate"] == pytest.approx(2.5 / 4)  # (2 + 0.5) / 4
    # Wilson, p = .625, n = 4, z^2 = 3.8416: center = (.625 + .4802) / 1.9604 = .56376,
    # half = 1.96 * sqrt(.234375 / 4 + 3.8416 / 64) / 1.9604 = 1.96 * .34437 / 1.9604 = .34430
    assert row["ci"] == pytest.approx((0.21946, 0.90806), abs=1e-4)


@pytest.mark.parametrize(
    "outcomes, expected",
    [
        # one win: p = 1, z^2 = 3.8416: center = 2.9208 / 4.8416 = .60327, half = 1.96 * .98 / 4.8416 = .39673
        ([1.0], (0.20654, 1.0)),
        # one loss: the mirror image
        ([0.0], (0.0, 0.79346)),
        # 7 of 10: center = (.7 + .19208) / 1.38416 = .64449, half = 1.96 * sqrt(.021 + .009604) / 1.38416 = .24772
        ([1.0] * 7 + [0.0] * 3, (0.39677, 0.89221)),
    ],
)
def test_wilson_interval_by_hand_is_an_interval_at_one_vote(outcomes, expected):
    assert wilson_interval(outcomes) == pytest.approx(expected, abs=1e-4)
    assert bootstrap_ci([1.0]) == (1.0, 1.0)  # what the table showed before: no interval at all


def test_bootstrap_interval_narrows_with_more_votes_and_is_degenerate_when_unanimous():
    assert bootstrap_ci([1.0] * 10) == (1.0, 1.0)
    few = bootstrap_ci([1, 0] * 5)
    many = bootstrap_ci([1, 0] * 500)
    assert few[1] - few[0] > many[1] - many[0] > 0
    assert many[0] < 0.5 < many[1]


@pytest.mark.parametrize(
    "choice, ranks, skipped, pairs",
    [("left", [1, 2], False, 1), ("right", [2, 1], False, 1), ("tie", [1, 1], False, 0), ("both_bad", [1, 1], True, 0)],
)
def test_a_vote_is_a_compare_ranking(db, choice, ranks, skipped, pairs):
    from store.compare import compare_votes, record_vote
    from store.db import write

    with write(db) as con:
        record_vote(con, "Say hi", [("hello!", "ppo-run"), ("hi.", "default:ref")], choice, "ann", {"seed": 3}, 3)
    rows = query(
        db,
        """SELECT s.text, s.model_id, i.rank, i.shown_position, r.source, r.skipped, r.annotator
           FROM rankings r JOIN ranking_items i USING (ranking_id) JOIN responses s USING (response_id)
           ORDER BY i.shown_position""",
    )
    assert [(t, m, rk, pos) for t, m, rk, pos, *_ in rows] == [
        ("hello!", "ppo-run", ranks[0], 0),
        ("hi.", "default:ref", ranks[1], 1),
    ]
    assert {(src, sk, ann) for *_, src, sk, ann in rows} == {("compare", skipped, "ann")}
    assert query(db, "SELECT count(*) FROM pairs")[0][0] == pairs
    with write(db) as con:
        assert compare_votes(con) == [("ppo-run", "default:ref", choice)]


def test_streamed_chat_vote_and_win_table(db, tiny_model_dir, tmp_path):
    """Both panes stream in lockstep from two real (tiny) models with the same seed; the vote lands in the store
    under the right model ids, and the win table counts it."""
    from app.compare import new_conversation, respond, vote, win_rows
    from training.chat import ChatParams, Models

    models = Models()
    state = new_conversation(str(tiny_model_dir), "default", blind=False)
    params = ChatParams(max_new_tokens=6, min_new_tokens=6, seed=5)
    frames = list(respond(models, state, "Tell me a joke", params))
    assert len(frames) >= 6  # one frame per step, then the final one
    partial_lengths = [len(f[0][-1]["content"]) for f in frames[:-1]]
    assert partial_lengths == sorted(partial_lengths) and partial_lengths[-1] > 0  # the text grows
    left, right, state = frames[-1]
    assert [m["role"] for m in left] == ["user", "assistant"] and left[0]["content"] == "Tell me a joke"
    assert state["replies"][0] and state["replies"][1]
    again = list(respond(models, {**state, "history": [[], []]}, "Tell me a joke", params))[-1][2]
    assert again["replies"] == state["replies"]  # same seed, same parameters: the same replies
    state, reveal = vote(db, state, "left", "rev")
    assert "actor" in reveal and "reference" in reveal
    assert query(db, "SELECT count(*), min(source) FROM rankings") == [(1, "compare")]
    (row,) = win_rows(db, str(tiny_model_dir))
    assert row[1:6] == [1, 1, 0, 0, 0] and row[6] == "1.00"
    with pytest.raises(Exception, match="already has your vote"):
        vote(db, state, "right", "rev")
    assert models.release() == 2


def test_reply_scores_come_from_the_reward_model(tiny_model_dir, tmp_path):
    from app.compare import scores_of
    from tests.test_ppo_training import build_liked_token_rm
    from training.chat import Models

    rm = build_liked_token_rm(tiny_model_dir, tmp_path / "rm")
    models = Models()
    tok = models.reward(str(rm))[1]
    even = next(t for t in range(1000, 2000) if t % 2 == 0 and tok.decode([t]).strip().isalpha())
    odd = next(t for t in range(1000, 2000) if t % 2 == 1 and tok.decode([t]).strip().isalpha())
    history = [{"role": "user", "content": "hi"}]
    state = {
        "replies": [tok.decode([even] * 5), tok.decode([odd] * 5)],
        "history": [history + [{"role": "assistant", "content": "x"}]] * 2,
    }
    good, bad = scores_of(models, state, str(rm))
    assert good > bad
    assert scores_of(models, state, "") is None


def test_multi_turn_keeps_each_sides_history_and_flags_the_vote(db, tiny_model_dir):
    from app.compare import new_conversation, respond, vote
    from training.chat import ChatParams, Models

    models = Models()
    params = ChatParams(max_new_tokens=4, min_new_tokens=4, seed=1)
    state = new_conversation(str(tiny_model_dir), str(tiny_model_dir), blind=True, seed=3)
    state = list(respond(models, state, "first question", params))[-1][2]
    state = list(respond(models, state, "second question", params))[-1][2]
    for history in state["history"]:
        assert [m["role"] for m in history] == ["user", "assistant", "user", "assistant"]
        assert history[2]["content"] == "second question"
    assert state["replies"][0] == state["replies"][1]  # one model on both sides, one seed: the same reply
    state, _ = vote(db, state, "tie", "rev")
    assert query(db, "SELECT flags, skipped, skip_reason FROM rankings") == [
        (["blind", "multi_turn"], True, "identical replies")  # stored, but it makes no pair
    ]
    assert query(db, "SELECT text FROM prompts") == [("second question",)]
