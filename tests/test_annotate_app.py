"""The Annotate tab through the app's HTTP API (gradio_client) with logins, and a kill -9 in the middle."""

import pytest
from gradio_client import Client

from app.faces.annotate_tab import SHOWN_ORDER_WARNING, annotator_name, empty_store_line, on_load, on_submit, on_undo
from app.faces.cli import main
from app.faces.ui import AppContext, first_tab
from bench.app_server import AppServer
from store.errors import UserError
from tests.builders import seed_store
from tests.conftest import query, store_rows


@pytest.fixture
def users(tmp_path):
    f = tmp_path / "users.txt"
    f.write_text("ann:pw-ann\nbob:pw-bob\n")
    f.chmod(0o600)  # rlhf ui refuses a users file others can read
    return str(f)


@pytest.fixture
def server(db, users):
    seed_store(db, 6)
    app = AppServer(db, "--auth", users, "--admins", "ann")
    yield app
    app.stop()


def _client(server, user):
    return Client(server.url, auth=(user, f"pw-{user}"), verbose=False)


def _without_ids(value):
    return {**value, "items": [{k: v for k, v in it.items() if k != "id"} for it in value["items"]]}


def _reverse(value):
    """Rank the shown responses in reverse (never the shown order)."""
    items = value["items"]
    k = len(items)
    return {"items": [{**it, "rank": k - it["pos"]} for it in items]}


@pytest.mark.integration
def test_submit_skip_undo_through_the_api(server, db):
    """gr.State (the task held) stays on the server: the API takes the name and the widget value only."""
    ann = _client(server, "ann")
    prompt, value, progress, status, guideline = ann.predict("", api_name="/annotate_next")
    assert prompt.startswith("<h3>Prompt</h3>") and len(value["items"]) == 4 and not guideline  # none set
    assert progress == "you: 0 ranked · team: 0 · prompts waiting: 6 · pairs: 0"
    prompt2, value2, progress, status, _ = ann.predict("", _reverse(value), api_name="/annotate_submit")
    assert status == "Saved. Next prompt." and progress.startswith("you: 1 ranked · team: 1")
    assert prompt2 != prompt
    # the login, not the (empty) name field, is the annotator; the shown order and lead time are stored
    assert query(db, "SELECT annotator, source, lead_time_s IS NOT NULL FROM rankings") == [("ann", "ui", True)]
    shown = query(
        db, "SELECT r.text FROM ranking_items i JOIN responses r USING (response_id) ORDER BY i.shown_position"
    )
    assert [text for (text,) in shown] == [it["text"] for it in value["items"]]
    _, _, _, status, _ = ann.predict("", "cannot judge", api_name="/annotate_skip")
    assert status == "Skipped (cannot judge)."
    assert query(db, "SELECT skipped FROM rankings ORDER BY ranking_id") == [(False,), (True,)]
    # undo brings the skipped task back
    back_prompt, back_value, _, status, _ = ann.predict("", api_name="/annotate_undo")
    assert back_prompt == prompt2 and status.startswith("Your last answer is back")
    assert query(db, "SELECT count(*) FROM rankings") == [(1,)]
    # All bad: none of them is good (no edit here: no pairs), stored as the answer it is
    _, _, _, status, _ = ann.predict("", back_value, api_name="/annotate_all_bad")
    assert status == "Saved as all bad. Next prompt."
    assert query(db, "SELECT skipped, skip_reason, all_bad FROM rankings ORDER BY ranking_id") == [
        (False, None, False),
        (True, "all bad", True),
    ]
    # bob gets a prompt nobody holds (overlap 1)
    bob = _client(server, "bob")
    bob_prompt = bob.predict("", api_name="/annotate_next")[0]
    assert bob_prompt not in (prompt, prompt2)


@pytest.mark.integration
def test_undo_takes_back_only_the_last_answer_and_keeps_a_trace(server, db, capsys):
    """Three rankings, then Undo pressed three times: the first brings the last ranking back, the others refuse,
    and the two before it stay; `rlhf undone` shows who took back what, and when."""
    ann = _client(server, "ann")
    _, value, *_ = ann.predict("", api_name="/annotate_next")
    for _ in range(3):
        _, value, *_ = ann.predict("", _reverse(value), api_name="/annotate_submit")
    last = query(db, "SELECT max(ranking_id) FROM rankings")[0][0]
    ranks = query(db, f"SELECT list(rank ORDER BY shown_position) FROM ranking_items WHERE ranking_id = {last}")
    _, back, *_ = ann.predict("", api_name="/annotate_undo")
    for _ in range(2):
        with pytest.raises(Exception, match="only your last answer can be undone, and it is open now"):
            ann.predict("", api_name="/annotate_undo")
    assert query(db, "SELECT count(*) FROM rankings WHERE annotator = 'ann'") == [(2,)]
    assert query(db, "SELECT ranking_id, annotator, ranks FROM undone_rankings") == [(last, "ann", ranks[0][0])]
    assert main(["--db", db, "undone", "--annotator", "ann"]) == 0
    line = capsys.readouterr().out.strip()
    assert "  ann  prompt " in line and f"ranking {last} of " in line and " ranks " in line
    # submitted again, the answer is the last one once more, and can be undone again
    ann.predict("", back, api_name="/annotate_submit")
    ann.predict("", api_name="/annotate_undo")
    assert query(db, "SELECT count(*) FROM undone_rankings") == [(2,)]


@pytest.mark.integration
def test_kill_9_keeps_every_acknowledged_ranking(server, db, users):
    ann = _client(server, "ann")
    acknowledged = 0
    prompt, value, *_ = ann.predict("", api_name="/annotate_next")
    for _ in range(4):
        prompt, value, *_ = ann.predict("", _reverse(value), api_name="/annotate_submit")
        acknowledged += 1
    server.kill(9)
    assert query(db, "SELECT count(*) FROM rankings") == [(acknowledged,)]
    assert query(db, "SELECT count(*) FROM ranking_items") == [(4 * acknowledged,)]
    again = AppServer(db, "--auth", users)
    try:
        ann = _client(again, "ann")
        prompt2, value2, progress, *_ = ann.predict("", api_name="/annotate_next")
        # the task open at the kill is handed back as it was (under new item ids: they are made for each showing)
        assert (prompt2, _without_ids(value2)) == (prompt, _without_ids(value))
        assert progress.startswith(f"you: {acknowledged} ranked")
    finally:
        again.stop()


def test_handlers_without_a_browser(db):
    seed_store(db, 2)
    ctx = AppContext(db)
    view = on_load(ctx, "ann")
    shown = view.ranker
    # the order as shown needs a second Submit
    warned = on_submit(ctx, "ann", view.task, shown, False)
    assert warned.status == SHOWN_ORDER_WARNING and warned.confirm and warned.task == view.task
    assert query(db, "SELECT count(*) FROM rankings") == [(0,)]
    done = on_submit(ctx, "ann", view.task, shown, True)
    assert done.status == "Saved. Next prompt." and done.task != view.task
    assert query(db, "SELECT flags FROM rankings") == [(["shown_order"],)]
    back = on_undo(ctx, "ann")
    same = ("assignment_id", "response_ids", "guideline_version")
    assert [back.task[k] for k in same] == [view.task[k] for k in same]  # the same task, shown under new item ids
    assert back.task["item_ids"] != view.task["item_ids"] and [it["rank"] for it in back.ranker["items"]] == [
        1,
        2,
        3,
        4,
    ]
    with pytest.raises(UserError, match="does not match the task"):  # the widget of the task as shown before
        on_submit(ctx, "ann", back.task, shown, True)
    with pytest.raises(UserError, match="does not match the task"):
        on_submit(ctx, "ann", view.task, {"items": shown["items"][:2]}, True)
    with pytest.raises(UserError, match="enter your name"):
        annotator_name("  ")


ADMIN_EMPTY = (
    "Nothing to annotate yet: load the example prompts or add a prompt file on the Data tab, then sample responses."
)
ADMIN_PENDING = "Nothing to annotate yet: press Sample pending prompts on the Data tab to sample the 2 loaded prompts."
ANNOTATOR = "Nothing to annotate yet: an admin loads prompts and samples responses in the Data tab."


@pytest.mark.parametrize(
    "prompts, sampled, admin, line, tab",
    [
        (0, False, True, ADMIN_EMPTY, "data"),  # an empty store opens on the Data tab, where the work starts
        (0, False, False, ANNOTATOR, "annotate"),  # an annotator has no Data tab: one line says who acts
        (2, False, True, ADMIN_PENDING, "data"),  # prompts, but nothing sampled yet: still nothing to rank
        (2, False, False, ANNOTATOR, "annotate"),
        (2, True, True, None, "annotate"),
        (2, True, False, None, "annotate"),
    ],
)
def test_an_empty_store_says_what_to_do_first(db, prompts, sampled, admin, line, tab):
    from store.db import write
    from store.prompts import prompt_ids

    if sampled:
        seed_store(db, prompts)
    elif prompts:
        with write(db) as con:
            prompt_ids(con, [f"prompt {i}" for i in range(prompts)], "test")
    assert empty_store_line(db, admin) == line
    assert first_tab(db, admin) == tab
    view = on_load(AppContext(db), "ann", admin=admin)
    assert (view.task is None) == (line is not None)
    if line:
        assert view.prompt == line and view.ranker == {"items": []}


# What an annotator may call: their own queue (and its page load), and the Compare tab (chat + their own votes).
ANNOTATOR_ENDPOINTS = ("/annotate_", "/compare_", "/vote_", "/load")


@pytest.mark.integration
def test_an_annotator_can_neither_read_nor_change_anyone_elses_work(server, db):
    """bob (not an admin) calls every endpoint the app exposes, with ann's work in the store: the store-wide ones
    (Data and Train tabs: pairs, exports, counts, imports, runs) refuse him, his undo reaches only his own work, and
    not one row changes. ann, an admin, gets the same endpoints' answers."""
    ann, bob = _client(server, "ann"), _client(server, "bob")
    prompt, value, *_ = ann.predict("", api_name="/annotate_next")
    ann.predict("", _reverse(value), api_name="/annotate_submit")  # ann's ranking, and her next task held open
    before = store_rows(db)
    with pytest.raises(Exception, match="nothing to undo yet"):
        bob.predict("", api_name="/annotate_undo")
    bob_prompt, *_ = bob.predict("", api_name="/annotate_next")
    assert bob_prompt != prompt  # a prompt nobody holds, not ann's (overlap 1)
    named = bob.view_api(return_format="dict", print_info=False)["named_endpoints"]
    refused, quiet = [], []
    for name, info in named.items():
        if name.startswith(ANNOTATOR_ENDPOINTS):
            continue
        args = [p["parameter_default"] if p.get("parameter_has_default") else None for p in info["parameters"]]
        try:
            result = bob.predict(*args, api_name=name)
        except Exception as e:
            assert "bob is an annotator: the Data and Train tabs are for admins" in str(e), (name, e)
            refused.append(name)
        else:  # a page-load refresh: it answers with nothing rather than a pop-up every two seconds
            assert "rankings" not in repr(result) and "ann" not in repr(result), (name, result)
            quiet.append(name)
    assert {"/download_pairs", "/export_ls", "/import_ls", "/add_prompts", "/sample", "/train_rm", "/stop_run"} <= set(
        refused
    )
    assert quiet and all(n.startswith(("/counts", "/annotators", "/lambda", "/refresh", "/choices")) for n in quiet), (
        quiet
    )
    assert len(refused) >= 12, refused
    assert store_rows(db)["rankings"] == before["rankings"] and store_rows(db)["prompts"] == before["prompts"]
    assert query(db, "SELECT annotator, count(*) FROM rankings GROUP BY ALL") == [("ann", 1)]
    # the Compare tab is his, but only on the listed runs: no model folder of his choosing from the server's disk
    with pytest.raises(Exception, match="annotators compare the listed PPO runs only, not /etc"):
        bob.predict("/etc", api_name="/vote_left")  # the vote's win table read the actor's folder unchecked
    with pytest.raises(Exception, match="annotators compare the listed PPO runs only, not /etc"):
        bob.predict("hi", "/etc", "default", True, 0.8, 0.95, 8, 0, api_name="/compare_send")
    counts = ann.predict(api_name="/counts")
    assert "rankings 1" in repr(counts)
    assert ann.predict("jsonl", api_name="/download_pairs")  # the admin downloads the pairs file
