"""Browser ranking as plain functions: assignment, submit, skip, undo, overlap, 20 annotators at once, and double
submits."""

import threading

import pytest

from annotation.session import check_ranks, next_task, progress, skip, submit, submit_and_next, undo_last
from store.db import Store, write
from store.errors import UserError
from store.prompts import prompt_ids
from store.responses import Sample, add_samples
from tests.builders import seed_store
from tests.conftest import query, store_rows


def test_task_shows_each_response_once_in_a_stored_shuffled_order(db):
    seed_store(db, 3, duplicate_last=True)
    task = next_task(db, "ann", seed=1)
    assert task.prompt == "prompt 0" and sorted(task.response_ids) == [1, 2, 3, 4]  # the duplicate (5) left out
    assert task.responses == [f"p0 answer {i - 1}" for i in task.response_ids]
    # asking again (a page reload) gives the same task in the same order
    again = next_task(db, "ann", seed=2)
    assert (again.assignment_id, again.response_ids) == (task.assignment_id, task.response_ids)


def test_submit_stores_ranks_shown_order_and_lead_time(db):
    seed_store(db, 2)
    task = next_task(db, "ann", seed=3)
    ranks = [2, 1, 4, 3]
    ranking_id = submit(db, "ann", task.assignment_id, ranks)
    rows = query(
        db,
        "SELECT response_id, rank, shown_position FROM ranking_items WHERE ranking_id = ? ORDER BY shown_position",
        [ranking_id],
    )
    assert rows == [(rid, r, pos) for pos, (rid, r) in enumerate(zip(task.response_ids, ranks, strict=True))]
    ((source, key, lead, flags),) = query(db, "SELECT source, external_key, lead_time_s, flags FROM rankings")
    assert (source, key, flags) == ("ui", f"ui:{task.assignment_id}", []) and 0 <= lead < 60
    assert query(db, "SELECT count(*) FROM pairs") == [(6,)]
    # a double click stores nothing more
    assert submit(db, "ann", task.assignment_id, ranks) == ranking_id
    assert query(db, "SELECT count(*) FROM rankings") == [(1,)]
    # the next call moves on to the next prompt
    assert next_task(db, "ann").prompt == "prompt 1"


def test_ranking_in_the_shown_order_is_flagged(db):
    seed_store(db, 1)
    task = next_task(db, "ann")
    submit(db, "ann", task.assignment_id, [1, 2, 3, 4])
    assert query(db, "SELECT flags FROM rankings") == [(["shown_order"],)]


def test_ties_give_fewer_pairs(db):
    seed_store(db, 1)
    task = next_task(db, "ann")
    submit(db, "ann", task.assignment_id, [1, 1, 2, 2])  # two tiers of two: 2 x 2 pairs
    assert query(db, "SELECT count(*) FROM pairs") == [(4,)]


@pytest.mark.parametrize(
    "ranks, message",
    [
        ([1, 2, 3], "rank all 4 responses"),
        ([1, 2, 3, 5], "must be a number from 1 to 4, got 5"),
        ([1, 2, 3, None], "got None"),
        ([1, 1, 1, 1], "all responses tie"),
        ([], "rank all 4 responses (got 0 ranks)"),
    ],
)
def test_bad_rankings_are_refused_and_change_nothing(db, ranks, message):
    seed_store(db, 1)
    task = next_task(db, "ann")
    before = store_rows(db)
    with pytest.raises(UserError, match=message.replace("(", r"\(").replace(")", r"\)")):
        submit(db, "ann", task.assignment_id, ranks)
    assert store_rows(db) == before


def test_someone_elses_task_or_an_unknown_one(db):
    seed_store(db, 2)
    task = next_task(db, "ann")
    with pytest.raises(UserError, match=f"task {task.assignment_id} is not assigned to bob"):
        submit(db, "bob", task.assignment_id, [1, 2, 3, 4])
    with pytest.raises(UserError, match="task 999 is not assigned to ann"):
        submit(db, "ann", 999, [1, 2, 3, 4])
    with pytest.raises(UserError, match="enter your name"):
        next_task(db, " ")


def test_skip_needs_a_reason_and_gives_no_pairs(db):
    seed_store(db, 2)
    task = next_task(db, "ann")
    with pytest.raises(UserError, match="say why you skip"):
        skip(db, "ann", task.assignment_id, "")
    skip(db, "ann", task.assignment_id, "all responses are bad")
    assert query(db, "SELECT skipped, skip_reason FROM rankings") == [(True, "all responses are bad")]
    assert query(db, "SELECT count(*) FROM pairs") == [(0,)]
    assert next_task(db, "ann").prompt == "prompt 1"


def test_undo_hands_back_the_last_task_with_its_ranks(db):
    seed_store(db, 3)
    first = next_task(db, "ann")
    submit(db, "ann", first.assignment_id, [2, 1, 4, 3])
    held = next_task(db, "ann")  # holding prompt 1 when undoing
    back = undo_last(db, "ann")
    assert back.assignment_id == first.assignment_id and back.previous_ranks == [2, 1, 4, 3]
    assert query(db, "SELECT count(*) FROM rankings") == [(0,)]
    assert query(db, "SELECT count(*) FROM ranking_items") == [(0,)]
    # the held prompt went back to the pool: another annotator can get it
    assert next_task(db, "bob").prompt_id == held.prompt_id
    # the edited ranking replaces the old one
    assert next_task(db, "ann").assignment_id == first.assignment_id
    submit(db, "ann", first.assignment_id, [1, 2, 3, 4])
    assert query(db, "SELECT count(*) FROM rankings WHERE annotator = 'ann'") == [(1,)]
    with pytest.raises(UserError, match="nothing to undo"):
        undo_last(db, "carol")


def test_overlap_one_never_gives_a_prompt_to_two_annotators(db):
    seed_store(db, 2)
    a, b = next_task(db, "ann"), next_task(db, "bob")
    assert a.prompt_id != b.prompt_id
    assert next_task(db, "carol") is None  # both prompts are held


def test_overlap_two_gives_each_prompt_to_two_annotators(db):
    seed_store(db, 2)
    seen = {}
    for who in ("ann", "bob", "carol", "dan"):
        task = next_task(db, who, overlap=2)
        seen.setdefault(task.prompt_id, []).append(who)
        submit(db, who, task.assignment_id, [1, 2, 3, 4])
    assert sorted(len(v) for v in seen.values()) == [2, 2]
    assert next_task(db, "erin", overlap=2) is None


def test_progress_counts(db):
    seed_store(db, 3)
    for who in ("ann", "ann", "bob"):
        t = next_task(db, who)
        submit(db, who, t.assignment_id, [1, 2, 3, 4])
    p = progress(db, "ann")
    assert (p.mine, p.team, p.pending, p.pairs) == (2, 3, 0, 18)
    assert p.line() == "you: 2 ranked · team: 3 · prompts waiting: 0 · pairs: 18"


def test_check_ranks_allows_ties_and_any_order():
    check_ranks([2, 1, 2, 3], 4)
    with pytest.raises(UserError):
        check_ranks([True, 1], 2)


@pytest.mark.integration
def test_ten_annotators_at_once(db):
    """10 annotators x 10 rankings submitted concurrently: exactly 100 rankings, no prompt ranked twice."""
    seed_store(db, 100, k=4)
    store = Store(db).hold()  # as the app does: one Store for every session
    errors = []

    def annotator(name):
        try:
            for _ in range(10):
                task = next_task(store, name)
                submit(store, name, task.assignment_id, [1, 2, 3, 4][::-1])
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(repr(e))

    threads = [threading.Thread(target=annotator, args=(f"a{i:02d}",)) for i in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    store.release()
    assert errors == []
    assert query(db, "SELECT count(*), count(DISTINCT prompt_id), count(DISTINCT external_key) FROM rankings") == [
        (100, 100, 100)
    ]
    assert query(db, "SELECT annotator, count(*) FROM rankings GROUP BY 1 HAVING count(*) <> 10") == []
    assert query(db, "SELECT count(*) FROM ranking_items") == [(400,)]


def test_blank_responses_are_never_shown(db):
    """A response of spaces only (any Unicode space) is not shown, and a prompt left with one response is not handed
    out; a leading or trailing space does not make a response blank."""
    with write(db) as con:
        ids = prompt_ids(con, ["p0", "p1"], "test")
        texts = {"p0": ["  ", "\u3000\u00a0", "a"], "p1": [" x", "y ", "   "]}
        add_samples(con, [Sample(ids[p], t, j, 1, "eos", 0) for p in texts for j, t in enumerate(texts[p])], "test")
    task = next_task(db, "ann")
    assert task.prompt == "p1" and sorted(task.responses) == [" x", "y "]
    assert next_task(db, "bob") is None


@pytest.mark.integration
def test_each_task_submitted_twice_at_once_is_stored_once(db):
    """8 annotators, each clicking Submit twice at once (two threads, as a double click or a retried request does)
    for 4 tasks in a row: every ranking is stored exactly once with its 4 items, and both clicks get the same next
    task."""
    seed_store(db, 40, k=4)
    store = Store(db).hold()  # as the app does: one Store for every session
    errors, next_ids = [], {}

    def click(name, first, barrier, out):
        task = first
        try:
            for _ in range(4):
                barrier.wait(timeout=30)
                task, _ = submit_and_next(store, name, task.assignment_id, [4, 3, 2, 1])
                out.append(task.assignment_id)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(repr(e))

    threads = []
    for i in range(8):
        name, barrier = f"a{i}", threading.Barrier(2)
        first = next_task(store, name)
        next_ids[name] = ([], [])
        threads += [threading.Thread(target=click, args=(name, first, barrier, out)) for out in next_ids[name]]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    store.release()
    assert errors == []
    assert all(a == b and len(a) == 4 for a, b in next_ids.values())
    assert query(db, "SELECT count(*), count(DISTINCT prompt_id), count(DISTINCT external_key) FROM rankings") == [
        (32, 32, 32)
    ]
    assert query(db, "SELECT count(*), count(DISTINCT (ranking_id, response_id)) FROM ranking_items") == [(128, 128)]
    assert query(db, "SELECT count(*) FROM assignments WHERE status = 'open'") == [(8,)]


def test_rlhf_undone_shows_an_annotators_escape_sequences_as_text(db, cli):
    """Issue 51 item 10: a skip reason is the annotator's own text; `rlhf undone` printed it raw, so an escape
    sequence in it could clear the lead's screen or retitle the window. Now each control character is escaped."""
    from annotation.session import next_task, skip, undo_last
    from tests.builders import seed_store

    seed_store(db, 1)
    task = next_task(db, "ann")
    hostile = "fine\x1b]0;pwned\x07\x1b[2J\u202eevil"
    skip(db, "ann", task.assignment_id, hostile)
    undo_last(db, "ann")
    code, out, _ = cli("undone")
    assert code == 0 and "\x1b" not in out and "\x07" not in out and "\u202e" not in out
    assert "skip (fine\\x1b]0;pwned\\x07\\x1b[2J\\u202eevil)" in out
