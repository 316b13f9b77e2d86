"""Side-by-side compare: win rates by hand, votes as rankings in the store, the streamed chat with tiny models."""

import json
from pathlib import Path

import pytest

from annotation.winrate import bootstrap_ci, wilson_interval, win_rate, win_table
from store.conversations import conversation_text
from store.errors import UserError
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


@pytest.mark.parametrize("choice, pair", [("left", ("hello!", "hi.")), ("right", ("hi.", "hello!")), ("tie", None)])
def test_a_vote_is_stored_apart_from_the_annotation_data(db, choice, pair):
    from store.compare import Vote, compare_votes, record_vote
    from store.db import write

    replies = [("hello!", "ppo-run"), ("hi.", "default:ref")]
    with write(db) as con:
        record_vote(con, Vote("ann", "Say hi", replies, choice, {"seed": 3}, 3, [[], []], ["blind"]))
        assert compare_votes(con) == [("ppo-run", "default:ref", choice)]
    assert query(db, "SELECT count(*) FROM prompts") == [(0,)]  # no prompt for the annotators' queue
    assert query(db, "SELECT count(*) FROM responses") == query(db, "SELECT count(*) FROM rankings") == [(0,)]
    assert query(db, "SELECT count(*) FROM pairs") == [(0,)]
    got = query(db, "SELECT prompt, chosen, rejected, source FROM vote_pairs")
    assert got == ([("Say hi", *pair, "compare")] if pair else [])


def test_identical_replies_are_a_tie_and_both_bad_gives_no_pair(db):
    from store.compare import Vote, record_vote
    from store.db import write

    with write(db) as con:
        record_vote(con, Vote("ann", "Say hi", [("same", "a"), ("same", "b")], "left", {}, 0))
        record_vote(con, Vote("ann", "Say hi", [("x", "a"), ("y", "b")], "both_bad", {}, 0))
    assert query(db, "SELECT (SELECT count(*) FROM votes), (SELECT count(*) FROM vote_pairs)") == [(2, 0)]
    assert query(db, "SELECT choice FROM votes ORDER BY vote_id") == [("tie",), ("both_bad",)]


@pytest.mark.integration
def test_streamed_chat_vote_and_win_table(db, tiny_model_dir, tmp_path):
    """Both panes stream in lockstep from two real (tiny) models with the same seed; the vote lands in the store
    under the right model ids, and the win table counts it."""
    from app.jobs.compare import new_conversation, respond, vote, win_rows
    from training.sampling.chat import ChatParams, Models

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
    assert query(db, "SELECT count(*), min(choice), min(annotator) FROM votes") == [(1, "left", "rev")]
    (row,) = win_rows(db, str(tiny_model_dir))
    assert row[1:6] == [1, 1, 0, 0, 0] and row[6] == "1.00"
    with pytest.raises(Exception, match="already has your vote"):
        vote(db, state, "right", "rev")
    assert models.release() == 2


def test_reply_scores_come_from_the_reward_model(tiny_model_dir, tmp_path):
    from app.jobs.compare import scores_of
    from tests.builders import build_liked_token_rm
    from training.sampling.chat import Models

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


def test_multi_turn_keeps_each_sides_history_and_a_shared_history_is_the_votes_prompt(db, tiny_model_dir):
    from app.jobs.compare import new_conversation, respond, vote
    from training.sampling.chat import ChatParams, Models

    models = Models()
    params = ChatParams(max_new_tokens=4, min_new_tokens=4, seed=1)
    state = new_conversation(str(tiny_model_dir), str(tiny_model_dir), blind=True, seed=3)
    state = list(respond(models, state, "first question", params))[-1][2]
    state = list(respond(models, state, "second question", params))[-1][2]
    for history in state["history"]:
        assert [m["role"] for m in history] == ["user", "assistant", "user", "assistant"]
        assert history[2]["content"] == "second question"
    assert state["replies"][0] == state["replies"][1]  # one model on both sides, one seed: the same reply
    state, _ = vote(db, state, "left", "rev")
    # identical replies: stored as a tie (no pair); the context is each side's first exchange, the same on both
    # sides here (one model, one seed), so the vote answers one conversation and is no multi-turn vote
    ((flags, choice, prompt, context),) = query(db, "SELECT flags, choice, prompt, context FROM votes")
    sides = json.loads(context)
    assert sides[0] == sides[1] and [m["role"] for m in sides[0]] == ["user", "assistant"]
    assert sides[0][0]["content"] == "first question"
    asked = [*sides[0], {"role": "user", "content": "second question"}]
    assert (flags, choice, prompt) == (["blind"], "tie", conversation_text(asked))
    assert query(db, "SELECT count(*) FROM prompts") == [(0,)]


def test_sides_whose_turns_differ_flag_the_vote_and_it_answers_the_message(db, tiny_model_dir):
    from app.jobs.compare import vote

    state = {
        "sides": [str(tiny_model_dir), str(tiny_model_dir)],
        "roles": ["actor", "reference"],
        "blind": False,
        "prompt": "next",
        "replies": ["x", "y"],
        "voted": False,
        "params": {"seed": 0},
        "history": [
            [{"role": "user", "content": "q"}, {"role": "assistant", "content": "one"}, *_exchange("next", "x")],
            [{"role": "user", "content": "q"}, {"role": "assistant", "content": "two"}, *_exchange("next", "y")],
        ],
    }
    vote(db, state, "left", "rev")
    assert query(db, "SELECT flags, prompt FROM votes") == [(["multi_turn"], "next")]


def _exchange(message: str, reply: str) -> list[dict]:
    return [{"role": "user", "content": message}, {"role": "assistant", "content": reply}]


def test_voted_prompt_by_hand():
    from app.jobs.compare import voted_prompt

    a = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "one"}]
    b = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "two"}]
    assert voted_prompt([a, b], "next") == "next" and voted_prompt([[], []], "first") == "first"
    assert voted_prompt([a, a], "next") == conversation_text([*a, {"role": "user", "content": "next"}])
    # turns that make no prompt (two user turns in a row, with the system after them): the message alone
    odd = [{"role": "user", "content": "q"}, {"role": "system", "content": "s"}]
    assert voted_prompt([odd, odd], "next") == "next"


def test_a_chat_from_a_stored_conversation_shows_its_turns_and_the_vote_keeps_them(db, tiny_model_dir):
    from app.jobs.compare import respond, start_from, stored_conversation, stored_conversations, vote
    from store.db import write
    from store.prompts import add_prompts
    from training.sampling.chat import ChatParams, Models

    turns = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Name a fruit."},
        {"role": "assistant", "content": "Apple."},
        {"role": "user", "content": "Another?"},
    ]
    with write(db) as con:
        add_prompts(con, ["plain prompt", conversation_text(turns)], "test")
    ((label, pid),) = stored_conversations(db)  # the text prompt is not offered
    assert label == f"#{pid}: Another?"
    with pytest.raises(UserError, match="is not a stored conversation"):
        stored_conversation(db, pid - 1)
    state, message = start_from(str(tiny_model_dir), str(tiny_model_dir), True, stored_conversation(db, pid), seed=3)
    assert message == "Another?" and state["history"] == [turns[:3], turns[:3]]
    params = ChatParams(max_new_tokens=4, min_new_tokens=4, seed=1)
    state = list(respond(Models(), state, message, params))[-1][2]
    assert all(h[:4] == turns and h[4]["role"] == "assistant" for h in state["history"])
    vote(db, state, "left", "rev")
    ((flags, prompt, context),) = query(db, "SELECT flags, prompt, context FROM votes")
    # the whole conversation: its earlier turns as the context of each side, and as the prompt its pairs answer
    assert json.loads(context) == [turns[:3], turns[:3]] and prompt == conversation_text(turns)
    assert flags == ["blind"] and query(db, "SELECT count(*) FROM prompts") == [(2,)]


def test_the_chat_shows_markdown_and_never_a_messages_own_html():
    """The panes get HTML rendered on the server with every tag of the text escaped; the conversation the models
    see keeps the raw text."""
    from app.jobs.compare import chat_html

    history = [
        {"role": "user", "content": "hi <img src=x onerror=alert(1)>"},
        {"role": "assistant", "content": "```\nx < 1\n```\n- a"},
    ]
    assert chat_html(history) == [
        {"role": "user", "content": "<p>hi &lt;img src=x onerror=alert(1)&gt;</p>\n"},
        {"role": "assistant", "content": "<pre><code>x &lt; 1\n</code></pre>\n<ul>\n<li>a</li>\n</ul>\n"},
    ]
    assert history[0]["content"] == "hi <img src=x onerror=alert(1)>"


def _replied(actor: str, blind: bool) -> dict:
    """A conversation with both replies in and the reward model's scores kept: what after_send leaves."""
    from app.jobs.compare import new_conversation

    state = new_conversation(actor, "default", blind=blind, seed=0)
    history = [{"role": "user", "content": "hi"}]
    return {
        **state,
        "prompt": "hi",
        "replies": ["left reply", "right reply"],
        "history": [history + [{"role": "assistant", "content": r}] for r in ("left reply", "right reply")],
        "params": {"seed": 0},
        "scores": (6.4, -4.5),
    }


@pytest.mark.parametrize("blind", [True, False])
def test_blind_scores_wait_for_the_vote_and_come_with_the_names(db, tiny_model_dir, blind):
    """Blind, a reviewer who saw 6.4 against -4.5 would vote on the reward model, and the vote goes back into the
    store as a preference: the scores show with the names, after the vote. Not blind, they show at once."""
    from app.jobs.compare import BLIND_LINE, blind_line, score_lines, vote

    state = _replied(str(tiny_model_dir), blind)
    shown = ("reward model score: **6.400**", "reward model score: **-4.500**")
    assert score_lines(state) == (("", "") if blind else shown)
    assert blind_line(state) == (BLIND_LINE if blind else "")
    assert "scores are shown with the names after your vote" in BLIND_LINE
    state, reveal = vote(db, state, "left", "rev")
    assert score_lines(state) == shown and blind_line(state) == ""
    left, right = (f"**{r}** ({s})" for r, s in zip(state["roles"], state["sides"], strict=True))
    assert reveal == f"Left was {left}, reward model score 6.400; right was {right}, reward model score -4.500."
    assert score_lines({**state, "scores": None}) == ("", "")  # no reward model: nothing to show


def test_a_new_message_hides_the_last_scores_again(tiny_model_dir):
    from app.jobs.compare import respond, score_lines
    from training.sampling.chat import ChatParams, Models

    state = {**_replied(str(tiny_model_dir), True), "voted": True}
    assert score_lines(state) != ("", "")
    params = ChatParams(max_new_tokens=2, min_new_tokens=2, seed=0)
    state = {**state, "sides": [str(tiny_model_dir)] * 2}
    *_, (_, _, fresh) = respond(Models(), state, "again", params)
    assert fresh["scores"] is None and not fresh["voted"] and score_lines(fresh) == ("", "")


def test_the_compare_list_offers_a_ppo_runs_checkpoints_with_the_best_marked(db, tmp_path):
    """A PPO run with evaluated checkpoints (training/rollouts/checkpoints.py) lists each saved one beside its actor; a
    checkpoint's reference and reward model are its run's."""
    from app.jobs.compare import run_defaults, tuned_runs
    from store.db import write
    from store.runs import record_run

    run = tmp_path / "runs" / "ppo-1"
    for folder in ("actor", "checkpoints/actor-step2", "checkpoints/actor-step4"):
        (run / folder).mkdir(parents=True)
        (run / folder / "config.json").write_text("{}")
    cfg = {"kind": "ppo", "actor": "/models/sft", "reward": "/runs/rm-1"}
    (run / "config.json").write_text(json.dumps(cfg))
    rows = [
        {"step": 2, "score_mean": 1.0, "heldout_score_mean": 0.9, "actor": str(run / "checkpoints/actor-step2")},
        {"step": 4, "score_mean": 2.0, "heldout_score_mean": 0.4, "actor": str(run / "checkpoints/actor-step4")},
        {"step": 6, "score_mean": 3.0, "heldout_score_mean": 0.2, "actor": str(run / "actor")},
    ]
    (run / "checkpoints.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    with write(db) as con:
        record_run(con, "ppo-1", "ppo", str(run), cfg, None)
    assert tuned_runs(db) == [
        ("ppo-1", str(run)),
        ("ppo-1 · step 2 (best)", str(run / "checkpoints/actor-step2")),
        ("ppo-1 · step 4", str(run / "checkpoints/actor-step4")),
    ]
    assert run_defaults(str(run / "checkpoints/actor-step4")) == ("/models/sft", "/runs/rm-1")


@pytest.mark.integration
def test_best_of_n_of_the_reference_is_a_contestant(db, tiny_model_dir, tmp_path):
    """N = 3: the reference side shows the reward model's pick among the reference's replies with seeds seed ..
    seed + 2 (checked by sampling and scoring each directly), the actor streams beside it, and the vote is stored
    under 'best-of-3:' and the reference's id."""
    from app.jobs.compare import best_of_ref, model_name, new_conversation, respond, split_best_of, vote
    from tests.builders import build_liked_token_rm
    from training.sampling.chat import ChatParams, Models, sample_reply, score_reply

    rm = str(build_liked_token_rm(tiny_model_dir, tmp_path / "rm"))
    ref = best_of_ref(str(tiny_model_dir), 3)
    assert split_best_of(ref) == (3, str(tiny_model_dir)) and best_of_ref("default", 1) == "default"
    assert model_name(ref) == f"best-of-3:{tiny_model_dir.resolve()}"
    models = Models()
    state = new_conversation("default", ref, blind=False)
    params = ChatParams(max_new_tokens=6, seed=11)
    frames = list(respond(models, state, "Tell me a joke", params, rm))
    state = frames[-1][2]
    history = [{"role": "user", "content": "Tell me a joke"}]
    model = models.causal(str(tiny_model_dir))
    replies = [sample_reply(model, history, ChatParams(max_new_tokens=6, seed=11 + j)) for j in range(3)]
    scores = [score_reply(models.reward(rm), history, r) for r in replies]
    assert state["replies"][1] == replies[scores.index(max(scores))]
    assert all(f[1][-1]["content"] == state["replies"][1] for f in frames)  # shown whole from the first frame
    vote(db, state, "right", "rev")
    assert query(db, "SELECT right_model FROM votes") == [(f"best-of-3:{tiny_model_dir.resolve()}",)]
    with pytest.raises(Exception, match="picks with a reward model"):
        list(respond(models, new_conversation("default", ref, blind=False), "hi", params, ""))


@pytest.mark.integration
def test_a_vote_through_the_app_reaches_no_queue_no_prompt_and_training_only_when_asked(tmp_path, tiny_model_dir):
    """An annotator's chat message is the text of a stored prompt: voting on it adds nothing to that prompt, hands
    no one a task, and no pair leaves the store unless asked for with --with-votes."""

    from app.faces.cli import main
    from bench.app_server import AppServer
    from tests.builders import seed_store
    from training.tiny import build_plain_model

    db = str(tmp_path / "s.duckdb")
    seed_store(db, 2)
    reference = build_plain_model(tmp_path / "reference", hidden=32, seed=5)  # other weights: other replies
    app = AppServer(db)
    try:
        client = app.client()
        client.predict(
            "prompt 0", str(tiny_model_dir), str(reference), False, 0.8, 0.95, 4, 0, api_name="/compare_send"
        )
        client.predict(str(tiny_model_dir), api_name="/vote_left")
        client.predict(
            "Tell me a secret", str(tiny_model_dir), str(reference), False, 0.8, 0.95, 4, 1, api_name="/compare_send"
        )
        client.predict(str(tiny_model_dir), api_name="/vote_right")
        seen = []
        for _ in range(3):
            prompt, value, *_ = client.predict("bob", api_name="/annotate_next")
            seen.append(prompt)
            if value["items"]:
                ranked = {"items": [{**it, "rank": len(value["items"]) - it["pos"]} for it in value["items"]]}
                client.predict("bob", ranked, api_name="/annotate_submit")
    finally:
        app.stop()
    assert query(db, "SELECT count(*) FROM votes") == [(2,)]
    assert query(db, "SELECT text FROM prompts ORDER BY prompt_id") == [("prompt 0",), ("prompt 1",)]
    assert query(db, "SELECT count(*) FROM responses") == [(8,)]  # the seeded 2 x 4, no reply added
    assert "Tell me a secret" not in " ".join(seen) and "Nothing left to rank" in seen[-1]
    out = tmp_path / "pairs.jsonl"
    assert main(["--db", db, "pairs", "--out", str(out)]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 12 and {r["source"] for r in rows} == {"ui"}  # bob's two rankings of 4: 2 x 6 pairs
    assert main(["--db", db, "pairs", "--out", str(out), "--with-votes"]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 14 and sorted(r["prompt"] for r in rows if r["source"] == "compare") == [
        "Tell me a secret",
        "prompt 0",
    ]
    # a training run's snapshot takes the votes only with --with-votes too (what `rlhf train-rm` freezes)
    from app.jobs.training import prepare_run
    from training.reward.config import RewardConfig

    for with_votes, votes in ((False, 0), (True, 2)):
        cfg = RewardConfig(model=str(tiny_model_dir), with_votes=with_votes, eval_fraction=0.0)
        run = prepare_run(db, cfg, tmp_path / "runs")
        data = Path(json.loads((run / "config.json").read_text())["data"])
        files = [str(f) for f in sorted(data.glob("*.parquet"))]
        assert query(db, "SELECT count(*) FILTER (source = 'compare'), count(*) FROM read_parquet(?)", [files]) == [
            (votes, 12 + votes)
        ]


def test_the_migration_moves_old_compare_rankings_into_votes(tmp_path):
    """A store written before votes had their table (schema 5): each vote a 'compare' ranking of two replies added
    as responses to a prompt of the message's text. Migrated, they are votes; replies nobody else ranked and the
    prompts only votes made are gone; another ranking of a reply keeps it and its prompt."""
    import duckdb

    from store.db import migrate
    from store.prompts import prompt_ids
    from store.rankings import RankedItem, RankingIn, insert_rankings
    from store.responses import Sample, add_samples

    con = duckdb.connect(str(tmp_path / "old.duckdb"))
    migrate(con, upto=5)
    # today's store functions build the old rows and also keep 0009's counters: stand-ins that the migration's
    # own tables replace below
    con.execute(
        "CREATE TABLE tasks (prompt_id BIGINT, round INTEGER, rankable INTEGER, position INTEGER, assigned INTEGER, "
        "done INTEGER)"
    )
    con.execute("CREATE VIEW task_state AS SELECT * FROM tasks")
    con.execute(
        "CREATE TABLE ranking_counts (annotator VARCHAR, source VARCHAR, rankings BIGINT, skipped BIGINT, pairs BIGINT)"
    )
    con.execute("ALTER TABLE rankings ADD COLUMN all_bad BOOLEAN DEFAULT false")  # 0015's, written by insert_rankings
    (pid,) = prompt_ids(con, ["prompt 0"], "test").values()
    add_samples(con, [Sample(pid, f"sampled {j}", j, 3, "eos", 0) for j in range(4)], model_id="test")

    def old_vote(prompt, left, right, ranks, skipped=None):
        (p,) = prompt_ids(con, [prompt], source="compare").values()
        ids = []
        for pos, (text, model) in enumerate([left, right]):
            add_samples(con, [Sample(p, text, pos, 0, "", 7, {"seed": 7})], model)
            ids.append(con.execute("SELECT max(response_id) FROM responses").fetchone()[0])
        items = [RankedItem(t, r, pos, i) for (t, _), r, pos, i in zip([left, right], ranks, (0, 1), ids, strict=True)]
        ranking = RankingIn(
            prompt, items, "rev", "compare", flags=["blind"], skipped=bool(skipped), skip_reason=skipped
        )
        insert_rankings(con, [ranking])
        return ids

    old_vote("prompt 0", ("vote L", "ppo"), ("vote R", "ref"), (1, 2))  # onto a stored prompt
    kept = old_vote("Tell me a secret", ("secret L", "ppo"), ("secret R", "ref"), (1, 1), "both bad")
    old_vote("Another chat", ("chat L", "ppo"), ("chat R", "ref"), (2, 1))
    # an annotator was handed the vote's prompt and ranked its replies (the bug this migration ends)
    items = [RankedItem("secret L", 1, 0, kept[0]), RankedItem("secret R", 2, 1, kept[1])]
    insert_rankings(con, [RankingIn("Tell me a secret", items, "bob", "ui")])
    con.execute("DROP VIEW task_state; DROP TABLE tasks; DROP TABLE ranking_counts")
    con.execute("ALTER TABLE rankings DROP COLUMN all_bad")
    migrate(con)
    got = con.execute("SELECT prompt, left_text, right_text, choice, flags FROM votes ORDER BY vote_id").fetchall()
    assert got == [
        ("prompt 0", "vote L", "vote R", "left", ["blind"]),
        ("Tell me a secret", "secret L", "secret R", "both_bad", ["blind"]),
        ("Another chat", "chat L", "chat R", "right", ["blind"]),
    ]
    assert con.execute("SELECT count(*) FROM rankings WHERE source = 'compare'").fetchone() == (0,)
    texts = con.execute("SELECT p.text, s.text FROM responses s JOIN prompts p USING (prompt_id) ORDER BY 2").fetchall()
    assert texts == [("prompt 0", f"sampled {j}") for j in range(4)] + [
        ("Tell me a secret", "secret L"),
        ("Tell me a secret", "secret R"),
    ]
    assert con.execute("SELECT text FROM prompts ORDER BY text").fetchall() == [("Tell me a secret",), ("prompt 0",)]
    assert con.execute("SELECT annotator, source FROM rankings").fetchall() == [("bob", "ui")]


def test_an_annotator_compares_runs_by_name_and_reads_no_server_path(db, tmp_path):
    """Issue 51 item 10: an annotator's Compare tab carried the server's absolute paths (the runs' folders as the
    list's values, the reference and reward folders, the reveal line, the win table). Now an annotator picks and
    reads names; the server maps them to folders, and a folder sent by hand is refused. An admin still sees
    folders."""
    from types import SimpleNamespace

    from app.faces.compare_tab import _handlers, _models, run_choices
    from app.faces.ui import AppContext
    from app.jobs.compare import annotator_models, reveal_line, shown_names
    from store.db import write
    from store.errors import UserError
    from store.runs import record_run

    run = tmp_path / "runs" / "ppo-1"
    for folder in ("actor", "checkpoints/actor-step2"):
        (run / folder).mkdir(parents=True)
        (run / folder / "config.json").write_text("{}")
    cfg = {"kind": "ppo", "actor": "/models/sft", "reward": "/runs/rm-1"}
    (run / "config.json").write_text(json.dumps(cfg))
    step2 = {"step": 2, "score_mean": 1.0, "heldout_score_mean": 0.9, "actor": str(run / "checkpoints/actor-step2")}
    (run / "checkpoints.jsonl").write_text(json.dumps(step2) + "\n")
    with write(db) as con:
        record_run(con, "ppo-1", "ppo", str(run), cfg, None)
    ctx = AppContext(db, auth=True, admins={"boss"})
    bob, boss = SimpleNamespace(username="bob"), SimpleNamespace(username="boss")
    assert run_choices(ctx, bob) == [("ppo-1", "ppo-1"), ("ppo-1 · step 2 (best)", "ppo-1 · step 2 (best)")]
    assert run_choices(ctx, boss)[0] == ("ppo-1", str(run))
    handlers = _handlers(ctx)
    assert handlers.on_actor("ppo-1", bob)[:2] == ("ppo-1 · reference", "ppo-1 · reward model")
    assert handlers.on_actor(str(run), boss)[:2] == ("/models/sft", "/runs/rm-1")  # an admin sends folders
    loads = _models(ctx, bob, "ppo-1 · step 2 (best)", "ppo-1 · reference", "ppo-1 · reward model", "default")
    assert loads == [str(run / "checkpoints/actor-step2"), "/models/sft", "/runs/rm-1", "default"]
    with pytest.raises(UserError, match="annotators compare the listed PPO runs only, not /models/sft"):
        _models(ctx, bob, "/models/sft")
    line = reveal_line({"roles": ["actor", "reference"], "sides": [str(run), "/models/sft"], "scores": [0.5, 0.1]})
    shown = shown_names(line, annotator_models(db))
    assert shown == (
        "Left was **actor** (ppo-1), reward model score 0.500; right was **reference** (ppo-1 · reference), "
        "reward model score 0.100."
    )


def test_an_annotator_reads_no_path_or_reason_when_a_model_fails_to_load(tmp_path, capsys):
    from app.faces.compare_tab import QuietChat
    from app.jobs.compare import LocalChat
    from training.models import ModelError
    from training.sampling.chat import ChatParams, Models

    broken = tmp_path / "runs" / "ppo-x" / "actor"
    broken.mkdir(parents=True)
    (broken / "config.json").write_text("{not json")
    with pytest.raises(ModelError) as admin_sees:
        Models().causal(str(broken))
    assert str(broken) in str(admin_sees.value)
    history = [[{"role": "user", "content": "hi"}]] * 2
    with pytest.raises(ModelError) as annotator_sees:
        list(QuietChat(LocalChat(Models())).pair([str(broken), str(broken)], history, ChatParams(max_new_tokens=2)))
    assert str(annotator_sees.value) == QuietChat.LINE and str(tmp_path) not in str(annotator_sees.value)
    assert str(broken) in capsys.readouterr().err  # the reason is in the app's log


@pytest.mark.integration
def test_an_annotator_chatting_with_a_model_that_fails_to_load_reads_no_path_or_reason(tmp_path):
    """Through the app, as an annotator: a listed PPO run whose actor is broken gives the one quiet line; the folder
    and the reason go to the app's log only."""
    from bench.app_server import AppServer
    from store.db import connect
    from store.runs import record_run
    from tests.builders import seed_store

    db = str(tmp_path / "s.duckdb")
    seed_store(db, 1)
    run = tmp_path / "runs" / "ppo-broken"
    (run / "actor").mkdir(parents=True)
    (run / "config.json").write_text(json.dumps({"kind": "ppo", "actor": "default", "reward": ""}))
    (run / "actor" / "config.json").write_text("{not json")
    with connect(db) as con:
        record_run(con, "ppo-broken", "ppo", str(run), {}, None)
    users = tmp_path / "users.txt"
    users.write_text("boss:pw-boss\nbob:pw-bob\n")
    users.chmod(0o600)
    app = AppServer(db, "--auth", str(users), "--admins", "boss")
    try:
        bob = app.client(auth=("bob", "pw-bob"))
        with pytest.raises(Exception) as seen:
            bob.predict("hi", "ppo-broken", "ppo-broken · reference", False, 0.8, 0.95, 4, 0, api_name="/compare_send")
    finally:
        app.stop()
    assert "that model could not be loaded; an admin can read why in the app's log" in str(seen.value)
    assert str(tmp_path) not in str(seen.value) and "json" not in str(seen.value).lower()
    assert str(run / "actor") in app.output()  # the admin reads the folder and the reason in the log
